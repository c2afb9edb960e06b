"""nodes and node events carry the scheduler's forecast ``until``

A node event may say when the scheduler expects to need the node back (``until``); the node
keeps that of its newest applied event, and the stored event keeps its own so that a retry
with a different ``until`` is a conflict. Existing rows get None (unknown).

Revision ID: 0006_node_until
Revises: 0005_superseded_events
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_node_until"
down_revision: str | None = "0005_superseded_events"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("nodes", "node_events")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("until", sa.DateTime(), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("until")
