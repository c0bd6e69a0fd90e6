"""The one rule for every time argument of the client, whatever the method.

An instant is a ``datetime`` or an ``int`` of milliseconds since the Unix epoch. A naive datetime
is UTC, as it is for the ``gpucloud`` command's time options and for the API, whose times are
all UTC: the client never reads the machine's local zone. A duration is a ``timedelta`` or an
``int`` of milliseconds. Anything else is refused before any call with ``InvalidValueError``
naming the parameter: a float (``time.time() * 1000``) would silently drop its fraction, and a
float of seconds would be read as milliseconds, 1000 times too early.
"""

from __future__ import annotations

import operator
from datetime import UTC, datetime, timedelta
from typing import SupportsIndex

from google.protobuf.timestamp_pb2 import Timestamp

from clients.errors import InvalidValueError

Instant = datetime | int
"""What a time parameter takes: a datetime (naive means UTC) or milliseconds since the epoch."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_INT64 = range(-(2**63), 2**63)


def _whole_ms(value: object, parameter: str, what: str) -> int:
    """``value`` as an int (numpy integers included), or InvalidValueError naming ``parameter``."""
    # bool is an int to Python, but True is never meant as a time.
    # SupportsIndex takes numpy's integers too, and no float.
    if isinstance(value, SupportsIndex) and not isinstance(value, bool):
        number = operator.index(value)
        if number not in _INT64:
            raise InvalidValueError(parameter, f"{parameter}: {number} ms is outside what an int64 holds")
        return number
    raise InvalidValueError(
        parameter, f"{parameter}: expected {what} or an int of milliseconds, not {type(value).__name__} {value!r}"
    )


def to_ms(moment: object, parameter: str) -> int:
    """Milliseconds since the epoch of an instant (a datetime, naive meaning UTC, or int ms)."""
    if isinstance(moment, datetime):
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return (moment - _EPOCH) // timedelta(milliseconds=1)
    return _whole_ms(moment, parameter, "a datetime")


def from_ms(millis: int) -> datetime:
    """The aware UTC datetime of milliseconds since the epoch."""
    return _EPOCH + timedelta(milliseconds=millis)


def to_timestamp(moment: object, parameter: str) -> Timestamp | None:
    """A protobuf Timestamp of an instant, or None for None (the field left unset)."""
    if moment is None:
        return None
    ts = Timestamp()
    if isinstance(moment, datetime):
        ts.FromDatetime(moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC))
        return ts
    millis = _whole_ms(moment, parameter, "a datetime")
    # Whole ms: seconds floor towards the past, so nanos stay within [0, 1e9) as protobuf wants.
    ts.seconds, ts.nanos = millis // 1000, millis % 1000 * 1_000_000
    return ts


def duration_ms(step: object, parameter: str) -> int:
    """Milliseconds of a duration (a timedelta, or int ms); a part below 1 ms is dropped."""
    if isinstance(step, timedelta):
        return step // timedelta(milliseconds=1)
    return _whole_ms(step, parameter, "a timedelta")
