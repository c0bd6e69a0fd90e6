"""Fault injection by command: an ``Injection`` is one fault for one simulated node, written as
one JSON line of a control file that a running ``SimulatedFleet`` reads as it grows
(``gpucloud agent inject`` appends; docs/agent.md lists the faults and their parameters)."""

from __future__ import annotations

import enum
import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from clients.agent.fabric import MAX_PARTITION_KEY
from clients.agent.inventory import ThrottleReason

# GPU indexes a node has (every node has 8 GPUs).
GPUS_PER_NODE = 8
_INT32_MAX = 2**31 - 1


class Fault(enum.StrEnum):
    """What can be made to go wrong with a simulated node."""

    XID = "xid"
    ECC = "ecc"
    THROTTLE = "throttle"
    OFF_BUS = "off-bus"
    SLOW = "slow"
    LOST_HEARTBEAT = "lost-heartbeat"
    FLAPPING_LINK = "flapping-link"
    PARTITION_LEAK = "partition-leak"
    CLEAR = "clear"


# For each fault, the parameters it needs and those it may take; any other is refused, so that
# a parameter given to the wrong fault is not silently ignored.
PARAMETERS: dict[Fault, tuple[frozenset[str], frozenset[str]]] = {
    Fault.XID: (frozenset({"gpu", "code"}), frozenset()),
    Fault.ECC: (frozenset({"gpu", "per_sample"}), frozenset()),
    Fault.THROTTLE: (frozenset({"gpu", "reason"}), frozenset()),
    Fault.OFF_BUS: (frozenset({"gpu"}), frozenset()),
    Fault.SLOW: (frozenset({"factor"}), frozenset({"gpu"})),
    Fault.LOST_HEARTBEAT: (frozenset({"seconds"}), frozenset()),
    Fault.FLAPPING_LINK: (frozenset({"seconds"}), frozenset({"period"})),
    Fault.PARTITION_LEAK: (frozenset({"key"}), frozenset()),
    Fault.CLEAR: (frozenset(), frozenset({"gpu"})),
}
_OPTIONAL_FIELDS = ("gpu", "code", "seconds", "factor", "reason", "per_sample", "period", "key")


class ControlLineError(ValueError):
    """An injection or a control line that is not valid; ``field`` names the bad field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


@dataclass(frozen=True, slots=True)
class Injection:
    """One fault for node ``node_id``, with the parameters its fault takes (``PARAMETERS``) and
    None for the others. Checked when made: ``ControlLineError`` names the first bad field.

    ``gpu``: GPU index 0-7; ``code``: an XID code; ``per_sample``: ECC errors added at every
    sample; ``reason``: a throttle reason (``ThrottleReason``); ``factor``: share of healthy speed,
    within (0, 1]; ``seconds``: how long a link fault lasts; ``period``: seconds a flapping link
    stays down, then up; ``key``: a fabric partition key, 1-32766, the node stays in whatever
    it is told (a leave the fabric never applied).
    """

    node_id: str
    fault: Fault
    gpu: int | None = None
    code: int | None = None
    seconds: float | None = None
    factor: float | None = None
    reason: str | None = None
    per_sample: int | None = None
    period: float | None = None
    key: int | None = None

    def __post_init__(self) -> None:
        """Refuse a bad node id, fault, parameter value, or a parameter the fault does not take."""
        if not isinstance(self.node_id, str) or not self.node_id or any(c.isspace() for c in self.node_id):
            raise ControlLineError("node_id", f"must be a node id without spaces, not {self.node_id!r}")
        fault = _fault(self.fault)
        object.__setattr__(self, "fault", fault)
        required, optional = PARAMETERS[fault]
        for name in _OPTIONAL_FIELDS:
            given = getattr(self, name) is not None
            if given and name not in required | optional:
                raise ControlLineError(name, f"not a parameter of {fault.value}")
            if not given and name in required:
                raise ControlLineError(name, f"is required for {fault.value}")
        self._check_values()

    def _check_values(self) -> None:
        _check_int("gpu", self.gpu, 0, GPUS_PER_NODE - 1)
        _check_int("code", self.code, 1, _INT32_MAX)
        _check_int("per_sample", self.per_sample, 0, _INT32_MAX)
        _check_int("key", self.key, 1, MAX_PARTITION_KEY)
        _check_seconds("seconds", self.seconds)
        _check_seconds("period", self.period)
        if self.factor is not None:
            factor = _number("factor", self.factor)
            if not 0.0 < factor <= 1.0:
                raise ControlLineError("factor", f"must be within (0, 1], not {self.factor!r}")
            object.__setattr__(self, "factor", factor)
        if self.reason is not None and self.reason not in {r.value for r in ThrottleReason}:
            known = ", ".join(r.value for r in ThrottleReason)
            raise ControlLineError("reason", f"no throttle reason {self.reason!r}; known are {known}")

    @classmethod
    def of(cls, node_id: str, fault: Fault | str, **params: object) -> Injection:
        """An injection from loose values, as a command or a control line gives them:
        ``ControlLineError`` for an unknown parameter or a value of the wrong type."""
        for name in params:
            if name not in _OPTIONAL_FIELDS:
                raise ControlLineError(name, "not a parameter of any fault")
        return cls(
            node_id,
            _fault(fault),
            gpu=_whole("gpu", params.get("gpu")),
            code=_whole("code", params.get("code")),
            seconds=_optional_number("seconds", params.get("seconds")),
            factor=_optional_number("factor", params.get("factor")),
            reason=_text("reason", params.get("reason")),
            per_sample=_whole("per_sample", params.get("per_sample")),
            period=_optional_number("period", params.get("period")),
            key=_whole("key", params.get("key")),
        )


def _fault(value: object) -> Fault:
    if isinstance(value, str) and value in {f.value for f in Fault}:
        return Fault(value)
    known = ", ".join(f.value for f in Fault)
    raise ControlLineError("fault", f"no fault {value!r}; known are {known}")


def _whole(field: str, value: object) -> int | None:
    # bool is an int to Python, but true is never meant as GPU 1.
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ControlLineError(field, f"must be a whole number, not {value!r}")


def _optional_number(field: str, value: object) -> float | None:
    return None if value is None else _number(field, value)


def _text(field: str, value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ControlLineError(field, f"must be a string, not {value!r}")


def _check_int(field: str, value: object, least: int, most: int) -> None:
    if value is None:
        return
    # bool is an int to Python, but true is never meant as GPU 1.
    if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= most:
        raise ControlLineError(field, f"must be a whole number within {least}-{most}, not {value!r}")


def _number(field: str, value: object) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise ControlLineError(field, f"must be a finite number, not {value!r}")
    return float(value)


def _check_seconds(field: str, value: object) -> None:
    if value is not None and _number(field, value) <= 0:
        raise ControlLineError(field, f"must be more than 0 seconds, not {value!r}")


def parse_line(line: str) -> Injection:
    """The injection one control line holds: a JSON object with ``node_id``, ``fault`` and the
    fault's parameters. ``ControlLineError`` names the bad field (``line`` when it is no object)."""
    try:
        document: Any = json.loads(line)
    except json.JSONDecodeError as error:
        raise ControlLineError("line", f"not JSON: {error.msg} at column {error.colno}") from None
    if not isinstance(document, dict):
        raise ControlLineError("line", f"must be a JSON object, not {type(document).__name__}")
    for name in ("node_id", "fault"):
        if not isinstance(document.get(name), str):
            raise ControlLineError(name, f"is required, as a string, not {document.get(name)!r}")
    params = {name: value for name, value in document.items() if name not in ("node_id", "fault")}
    return Injection.of(document["node_id"], document["fault"], **params)


def format_line(injection: Injection) -> str:
    """The control line of ``injection`` (no newline): its fields, leaving out those not given."""
    fields = {name: value for name, value in asdict(injection).items() if value is not None}
    fields["fault"] = injection.fault.value
    return json.dumps(fields, separators=(",", ":"))


def append(path: Path, injection: Injection) -> None:
    """Append ``injection``'s line to the control file at ``path``, making its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (format_line(injection) + "\n").encode()
    # One write of an O_APPEND file: two commands appending at once never interleave their lines.
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(descriptor, data)
    finally:
        os.close(descriptor)


class ControlTail:
    """The lines appended to a control file since the tail was made (or all of them with
    ``from_start``), read a batch at a time. A line still being written waits for its newline;
    a file truncated or replaced is read again from its start."""

    def __init__(self, path: Path, *, from_start: bool = False) -> None:
        self.path = path
        self._offset = 0
        self._inode: int | None = None
        if not from_start:
            stat = self._stat()
            if stat is not None:
                self._offset, self._inode = stat.st_size, stat.st_ino

    def _stat(self) -> os.stat_result | None:
        try:
            return self.path.stat()
        except FileNotFoundError:
            return None

    def read(self) -> list[Injection | ControlLineError]:
        """The complete lines added since the last read, in order, each parsed or its error
        (blank lines are skipped). Blocks on the file system: call it off the event loop."""
        stat = self._stat()
        if stat is None:
            return []
        if stat.st_ino != self._inode or stat.st_size < self._offset:
            self._offset, self._inode = 0, stat.st_ino
        with self.path.open("rb") as file:
            file.seek(self._offset)
            data = file.read()
        complete = data[: data.rfind(b"\n") + 1]
        self._offset += len(complete)
        found: list[Injection | ControlLineError] = []
        for raw in complete.splitlines():
            text = raw.decode(errors="replace").strip()
            if not text:
                continue
            try:
                found.append(parse_line(text))
            except ControlLineError as error:
                found.append(error)
        return found
