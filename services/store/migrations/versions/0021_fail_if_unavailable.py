"""fail if unavailable: a create that asked not to wait, kept on its row until a cycle decides

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Raw ALTER TABLE: on SQLite a batch would copy ``allocations``, which other tables refer to.
    op.execute("ALTER TABLE allocations ADD COLUMN fail_if_unavailable BOOLEAN NOT NULL DEFAULT false")


def downgrade() -> None:
    # A create that asked not to wait is decided by the cycle that follows its intake: none is
    # left waiting for one once the server has stopped, but a row that is would just wait.
    op.execute("ALTER TABLE allocations DROP COLUMN fail_if_unavailable")
