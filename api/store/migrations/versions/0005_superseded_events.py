"""node events record the newer event that superseded them

An event older than the newest one applied to its node changes nothing; the answer says so
(``applied: false``), and a retry must answer the same, so the ``at`` of that newer event is
kept. Existing events are taken as applied (None).

Revision ID: 0005_superseded_events
Revises: 0004_tokens
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_superseded_events"
down_revision: str | None = "0004_tokens"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("node_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("superseded_by_at", sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("node_events", schema=None) as batch_op:
        batch_op.drop_column("superseded_by_at")
