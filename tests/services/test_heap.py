"""tune_collector: what startup built leaves the collector's generations, garbage does not get
frozen with it, and the youngest generation is collected less often."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from services.heap import YOUNG_THRESHOLD, tune_collector


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """Leave the test process's collector as the test found it."""
    gc.collect()
    gc.unfreeze()
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


@pytest.mark.usefixtures("unfrozen")
def test_live_objects_are_frozen_and_cyclic_garbage_is_collected_first() -> None:
    live = Node()
    garbage = Node()
    collected = weakref.ref(garbage)
    del garbage

    frozen = tune_collector()

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


@pytest.mark.usefixtures("unfrozen")
def test_the_youngest_generation_is_collected_in_larger_batches() -> None:
    _, middle, old = gc.get_threshold()
    tune_collector()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, middle, old)
