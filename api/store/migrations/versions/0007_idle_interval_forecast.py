"""idle intervals record whether their end had been forecast

An idle interval (a node idle, then busy) records whether the node had a forecast ``until``
when its busy event came: the share of the newest intervals that had one is the forecast
coverage that decides whether the optimizer uses the forecasts
(:mod:`interstice.optimizer.coverage`). Existing rows get None (not counted).

Revision ID: 0007_idle_interval_forecast
Revises: 0006_node_until
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_idle_interval_forecast"
down_revision: str | None = "0006_node_until"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("idle_intervals", schema=None) as batch_op:
        batch_op.add_column(sa.Column("forecast", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("idle_intervals", schema=None) as batch_op:
        batch_op.drop_column("forecast")
