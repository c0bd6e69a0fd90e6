"""The rate card invoices are priced with: a JSON file, or the built-in default.

One card for both ways of invoicing: the server's (``gpucloud serve --rates FILE``) and the
offline ``gpucloud invoice --rates FILE``, which read the same file format
(``accounting/loaders.py``); without a file both use ``DEFAULT_RATES``, an illustrative
on-demand/spot card for the GPU models the control plane knows (docs/billing.md lists it). It
lives in the library, not in the server, so that the offline command prices exactly as the
server does without importing the server.
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
