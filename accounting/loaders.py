"""Reading the offline inputs: usage events and outages (JSONL), the price book (JSON).

Every problem raises :class:`~accounting.errors.InputError` naming the file and the line
(JSONL) or the JSON path (rates): a bill computed from a half-read file would be wrong in a
way nobody notices. Blank lines are skipped; unknown fields are ignored, so a newer exporter
can add fields without breaking older readers.

Formats (one JSON object per line):

* events: ``event_id, tenant_id, allocation_id, gpu_uuid, gpu_model, kind ("start"|"stop"),
  time (RFC 3339 with an offset), price_class ("on_demand", the default, or "spot")``
* outages: ``gpu_uuid, start, end`` (RFC 3339, end after start)
* rates: ``{"currency": "USD", "gpu_hour": {"H100": {"on_demand": "2.49", "spot": "1.10"}},
  "commitments": [{"tenant_id": "acme", "gpu_model": "H100", "gpus": 16, "gpu_hour": "2.10"}]}``
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from accounting.errors import InputError
from accounting.model import Commitment, EventKind, Outage, PriceClass, Rates, UsageEvent, datetime_to_us

EVENT_FIELDS = ("event_id", "tenant_id", "allocation_id", "gpu_uuid", "gpu_model", "kind", "time")
OUTAGE_FIELDS = ("gpu_uuid", "start", "end")
USAGE_CLASSES = (PriceClass.ON_DEMAND, PriceClass.SPOT)


def parse_time(text: object) -> int:
    """Microseconds since the epoch of an RFC 3339 timestamp; ValueError if it has no offset."""
    if not isinstance(text, str):
        raise ValueError(f"time {text!r} is not an RFC 3339 string")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"time {text!r} is not RFC 3339 (like 2025-06-01T00:00:00Z)") from None
    if moment.tzinfo is None:
        raise ValueError(f"time {text!r} has no UTC offset (add Z or +00:00)")
    return datetime_to_us(moment)


def load_events(path: Path | str) -> list[UsageEvent]:
    """Every event of a JSONL file, in file order (the first copy of an event id stands)."""
    events = []
    for line, record in _jsonl(Path(path)):
        try:
            values = _strings(record, EVENT_FIELDS)
            kind = _choice(values["kind"], EventKind, "kind")
            price_class = _choice(record.get("price_class", PriceClass.ON_DEMAND.value), USAGE_CLASSES, "price_class")
            at_us = parse_time(values["time"])
        except ValueError as error:
            raise InputError(path, line, str(error)) from None
        events.append(
            UsageEvent(
                values["event_id"],
                values["tenant_id"],
                values["allocation_id"],
                values["gpu_uuid"],
                values["gpu_model"],
                EventKind(kind),
                at_us,
                PriceClass(price_class),
            )
        )
    return events


def load_outages(path: Path | str) -> list[Outage]:
    """Every outage of a JSONL file."""
    outages = []
    for line, record in _jsonl(Path(path)):
        try:
            values = _strings(record, OUTAGE_FIELDS)
            start_us, end_us = parse_time(values["start"]), parse_time(values["end"])
            if end_us <= start_us:
                raise ValueError(f"end {values['end']} is not after start {values['start']}")
        except ValueError as error:
            raise InputError(path, line, str(error)) from None
        outages.append(Outage(values["gpu_uuid"], start_us, end_us))
    return outages


def load_rates(path: Path | str) -> Rates:
    """The price book. Numbers may be JSON strings or numbers; both are read exactly."""
    path = Path(path)
    text = _read(path)
    try:
        # parse_float=Decimal: 2.49 is read as exactly 2.49, never as a binary float.
        document = json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError as error:
        raise InputError(path, error.lineno, f"not JSON: {error.msg}") from None
    try:
        return _rates(document)
    except ValueError as error:
        raise InputError(path, None, str(error)) from None


def _rates(document: Any) -> Rates:
    if not isinstance(document, dict):
        raise ValueError("the top level must be an object")
    currency = document.get("currency")
    if not isinstance(currency, str) or not currency:
        raise ValueError("currency: missing (a string like USD)")
    prices = document.get("gpu_hour")
    if not isinstance(prices, dict):
        raise ValueError("gpu_hour: missing (an object of models, each an object of price classes)")
    gpu_hour: dict[str, dict[PriceClass, Decimal]] = {}
    for model, by_class in prices.items():
        if not isinstance(by_class, dict):
            raise ValueError(f'gpu_hour.{model}: must be an object like {{"on_demand": "2.49"}}')
        gpu_hour[model] = {
            PriceClass(_choice(klass, USAGE_CLASSES, f"gpu_hour.{model} key")): _money(
                rate, f"gpu_hour.{model}.{klass}"
            )
            for klass, rate in by_class.items()
        }
    raw_commitments = document.get("commitments", [])
    if not isinstance(raw_commitments, list):
        raise ValueError("commitments: must be a list")
    commitments = []
    for n, item in enumerate(raw_commitments):
        where = f"commitments[{n}]"
        if not isinstance(item, dict):
            raise ValueError(f"{where}: must be an object")
        values = _strings(item, ("tenant_id", "gpu_model"), where=f"{where}.")
        gpus = item.get("gpus")
        if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus <= 0:
            raise ValueError(f"{where}.gpus: must be a positive integer")
        if "gpu_hour" not in item:
            raise ValueError(f"{where}.gpu_hour: missing")
        commitments.append(
            Commitment(values["tenant_id"], values["gpu_model"], gpus, _money(item["gpu_hour"], f"{where}.gpu_hour"))
        )
    try:
        return Rates(currency, gpu_hour, tuple(commitments))
    except ValueError as error:
        raise ValueError(f"commitments: {error}") from None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise InputError(path, None, f"cannot read: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        line = path.read_bytes()[: error.start].count(b"\n") + 1
        raise InputError(path, line, "not UTF-8 text") from None


def _jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line."""
    for line, text in enumerate(_read(path).splitlines(), start=1):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as error:
            raise InputError(path, line, f"not JSON: {error.msg}") from None
        if not isinstance(record, dict):
            raise InputError(path, line, "each line must be a JSON object")
        yield line, record


def _strings(record: dict[str, Any], fields: tuple[str, ...], where: str = "") -> dict[str, str]:
    """The named fields, each required to be a non-empty string."""
    values = {}
    for name in fields:
        if name not in record:
            raise ValueError(f"missing field {where}{name}")
        value = record[name]
        if not isinstance(value, str) or not value:
            raise ValueError(f"field {where}{name} must be a non-empty string, not {value!r}")
        values[name] = value
    return values


def _choice(value: object, allowed: Any, name: str) -> str:
    """``value`` if it is one of ``allowed`` (an enum or a sequence of enum members)."""
    options = [member.value for member in allowed]
    if value not in options:
        raise ValueError(f"unknown {name} {value!r}: expected one of {', '.join(options)}")
    return str(value)


def _money(value: object, where: str) -> Decimal:
    """A finite, non-negative decimal from a JSON string or number (never a bool)."""
    try:
        if isinstance(value, bool) or not isinstance(value, str | int | Decimal):
            raise InvalidOperation
        amount = Decimal(value)
    except InvalidOperation:
        raise ValueError(f"{where}: {value!r} is not a decimal number") from None
    if not amount.is_finite() or amount < 0:
        raise ValueError(f"{where}: {value!r} must be a finite, non-negative number")
    return amount
