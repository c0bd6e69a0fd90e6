"""The tsdb codecs: bit-exact round trips for any input, the right kind for each kind of data, sizes."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.typing import NDArray

from tsdb import codecs
from tsdb.codecs import CONST, DECIMAL, PATCHED, XOR
from tsdb.errors import CorruptSegmentError, TsdbError

FEW = settings(max_examples=60, deadline=None)
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
START_MS = 1_700_000_000_000
NAN_PAYLOADS = [0x7FF8_0000_0000_0000, 0xFFF8_0000_0000_0001, 0x7FF0_0000_0000_0001, 0x7FF4_DEAD_BEEF_0042]
SPECIALS = [0.0, -0.0, math.inf, -math.inf, 5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, -1e300]


def bits(values: NDArray[np.float64]) -> NDArray[np.uint64]:
    return np.ascontiguousarray(values).view(np.uint64)


def roundtrip(block: NDArray[np.float64], level: int = 1) -> bytes:
    blob = codecs.encode_values(block, level=level)
    decoded = codecs.decode_values(blob)
    assert decoded.shape == block.shape
    assert decoded.dtype == np.float64
    np.testing.assert_array_equal(bits(decoded), bits(block))
    return blob


def smallest_decimals(row: list[float]) -> int | None:
    """Reference answer, independent of the codec: the smallest k <= 6 with every value = round(v*10^k)/10^k
    for an int64 round(v*10^k), -0.0 excluded."""

    def exact(v: float, k: int) -> bool:
        scale: int = 10**k  # k >= 0: an int (the stubs cannot tell, and say Any)
        scaled = v * scale
        if not math.isfinite(scaled) or (v == 0 and math.copysign(1, v) < 0):
            return False
        r = round(scaled)
        return INT64_MIN <= r <= INT64_MAX and r / scale == v

    for k in range(7):
        if all(exact(v, k) for v in row):
            return k
    return None


any_bits = hnp.arrays(
    np.uint64,
    st.tuples(st.integers(1, 4), st.integers(0, 40)),
    elements=st.integers(0, (1 << 64) - 1) | st.sampled_from(NAN_PAYLOADS),
)


@FEW
@given(any_bits)
def test_any_bit_pattern_round_trips(raw: NDArray[np.uint64]) -> None:
    roundtrip(raw.view(np.float64))


float_elements = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True, width=64) | st.sampled_from(
    SPECIALS
)


@FEW
@given(hnp.arrays(np.float64, st.tuples(st.integers(1, 3), st.integers(1, 60)), elements=float_elements))
def test_any_float_round_trips(block: NDArray[np.float64]) -> None:
    roundtrip(block)


@FEW
@given(
    st.integers(1, 6),
    st.lists(st.integers(-(10**12), 10**12), min_size=2, max_size=80),
)
def test_decimals_pick_the_smallest_exact_k(places: int, ints: list[int]) -> None:
    row = [i / 10**places for i in ints]
    blob = roundtrip(np.array([row]))
    expected = smallest_decimals(row)
    kind, k = codecs.row_kinds(blob)[0]
    if len(set(row)) == 1:
        assert kind == CONST
    else:
        assert expected is not None
        assert expected <= places
        assert (kind, k) == (DECIMAL, expected)


@FEW
@given(st.lists(float_elements, min_size=2, max_size=30))
def test_kind_matches_the_reference_rule(row: list[float]) -> None:
    block = np.array([row])
    blob = roundtrip(block)
    kind, k = codecs.row_kinds(blob)[0]
    if len(set(bits(block)[0].tolist())) == 1:
        assert kind == CONST
    elif (expected := smallest_decimals(row)) is not None:
        assert (kind, k) == (DECIMAL, expected)
    elif kind == PATCHED:
        special = [v for v in row if not math.isfinite(v) or (v == 0 and math.copysign(1, v) < 0)]
        assert 0 < 8 * len(special) <= len(row)
        assert smallest_decimals([v for v in row if v not in special and not math.isnan(v)]) == k
    else:
        assert kind == XOR


@FEW
@given(st.integers(0, 10**12), st.lists(st.integers(0, 5000), min_size=1, max_size=200))
def test_counters_are_decimal_and_small(base: int, increments: list[int]) -> None:
    counter = np.array([base + np.cumsum(increments, dtype=np.int64)], dtype=np.float64)
    blob = roundtrip(counter)
    kinds = codecs.row_kinds(blob)
    assert kinds[0][0] in (CONST, DECIMAL)
    assert len(blob) < 64 + 2 * len(increments)


@pytest.mark.parametrize("value", [0.0, -0.0, 9501.0, math.nan, -math.inf, 5e-324, 123.456789123])
def test_constant_row_costs_a_header(value: float) -> None:
    blob = roundtrip(np.full((1, 720), value))
    assert codecs.row_kinds(blob) == [(CONST, 0)]
    assert len(blob) < 40
    eight = roundtrip(np.full((8, 720), value))
    assert len(eight) < 8 * 40


def test_constant_nan_payload_and_negative_zero_are_kept() -> None:
    block = np.array([NAN_PAYLOADS, [-0.0] * 4], dtype=np.uint64)
    block[1] = np.float64(-0.0).view(np.uint64)
    roundtrip(block.view(np.float64))


def test_mixed_rows_in_one_block() -> None:
    rng = np.random.default_rng(3)
    n = 500
    block = np.stack(
        [
            np.round(rng.normal(300, 20, n), 3),  # decimal, 3 places
            rng.normal(size=n),  # full-precision floats: XOR
            np.full(n, 1410.0),  # constant
            np.where(np.arange(n) % 7 == 0, math.nan, 42.0),  # NaN too often among integers: XOR
            np.round(rng.uniform(0, 100, n)),  # integers
            np.cumsum(rng.integers(0, 3, n)) * 0.5,  # one decimal place
            np.where(np.arange(n) % 100 == 0, math.nan, np.round(rng.normal(70, 2, n))),  # rare NaN: PATCHED
        ]
    )
    blob = roundtrip(block)
    assert codecs.row_kinds(blob) == [
        (DECIMAL, 3),
        (XOR, 0),
        (CONST, 0),
        (XOR, 0),
        (DECIMAL, 0),
        (DECIMAL, 1),
        (PATCHED, 0),
    ]


def test_rare_specials_are_patched_not_xored() -> None:
    rng = np.random.default_rng(11)
    clean = np.round(rng.normal(60, 2, (4, 720)))
    gapped = clean.copy()
    gapped[0, [0, 5, 6, 700]] = math.nan  # missed scrapes, the first value included
    gapped[1, 719] = -math.inf
    gapped[2, 300] = -0.0
    gapped.view(np.uint64)[3, [10, 20]] = NAN_PAYLOADS[2:]
    blob = roundtrip(gapped)
    assert codecs.row_kinds(blob) == [(PATCHED, 0)] * 4
    assert len(blob) < len(codecs.encode_values(clean)) + 120
    often = clean.copy()
    often[0, ::5] = math.nan  # one in five is no longer rare: XOR keeps it exact
    assert codecs.row_kinds(roundtrip(often))[0] == (XOR, 0)
    for rows in ([0], [3, 1], [2, 2, 0]):
        np.testing.assert_array_equal(bits(codecs.decode_value_rows(blob, rows)), bits(gapped[rows]))


@FEW
@given(
    st.integers(0, 6),
    st.lists(st.integers(-(10**9), 10**9), min_size=16, max_size=120),
    st.lists(st.tuples(st.integers(0, 119), st.sampled_from([*NAN_PAYLOADS, 0x7FF0 << 48, 0xFFF0 << 48, 1 << 63]))),
)
def test_decimal_rows_with_specials_round_trip(places: int, ints: list[int], specials: list[tuple[int, int]]) -> None:
    row = np.array([ints], dtype=np.float64) / 10.0**places
    for position, pattern in specials:
        row.view(np.uint64)[0, position % row.shape[1]] = pattern
    roundtrip(row)


def test_decimals_up_to_six_places_and_not_beyond() -> None:
    rng = np.random.default_rng(4)
    ints = rng.integers(-(10**9), 10**9, size=(7, 300))
    block = ints / (10.0 ** np.arange(1, 8))[:, None]
    blob = roundtrip(block)
    assert [k for _, k in codecs.row_kinds(blob)[:6]] == [1, 2, 3, 4, 5, 6]
    assert codecs.row_kinds(blob)[6][0] == XOR  # 7 places is past the limit


def test_huge_and_tiny_values() -> None:
    block = np.array(
        [
            [1e308, -1e308, 1.7976931348623157e308, 1e300],
            [5e-324, 1e-320, -2.2250738585072014e-308, 1e-310],
            [2.0**62, -(2.0**62), 2.0**63, 9.2e18],  # integral but past int64 for some
            [2.0**53 + 2, 3.0, -(2.0**60), 7.0],  # integral and inside int64: still decimal
        ]
    )
    blob = roundtrip(block)
    kinds = codecs.row_kinds(blob)
    assert kinds[0][0] == XOR
    assert kinds[1][0] == XOR
    assert kinds[2][0] == XOR
    assert kinds[3] == (DECIMAL, 0)


def test_telemetry_like_blocks_are_small() -> None:
    """Rough per-field ceilings for 2 h blocks of 8 GPUs: a regression in kind
    choice, difference order or byte layout shows up here."""
    rng = np.random.default_rng(12)
    n = 720
    drift = np.cumsum(rng.normal(0, 0.2, (8, n)), axis=1)
    temps = np.round(60 + drift)  # slowly varying integers
    power = np.round(300 + 5 * rng.normal(size=(8, n)), 3)  # 3 decimals of noise
    energy = 1e12 + np.cumsum(np.round(3e6 + 5e4 * rng.normal(size=(8, n))), axis=1)  # mJ counter
    sizes = {name: len(roundtrip(block)) / block.size for name, block in (("t", temps), ("p", power), ("e", energy))}
    assert sizes["t"] < 0.35
    assert sizes["p"] < 2.1
    assert sizes["e"] < 2.7  # unshuffled 4-byte residuals would cost about 2.9


@pytest.mark.parametrize("shape", [(0, 0), (0, 5), (3, 0), (1, 1), (4, 1), (2, 2)])
def test_edge_shapes(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(5)
    block = rng.normal(size=shape)
    roundtrip(block)
    blob = codecs.encode_values(block)
    assert codecs.decode_value_rows(blob, []).shape == (0, shape[1])


def test_decode_value_rows() -> None:
    rng = np.random.default_rng(6)
    n = 300
    block = np.stack(
        [
            np.round(rng.normal(70, 3, n)),
            rng.normal(size=n),
            np.full(n, 3.0),
            np.round(rng.normal(300, 20, n), 3),
            np.round(rng.normal(20, 3, n)),
            rng.normal(size=n) * 1e-300,
        ]
    )
    blob = codecs.encode_values(block)
    for rows in ([0], [5], [2], [3, 1], [4, 0, 4, 2], list(range(6)), list(range(5, -1, -1))):
        part = codecs.decode_value_rows(blob, rows)
        np.testing.assert_array_equal(bits(part), bits(block[rows]))
    np.testing.assert_array_equal(bits(codecs.decode_value_rows(blob, np.array([1, 3]))), bits(block[[1, 3]]))
    with pytest.raises(ValueError, match=r"rows \[6\] out of range for a block of 6 rows"):
        codecs.decode_value_rows(blob, [6])
    with pytest.raises(ValueError, match=r"rows \[-1\] out of range for a block of 6 rows"):
        codecs.decode_value_rows(blob, [-1])


@FEW
@given(hnp.arrays(np.float64, st.tuples(st.integers(1, 8), st.integers(1, 30)), elements=float_elements), st.data())
def test_decode_value_rows_matches_full_decode(block: NDArray[np.float64], data: st.DataObject) -> None:
    blob = codecs.encode_values(block)
    rows = data.draw(st.lists(st.integers(0, block.shape[0] - 1), max_size=10))
    np.testing.assert_array_equal(bits(codecs.decode_value_rows(blob, rows)), bits(block[rows]))


@FEW
@given(
    hnp.arrays(np.float64, st.tuples(st.integers(1, 8), st.integers(1, 40)), elements=float_elements)
    | st.builds(
        lambda ints, places, gaps: np.array([np.cumsum(ints) / 10**places, np.where(gaps, np.nan, ints / 10**places)]),
        st.lists(st.integers(-(10**9), 10**9), min_size=40, max_size=40).map(np.array),
        st.integers(0, 4),
        st.lists(st.booleans(), min_size=40, max_size=40).map(lambda g: np.array(g) & (np.arange(40) % 9 == 0)),
    ),
    st.data(),
)
def test_decode_value_row_slices_match_full_decode(block: NDArray[np.float64], data: st.DataObject) -> None:
    blob = codecs.encode_values(block)
    rows, n = block.shape
    for _ in range(4):
        row = data.draw(st.integers(0, rows - 1))
        start = data.draw(st.integers(0, n))
        stop = data.draw(st.integers(start, n))
        part = codecs.decode_value_row(memoryview(blob), row, start, stop)
        np.testing.assert_array_equal(bits(part), bits(block[row, start:stop]))
    np.testing.assert_array_equal(bits(codecs.decode_value_row(blob, rows - 1)), bits(block[rows - 1]))


def test_decode_value_row_covers_every_kind_and_order() -> None:
    rng = np.random.default_rng(16)
    n = 500
    patched = np.round(rng.normal(50, 5, n), 1)
    patched[[0, 77, 499]] = [np.nan, -0.0, np.inf]
    block = np.stack(
        [
            np.round(rng.normal(70, 3, n)),  # decimal, 1-byte residuals
            np.cumsum(rng.integers(0, 5000, n)).astype(np.float64),  # counter: order 1
            np.round(np.cumsum(np.cumsum(rng.normal(size=n))), 2),  # order 2, shuffled wide residuals
            np.full(n, -0.0),  # CONST
            rng.normal(size=n),  # XOR
            patched,  # PATCHED
        ]
    )
    blob = codecs.encode_values(block)
    assert {kind for kind, _ in codecs.row_kinds(blob)} == {CONST, DECIMAL, XOR, PATCHED}
    for row in range(block.shape[0]):
        for start, stop in ((0, n), (0, 0), (0, 1), (1, 2), (2, 3), (76, 78), (130, 444), (499, 500), (n, n)):
            part = codecs.decode_value_row(blob, row, start, stop)
            np.testing.assert_array_equal(bits(part), bits(block[row, start:stop]))
    for bad in ((6, 0, 1), (-1, 0, 1), (0, 3, 2), (0, 0, n + 1), (0, -1, 2)):
        with pytest.raises(codecs.CodecInputError):
            codecs.decode_value_row(blob, *bad)
    with pytest.raises(codecs.CorruptBlobError):
        codecs.decode_value_row(blob[:-3], 0, 0, 5)


@FEW
@given(
    hnp.arrays(np.float64, st.tuples(st.integers(1, 20), st.integers(0, 50)), elements=float_elements)
    | st.builds(
        lambda ints, places: np.round(np.cumsum(ints, axis=1) / 10**places, places),
        hnp.arrays(np.int64, st.tuples(st.integers(1, 20), st.integers(2, 50)), elements=st.integers(-(10**6), 10**6)),
        st.integers(0, 4),
    ),
    st.data(),
)
def test_encode_value_blocks_equals_encoding_each_block(matrix: NDArray[np.float64], data: st.DataObject) -> None:
    rows = matrix.shape[0]
    cuts = sorted(data.draw(st.lists(st.integers(0, rows), max_size=4)))
    bounds = list(zip([0, *cuts], [*cuts, rows], strict=True))
    blobs = codecs.encode_value_blocks(matrix, bounds, level=1)
    assert blobs == [codecs.encode_values(matrix[lo:hi], level=1) for lo, hi in bounds]
    for (lo, hi), blob in zip(bounds, blobs, strict=True):
        np.testing.assert_array_equal(bits(codecs.decode_values(blob)), bits(matrix[lo:hi]))
    with pytest.raises(codecs.CodecInputError):
        codecs.encode_value_blocks(matrix, [(0, rows + 1)])


def test_decode_values_into_rows_of_a_larger_matrix() -> None:
    block = np.round(np.random.default_rng(17).normal(50, 5, (4, 30)), 2)
    blob = codecs.encode_values(block)
    target = np.full((10, 30), np.nan)
    codecs.decode_values(blob, out=target[3:7])
    np.testing.assert_array_equal(target[3:7], block)
    assert np.isnan(target[:3]).all()
    assert np.isnan(target[7:]).all()
    with pytest.raises(codecs.CodecInputError):
        codecs.decode_values(blob, out=np.empty((4, 29)))
    for rows in ([2, 0], [1, 1, 3]):
        target = np.full((10, 30), np.nan)
        assert codecs.decode_value_rows(blob, rows, out=target[5 : 5 + len(rows)]) is not None
        np.testing.assert_array_equal(target[5 : 5 + len(rows)], block[rows])
        assert np.isnan(target[:5]).all()
        assert np.isnan(target[5 + len(rows) :]).all()
    # A wrong target is refused whether or not a row repeats (repeats are decoded apart and copied).
    for rows in ([2, 0], [1, 1, 3]):
        # A float32 target among them: outside the declared float64, on purpose.
        wrong_targets: tuple[NDArray[Any], ...] = (
            np.empty((len(rows), 30), dtype=np.float32),
            np.empty((30, len(rows))).T,
            np.empty((len(rows) + 1, 30)),
        )
        for wrong in wrong_targets:
            with pytest.raises(codecs.CodecInputError):
                codecs.decode_value_rows(blob, rows, out=wrong)


def test_memoryview_and_level() -> None:
    block = np.round(np.random.default_rng(7).normal(50, 5, (8, 720)), 1)
    for level in (-1, 1, 3, 19):
        blob = codecs.encode_values(block, level=level)
        np.testing.assert_array_equal(bits(codecs.decode_values(memoryview(blob))), bits(block))
        np.testing.assert_array_equal(bits(codecs.decode_value_rows(memoryview(blob), [2])), bits(block[[2]]))
    with pytest.raises(ValueError, match=r"zstd level must be an int in \[-7, 22\], got 99"):
        codecs.encode_values(block, level=99)


def test_non_contiguous_and_float32_inputs() -> None:
    block = np.round(np.random.default_rng(8).normal(50, 5, (8, 100)), 2)
    view = block[::2, ::3]
    np.testing.assert_array_equal(bits(codecs.decode_values(codecs.encode_values(view))), bits(view))
    single: NDArray[Any] = block.astype(np.float32)  # outside the declared float64, on purpose
    np.testing.assert_array_equal(codecs.decode_values(codecs.encode_values(single)), single.astype(np.float64))


@pytest.mark.parametrize("bad", [np.zeros(5), np.zeros((2, 2, 2)), np.zeros((2, 3), dtype=np.int64)])
def test_bad_value_inputs(bad: Any) -> None:  # Any: deliberately not what the codec accepts
    with pytest.raises(codecs.CodecInputError) as caught:
        codecs.encode_values(bad)
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, TsdbError)


def test_corrupt_value_blobs_are_refused() -> None:
    block = np.round(np.random.default_rng(9).normal(50, 5, (4, 200)), 2)
    blob = codecs.encode_values(block)
    cases = [
        b"",
        blob[:5],
        bytes([9]) + blob[1:],  # unknown version
        blob[:7] + bytes([0x0F]) + blob[8:],  # invalid descriptor
        blob[:-3],  # truncated frame
        blob[:7] + blob[7:15],  # descriptors only
        blob[:7] + bytes([blob[7] | 3]) + blob[8:],  # a PATCHED row without an exceptions section
        codecs.encode_values(np.zeros((0, 3))) + b"x",  # bytes after a block that has no frame
    ]
    for case in cases:
        with pytest.raises(codecs.CorruptBlobError) as caught:
            codecs.decode_values(case)
        assert isinstance(caught.value, CorruptSegmentError)
    for case in cases[:-1]:
        with pytest.raises(codecs.CorruptBlobError):
            codecs.decode_value_row(case, 0, 0, 5)


# --- timestamps ---------------------------------------------------------------------------------


def ts_roundtrip(ts: NDArray[np.int64]) -> bytes:
    blob = codecs.encode_timestamps(ts)
    decoded = codecs.decode_timestamps(blob)
    assert decoded.dtype == np.int64
    np.testing.assert_array_equal(decoded, ts)
    info = codecs.timestamps_header(blob)
    assert info.count == ts.size
    if ts.size:
        assert (info.t0, info.tmin, info.tmax) == (int(ts[0]), int(ts.min()), int(ts.max()))
        diffs = set(np.diff(ts.astype(object)).tolist())
        # Regular means one stride that int64 can hold (INT64_MIN -> INT64_MAX's stride cannot).
        assert info.regular == (len(diffs) == 0 or (len(diffs) == 1 and INT64_MIN <= min(diffs) <= INT64_MAX))
        assert info.step == (diffs.pop() if info.regular and diffs else 0)
    return blob


@FEW
@given(hnp.arrays(np.int64, st.integers(0, 60), elements=st.integers(INT64_MIN, INT64_MAX)))
def test_any_int64_timestamps_round_trip(ts: NDArray[np.int64]) -> None:
    ts_roundtrip(ts)


@FEW
@given(st.integers(-(10**15), 10**15), st.lists(st.integers(0, 10**7), min_size=0, max_size=100))
def test_non_decreasing_timestamps_round_trip(start: int, gaps: list[int]) -> None:
    ts_roundtrip(start + np.concatenate(([0], np.cumsum(gaps, dtype=np.int64))).astype(np.int64))


@FEW
@given(st.integers(0, 10**13), st.integers(1, 60_000), st.integers(1, 5000), st.integers(0, 100))
def test_regular_timestamps_cost_a_header(start: int, step: int, count: int, jitter: int) -> None:
    regular = start + step * np.arange(count, dtype=np.int64)
    blob = ts_roundtrip(regular)
    assert len(blob) < 40
    assert codecs.timestamps_header(blob).step == (step if count > 1 else 0)
    jittered = regular + np.random.default_rng(jitter).integers(-jitter, jitter + 1, count)
    ts_roundtrip(jittered)


def test_jittered_and_gapped_timestamps_are_compact() -> None:
    rng = np.random.default_rng(10)
    regular = START_MS + 10_000 * np.arange(8640, dtype=np.int64)
    jittered = regular + rng.integers(-25, 26, regular.size)
    assert len(ts_roundtrip(jittered)) < 0.9 * regular.size  # jitter of 51 values: under 6 bits each
    gapped = np.delete(regular, [100, 101, 4000])
    assert len(ts_roundtrip(gapped)) < 100  # delta-of-delta: almost all zero
    equal = np.repeat(regular[:100], 3)  # equal consecutive values
    ts_roundtrip(equal)


def test_timestamp_extremes() -> None:
    for ts in (
        [INT64_MIN, INT64_MAX],
        [INT64_MAX, INT64_MIN],
        [INT64_MIN, 0, INT64_MAX - 1],
        [INT64_MIN, 5, INT64_MIN + 10],
        [INT64_MAX] * 3,
        [0],
        [],
    ):
        ts_roundtrip(np.array(ts, dtype=np.int64))
    empty = codecs.timestamps_header(codecs.encode_timestamps(np.array([], dtype=np.int64)))
    assert (empty.count, empty.tmin, empty.tmax) == (0, 0, 0)


def test_bad_and_corrupt_timestamps() -> None:
    # Any: deliberately not what the codec accepts.
    bad_inputs: tuple[Any, ...] = (np.zeros((2, 2), dtype=np.int64), np.zeros(3), np.array([2**63], dtype=np.uint64))
    for bad in bad_inputs:
        with pytest.raises(codecs.CodecInputError):
            codecs.encode_timestamps(bad)
    irregular = codecs.encode_timestamps(START_MS + np.cumsum(np.arange(100, dtype=np.int64) % 7))
    regular = codecs.encode_timestamps(START_MS + np.arange(100, dtype=np.int64))
    for case in (b"", b"\x07" + regular[1:], regular[:-1], irregular[:20], irregular[:-2], regular + b"\x00"):
        with pytest.raises(codecs.CorruptBlobError):
            codecs.decode_timestamps(case)
