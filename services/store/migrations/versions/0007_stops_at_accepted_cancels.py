"""usage stops of cancels accepted before the release, written at the cancel

A tenant's hold on a node ends when its cancel is accepted: that transaction writes a usage
``stop`` for every GPU the allocation holds, and the release after the scrub writes none.
An allocation that is CANCELLING without its stops (a database written by revision 0006's
schema, whose releases wrote them) would never get them, so this revision writes them, at each
such allocation's cancel time.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The event id is <allocation>/<gpu>/stop, as services/usage/repository.py writes it; a GPU
# that has its stop already keeps it.
_WRITE_MISSING_STOPS = sa.text(
    "INSERT INTO usage_events (event_id, tenant_id, allocation_id, node_id, gpu_uuid, gpu_model, kind, at_us,"
    " source, recorded_us)"
    " SELECT a.allocation_id || '/' || g.gpu_uuid || '/stop', al.tenant_id, a.allocation_id, a.node_id,"
    " g.gpu_uuid, al.gpu_model, 'stop', al.cancel_us, 'control-plane', :recorded"
    " FROM assignments a JOIN allocations al ON al.allocation_id = a.allocation_id"
    " JOIN gpus g ON g.node_id = a.node_id"
    " WHERE a.released_us IS NULL AND al.cancel_us IS NOT NULL"
    " AND NOT EXISTS (SELECT 1 FROM usage_events u"
    " WHERE u.event_id = a.allocation_id || '/' || g.gpu_uuid || '/stop')"
)


def upgrade() -> None:
    op.get_bind().execute(_WRITE_MISSING_STOPS, {"recorded": time.time_ns() // 1000})


def downgrade() -> None:
    # The stops stay: the usage log is append-only, and they bill what the tenant held.
    pass
