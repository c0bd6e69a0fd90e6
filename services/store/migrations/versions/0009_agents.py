"""agents: nodes their agents manage, GPU descriptions, heartbeats, status and action results

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_GPU_TEXT = (("name", 96), ("serial", 64), ("driver_version", 32), ("vbios_version", 32), ("inforom_version", 32))


def upgrade() -> None:
    # Raw ALTER TABLE, not alembic's batch mode: on SQLite a batch copies ``nodes`` and its
    # DROP TABLE fails the foreign keys that refer to it; SQLite 3.35+ alters in place.
    for flag in ("agent_managed", "unreachable"):
        op.execute(f"ALTER TABLE nodes ADD COLUMN {flag} BOOLEAN NOT NULL DEFAULT false")
    op.add_column("nodes", sa.Column("last_heartbeat_us", sa.BigInteger(), nullable=True))
    for column, length in _GPU_TEXT:
        op.add_column("gpus", sa.Column(column, sqlmodel.sql.sqltypes.AutoString(length=length), nullable=True))
    op.add_column("gpus", sa.Column("memory_bytes", sa.BigInteger(), nullable=True))
    op.add_column("gpus", sa.Column("rail", sa.Integer(), nullable=True))
    op.create_table(
        "node_status",
        sa.Column("node_id", sqlmodel.sql.sqltypes.AutoString(length=63), nullable=False),
        sa.Column("status_json", sa.Text(), nullable=False),
        sa.Column("reported_us", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.node_id"]),
        sa.PrimaryKeyConstraint("node_id"),
    )
    op.create_table(
        "action_results",
        sa.Column("node_id", sqlmodel.sql.sqltypes.AutoString(length=63), nullable=False),
        sa.Column("action_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("result_json", sa.Text(), nullable=False),
        sa.Column("error", sqlmodel.sql.sqltypes.AutoString(length=256), nullable=False),
        sa.Column("reported_us", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.node_id"]),
        sa.PrimaryKeyConstraint("node_id", "action_id"),
    )
    op.create_index("ix_action_results_kind_reported", "action_results", ["kind", "reported_us"])


def downgrade() -> None:
    op.drop_table("action_results")
    op.drop_table("node_status")
    # Raw ALTER TABLE, for the same reason as in upgrade (SQLite 3.35+ drops columns in place).
    for column in ("rail", "memory_bytes", *(c for c, _ in reversed(_GPU_TEXT))):
        op.execute(f"ALTER TABLE gpus DROP COLUMN {column}")
    for column in ("last_heartbeat_us", "unreachable", "agent_managed"):
        op.execute(f"ALTER TABLE nodes DROP COLUMN {column}")
