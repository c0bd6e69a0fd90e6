"""Resource ids: time-ordered, unique, and valid wherever a client hands one back."""

from __future__ import annotations

import re

import pytest

from services import ids
from services.validation import ID_PATTERN


def test_an_id_is_its_prefix_then_ms_time_then_64_random_bits() -> None:
    made = ids.new_id("alloc")
    assert re.fullmatch(r"alloc-[0-9a-f]{12}[0-9a-f]{16}", made)
    assert ID_PATTERN.fullmatch(made)
    assert ID_PATTERN.fullmatch(ids.new_id("op"))


def test_ids_made_later_sort_later_whatever_their_random_part(monkeypatch: pytest.MonkeyPatch) -> None:
    made = []
    for ms in (1_733_000_000_000, 1_733_000_000_001, 1_733_000_060_000, 1_900_000_000_000):
        monkeypatch.setattr(ids, "time_ns", lambda ms=ms: ms * 1_000_000)
        made.append(ids.new_id("alloc"))
    assert made == sorted(made)
    assert len({m[:18] for m in made}) == 4  # the time part differs, the prefix does not


def test_ids_made_in_one_millisecond_do_not_collide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ids, "time_ns", lambda: 1_733_000_000_000_000_000)
    assert len({ids.new_id("op") for _ in range(10_000)}) == 10_000
