"""The invoice read model the BillingService serves: a period's own lines plus adjustments.

The accounting library computes one period from events (``accounting.model.Invoice``); this
adds what only the control plane knows: whether the invoice is frozen, and the corrections it
carries for earlier periods that were finalized before all of their events had arrived.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from accounting import Anomaly, BillingPeriod, InvoiceLine, PriceClass, Reconciliation

LATE_AFTER_FINALIZATION = "LATE_AFTER_FINALIZATION"

# For a period, how many events with a time before its end an invoice computation read. The
# log only grows (an event is never deleted or changed), so an equal count means the same events.
InputCounts = Mapping[BillingPeriod, int]


@dataclass(frozen=True)
class Adjustment:
    """A signed correction of a finalized period, by line (GPU model, price class)."""

    adjusted_period: str
    gpu_model: str
    price_class: PriceClass
    gpu_seconds: Decimal
    # None when the line has no rate (unpriced lines are never billed at zero).
    amount: Decimal | None


@dataclass(frozen=True)
class LateEvents:
    """Events that arrived after ``adjusted_period`` was finalized, though they happened inside it."""

    adjusted_period: str
    event_ids: tuple[str, ...]
    gpu_seconds: Decimal
    detail: str


@dataclass(frozen=True)
class InvoiceView:
    """A tenant's invoice for one period, open (computed now) or finalized (frozen)."""

    tenant_id: str
    period: BillingPeriod
    currency: str
    lines: tuple[InvoiceLine, ...]
    credited_gpu_seconds: Decimal
    # The period's own usage after credits (the accounting library's invoice total).
    subtotal: Decimal
    adjustments: tuple[Adjustment, ...]
    anomalies: tuple[Anomaly, ...]
    late_events: tuple[LateEvents, ...]
    reconciliation: Reconciliation
    # The newest record time among the events used; None when there were none.
    watermark_us: int | None
    finalized_us: int | None = None

    @property
    def adjustments_total(self) -> Decimal:
        """The sum of the priced adjustments; unpriced ones are left out."""
        return sum((a.amount for a in self.adjustments if a.amount is not None), Decimal(0))

    @property
    def total(self) -> Decimal:
        """What the invoice bills: ``subtotal`` plus ``adjustments_total``."""
        return self.subtotal + self.adjustments_total

    @property
    def finalized(self) -> bool:
        """Whether the invoice is frozen (``finalized_us`` is set)."""
        return self.finalized_us is not None


@dataclass(frozen=True)
class FrozenInvoice:
    """A finalized invoice with the rate card it was priced with, the instant of its snapshot
    (events recorded at or after it were not known to the frozen computation), and how many
    events before each period's end that computation read (``InputCounts``)."""

    view: InvoiceView
    rates_json: str
    snapshot_us: int
    input_counts: InputCounts = field(default_factory=dict)
