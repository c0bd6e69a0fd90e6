"""The rate card the server prices invoices with: a JSON file, or the built-in default.

The file format is the accounting library's (``accounting/loaders.py``), the same file the
offline ``gpucloud invoice --rates`` reads, so one rate card prices both. The default is an
illustrative on-demand/spot card for the GPU models the control plane knows; docs/billing.md
lists it. A deployment that bills for real passes its own (``gpucloud serve --rates FILE``).
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from accounting.loaders import load_rates
from accounting.model import PriceClass, Rates

# USD per GPU-hour; spot at half the on-demand price. Figures for the reference
# implementation, not a price list.
DEFAULT_RATES = Rates(
    currency="USD",
    gpu_hour={
        model: {PriceClass.ON_DEMAND: Decimal(on_demand), PriceClass.SPOT: Decimal(on_demand) / 2}
        for model, on_demand in {
            "A100": "1.80",
            "H100": "3.00",
            "H200": "3.80",
            "B200": "5.50",
            "L40S": "1.00",
        }.items()
    },
)


def load(path: Path | None) -> Rates:
    """The rate card in ``path``, or the default when None; a bad file raises with its place."""
    return DEFAULT_RATES if path is None else load_rates(path)
