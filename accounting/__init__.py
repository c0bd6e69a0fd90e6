"""Usage accounting: GPU-hours invoices from usage events, in DuckDB, with a pure-Python reference.

A library: it imports nothing from ``services`` or ``clients``. The entry point is
:func:`compute_invoices`; the data it takes and returns is in :mod:`accounting.model`.
"""

from accounting.errors import AccountingError, InputError
from accounting.invoice import Engine, compute_invoices
from accounting.model import (
    Anomaly,
    AnomalyKind,
    Commitment,
    EventKind,
    Invoice,
    InvoiceLine,
    InvoiceRun,
    Outage,
    Period,
    PriceClass,
    Rates,
    Reconciliation,
    UsageEvent,
)

__all__ = [
    "AccountingError",
    "Anomaly",
    "AnomalyKind",
    "Commitment",
    "Engine",
    "EventKind",
    "InputError",
    "Invoice",
    "InvoiceLine",
    "InvoiceRun",
    "Outage",
    "Period",
    "PriceClass",
    "Rates",
    "Reconciliation",
    "UsageEvent",
    "compute_invoices",
]
