"""allocation queue: a priority, an admission time and a topology rule on allocations, and the
index of a model's queue of PENDING allocations in admission order

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Raw ALTER TABLE, not alembic's batch mode: on SQLite a batch copies ``allocations`` and
    # its DROP TABLE fails the foreign keys that refer to it; SQLite 3.35+ alters in place.
    op.execute("ALTER TABLE allocations ADD COLUMN priority INTEGER NOT NULL DEFAULT 0")
    op.execute("ALTER TABLE allocations ADD COLUMN same_block BOOLEAN NOT NULL DEFAULT false")
    op.add_column("allocations", sa.Column("admitted_us", sa.BigInteger(), nullable=True))
    # Every allocation before the queue was placed when it was created.
    op.execute("UPDATE allocations SET admitted_us = created_us")
    op.create_index("ix_allocations_queue", "allocations", ["state", "gpu_model", "priority", "created_us"])


def downgrade() -> None:
    # The schema before knows no PENDING state: an allocation still queued ends, never admitted.
    op.execute(
        "UPDATE allocations SET state = 'CANCELLED', cancel_us = created_us, released_us = created_us"
        " WHERE state = 'PENDING'"
    )
    op.drop_index("ix_allocations_queue", table_name="allocations")
    for column in ("same_block", "admitted_us", "priority"):
        op.execute(f"ALTER TABLE allocations DROP COLUMN {column}")
