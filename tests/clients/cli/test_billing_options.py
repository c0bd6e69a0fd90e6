"""The billing CLI's period options: bad months are a clear option error, never a traceback."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from clients.cli.billing import BadOption, export_window, period_bounds


def test_a_month_is_the_servers_billing_period() -> None:
    assert period_bounds("2026-12") == (datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC))


@pytest.mark.parametrize("period", ["0000-01", "99999-12", "2026-13", "2026-1", "next month"])
def test_a_month_out_of_range_or_malformed_is_an_option_error(period: str) -> None:
    with pytest.raises(BadOption, match="--period"):
        period_bounds(period)
    with pytest.raises(BadOption, match=r"^--invoice-period "):
        export_window(None, None, period)


def test_export_times_take_the_commands_time_forms() -> None:
    """A time without an offset is UTC, and -1h is an hour before now, as in `metrics query`."""
    start, end = export_window("2026-11-01", "-1h", None)
    assert start == datetime(2026, 11, 1, tzinfo=UTC)
    assert end is not None
    assert abs((datetime.now(UTC) - end).total_seconds() - 3600) < 60
    assert export_window("1767225600000", None, None) == (datetime(2026, 1, 1, tzinfo=UTC), None)


@pytest.mark.parametrize(("start", "end", "option"), [("soon", None, "--start"), (None, "-5parsecs", "--end")])
def test_a_malformed_export_time_names_its_option(start: str | None, end: str | None, option: str) -> None:
    with pytest.raises(BadOption, match=f"^{option}: "):
        export_window(start, end, None)
