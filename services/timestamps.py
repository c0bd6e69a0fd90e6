"""The protobuf form of an instant, shared by every resource's ``proto.py``."""

from __future__ import annotations

from google.protobuf.timestamp_pb2 import Timestamp


def timestamp(micros: int | None) -> Timestamp | None:
    """A protobuf Timestamp for microseconds since the epoch; None stays unset."""
    if micros is None:
        return None
    # The constructor, not Timestamp.FromMicroseconds: that one is pure Python and costs half
    # again as much, on every allocation and operation sent.
    seconds, remainder = divmod(micros, 1_000_000)
    return Timestamp(seconds=seconds, nanos=remainder * 1000)
