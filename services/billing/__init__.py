"""Billing: invoices computed from the usage-event log, their finalization, adjustments, export."""
