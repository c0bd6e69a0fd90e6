"""The label catalog's selector matching against a brute-force reference, on irregular label sets."""

from __future__ import annotations

import tempfile
from pathlib import Path
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from tsdb import catalog as catalog_module
from tsdb.catalog import Catalog

NAMES = ("node", "gpu", "field", "pod")
VALUES = ("a", "b", "c")

label_sets = st.dictionaries(st.sampled_from(NAMES), st.sampled_from(VALUES), min_size=1)
selectors = st.dictionaries(
    st.sampled_from((*NAMES, "rack")),
    st.sampled_from(VALUES) | st.frozensets(st.sampled_from(VALUES), max_size=3),
)


def reference(labels: list[dict[str, str]], selector: dict[str, str | frozenset[str]]) -> list[int]:
    def ok(item: dict[str, str]) -> bool:
        return all(
            item.get(name) == wanted if isinstance(wanted, str) else item.get(name) in wanted
            for name, wanted in selector.items()
        )

    return [sid for sid, item in enumerate(labels) if ok(item)]


@settings(max_examples=60, deadline=None)
@given(st.lists(label_sets, min_size=1, max_size=40), st.lists(selectors, min_size=1, max_size=8))
def test_select_matches_a_brute_force_scan(
    items: list[dict[str, str]], queries: list[dict[str, str | frozenset[str]]]
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        catalog, _ = Catalog.open(Path(folder) / "catalog.tsc")
        try:
            catalog.ids(items)
            distinct = list({tuple(sorted(item.items())): item for item in items}.values())
            labels = [dict(catalog.labels(sid)) for sid in range(len(catalog))]
            assert sorted(map(sorted, (i.items() for i in labels))) == sorted(
                map(sorted, (i.items() for i in distinct))
            )
            for selector in queries:
                expected = reference(labels, selector)
                for _ in range(2):  # a miss, then the cached answer
                    assert catalog.select(selector).tolist() == expected
                # Large candidate sets intersect id arrays instead: the same answer.
                with mock.patch.object(catalog_module, "_FILTER_IN_PYTHON", 0):
                    assert catalog._match(catalog_module._selector_key(selector)).tolist() == expected
        finally:
            catalog.close()


def test_a_full_label_set_selects_only_that_series_when_others_have_more_labels() -> None:
    with tempfile.TemporaryDirectory() as folder:
        catalog, _ = Catalog.open(Path(folder) / "catalog.tsc")
        try:
            ids = catalog.ids([{"node": "a", "gpu": "0"}, {"node": "a", "gpu": "0", "pod": "p"}, {"node": "b"}])
            assert catalog.select({"node": "a", "gpu": "0"}).tolist() == [int(ids[0]), int(ids[1])]
            assert catalog.select({"node": "a", "gpu": "0", "pod": "p"}).tolist() == [int(ids[1])]
            assert catalog.select({"node": "b", "gpu": "0", "pod": "p"}).tolist() == []
        finally:
            catalog.close()
