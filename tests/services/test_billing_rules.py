"""Billing rules as plain functions: periods, which events an invoice reads, where corrections go."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from accounting.model import EventKind, InvoiceLine, PriceClass, Reconciliation, UsageEvent, datetime_to_us
from accounting.periods import FIRST_PERIOD, BadPeriod, BillingPeriod, parse_period, period_of
from accounting.rate_card import DEFAULT_RATES
from services.billing import codec
from services.billing.invoice import Adjustment, InvoiceView, LateEvents
from services.billing.rules import (
    LoggedEvent,
    adjustment_sources,
    invoice_events,
    late_event_ids,
    outstanding,
)


def us(year: int, month: int, day: int) -> int:
    return datetime_to_us(datetime(year, month, day, tzinfo=UTC))


def logged(event_id: str, at_us: int, recorded_us: int | None = None, kind: EventKind = EventKind.START) -> LoggedEvent:
    event = UsageEvent(event_id, "acme", "alloc-1", "GPU-1", "H100", kind, at_us)
    return LoggedEvent(event, at_us if recorded_us is None else recorded_us)


def line(
    seconds: str, amount: str | None, model: str = "H100", klass: PriceClass = PriceClass.ON_DEMAND
) -> InvoiceLine:
    rate = None if amount is None else Decimal("3.00")
    return InvoiceLine(model, klass, Decimal(seconds), rate, None if amount is None else Decimal(amount))


class TestPeriods:
    def test_a_month_is_the_half_open_utc_interval(self) -> None:
        """2026-11 runs from Nov 1 00:00 UTC up to, not including, Dec 1 00:00 UTC."""
        period = parse_period("2026-11")
        assert (period.start_us, period.end_us) == (us(2026, 11, 1), us(2026, 12, 1))
        assert period.span.start_us == period.start_us
        assert period.span.end_us == period.end_us
        assert period_of(period.end_us - 1) == period
        assert period_of(period.end_us) == parse_period("2026-12")

    def test_december_rolls_into_the_next_year_and_back(self) -> None:
        assert parse_period("2026-12").next() == parse_period("2027-01")
        assert parse_period("2027-01").previous() == parse_period("2026-12")
        assert parse_period("2026-12").end_us == us(2027, 1, 1)
        assert str(parse_period("2026-03")) == "2026-03"

    def test_the_last_period_ends_and_no_period_lies_outside_the_named_range(self) -> None:
        """9998-12 ends at 9999-01-01 (a period needs an end); 9999-01 or month 13 is refused
        however it is built, not only when parsed."""
        assert parse_period("9998-12").end_us == us(9999, 1, 1)
        for year, month in ((9999, 1), (1969, 12), (2026, 13), (2026, 0)):
            with pytest.raises(BadPeriod):
                BillingPeriod(year, month)
        with pytest.raises(BadPeriod):
            parse_period("9998-12").next()

    def test_periods_order_chronologically(self) -> None:
        names = ["2027-01", "2026-02", "2026-11", "2026-12"]
        assert [p.name for p in sorted(parse_period(n) for n in names)] == sorted(names)

    @pytest.mark.parametrize(
        ("text", "why"),
        [
            ("2026-13", "month must be 01-12"),
            ("2026-00", "month must be 01-12"),
            ("2026-1", "use YYYY-MM"),
            ("26-11", "use YYYY-MM"),
            ("2026/11", "use YYYY-MM"),
            ("", "use YYYY-MM"),
            ("1969-12", "year must be"),
            (" 2026-11", "use YYYY-MM"),
        ],
    )
    def test_bad_names_say_why(self, text: str, why: str) -> None:
        with pytest.raises(BadPeriod, match=why):
            parse_period(text)


class TestWhichEvents:
    def test_an_invoice_reads_every_event_before_its_period_end(self) -> None:
        """Events of earlier periods are kept (a GPU may be held across the boundary); later ones are not."""
        period = parse_period("2026-11")
        events = [
            logged("before", us(2026, 9, 30)),
            logged("inside", us(2026, 11, 15)),
            logged("last-instant", period.end_us - 1),
            logged("at-end", period.end_us),
            logged("after", us(2026, 12, 2)),
        ]
        assert [e.event.event_id for e in invoice_events(events, period)] == ["before", "inside", "last-instant"]


class TestAdjustmentSources:
    def test_the_run_of_finalized_periods_right_before_an_open_one(self) -> None:
        """Corrections of a finalized period go to the first later period that is not finalized."""
        finalized = [parse_period(n) for n in ("2026-06", "2026-08", "2026-09")]
        assert [p.name for p in adjustment_sources(parse_period("2026-10"), finalized)] == ["2026-08", "2026-09"]
        assert [p.name for p in adjustment_sources(parse_period("2026-07"), finalized)] == ["2026-06"]
        assert adjustment_sources(parse_period("2026-12"), finalized) == []

    def test_the_first_period_has_none_before_it(self) -> None:
        """1970-01 has no month before it: no sources, not a BadPeriod for "1969-12"."""
        assert adjustment_sources(FIRST_PERIOD, []) == []
        assert [p.name for p in adjustment_sources(FIRST_PERIOD.next(), [FIRST_PERIOD])] == ["1970-01"]

    def test_a_finalized_period_takes_no_new_corrections(self) -> None:
        with pytest.raises(ValueError, match="finalized"):
            adjustment_sources(parse_period("2026-08"), [parse_period("2026-08")])


class TestOutstanding:
    def test_difference_of_recomputed_and_frozen_lines(self) -> None:
        """A late stop shortens a line (negative correction); a late start adds another model's line."""
        period = parse_period("2026-10")
        recomputed = [line("3600", "3.00"), line("1800", "0.90", model="A100")]
        frozen = [line("7200", "6.00")]
        result = outstanding(period, recomputed, frozen, [])
        assert result == (
            Adjustment("2026-10", "A100", PriceClass.ON_DEMAND, Decimal("1800"), Decimal("0.90")),
            Adjustment("2026-10", "H100", PriceClass.ON_DEMAND, Decimal("-3600"), Decimal("-3.00")),
        )

    def test_corrections_already_frozen_elsewhere_are_not_repeated(self) -> None:
        period = parse_period("2026-10")
        applied = [
            Adjustment("2026-10", "H100", PriceClass.ON_DEMAND, Decimal("-3600"), Decimal("-3.00")),
            # A correction of another period does not count against this one.
            Adjustment("2026-09", "H100", PriceClass.ON_DEMAND, Decimal("99"), Decimal("1.00")),
        ]
        assert outstanding(period, [line("3600", "3.00")], [line("7200", "6.00")], applied) == ()

    def test_nothing_changed_is_no_correction(self) -> None:
        lines = [line("3600", "3.00")]
        assert outstanding(parse_period("2026-10"), lines, lines, []) == ()

    def test_an_unpriced_line_stays_unpriced(self) -> None:
        result = outstanding(parse_period("2026-10"), [line("10", None)], [line("4", None)], [])
        assert result == (Adjustment("2026-10", "H100", PriceClass.ON_DEMAND, Decimal("6"), None),)


class TestLateEvents:
    def test_late_means_inside_the_period_and_recorded_since_the_snapshot(self) -> None:
        period = parse_period("2026-10")
        snapshot = us(2026, 11, 2)
        events = [
            logged("on-time", us(2026, 10, 5)),
            logged("late", us(2026, 10, 6), recorded_us=us(2026, 11, 3)),
            logged("late-but-next-period", us(2026, 11, 3), recorded_us=us(2026, 11, 3)),
            logged("exactly-at-snapshot", us(2026, 10, 7), recorded_us=snapshot),
        ]
        assert late_event_ids(events, period, known_before_us=snapshot) == ("exactly-at-snapshot", "late")


class TestCodec:
    def test_an_invoice_reads_back_digit_for_digit(self) -> None:
        view = InvoiceView(
            tenant_id="acme",
            period=parse_period("2026-10"),
            currency="USD",
            lines=(line("3600.000001", "3.00"), line("12", None, model="B200", klass=PriceClass.SPOT)),
            credited_gpu_seconds=Decimal("0.000000"),
            subtotal=Decimal("3.00"),
            adjustments=(Adjustment("2026-09", "H100", PriceClass.ON_DEMAND, Decimal("-1.5"), Decimal("-0.01")),),
            anomalies=(),
            late_events=(LateEvents("2026-09", ("a/b/stop",), Decimal("-1.5"), "1 late"),),
            reconciliation=Reconciliation(3, 2, 1, 0, {"DUPLICATE_EVENT": 1}, interval_seconds=Decimal("3612.5")),
            watermark_us=us(2026, 10, 31),
        )
        back = codec.invoice_from_json(codec.invoice_to_json(view), finalized_us=123)
        assert back == InvoiceView(**{**view.__dict__, "finalized_us": 123})
        assert back.total == Decimal("2.99")

    def test_a_rate_card_reads_back(self) -> None:
        assert codec.rates_from_json(codec.rates_to_json(DEFAULT_RATES)) == DEFAULT_RATES

    def test_an_unknown_version_is_refused(self) -> None:
        with pytest.raises(codec.CorruptInvoice, match="version"):
            codec.invoice_from_json('{"v": 99}', finalized_us=None)


def test_periods_are_hashable_values() -> None:
    assert {BillingPeriod(2026, 11): 1}[parse_period("2026-11")] == 1
