"""freeze_startup_heap: what startup built leaves the collector's generations; garbage does not
get frozen with it."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from services.heap import freeze_startup_heap


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """Leave the test process's collector as the test found it."""
    gc.collect()
    gc.unfreeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
def test_live_objects_are_frozen_and_cyclic_garbage_is_collected_first() -> None:
    live = Node()
    garbage = Node()
    collected = weakref.ref(garbage)
    del garbage

    frozen = freeze_startup_heap()

    assert collected() is None, "garbage alive at the freeze would never be reclaimed"
    assert frozen == gc.get_freeze_count() > 0
    # A full collection no longer visits what was frozen...
    assert not any(o is live for o in gc.get_objects())
    # ...but objects made afterwards are collected as before.
    later = Node()
    assert any(o is later for o in gc.get_objects())
    gone = weakref.ref(later)
    del later
    gc.collect()
    assert gone() is None
