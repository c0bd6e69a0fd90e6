"""The harness on its own: names of methods as ``Class.method``, methods that are not written
yet, and what a reference stops once its suite has run."""

from __future__ import annotations

import asyncio
from types import ModuleType

import pytest

from exercises import harness


class Store:
    """A class as a candidate's file holds it: one method written, two not yet."""

    size = 3

    def written(self) -> int:
        return 1

    def blank(self) -> int:
        raise NotImplementedError

    async def later(self) -> int:
        raise NotImplementedError


def implementation() -> harness.Implementation:
    module = ModuleType("candidate")
    module.__dict__["Store"] = Store  # a module made here, as load_file makes one
    return harness.Implementation("candidate", [module])


def test_a_method_is_defined_as_class_dot_method() -> None:
    impl = implementation()
    assert [impl.defines(n) for n in ("Store", "Store.written", "Store.gone", "Other.written")] == [
        True,
        True,
        False,
        False,
    ]


def test_a_guarded_object_reads_not_written_for_a_method_not_written_yet() -> None:
    store = harness.guarded(implementation().Store())
    assert (store.written(), store.size) == (1, 3)
    with pytest.raises(harness.NotWritten, match=r"Store\.blank is not implemented yet"):
        store.blank()


def test_an_async_method_not_written_yet_reads_the_same() -> None:
    store = harness.guarded(Store())
    with pytest.raises(harness.NotWritten, match=r"Store\.later is not implemented yet"):
        asyncio.run(store.later())


def test_what_a_reference_started_is_stopped_at_the_end_latest_first() -> None:
    stopped: list[str] = []
    harness.at_finish(lambda: stopped.append("plane"))
    harness.at_finish(lambda: stopped.append("client"))
    harness.finish()
    harness.finish()
    assert stopped == ["client", "plane"]
