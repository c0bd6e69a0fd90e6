"""Benchmarks, each a script run as ``uv run python bench/NAME.py``; docs/performance.md says
what each measures and holds the latest figures. Not product code: nothing outside bench/
imports it."""
