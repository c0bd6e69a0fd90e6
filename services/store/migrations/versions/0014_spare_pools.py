"""spare pools: the free nodes of each GPU model that creates leave to replacements; when a
replacement's spare took its place, which is later than the removal for a degraded allocation
topped up once a node freed up

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "spare_pools",
        sa.Column("gpu_model", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("spares", sa.Integer(), nullable=False),
        sa.Column("actor", sqlmodel.sql.sqltypes.AutoString(length=96), nullable=False),
        sa.Column("updated_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("gpu_model"),
    )
    op.add_column("replacements", sa.Column("spare_us", sa.BigInteger(), nullable=True))
    op.execute("UPDATE replacements SET spare_us = at_us WHERE spare_node_id IS NOT NULL")


def downgrade() -> None:
    with op.batch_alter_table("replacements") as batch:
        batch.drop_column("spare_us")
    op.drop_table("spare_pools")
