"""The agent's journal: the XID events it observed and has not delivered yet, kept in a file, so
that a fault seen while the control plane is unreachable, or just before the agent itself stops,
is reported once it reconnects, with the time the driver raised it.

Each event gets the node's next sequence number and is appended (one JSON line, flushed to disk)
before any report carries it. A report the control plane answered marks its entries delivered:
the file is rewritten, atomically, to a header holding the last number given and the entries
still undelivered, so it stays as small as the backlog. Numbers run on across restarts; a
journal whose file is lost starts at 1 again, and its events' own (later) times keep them apart
from the old ones on the control plane, which stores an XID once by its time and number. An
entry sent twice (a report whose answer was lost, or an agent stopped between the control
plane's answer and the rewrite) therefore counts once.

A torn last line, left by a stop in the middle of an append, is dropped when the file is read:
its event was never reported. Any other line that does not parse (a disk that lost power can
leave garbage where an append was) is skipped too, and the agent runs on: the file as found is
kept beside the journal (``NODE.journal.corrupt``) and logged, the journal rewritten from the
lines that parse, and numbers go on from the highest one read, so none is given twice. Stopping
the agent instead would leave the node unheard until someone moved the file.

A journal without a file keeps the same entries in memory only (a simulated fleet run without
a data directory); it survives an outage of the control plane but not a restart of the agent.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import structlog

from clients.agent.inventory import XidEvent

log = structlog.get_logger(__name__)

# The header's key: the last sequence number given.
LAST_SEQ = "last_seq"


def journal_path(directory: Path, node_id: str) -> Path:
    """Where the journal of ``node_id`` lives in ``directory``."""
    return directory / f"{node_id}.journal"


@dataclass(frozen=True, slots=True)
class Entry:
    """An XID event as the journal numbered it."""

    seq: int
    gpu: int
    code: int
    time_ms: int

    def line(self) -> str:
        """The entry as its journal line."""
        return json.dumps({"seq": self.seq, "gpu": self.gpu, "code": self.code, "time_ms": self.time_ms}) + "\n"


class Journal:
    """The undelivered XID events of one node, in ``path`` (None: in memory only).

    ``record`` and ``delivered`` write and sync the file: call them off the event loop.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._last_seq = 0
        self._pending: list[Entry] = []
        # Whether the file lacks entries the memory has (a write failed).
        self._behind = False
        # The lines of the file as found that did not parse, by number (1 is the first).
        self.skipped: tuple[int, ...] = ()
        if path is not None and path.exists():
            self._last_seq, self._pending, torn, self.skipped = _read(path)
            if self.skipped:
                kept = path.with_name(path.name + ".corrupt")
                os.replace(path, kept)
                log.warning("agent_journal_lines_skipped", path=str(path), lines=list(self.skipped), kept=str(kept))
            if torn or self.skipped:
                # Appending after a torn line would glue the next entry onto it.
                _replace(path, self._last_seq, self._pending)

    @property
    def pending(self) -> tuple[Entry, ...]:
        """The entries not delivered yet, oldest first."""
        return tuple(self._pending)

    @property
    def last_seq(self) -> int:
        """The last sequence number given (0: none yet)."""
        return self._last_seq

    def record(self, events: Iterable[XidEvent]) -> list[Entry]:
        """Number ``events`` and keep them until delivered; the entries. They are kept in memory
        first: a write that fails (a full disk) raises ``OSError`` having lost nothing the agent
        still runs with, and the file catches up at the next write that succeeds."""
        entries = []
        for event in events:
            self._last_seq += 1
            entries.append(Entry(self._last_seq, event.index, event.code, event.timestamp_ms))
        if not entries:
            return entries
        self._pending += entries
        if self.path is not None:
            if self._behind or not self.path.exists():
                # Rewritten whole: after a failed write, or to put the header first (a journal
                # always says where its numbers stand).
                self._behind = True
                _replace(self.path, self._last_seq, self._pending)
                self._behind = False
            else:
                self._behind = True
                with self.path.open("a", encoding="utf-8") as file:
                    file.writelines(entry.line() for entry in entries)
                    file.flush()
                    os.fsync(file.fileno())
                self._behind = False
        return entries

    def delivered(self, seqs: Iterable[int]) -> None:
        """The control plane has the entries numbered ``seqs``: drop them."""
        done = set(seqs)
        left = [entry for entry in self._pending if entry.seq not in done]
        if len(left) == len(self._pending):
            return
        if self.path is not None:
            _replace(self.path, self._last_seq, left)
            self._behind = False
        self._pending = left


def _read(path: Path) -> tuple[int, list[Entry], bool, tuple[int, ...]]:
    """The last number given, the entries, whether the last line was torn, and the other lines
    that did not parse."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    last_seq, entries, skipped = 0, [], []
    torn = bool(lines) and not lines[-1].endswith("\n")
    for number, text in enumerate(lines, start=1):
        try:
            found = json.loads(text)
            if LAST_SEQ in found:
                last_seq = max(last_seq, int(found[LAST_SEQ]))
            else:
                entries.append(Entry(int(found["seq"]), int(found["gpu"]), int(found["code"]), int(found["time_ms"])))
        except (ValueError, KeyError, TypeError):
            if not (torn and number == len(lines)):  # a torn last line: its event was never reported
                skipped.append(number)
    return max([last_seq, *(entry.seq for entry in entries)]), entries, torn, tuple(skipped)


def _replace(path: Path, last_seq: int, entries: list[Entry]) -> None:
    """Write the journal whole to a new file and move it over ``path``: a stop at any point
    leaves either the old journal or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = path.with_name(path.name + ".new")
    with fresh.open("w", encoding="utf-8") as file:
        file.write(json.dumps({LAST_SEQ: last_seq}) + "\n")
        file.writelines(entry.line() for entry in entries)
        file.flush()
        os.fsync(file.fileno())
    os.replace(fresh, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
