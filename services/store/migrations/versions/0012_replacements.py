"""replacements: nodes the health controller took from allocations, and their spares

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("assignments", sa.Column("replaced_us", sa.BigInteger(), nullable=True))
    op.create_table(
        "replacements",
        sa.Column("allocation_id", sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column("removed_node_id", sqlmodel.sql.sqltypes.AutoString(length=63), nullable=False),
        sa.Column("spare_node_id", sqlmodel.sql.sqltypes.AutoString(length=63), nullable=True),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("reason", sqlmodel.sql.sqltypes.AutoString(length=512), nullable=False),
        sa.Column("at_us", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["allocation_id"], ["allocations.allocation_id"]),
        sa.ForeignKeyConstraint(["removed_node_id"], ["nodes.node_id"]),
        sa.ForeignKeyConstraint(["spare_node_id"], ["nodes.node_id"]),
        sa.PrimaryKeyConstraint("allocation_id", "removed_node_id"),
    )


def downgrade() -> None:
    op.drop_table("replacements")
    with op.batch_alter_table("assignments") as batch:
        batch.drop_column("replaced_us")
