"""The protobuf form of a stored instant."""

from __future__ import annotations

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from services.timestamps import timestamp


@pytest.mark.parametrize("micros", [0, 1, 999_999, 1_000_000, 1_796_123_965_250_314, -1, -1_500_001])
def test_timestamp_is_the_instant_protobuf_itself_would_make(micros: int) -> None:
    expected = Timestamp()
    expected.FromMicroseconds(micros)
    assert timestamp(micros) == expected
    assert 0 <= expected.nanos < 1_000_000_000


def test_an_unset_instant_stays_unset() -> None:
    assert timestamp(None) is None
