"""Packed (group, time) keys: which integer type they need, and that they sort as (group, time)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from accounting.engine import connect
from accounting.packing import PackedKey

MONTH_US = 31 * 86_400 * 1_000_000


def test_a_month_of_microseconds_leaves_21_bits_for_groups() -> None:
    assert PackedKey.fitting(2**21, 0, MONTH_US) == PackedKey(42, 0, "BIGINT")
    assert PackedKey.fitting(2**21 + 1, 0, MONTH_US).sql_type == "HUGEINT"
    assert PackedKey.fitting(1, -(2**62), 2**62).sql_type == "HUGEINT"  # 64 bits of time alone
    assert PackedKey.fitting(0, 5, 5) == PackedKey(1, 5, "BIGINT")  # no rows: any key will do


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 2**24),
    st.integers(-(2**62), 2**62 - 1),
    st.one_of(st.integers(0, 2**30), st.integers(0, 2**62)),  # BIGINT and HUGEINT keys
    st.lists(st.tuples(st.integers(0, 2**24), st.integers(0, 2**62)), min_size=1, max_size=20),
)
def test_keys_sort_as_group_then_time_and_unpack(
    groups: int, origin: int, span: int, rows: list[tuple[int, int]]
) -> None:
    """At every width: order by the key is order by (group, time), and both come back out."""
    key = PackedKey.fitting(groups, origin, origin + span)
    rows = [(g % groups, origin + t % (span + 1)) for g, t in rows]
    values = ", ".join(f"({g}::BIGINT, {t}::BIGINT)" for g, t in rows)
    con = connect()
    try:
        got = con.sql(
            f"SELECT {key.group('k')}, {key.time('k')} FROM "
            f"(SELECT {key.pack('g', 't')} AS k FROM (VALUES {values}) v(g, t)) ORDER BY k"
        ).fetchall()
    finally:
        con.close()
    assert got == sorted(rows)
