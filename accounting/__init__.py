"""Usage accounting: interval algebra, and (to come) the DuckDB invoice engine.

A library: it imports nothing from ``services`` or ``clients``.
"""
