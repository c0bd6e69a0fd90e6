"""Reading events, outages and rates from real files; every bad input names its file and line."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from accounting import Commitment, EventKind, InputError, Outage, PriceClass, UsageEvent
from accounting.export import event_to_json, invoice_run_to_json, write_events
from accounting.loaders import load_events, load_outages, load_rates
from tests.accounting.helpers import P0, PERIOD, held, run, with_commitment

GOOD_EVENT = {
    "event_id": "a1/GPU-1/start",
    "tenant_id": "acme",
    "allocation_id": "a1",
    "gpu_uuid": "GPU-1",
    "gpu_model": "H100",
    "kind": "start",
    "time": "2025-06-01T00:00:00Z",
}
COMMITMENT = {"tenant_id": "acme", "gpu_model": "H100", "gpus": 16, "gpu_hour": "2.10"}
RATES_DOC = {"currency": "USD", "gpu_hour": {"H100": {"on_demand": "2.49", "spot": 1.10}}, "commitments": [COMMITMENT]}


def write_lines(path: Path, *lines: str) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def test_events_parse_with_defaults_offsets_and_blank_lines(tmp_path: Path) -> None:
    spot = {**GOOD_EVENT, "event_id": "x", "kind": "stop", "time": "2025-06-01T02:00:00.5+02:00", "price_class": "spot"}
    path = write_lines(tmp_path / "events.jsonl", json.dumps(GOOD_EVENT), "", json.dumps({**spot, "extra": 1}))
    first, second = load_events(path)
    assert first == UsageEvent(
        "a1/GPU-1/start", "acme", "a1", "GPU-1", "H100", EventKind.START, P0, PriceClass.ON_DEMAND
    )
    assert (second.kind, second.price_class) == (EventKind.STOP, PriceClass.SPOT)
    assert second.at_us == P0 + 500_000  # 02:00:00.5 at +02:00 is 00:00:00.5 UTC


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "must be a JSON object"),
        (json.dumps({k: v for k, v in GOOD_EVENT.items() if k != "gpu_uuid"}), "missing field gpu_uuid"),
        (json.dumps({**GOOD_EVENT, "kind": "pause"}), "unknown kind 'pause'"),
        (json.dumps({**GOOD_EVENT, "time": "2025-06-01T00:00:00"}), "has no UTC offset"),
        (json.dumps({**GOOD_EVENT, "time": "June 1st"}), "is not RFC 3339"),
        (json.dumps({**GOOD_EVENT, "time": 1748736000}), "time must be a non-empty string"),
        (json.dumps({**GOOD_EVENT, "price_class": "reserved"}), "unknown price_class 'reserved'"),
        (json.dumps({**GOOD_EVENT, "tenant_id": ""}), "tenant_id must be a non-empty string"),
    ],
)
def test_a_bad_event_line_names_the_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = write_lines(tmp_path / "events.jsonl", json.dumps(GOOD_EVENT), "", line)
    with pytest.raises(InputError) as caught:
        load_events(path)
    assert caught.value.line == 3
    assert str(caught.value).startswith(f"{path}:3: ")
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"gpu_uuid": "GPU-1", "start": "2025-06-01T01:00:00Z", "end": "2025-06-01T01:00:00Z"}, "is not after start"),
        ({"gpu_uuid": "GPU-1", "start": "2025-06-01T02:00:00Z", "end": "2025-06-01T01:00:00Z"}, "is not after start"),
        ({"gpu_uuid": "GPU-1", "start": "2025-06-01T01:00:00Z"}, "missing field end"),
    ],
)
def test_a_bad_outage_line_names_the_file_and_line(tmp_path: Path, record: dict[str, str], message: str) -> None:
    good = {"gpu_uuid": "GPU-1", "start": "2025-06-01T00:00:00Z", "end": "2025-06-01T00:30:00Z"}
    path = write_lines(tmp_path / "outages.jsonl", json.dumps(good), json.dumps(record))
    with pytest.raises(InputError, match=rf"^{path}:2: .*{message}"):
        load_outages(path)


def test_outages_parse(tmp_path: Path) -> None:
    good = {"gpu_uuid": "GPU-1", "start": "2025-06-01T00:00:00Z", "end": "2025-06-01T00:30:00Z"}
    assert load_outages(write_lines(tmp_path / "o.jsonl", json.dumps(good))) == [
        Outage("GPU-1", P0, P0 + 1_800_000_000)
    ]


def test_rates_parse_exactly(tmp_path: Path) -> None:
    path = tmp_path / "rates.json"
    path.write_text(json.dumps(RATES_DOC))
    rates = load_rates(path)
    assert rates.rate("H100", PriceClass.SPOT) == Decimal("1.10")  # a JSON number, read without a float
    assert rates.rate("H100", PriceClass.ON_DEMAND) == Decimal("2.49")
    assert rates.commitments == (Commitment("acme", "H100", 16, Decimal("2.10")),)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({**RATES_DOC, "currency": None}, "currency: missing"),
        ({**RATES_DOC, "gpu_hour": {"H100": {"on_demand": "two"}}}, "gpu_hour.H100.on_demand: 'two' is not a decimal"),
        ({**RATES_DOC, "gpu_hour": {"H100": {"on_demand": "-1"}}}, "must be a finite, non-negative number"),
        ({**RATES_DOC, "gpu_hour": {"H100": {"committed": "1"}}}, "unknown gpu_hour.H100 key 'committed'"),
        ({**RATES_DOC, "commitments": [{**COMMITMENT, "gpus": 0}]}, "commitments[0].gpus"),
        ({**RATES_DOC, "commitments": [COMMITMENT, COMMITMENT]}, "two commitments for tenant 'acme'"),
    ],
)
def test_bad_rates_name_the_file_and_the_field(tmp_path: Path, document: object, message: str) -> None:
    path = tmp_path / "rates.json"
    path.write_text(json.dumps(document))
    with pytest.raises(InputError) as caught:
        load_rates(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)


def test_rates_that_are_not_json_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "rates.json"
    path.write_text('{\n  "currency": "USD",\n  "gpu_hour": {,\n}\n')
    with pytest.raises(InputError, match=rf"^{path}:3: not JSON"):
        load_rates(path)


def test_a_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        load_events(tmp_path / "nope.jsonl")


def test_exported_events_load_back_equal(tmp_path: Path) -> None:
    events = [*held("x", "acme", "a1", "g1", -1, 2.5), *held("y", "beta", "b1", "g2", 0, 1, spot=True)]
    path = tmp_path / "export.jsonl"
    assert write_events(events, path) == 4
    assert load_events(path) == events
    assert "price_class" not in event_to_json(events[0])  # the default is left out


def test_an_invoice_run_as_json(tmp_path: Path) -> None:
    events = [*held("x", "acme", "a1", "g1", 0, 2), *held("y", "acme", "a2", "g2", 0, 3)]
    document = invoice_run_to_json(run("reference", events, rates=with_commitment("acme", "H100", 1, "2.10")))
    json.dumps(document)  # plain JSON types only
    assert document["period"] == {"start": "2025-06-01T00:00:00Z", "end": "2025-06-01T10:00:00Z"}
    (acme,) = document["invoices"]
    assert acme["lines"] == [
        {
            "gpu_model": "H100",
            "price_class": "committed",
            "gpu_seconds": "36000",
            "gpu_hour_rate": "2.10",
            "amount": "21.00",
        },
        # n(t) = 2 on [0, 2 h): 2 GPU-h beyond 1 committed GPU, at 2.49
        {
            "gpu_model": "H100",
            "price_class": "overage",
            "gpu_seconds": "7200",
            "gpu_hour_rate": "2.49",
            "amount": "4.98",
        },
    ]
    assert (acme["total"], acme["credited_gpu_seconds"]) == ("25.98", "0")
    assert document["reconciliation"]["events_in"] == 4
    assert document["reconciliation"]["balanced"] is True
    assert document["reconciliation"]["committed_covered_seconds"] == "10800"  # 5 h used - 2 h overage
    assert PERIOD.seconds == Decimal(36000)
