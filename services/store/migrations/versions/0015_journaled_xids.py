"""journaled XIDs: the agent's own time of an XID its journal numbered, by which a replay is known
whatever time the control plane clamped it to

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("health_observations", sa.Column("agent_ms", sa.BigInteger(), nullable=True))
    op.create_index(
        "ux_health_observations_journal", "health_observations", ["node_id", "agent_ms", "seq"], unique=True
    )


def downgrade() -> None:
    op.drop_index("ux_health_observations_journal", table_name="health_observations")
    with op.batch_alter_table("health_observations") as batch:
        batch.drop_column("agent_ms")
