"""finalized invoices record how many events they read

A finalized invoice stores, for its own period and for each finalized period it carried
corrections of, how many events with a time before that period's end its computation read.
The log only grows, so a later read recomputes a finalized period only when that count has.
Invoices frozen before this revision have none and are recomputed as before.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("finalized_invoices", schema=None) as batch_op:
        batch_op.add_column(sa.Column("input_counts", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("finalized_invoices", schema=None) as batch_op:
        batch_op.drop_column("input_counts")
