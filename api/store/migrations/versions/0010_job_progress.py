"""jobs carry the time of their last progress: when their step last advanced

A running job whose generation makes no progress within its bound is released and started
anew (:mod:`interstice.api.control.stalls`); the bound counts from ``jobs.last_progress_at``
(the service's time of the newest report whose step was beyond every earlier one, or of its
current generation's first step). Existing jobs have none: their bound counts from their
current generation's start.

Revision ID: 0010_job_progress
Revises: 0009_node_quarantine
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_job_progress"
down_revision: str | None = "0009_node_quarantine"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("last_progress_at", sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("last_progress_at")
