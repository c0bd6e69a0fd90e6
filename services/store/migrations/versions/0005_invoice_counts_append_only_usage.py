"""finalized invoices record how many events they read; the usage-event log is append-only

A finalized invoice stores, for its own period and for each finalized period it carried
corrections of, how many events with a time before that period's end its computation read.
A later read recomputes a finalized period only when that count has grown. That is exact only
because the log only grows, so triggers now refuse any UPDATE or DELETE of a usage event: a
wrong event is corrected by another event, never by rewriting history. Invoices frozen before
this revision have no counts and are recomputed as before.

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


REFUSAL = "usage_events is append-only: correct an event with another event"


def upgrade() -> None:
    with op.batch_alter_table("finalized_invoices", schema=None) as batch_op:
        batch_op.add_column(sa.Column("input_counts", sa.Text(), nullable=True))
    if op.get_context().dialect.name == "postgresql":
        op.execute(
            "CREATE FUNCTION usage_events_append_only() RETURNS trigger LANGUAGE plpgsql AS"
            f" $$ BEGIN RAISE EXCEPTION '{REFUSAL}'; END $$"
        )
        op.execute(
            "CREATE TRIGGER usage_events_append_only BEFORE UPDATE OR DELETE ON usage_events"
            " FOR EACH ROW EXECUTE FUNCTION usage_events_append_only()"
        )
    else:
        for action in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER usage_events_no_{action.lower()} BEFORE {action} ON usage_events"
                f" BEGIN SELECT RAISE(ABORT, '{REFUSAL}'); END"
            )


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute("DROP TRIGGER usage_events_append_only ON usage_events")
        op.execute("DROP FUNCTION usage_events_append_only()")
    else:
        for action in ("update", "delete"):
            op.execute(f"DROP TRIGGER usage_events_no_{action}")
    with op.batch_alter_table("finalized_invoices", schema=None) as batch_op:
        batch_op.drop_column("input_counts")
