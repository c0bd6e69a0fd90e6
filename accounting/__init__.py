"""Usage accounting: GPU-hours invoices from usage events, in DuckDB, with a pure-Python reference.

A library: it imports nothing from ``services`` or ``clients``, and they use only what this
module exports. The entry point is :func:`compute_invoices`; the data it takes and returns is
in :mod:`accounting.model`; the interval algebra, billing periods, rate cards, loaders and
exporters that the control plane and the CLI also use are exported here beside it.
"""

from accounting.errors import AccountingError, InputError
from accounting.export import decimal_text, invoice_run_to_json, write_events
from accounting.intervals import Interval
from accounting.intervals import intersect as intersect_intervals
from accounting.intervals import union as union_intervals
from accounting.invoice import Engine, compute_invoices
from accounting.loaders import load_events, load_outages
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
    datetime_to_us,
    rfc3339,
    split_unit,
    us_to_datetime,
)
from accounting.periods import FIRST_PERIOD, BadPeriod, BillingPeriod, parse_period
from accounting.rate_card import load as load_rate_card

__all__ = [
    "FIRST_PERIOD",
    "AccountingError",
    "Anomaly",
    "AnomalyKind",
    "BadPeriod",
    "BillingPeriod",
    "Commitment",
    "Engine",
    "EventKind",
    "InputError",
    "Interval",
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
    "datetime_to_us",
    "decimal_text",
    "intersect_intervals",
    "invoice_run_to_json",
    "load_events",
    "load_outages",
    "load_rate_card",
    "parse_period",
    "rfc3339",
    "split_unit",
    "union_intervals",
    "us_to_datetime",
    "write_events",
]
