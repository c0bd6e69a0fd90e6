"""Per-row analysis for the DECIMAL kind: the smallest exact number of decimals, and the difference order.

Both are vectorised over a block's rows; neither writes any bytes.
"""

from __future__ import annotations

import functools
from typing import Final

import numpy as np
from numpy.typing import NDArray

from tsdb._codec_common import I64, U64, WIDTHS, frame_of_reference, width_codes, width_dtype

F64 = NDArray[np.float64]
IntpArray = NDArray[np.intp]

MAX_DECIMALS: Final = 6
POW10: Final = np.array([10.0**k for k in range(MAX_DECIMALS + 1)])
# Rows are first tried on this many leading values; only rows that pass pay for a full check.
_PROBE: Final = 64
# Residuals sampled per row to estimate their entropy.
_ENTROPY_SAMPLE: Final = 512
# Rows whose residual bytes are histogrammed in one pass.
_ENTROPY_ROWS: Final = 8
# Estimated bytes charged per anchor parameter, so that ties go to the lower order.
_ANCHOR_COST: Final = 2.0


def _exact_at(values: F64, k: int) -> tuple[NDArray[np.bool_], I64]:
    """Per row, whether every value is bit-exactly rint(v * 10**k) / 10**k; and those ints."""
    # Callers silence numpy's warnings: NaN, inf and out-of-range values cast to garbage ints here,
    # and the bitwise comparison below is what rejects them.
    ints = np.rint(values * POW10[k] if k else values).astype(np.int64)
    back = ints.astype(np.float64)
    if k:
        back /= POW10[k]
    ok: NDArray[np.bool_] = (back.view(np.uint64) == values.view(np.uint64)).all(axis=1)
    return ok, ints


def decimal_scales(values: F64) -> tuple[NDArray[np.int8], I64]:
    """Per row, the smallest exact number of decimals (-1: none up to 6), and the scaled ints of decimal rows."""
    scales = np.full(values.shape[0], -1, dtype=np.int8)
    ints = np.empty(values.shape, dtype=np.int64)
    probe = values[:, :_PROBE]
    with np.errstate(all="ignore"):
        _scan_decimals(values, probe, scales, ints)
    return scales, ints


def _scan_decimals(values: F64, probe: F64, scales: NDArray[np.int8], ints: I64) -> None:
    """Fill scales (-1 where undecided) and ints, trying k = 0, 1, ... on the rows still undecided."""
    count, length = values.shape
    pending = scales < 0
    for k in range(MAX_DECIMALS + 1):
        rows = np.flatnonzero(pending)
        if rows.size == 0:
            break
        every = rows.size == count
        if length > _PROBE:
            # A cheap look at the first values rules most wrong k out before the full check.
            probe_ok, _ = _exact_at(probe if every else probe[rows], k)
            if not probe_ok.all():
                rows, every = rows[probe_ok], False
            if rows.size == 0:
                continue
        full_ok, scaled = _exact_at(values if every else values[rows], k)
        decided = rows[full_ok]
        scales[decided] = k
        ints[decided] = scaled[full_ok]
        pending[decided] = False


@functools.lru_cache(maxsize=64)
def _xlog2x(length: int) -> F64:
    """c * log2(c) for every count c in 0..length (0 for c = 0): entropy sums without a log per call."""
    counts = np.arange(length + 1, dtype=np.float64)
    table: F64 = counts * np.log2(np.maximum(counts, 1.0))
    table.setflags(write=False)
    return table


def _entropy_bytes(shifted: U64, planes: int) -> F64:
    """Per row, the order-0 entropy (in bytes per value) of the residual bytes of `planes` byte planes
    (enough for every row), plane by plane: a cheap stand-in for what zstd will make of a shuffled
    row, to compare difference orders with."""
    rows, count = shifted.shape
    planes_u8 = shifted.astype(width_dtype(planes)).view(np.uint8).reshape(rows, count, planes)
    offsets = (np.arange(rows * planes, dtype=np.intp) * 256).reshape(rows, 1, planes)
    index = np.add(planes_u8, offsets, dtype=np.intp)
    counts = np.bincount(index.reshape(-1), minlength=rows * planes * 256).reshape(rows, planes * 256)
    table = _xlog2x(count)
    bits = planes * float(table[count]) - table[counts].sum(axis=1)
    result: F64 = bits / (8.0 * count)
    return result


def choose_orders(raw: U64) -> IntpArray:
    """Per row, the difference order (0..2) whose residuals look cheapest to store.

    Judged on an evenly strided sample of each candidate's residuals (computed from the full rows at
    the sampled positions), so the choice costs a fraction of coding every candidate in full; the
    sample keeps the value distribution of busy and idle phases alike. Each row is judged on its own
    (on as many byte planes as its widest candidate needs), so the choice never depends on the other
    rows of the call.
    """
    rows, length = raw.shape
    orders = range(min(3, length))
    span = length - (len(orders) - 1)
    stride = -(-span // _ENTROPY_SAMPLE)
    taps = [raw[:, shift : shift + span : stride] for shift in range(len(orders))]
    samples = [taps[0]]
    if len(orders) > 1:
        samples.append(taps[1] - taps[0])
    if len(orders) > 2:
        samples.append(taps[2] - taps[1] - samples[1])
    _, shifted, maxima = frame_of_reference(np.concatenate(samples))
    codes = width_codes(maxima.reshape(len(orders), rows).max(axis=0))
    cost = np.zeros((len(orders), rows))
    for code in set(codes.tolist()):
        if WIDTHS[code] == 0:
            continue  # every candidate constant: no bytes at all
        every = np.flatnonzero(codes == code)
        # A few rows at a time: the byte histograms of a handful of rows stay in cache.
        for start in range(0, every.size, _ENTROPY_ROWS):
            members = every[start : start + _ENTROPY_ROWS]
            picked = (members[None, :] + rows * np.arange(len(orders))[:, None]).reshape(-1)
            entropy = _entropy_bytes(shifted if members.size == rows else shifted[picked], WIDTHS[code])
            cost[:, members] = entropy.reshape(len(orders), members.size)
    cost *= length
    cost += _ANCHOR_COST * np.arange(len(orders))[:, None]
    chosen: IntpArray = np.argmin(cost, axis=0)  # ties go to the lower order
    return chosen
