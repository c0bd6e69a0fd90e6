"""The codecs through their four public functions: any bit pattern and any sorted timestamps
round-trip, values that print as decimals but are not come back bit for bit, and telemetry
compresses under per-field budgets that plain zlib on the raw bytes does not meet."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tsdb import codecs

ROWS, SAMPLES = 8, 720  # one field across a node's 8 GPUs, 2 h at 10 s


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a.view(np.uint64), b.view(np.uint64)))


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.uint64, st.tuples(st.integers(1, 4), st.integers(0, 50))))
def test_any_bit_pattern_round_trips(bits: np.ndarray) -> None:
    # Every float64 bit pattern: NaN payloads, -0.0, infinities, subnormals.
    block = bits.view(np.float64)
    assert _same_bits(codecs.decode_values(codecs.encode_values(block)), block)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-(2**62), 2**62), min_size=0, max_size=200))
def test_any_sorted_timestamps_round_trip(raw: list[int]) -> None:
    ts = np.array(sorted(raw), dtype=np.int64)
    assert np.array_equal(codecs.decode_timestamps(codecs.encode_timestamps(ts)), ts)


def test_values_that_print_as_decimals_but_are_not_round_trip() -> None:
    """A running sum of 0.1 prints as 0.3, 0.4, ... but 0.1 + 0.2 is not 0.3: a decoder that
    scales to integers after checking values only approximately gives back the decimals."""
    block = np.cumsum(np.full((ROWS, SAMPLES), 0.1), axis=1)
    assert block[0, 2] != 0.3  # the trap itself
    assert _same_bits(codecs.decode_values(codecs.encode_values(block)), block)


def test_regular_timestamps_cost_a_header_not_a_column() -> None:
    ts = 1_764_547_200_000 + 10_000 * np.arange(SAMPLES, dtype=np.int64)
    assert len(codecs.encode_timestamps(ts)) < 40


def test_telemetry_compresses_like_telemetry() -> None:
    rng = np.random.default_rng(7)
    steps = rng.integers(0, 3, (ROWS, SAMPLES))
    telemetry = {
        # Budgets sit between the reference's sizes and what zlib makes of the raw float64 bytes
        # (const 0.017, util 1.41, power 3.41, energy 4.17, ECC 0.11): generic compression is not enough.
        "constant clock": (np.full((ROWS, SAMPLES), 1593.0), 0.05),
        "integer utilization": (rng.integers(0, 101, (ROWS, SAMPLES)).astype(np.float64), 1.0),
        "3-decimal power": (np.round(300 + np.cumsum(rng.normal(0, 2, (ROWS, SAMPLES)), axis=1), 3), 2.5),
        "energy counter": (np.cumsum(rng.integers(200_000, 400_000, (ROWS, SAMPLES)), axis=1).astype(np.float64), 3.0),
        "rare ECC counter": (np.cumsum(steps == 2, axis=1).astype(np.float64) * (rng.random((ROWS, 1)) < 0.2), 0.1),
    }
    for name, (block, budget) in telemetry.items():
        blob = codecs.encode_values(block)
        assert _same_bits(codecs.decode_values(blob), block), name
        assert len(blob) / block.size <= budget, f"{name}: {len(blob) / block.size:.3f} bytes/sample"
