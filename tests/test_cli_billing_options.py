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
