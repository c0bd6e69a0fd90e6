"""indexes in the order the hot path reads

Placement reads READY nodes of a model in fabric order (zone, rack, leaf switch, id) with a
LIMIT, the releaser reads CANCELLING allocations oldest cancel first, and the idempotency
janitor the oldest keys first: with the order in the index each is a short range scan instead
of a sort of every candidate.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_index("ix_nodes_placement")
        batch_op.create_index(
            "ix_nodes_placement", ["gpu_model", "state", "zone", "rack", "leaf_switch", "node_id"], unique=False
        )
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.drop_index("ix_allocations_state")
        batch_op.create_index("ix_allocations_state", ["state", "cancel_us"], unique=False)
    with op.batch_alter_table("idempotency_keys", schema=None) as batch_op:
        batch_op.create_index("ix_idempotency_keys_created", ["created_us"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("idempotency_keys", schema=None) as batch_op:
        batch_op.drop_index("ix_idempotency_keys_created")
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.drop_index("ix_allocations_state")
        batch_op.create_index("ix_allocations_state", ["state"], unique=False)
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_index("ix_nodes_placement")
        batch_op.create_index("ix_nodes_placement", ["gpu_model", "state", "node_id"], unique=False)
