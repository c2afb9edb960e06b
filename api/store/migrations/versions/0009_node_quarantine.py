"""nodes carry a quarantine: since when and why no job is placed on them

A launch that fails for a reason of the node (its launcher cannot start, the job's owner is
unknown there, its disk is full) quarantines the node until its agent proves healthy again or
an admin releases it (``nodes.quarantined_at``, ``nodes.quarantine_reason``). Existing nodes
are not quarantined.

Revision ID: 0009_node_quarantine
Revises: 0008_unix_owners
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_node_quarantine"
down_revision: str | None = "0008_unix_owners"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("quarantined_at", sa.DateTime(), nullable=True))
        batch_op.add_column(sa.Column("quarantine_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("quarantine_reason")
        batch_op.drop_column("quarantined_at")
