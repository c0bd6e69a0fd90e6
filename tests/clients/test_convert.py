"""The client's protobuf-to-Python conversions agree with protobuf's own."""

from __future__ import annotations

import re
from datetime import UTC

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from clients import convert
from gpucloud.v1 import allocation_pb2


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [
        (0, 0),
        (1_764_600_000, 123_456_789),
        (1_764_600_000, 999_999_999),
        (-1, 500_000_000),
        (-62_135_596_800, 0),  # 0001-01-01, the earliest a datetime holds
        (253_402_300_799, 999),  # 9999-12-31 23:59:59
    ],
)
def test_a_timestamp_reads_as_protobufs_own_datetime(seconds: int, nanos: int) -> None:
    message = allocation_pb2.Allocation(create_time=Timestamp(seconds=seconds, nanos=nanos))
    read = convert.optional_time(message, "create_time")
    assert read == message.create_time.ToDatetime(tzinfo=UTC)
    assert read is not None
    assert read.tzinfo is UTC


def test_an_unset_timestamp_reads_as_none() -> None:
    assert convert.optional_time(allocation_pb2.Allocation(), "cancel_time") is None


def test_enum_numbers_read_as_names_and_unknown_ones_say_so() -> None:
    assert convert.enum_name("AllocationState", "ALLOCATION_STATE_", allocation_pb2.ALLOCATION_STATE_ACTIVE) == "ACTIVE"
    assert convert.enum_name("GpuModel", "GPU_MODEL_", 999) == "UNKNOWN_999"


@pytest.mark.parametrize(
    ("seconds", "nanos"), [(0, -1), (0, 1_000_000_000), (-62_135_596_801, 0), (253_402_300_800, 0)]
)
def test_an_out_of_range_timestamp_is_refused_as_protobuf_refuses_it(seconds: int, nanos: int) -> None:
    message = allocation_pb2.Allocation(create_time=Timestamp(seconds=seconds, nanos=nanos))
    with pytest.raises(ValueError, match=r"^Timestamp is not valid") as by_protobuf:
        message.create_time.ToDatetime(tzinfo=UTC)
    with pytest.raises(ValueError, match=f"^{re.escape(str(by_protobuf.value))}$"):
        convert.optional_time(message, "create_time")
