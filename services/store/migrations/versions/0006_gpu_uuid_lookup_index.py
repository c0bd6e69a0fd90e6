"""an index for registration's case-insensitive GPU lookup

RegisterNode refuses a GPU that another node owns, comparing lower-cased UUIDs so that rows
stored before UUIDs were made canonical (``GPU-`` then lower case) still count. Without an
index on that expression each registration read every GPU of the fleet: registering a fleet of
N nodes cost O(N^2) row reads.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_gpus_uuid_lower", "gpus", [sa.text("lower(gpu_uuid)")], unique=False)


def downgrade() -> None:
    op.drop_index("ix_gpus_uuid_lower", table_name="gpus")
