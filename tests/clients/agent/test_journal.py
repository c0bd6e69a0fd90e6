"""The agent's journal on real files: numbers that run on across restarts, entries kept until
delivered, a torn last line dropped, and any other bad line skipped, the file kept aside."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.agent import XidEvent
from clients.agent.journal import Entry, Journal, journal_path

AT_MS = 1_767_225_600_000


def xid(gpu: int, code: int, offset_ms: int = 0) -> XidEvent:
    return XidEvent(index=gpu, code=code, timestamp_ms=AT_MS + offset_ms)


def test_entries_are_numbered_and_kept_in_the_file_until_delivered(tmp_path: Path) -> None:
    path = journal_path(tmp_path / "journal", "sim-0001")
    journal = Journal(path)
    assert not path.exists()  # nothing recorded, no file
    assert journal.record([xid(2, 79), xid(5, 48, 3)]) == [Entry(1, 2, 79, AT_MS), Entry(2, 5, 48, AT_MS + 3)]
    assert journal.record([xid(2, 13, 9)]) == [Entry(3, 2, 13, AT_MS + 9)]

    # The agent stops: a new one over the same file finds every entry, in order.
    again = Journal(path)
    assert again.pending == journal.pending
    assert [entry.seq for entry in again.pending] == [1, 2, 3]

    again.delivered({1, 2})
    assert again.pending == (Entry(3, 2, 13, AT_MS + 9),)
    assert Journal(path).pending == again.pending
    again.delivered({3})
    assert len(again.pending) == 0

    # Numbers run on after a restart with everything delivered: a replay is never mistaken
    # for a new event, nor a new event for a replay.
    restarted = Journal(path)
    assert (restarted.pending, restarted.last_seq) == ((), 3)
    assert restarted.record([xid(0, 31)]) == [Entry(4, 0, 31, AT_MS)]
    assert path.read_text().count("\n") == 2  # the header and the one undelivered entry


def test_delivering_what_was_delivered_changes_nothing(tmp_path: Path) -> None:
    path = journal_path(tmp_path, "n")
    journal = Journal(path)
    journal.record([xid(1, 79)])
    journal.delivered({1})
    written = path.stat().st_mtime_ns, path.read_text()
    journal.delivered({1})
    journal.delivered(set())
    assert (path.stat().st_mtime_ns, path.read_text()) == written


def test_a_torn_last_line_is_dropped_and_the_file_mended(tmp_path: Path) -> None:
    path = journal_path(tmp_path, "n")
    first = Journal(path)
    first.record([xid(1, 79)])
    first.record([xid(1, 48)])  # appended
    text = path.read_text()
    path.write_text(text[: len(text) - 7])  # stopped in the middle of that append
    journal = Journal(path)
    assert journal.pending == (Entry(1, 1, 79, AT_MS),)
    journal.record([xid(3, 13)])
    # The new entry is on a line of its own, not glued to the torn one.
    assert Journal(path).pending == (Entry(1, 1, 79, AT_MS), Entry(2, 3, 13, AT_MS))


def test_a_bad_line_before_the_last_is_skipped_kept_aside_and_never_renumbered(tmp_path: Path) -> None:
    """Garbage where an append was (a disk that lost power): the lines that parse are the
    journal, the file as found is kept beside it, and no number is given twice."""
    path = journal_path(tmp_path, "n")
    first = Journal(path)
    first.record([xid(1, 79)])
    first.record([xid(1, 48)])
    first.record([xid(2, 13)])
    lines = path.read_text().splitlines(keepends=True)
    found = lines[0] + lines[1] + "\x00\x00\x00 not json\n" + lines[3]
    path.write_text(found)
    journal = Journal(path)
    assert journal.skipped == (3,)
    assert [entry.seq for entry in journal.pending] == [1, 3]
    assert path.with_name(path.name + ".corrupt").read_text() == found
    assert journal.record([xid(0, 31)]) == [Entry(4, 0, 31, AT_MS)]
    again = Journal(path)
    assert again.skipped == ()
    assert [entry.seq for entry in again.pending] == [1, 3, 4]


def test_a_journal_without_a_file_numbers_and_keeps_in_memory() -> None:
    journal = Journal()
    journal.record([xid(0, 79), xid(1, 79)])
    journal.delivered({1})
    assert journal.pending == (Entry(2, 1, 79, AT_MS),)


def test_only_the_entries_a_status_carried_are_delivered(tmp_path: Path) -> None:
    """A status carries at most 32 codes a GPU: the rest stay pending for the next one, though
    numbered before entries of other GPUs that it did carry."""
    journal = Journal(journal_path(tmp_path, "n"))
    journal.record([xid(0, 13, i) for i in range(3)] + [xid(5, 79)])
    journal.delivered({1, 4})
    assert [entry.seq for entry in journal.pending] == [2, 3]
    assert [entry.seq for entry in Journal(journal.path).pending] == [2, 3]


def test_a_failed_write_keeps_the_entries_and_the_file_catches_up(tmp_path: Path) -> None:
    """The journal's directory is a file (so every write fails, for root too): recording raises,
    the entries stay pending in memory, and the first write that succeeds puts them all in the
    file."""
    directory = tmp_path / "journal"
    journal = Journal(journal_path(directory, "n"))
    directory.write_text("in the way\n")
    with pytest.raises(FileExistsError):
        journal.record([xid(0, 79)])
    with pytest.raises(FileExistsError):
        journal.record([xid(1, 48)])
    assert [entry.seq for entry in journal.pending] == [1, 2]
    directory.unlink()
    journal.record([xid(2, 13)])
    assert journal.path is not None
    assert [entry.seq for entry in Journal(journal.path).pending] == [1, 2, 3]
