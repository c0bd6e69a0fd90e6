"""partition keys: each tenant's fabric partition, numbered by the database; existing tenants
get theirs in order of creation

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "partition_keys",
        sa.Column("partition_key", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sqlmodel.sql.sqltypes.AutoString(length=63), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.tenant_id"]),
        sa.PrimaryKeyConstraint("partition_key"),
        sa.UniqueConstraint("tenant_id"),
    )
    op.execute("INSERT INTO partition_keys (tenant_id) SELECT tenant_id FROM tenants ORDER BY created_us, tenant_id")


def downgrade() -> None:
    op.drop_table("partition_keys")
