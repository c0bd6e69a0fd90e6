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


def test_an_allocation_carries_its_priority_queue_position_and_admit_time() -> None:
    message = allocation_pb2.Allocation(
        allocation_id="alloc-1",
        state=allocation_pb2.ALLOCATION_STATE_ACTIVE,
        create_time=Timestamp(seconds=1_764_600_000),
        admit_time=Timestamp(seconds=1_764_600_090),
        priority=700,
    )
    read = convert.allocation(message)
    assert (read.state, read.priority, read.queue_position) == ("ACTIVE", 700, 0)
    assert read.admit_time == message.admit_time.ToDatetime(tzinfo=UTC)


def test_a_pending_allocation_has_its_place_in_the_queue_and_no_admit_time() -> None:
    message = allocation_pb2.Allocation(state=allocation_pb2.ALLOCATION_STATE_PENDING, queue_position=3)
    read = convert.created_allocation(message, replayed=False)
    assert (read.state, read.queue_position, read.admit_time) == ("PENDING", 3, None)


def test_an_explanation_keeps_the_reasons_in_order_with_short_kinds_and_their_figures() -> None:
    message = allocation_pb2.ExplainAllocationResponse(
        allocation=allocation_pb2.Allocation(allocation_id="alloc-1", state=allocation_pb2.ALLOCATION_STATE_PENDING),
        reasons=[
            allocation_pb2.PendingReason(
                kind=allocation_pb2.PENDING_REASON_KIND_WAITING_FOR_CAPACITY,
                message="waiting for capacity: 1 free H100 node(s), 2 needed whole; short by 1",
                figures={"free": 1, "spares": 0, "needed": 2},
            ),
            allocation_pb2.PendingReason(kind=allocation_pb2.PENDING_REASON_KIND_BEHIND_GANGS, message="behind"),
            # A kind a newer server added reads as its number, not as an error.
            allocation_pb2.PendingReason(kind=allocation_pb2.PendingReasonKind.ValueType(99), message="newer"),
        ],
    )
    explained = convert.allocation_explanation(message)
    assert explained.allocation.allocation_id == "alloc-1"
    assert [reason.kind for reason in explained.reasons] == ["WAITING_FOR_CAPACITY", "BEHIND_GANGS", "UNKNOWN_99"]
    assert explained.reasons[0].figures == {"free": 1, "spares": 0, "needed": 2}
    assert explained.reasons[1].figures == {}


def test_an_explanation_of_an_allocation_that_is_not_pending_has_no_reasons() -> None:
    message = allocation_pb2.ExplainAllocationResponse(
        allocation=allocation_pb2.Allocation(state=allocation_pb2.ALLOCATION_STATE_ACTIVE)
    )
    assert convert.allocation_explanation(message).reasons == ()
