"""The control file's lines: every fault round-trips, every bad line names its bad field, and a
tail reads only complete lines appended since it was made."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clients.agent.control import (
    ControlLineError,
    ControlTail,
    Fault,
    Injection,
    append,
    format_line,
    parse_line,
)

EVERY_FAULT = [
    Injection("sim-0001", Fault.XID, gpu=3, code=79),
    Injection("sim-0001", Fault.ECC, gpu=0, per_sample=5),
    Injection("sim-0001", Fault.THROTTLE, gpu=7, reason="hw_thermal_slowdown"),
    Injection("sim-0001", Fault.OFF_BUS, gpu=2),
    Injection("sim-0001", Fault.SLOW, factor=0.8),
    Injection("sim-0001", Fault.SLOW, factor=0.5, gpu=1),
    Injection("sim-0001", Fault.LOST_HEARTBEAT, seconds=30.0),
    Injection("sim-0001", Fault.FLAPPING_LINK, seconds=60.0),
    Injection("sim-0001", Fault.FLAPPING_LINK, seconds=60.0, period=5.0),
    Injection("sim-0001", Fault.CLEAR),
    Injection("sim-0001", Fault.CLEAR, gpu=4),
]


@pytest.mark.parametrize("injection", EVERY_FAULT, ids=format_line)
def test_every_fault_round_trips_through_its_line(injection: Injection) -> None:
    line = format_line(injection)
    assert "\n" not in line
    assert parse_line(line) == injection
    assert None not in json.loads(line).values()  # parameters not given are left out


def test_a_line_is_plain_json_with_the_fault_as_written_on_the_command_line() -> None:
    line = format_line(Injection.of("sim-0002", "off-bus", gpu=1))
    assert json.loads(line) == {"node_id": "sim-0002", "fault": "off-bus", "gpu": 1}


@pytest.mark.parametrize(
    ("line", "field", "says"),
    [
        ("not json", "line", "not JSON"),
        ("[1, 2]", "line", "JSON object, not list"),
        ('{"fault": "xid", "gpu": 1, "code": 79}', "node_id", "is required"),
        ('{"node_id": "", "fault": "clear"}', "node_id", "without spaces"),
        ('{"node_id": "sim 1", "fault": "clear"}', "node_id", "without spaces"),
        ('{"node_id": "sim-1"}', "fault", "is required"),
        ('{"node_id": "sim-1", "fault": "melt"}', "fault", "no fault 'melt'; known are xid, ecc"),
        ('{"node_id": "sim-1", "fault": "xid", "gpu": 1}', "code", "is required for xid"),
        ('{"node_id": "sim-1", "fault": "xid", "code": 79}', "gpu", "is required for xid"),
        ('{"node_id": "sim-1", "fault": "off-bus", "gpu": 1, "code": 79}', "code", "not a parameter of off-bus"),
        ('{"node_id": "sim-1", "fault": "clear", "colour": "red"}', "colour", "not a parameter of any fault"),
        ('{"node_id": "sim-1", "fault": "off-bus", "gpu": 8}', "gpu", "within 0-7"),
        ('{"node_id": "sim-1", "fault": "off-bus", "gpu": true}', "gpu", "whole number"),
        ('{"node_id": "sim-1", "fault": "off-bus", "gpu": "1"}', "gpu", "whole number"),
        ('{"node_id": "sim-1", "fault": "xid", "gpu": 1, "code": 0}', "code", "within 1-"),
        ('{"node_id": "sim-1", "fault": "ecc", "gpu": 1, "per_sample": -1}', "per_sample", "within 0-"),
        ('{"node_id": "sim-1", "fault": "slow", "factor": 0}', "factor", "within (0, 1]"),
        ('{"node_id": "sim-1", "fault": "slow", "factor": 1.5}', "factor", "within (0, 1]"),
        ('{"node_id": "sim-1", "fault": "slow", "factor": "fast"}', "factor", "finite number"),
        ('{"node_id": "sim-1", "fault": "lost-heartbeat", "seconds": 0}', "seconds", "more than 0"),
        ('{"node_id": "sim-1", "fault": "lost-heartbeat", "seconds": NaN}', "seconds", "finite number"),
        ('{"node_id": "sim-1", "fault": "flapping-link", "seconds": 9, "period": -1}', "period", "more than 0"),
        ('{"node_id": "sim-1", "fault": "throttle", "gpu": 1, "reason": "too_hot"}', "reason", "no throttle reason"),
        ('{"node_id": "sim-1", "fault": "throttle", "gpu": 1, "reason": 3}', "reason", "must be a string"),
    ],
)
def test_a_bad_line_names_its_bad_field(line: str, field: str, says: str) -> None:
    with pytest.raises(ControlLineError) as raised:
        parse_line(line)
    assert raised.value.field == field
    assert says in raised.value.reason
    assert str(raised.value).startswith(f"{field}: ")


def test_an_injection_made_directly_is_checked_too() -> None:
    with pytest.raises(ControlLineError, match=r"^factor: is required for slow$"):
        Injection("sim-1", Fault.SLOW)


def test_append_makes_the_directory_and_adds_one_line_each(tmp_path: Path) -> None:
    path = tmp_path / "agents" / "inject.jsonl"
    for injection in EVERY_FAULT[:3]:
        append(path, injection)
    assert [parse_line(line) for line in path.read_text().splitlines()] == EVERY_FAULT[:3]
    assert path.stat().st_mode & 0o077 == 0


def test_a_tail_reads_only_lines_appended_after_it_was_made(tmp_path: Path) -> None:
    path = tmp_path / "inject.jsonl"
    append(path, EVERY_FAULT[0])
    tail = ControlTail(path)
    assert tail.read() == []
    append(path, EVERY_FAULT[1])
    append(path, EVERY_FAULT[2])
    assert tail.read() == EVERY_FAULT[1:3]
    assert tail.read() == []
    assert ControlTail(path, from_start=True).read() == EVERY_FAULT[:3]


def test_a_tail_of_a_file_not_there_yet_reads_it_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "inject.jsonl"
    tail = ControlTail(path)
    assert tail.read() == []
    append(path, EVERY_FAULT[0])
    assert tail.read() == [EVERY_FAULT[0]]


def test_a_line_still_being_written_waits_for_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "inject.jsonl"
    tail = ControlTail(path)
    line = format_line(EVERY_FAULT[3])
    with path.open("a") as file:
        file.write(line[:10])
        file.flush()
        assert tail.read() == []
        file.write(line[10:] + "\n")
    assert tail.read() == [EVERY_FAULT[3]]


def test_bad_lines_come_back_as_errors_in_their_place(tmp_path: Path) -> None:
    path = tmp_path / "inject.jsonl"
    tail = ControlTail(path)
    path.write_text(f"{format_line(EVERY_FAULT[0])}\n\n{{oops\n{format_line(EVERY_FAULT[1])}\n")
    found = tail.read()
    assert found[0] == EVERY_FAULT[0]
    assert isinstance(found[1], ControlLineError)
    assert found[1].field == "line"
    assert found[2] == EVERY_FAULT[1]
    assert len(found) == 3  # the blank line is skipped


def test_a_truncated_file_is_read_again_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "inject.jsonl"
    append(path, EVERY_FAULT[0])
    append(path, EVERY_FAULT[1])
    tail = ControlTail(path)
    path.write_text(format_line(EVERY_FAULT[2]) + "\n")
    assert tail.read() == [EVERY_FAULT[2]]
