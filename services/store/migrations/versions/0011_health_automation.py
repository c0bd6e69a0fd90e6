"""health automation: operators' pauses of the health controller's removals, per pool; node
events by time, for the fleet-wide list of its decisions

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "health_automation",
        sa.Column("gpu_model", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("reason", sqlmodel.sql.sqltypes.AutoString(length=256), nullable=False),
        sa.Column("actor", sqlmodel.sql.sqltypes.AutoString(length=96), nullable=False),
        sa.Column("updated_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("gpu_model"),
    )
    op.create_index("ix_node_events_at", "node_events", ["at_us"])


def downgrade() -> None:
    op.drop_index("ix_node_events_at", table_name="node_events")
    op.drop_table("health_automation")
