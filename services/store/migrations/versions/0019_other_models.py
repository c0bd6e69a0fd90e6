"""other models: the further GPU models an allocation accepts

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Raw ALTER TABLE: on SQLite a batch would copy ``allocations``, which other tables refer to.
    op.execute("ALTER TABLE allocations ADD COLUMN other_models VARCHAR(64) NOT NULL DEFAULT ''")


def downgrade() -> None:
    # The schema before knows one model an allocation: a waiting one keeps its first choice.
    op.execute("ALTER TABLE allocations DROP COLUMN other_models")
