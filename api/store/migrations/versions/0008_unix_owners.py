"""jobs have a Unix owner, tokens a Unix account, agents say whether they run jobs as owners

A user token may be bound to one Unix account (``tokens.unix_name``, ``tokens.unix_uid``),
and a MUNGE principal is a token row of its uid; a job records the account it runs as
(``jobs.owner_name``, ``jobs.owner_uid``, indexed: users list their jobs by it). Existing
tokens are unbound and existing jobs have no Unix owner (single-user mode: they run as the
agent's account and stay visible to their token as before). An agent says at registration
whether it runs jobs as their owners (``agents.runs_as_owner``); existing agents did not say
so, until they register again.

Revision ID: 0008_unix_owners
Revises: 0007_idle_interval_forecast
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_unix_owners"
down_revision: str | None = "0007_idle_interval_forecast"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("unix_name", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("unix_uid", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("owner_name", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("owner_uid", sa.BigInteger(), nullable=True))
        batch_op.create_index(batch_op.f("ix_jobs_owner_uid"), ["owner_uid"], unique=False)
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("runs_as_owner", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.drop_column("runs_as_owner")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_jobs_owner_uid"))
        batch_op.drop_column("owner_uid")
        batch_op.drop_column("owner_name")
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.drop_column("unix_uid")
        batch_op.drop_column("unix_name")
