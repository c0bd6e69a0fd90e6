"""Transactions that may run set-based with others of their kind in one SQLite group.

The SQLite writer (store/writer.py) commits every transaction waiting in one group. Many of
them are the same command for different callers (a burst of creates, of cancels), and each
runs its few statements alone: the Python around a statement and SQLite's own per-statement
work cost more than the rows they write. A transaction that says what kind of set it can
join (``SetBased``) lets the writer hand all of that kind in a group to one runner, which
reads and writes for all of them with a fixed number of statements.

The runner's contract, which keeps every caller's answer what it would be alone, with the
set's transactions run one after another in the order they were queued:

- It answers the longest prefix of its items that it can decide exactly as each item's own
  transaction would at that place: one answer per item, in order. The writer runs the first
  item it did not take alone (a replay, a refusal, a duplicate of an earlier item: whatever
  the plain case is not), then offers the rest to the runner again (after two offers in a
  row that took nothing, the rest run alone: a burst of refusals or replays).
- It decides by reading before it writes; if it raises after writing, the writer undoes the
  whole group and runs each transaction alone (its second pass).

A transaction that is not set-based (a release, a key pruning, an operation's deletion) is a
barrier: sets hold only what was queued since the last one, and run before it. Between two
barriers each runner's set runs at the place of its first transaction, so the set-based
transactions of different runners must commute (creates take READY nodes and cancels free none:
neither sees what the other writes).

PostgreSQL runs each transaction on its own connection and ignores sets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from services.store.tx import Tx

Item = TypeVar("Item")

# Items in; out, the answers of the longest prefix the runner could take, in order.
SetRunner = Callable[[Sequence[Item]], Tx[list[Any]]]


@dataclass(frozen=True, slots=True)
class SetBased(Generic[Item]):
    """A transaction's place in a set: the runner that can run many such items at once
    (sets are formed per runner), and this transaction's item."""

    runner: SetRunner[Item]
    item: Item
