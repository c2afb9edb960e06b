"""token expiry and revocation, audit rows by token id, the newest event time of a node,
idempotency keys of job submissions

Existing tokens never expire and are not revoked; existing nodes have no event time yet (the
next scheduler event applies whatever its ``at``).

Revision ID: 0004_tokens
Revises: 0002
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_tokens"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("expires_at", sa.DateTime(), nullable=True))
        batch_op.add_column(sa.Column("revoked_at", sa.DateTime(), nullable=True))
    with op.batch_alter_table("audit", schema=None) as batch_op:
        batch_op.add_column(sa.Column("token_id", sa.Integer(), nullable=True))
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("event_at", sa.DateTime(), nullable=True))
    op.create_table(
        "idempotency_keys",
        sa.Column("token_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("request_sha256", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"]),
        sa.ForeignKeyConstraint(["token_id"], ["tokens.id"]),
        sa.PrimaryKeyConstraint("token_id", "key"),
    )


def downgrade() -> None:
    op.drop_table("idempotency_keys")
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("event_at")
    with op.batch_alter_table("audit", schema=None) as batch_op:
        batch_op.drop_column("token_id")
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.drop_column("revoked_at")
        batch_op.drop_column("expires_at")
