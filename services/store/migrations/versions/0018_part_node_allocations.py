"""part-node allocations: whole GPUs, a MIG slice or a soft share of one node, CPU and memory,
and the GPUs they hold

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INTEGERS = ("gpus", "share_milli", "cpu_milli", "memory_mib")
_LIVE = sa.text("released_us IS NULL")


def upgrade() -> None:
    # Raw ALTER TABLE: on SQLite a batch would copy ``allocations``, which other tables refer to.
    for column in _INTEGERS:
        op.execute(f"ALTER TABLE allocations ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0")
    op.execute("ALTER TABLE allocations ADD COLUMN mig_profile VARCHAR(16) NOT NULL DEFAULT ''")
    op.create_table(
        "gpu_holds",
        sa.Column("hold_id", sa.Integer(), nullable=False),
        sa.Column("allocation_id", sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column("tenant_id", sqlmodel.sql.sqltypes.AutoString(length=63), nullable=False),
        sa.Column("node_id", sqlmodel.sql.sqltypes.AutoString(length=63), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("milli", sa.Integer(), nullable=False),
        sa.Column("mig_start", sa.Integer(), nullable=False),
        sa.Column("assigned_us", sa.BigInteger(), nullable=False),
        sa.Column("released_us", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["allocation_id"], ["allocations.allocation_id"]),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.node_id"]),
        sa.PrimaryKeyConstraint("hold_id"),
    )
    op.create_index("ix_gpu_holds_allocation", "gpu_holds", ["allocation_id"])
    op.create_index("ix_gpu_holds_live_node", "gpu_holds", ["node_id"], sqlite_where=_LIVE, postgresql_where=_LIVE)


def downgrade() -> None:
    # The schema before knows only whole nodes: a part-node allocation not yet ended ends now
    # (its holds and its nodes are left to the operator, as the schema has no place for them).
    op.execute(
        "UPDATE allocations SET state = 'CANCELLED', cancel_us = COALESCE(cancel_us, created_us),"
        " released_us = COALESCE(released_us, created_us)"
        " WHERE node_count = 0 AND state <> 'CANCELLED'"
    )
    op.drop_table("gpu_holds")
    for column in (*_INTEGERS, "mig_profile"):
        op.execute(f"ALTER TABLE allocations DROP COLUMN {column}")
