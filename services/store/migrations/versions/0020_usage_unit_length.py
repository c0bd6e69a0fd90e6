"""usage units: a MIG slice's or soft share's unit, "<gpu uuid>/<allocation id>", is longer than
a GPU's uuid may be

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlmodel.sql.sqltypes
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# The append-only guard of 0005, which SQLite's copy of the table leaves behind.
REFUSAL = "usage_events is append-only: correct an event with another event"


def _gpu_uuid_length(before: int, after: int) -> None:
    # On SQLite a batch copies the table (no other table refers to usage_events) and drops its
    # triggers, made again after it; on PostgreSQL it is one ALTER COLUMN, triggers kept.
    with op.batch_alter_table("usage_events") as batch:
        batch.alter_column(
            "gpu_uuid",
            existing_type=sqlmodel.sql.sqltypes.AutoString(length=before),
            type_=sqlmodel.sql.sqltypes.AutoString(length=after),
            existing_nullable=False,
        )
    if op.get_context().dialect.name == "sqlite":
        for action in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER IF NOT EXISTS usage_events_no_{action.lower()} BEFORE {action} ON usage_events"
                f" BEGIN SELECT RAISE(ABORT, '{REFUSAL}'); END"
            )


def upgrade() -> None:
    _gpu_uuid_length(96, 160)


def downgrade() -> None:
    # A unit longer than 96 characters would not fit the narrower column.
    _gpu_uuid_length(160, 96)
