"""leases: one replica at a time holds a named lease

The reconciler runs on one replica only: the one holding its lease. A lease is a row per name,
its holder and when it expires; another replica takes it once it has expired.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("holder", sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
        sa.Column("acquired_us", sa.BigInteger(), nullable=False),
        sa.Column("renewed_us", sa.BigInteger(), nullable=False),
        sa.Column("expires_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("leases")
