"""user jobs (command, env, workdir, global batch, job dir), heartbeat v2 progress, the
metrics series, learned rates and measured rescale costs

Existing rows: ``batch_size`` becomes ``global_batch_size`` (its value is kept),
``checkpoint_dir`` (which held ``<checkpoint_root>/<job_id>``) becomes ``job_dir``, and a
fractional ``total_samples`` is rounded up to an integer.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":  # its batch copy casts, which truncates
        op.execute(
            "UPDATE jobs SET total_samples = CAST(total_samples AS INTEGER) + 1 "
            "WHERE total_samples > CAST(total_samples AS INTEGER)"
        )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.alter_column("model", existing_type=sa.String(length=200), nullable=True)
        batch_op.alter_column(
            "total_samples",
            existing_type=sa.Float(),
            type_=sa.BigInteger(),
            existing_nullable=False,
            postgresql_using="ceil(total_samples)::bigint",
        )
        batch_op.alter_column(
            "batch_size", new_column_name="global_batch_size", existing_type=sa.Integer()
        )
        batch_op.alter_column("checkpoint_dir", new_column_name="job_dir", existing_type=sa.Text())
        batch_op.add_column(sa.Column("workdir", sa.Text(), nullable=True))
        batch_op.add_column(
            sa.Column("env", sa.JSON(), nullable=False, server_default=sa.text("'{}'"))
        )
        batch_op.add_column(
            sa.Column("nproc_per_node", sa.String(length=10), nullable=False, server_default="auto")
        )
        batch_op.add_column(sa.Column("error", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("last_step", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("last_loss", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("generation_step", sa.BigInteger(), nullable=True))

    with op.batch_alter_table("rescales", schema=None) as batch_op:
        batch_op.add_column(sa.Column("generation", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("cost_s", sa.Float(), nullable=True))

    op.create_table(
        "job_metrics",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("samples", sa.Float(), nullable=True),
        sa.Column("loss", sa.Float(), nullable=True),
        sa.Column("samples_per_s", sa.Float(), nullable=True),
        sa.Column("world_size", sa.Integer(), nullable=True),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("job_metrics", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_job_metrics_job_id"), ["job_id"], unique=False)

    op.create_table(
        "job_rates",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("nodes", sa.Integer(), nullable=False),
        sa.Column("spb_depth", sa.Integer(), nullable=False),
        sa.Column("samples_per_s", sa.Float(), nullable=False),
        sa.Column("reports", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"]),
        sa.PrimaryKeyConstraint("job_id", "nodes", "spb_depth"),
    )


def downgrade() -> None:
    op.drop_table("job_rates")
    with op.batch_alter_table("job_metrics", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_job_metrics_job_id"))
    op.drop_table("job_metrics")
    with op.batch_alter_table("rescales", schema=None) as batch_op:
        batch_op.drop_column("cost_s")
        batch_op.drop_column("generation")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        for column in (
            "generation_step",
            "last_loss",
            "last_step",
            "error",
            "nproc_per_node",
            "env",
            "workdir",
        ):
            batch_op.drop_column(column)
        batch_op.alter_column("job_dir", new_column_name="checkpoint_dir", existing_type=sa.Text())
        batch_op.alter_column(
            "global_batch_size", new_column_name="batch_size", existing_type=sa.Integer()
        )
        batch_op.alter_column(
            "total_samples",
            existing_type=sa.BigInteger(),
            type_=sa.Float(),
            existing_nullable=False,
        )
        batch_op.alter_column("model", existing_type=sa.String(length=200), nullable=False)
