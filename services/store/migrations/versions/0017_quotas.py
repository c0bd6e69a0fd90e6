"""quotas: per tenant and GPU model, with cohorts that lend unused quota, and why an
allocation was preempted

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "quotas",
        sa.Column("tenant_id", sqlmodel.sql.sqltypes.AutoString(length=63), nullable=False),
        sa.Column("gpu_model", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("nodes", sa.Integer(), nullable=False),
        sa.Column("borrow_limit", sa.Integer(), nullable=False),
        sa.Column("cohort", sqlmodel.sql.sqltypes.AutoString(length=63), nullable=False),
        sa.Column("actor", sqlmodel.sql.sqltypes.AutoString(length=96), nullable=False),
        sa.Column("updated_us", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.tenant_id"]),
        sa.PrimaryKeyConstraint("tenant_id", "gpu_model"),
    )
    op.add_column(
        "allocations", sa.Column("preempted_reason", sqlmodel.sql.sqltypes.AutoString(length=512), nullable=True)
    )


def downgrade() -> None:
    # Raw ALTER TABLE: on SQLite a batch would copy ``allocations``, which other tables refer to.
    op.execute("ALTER TABLE allocations DROP COLUMN preempted_reason")
    op.drop_table("quotas")
