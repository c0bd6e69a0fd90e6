"""health observations: the strikes agents' statuses carry, for the health controller

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "health_observations",
        sa.Column("node_id", sqlmodel.sql.sqltypes.AutoString(length=63), nullable=False),
        sa.Column("at_us", sa.BigInteger(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=True),
        sa.Column("signal", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.node_id"]),
        sa.PrimaryKeyConstraint("node_id", "at_us", "seq"),
    )
    op.create_index("ix_health_observations_at", "health_observations", ["at_us"])


def downgrade() -> None:
    op.drop_index("ix_health_observations_at", table_name="health_observations")
    op.drop_table("health_observations")
