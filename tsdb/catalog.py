"""The label catalog: every series' labels, stored once, append-only, in `catalog.tsc`.

File layout: an 8-byte header (``b"TSC1" | version u16 | reserved u16``) then framed records (see
tsdb.framing). Each record's payload is UTF-8 JSON, one of:

- ``{"first": <id>, "labels": [{...}, ...]}``: the series created by one call, with ids first,
  first+1, ...;
- ``{"first": <id>, "lost": <n>}``: n ids whose labels were lost (a damaged catalog) while a
  segment or the WAL still names them. They are reserved, never handed out again, and match no
  selector: their samples stay stored, unreachable, until retention deletes them.

Ids are dense from 0, so a record whose `first` is not the number of ids read so far is corrupt.
Reading stops at the first torn, corrupt or unreadable record, and the file is cut back to the
end of the last good one. The Store fsyncs the catalog before it writes any WAL record that names
a new series, and reserves on open every id that its state file, a segment or the WAL names
beyond what the catalog holds (Catalog.reserve), so an id is never given to a second series.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, cast

import numpy as np
from numpy.typing import NDArray

from tsdb import framing
from tsdb._fs import open_private, write_all
from tsdb.errors import InvalidArgumentError, TsdbError
from tsdb.model import Labels

I64 = NDArray[np.int64]
LabelKey = tuple[tuple[str, str], ...]
Selector = Mapping[str, str | Collection[str]]

MAGIC: Final = b"TSC1"
VERSION: Final = 1
HEADER: Final = MAGIC + VERSION.to_bytes(2, "little") + b"\0\0"
_SELECT_CACHE: Final = 256
# A selector whose narrowest label leaves at most this many candidates is checked in plain Python
# (label lookups per candidate); larger ones intersect id arrays with numpy.
_FILTER_IN_PYTHON: Final = 4096
# The fleet data model: series are (node, gpu, field). These names decide how a segment groups
# series (value groups are one field across one node's GPUs); other labels are allowed and kept.
NODE: Final = "node"
GPU: Final = "gpu"
FIELD: Final = "field"


@dataclass(slots=True)
class CatalogLoad:
    """What opening the catalog found: bytes cut off a torn tail, and why."""

    bytes_discarded: int
    reason: str | None


def _natural(value: str) -> tuple[int, int | str]:
    """Sort key that puts "gpu 2" before "gpu 10"."""
    return (0, int(value)) if value.isdigit() else (1, value)


def canonical(labels: Mapping[str, str]) -> LabelKey:
    """The label set as a sorted tuple, after checking it is a non-empty str -> str mapping."""
    if not isinstance(labels, Mapping) or not labels:
        raise InvalidArgumentError(f"labels must be a non-empty mapping of str to str, got {labels!r}")
    for name, value in labels.items():
        if not isinstance(name, str) or not name or not isinstance(value, str):
            raise InvalidArgumentError(f"label {name!r}={value!r}: names must be non-empty str and values str")
    return tuple(sorted(labels.items()))


class Catalog:
    """Labels <-> dense series ids, with postings per (label, value) for selectors."""

    def __init__(self, path: Path, fd: int, labels: list[dict[str, str] | None]) -> None:
        self.path = path
        self._fd = fd
        # A lost id (None in `labels`) holds the shared empty label set and is listed in _lost.
        self._labels = [_NO_LABELS if item is None else Labels(item) for item in labels]
        self._lost: set[int] = {sid for sid, item in enumerate(labels) if item is None}
        self._live: I64 | None = None
        self._index: dict[LabelKey, int] = {}
        self._postings: dict[tuple[str, str], list[int]] = {}
        self._names: set[str] = set()
        self._dirty = False
        self._selected: OrderedDict[tuple[object, ...], I64] = OrderedDict()
        self._single: dict[int, I64] = {}
        self._order_keys: dict[int, tuple[object, ...]] = {}
        for sid, item in enumerate(labels):
            if item is not None:
                self._register(sid, item)

    @classmethod
    def open(cls, path: Path) -> tuple[Catalog, CatalogLoad]:
        """Open (or create) the catalog file, cutting off a torn or corrupt tail."""
        fd = open_private(path, os.O_RDWR | os.O_APPEND)
        try:
            data = _read_all(fd)
            load = CatalogLoad(0, None)
            if not data:
                os.write(fd, HEADER)
                os.fsync(fd)
                return cls(path, fd, []), load
            if data[: len(MAGIC)] != MAGIC:
                raise TsdbError(f"{path} is not a tsdb catalog (bad magic)")
            labels: list[dict[str, str] | None] = []
            end = framing.ScanEnd(0, False, None)
            # Just past the last record taken: the scan's own good_end only moves past a record
            # once the next one is asked for, so it lags one record behind inside the loop.
            good = len(HEADER)
            for offset, payload in framing.scan(data, len(HEADER), end):
                try:
                    created = _parse_record(payload, len(labels))
                except ValueError as exc:
                    end.damaged, end.reason = True, f"record at offset {offset} {exc}"
                    break
                labels.extend(created)
                good = offset + framing.FRAME.size + len(payload)
            if end.damaged:
                load = CatalogLoad(len(data) - good, end.reason)
                os.ftruncate(fd, good)
                os.fsync(fd)
            return cls(path, fd, labels), load
        except BaseException:
            os.close(fd)
            raise

    def _register(self, sid: int, labels: dict[str, str]) -> None:
        self._index[canonical(labels)] = sid
        for item in labels.items():
            self._postings.setdefault(item, []).append(sid)
        self._names.update(labels)

    def __len__(self) -> int:
        """How many ids are taken, lost ones included: the next new series gets this id."""
        return len(self._labels)

    def labels(self, sid: int) -> Labels:
        """The labels of series `sid` (read-only, shared; empty for a lost id)."""
        return self._labels[sid]

    def is_lost(self, sid: int) -> bool:
        """Whether `sid` is reserved with its labels lost."""
        return sid in self._lost

    def known(self, sids: I64) -> NDArray[np.bool_]:
        """Per id: whether it names a series with labels (taken and not lost)."""
        inside: NDArray[np.bool_] = (sids >= 0) & (sids < len(self._labels))
        if self._lost:
            inside &= ~np.isin(sids, np.fromiter(self._lost, dtype=np.int64, count=len(self._lost)))
        return inside

    def reserve(self, next_id: int) -> int:
        """Take every id below `next_id` that is not yet taken, as lost, durably (a segment or
        the WAL names them but their labels are gone); returns how many were reserved."""
        missing = next_id - len(self._labels)
        if missing <= 0:
            return 0
        payload = json.dumps({"first": len(self._labels), "lost": missing}, separators=(",", ":")).encode()
        _write_all(self._fd, framing.frame(payload))
        os.fsync(self._fd)
        self._lost.update(range(len(self._labels), next_id))
        self._labels.extend([_NO_LABELS] * missing)
        self._live = None
        self._selected.clear()
        return missing

    def labels_of(self, sids: list[int]) -> list[Labels]:
        """The labels of many series."""
        every = self._labels
        return [every[sid] for sid in sids]

    def ids(self, items: Iterable[Mapping[str, str]]) -> I64:
        """Ids of the given label sets, creating the missing ones in one catalog record (not yet fsynced)."""
        ids, new = self.resolve(items)
        if new:
            self.create(new)
        return ids

    def resolve(self, items: Iterable[Mapping[str, str]]) -> tuple[I64, list[LabelKey]]:
        """Ids of the given label sets, changing nothing: a missing one gets the id ``create``
        would give it (``len(self)`` on, in order of first appearance), and is listed, once, in
        the second part of the answer."""
        keys = [canonical(labels) for labels in items]
        out = np.empty(len(keys), dtype=np.int64)
        new: dict[LabelKey, int] = {}
        for i, key in enumerate(keys):
            sid = self._index.get(key)
            if sid is None:
                sid = new.get(key)
                if sid is None:
                    sid = new[key] = len(self._labels) + len(new)
            out[i] = sid
        return out, list(new)

    def create(self, keys: Sequence[LabelKey]) -> None:
        """Create the series of ``keys`` (from ``resolve``, with nothing created since) under ids
        ``len(self)`` on, in one catalog record (not yet fsynced)."""
        created = [dict(key) for key in keys]
        payload = json.dumps({"first": len(self._labels), "labels": created}, separators=(",", ":")).encode()
        _write_all(self._fd, framing.frame(payload))
        self._dirty = True
        for labels in created:
            self._labels.append(Labels(labels))
            self._register(len(self._labels) - 1, labels)
        self._live = None
        self._selected.clear()

    def count(self, selector: Selector) -> int:
        """How many series match `selector` (see select), without listing them when it is {} or
        names one label's exact value."""
        if not isinstance(selector, Mapping):
            raise InvalidArgumentError(f"selector must be a mapping of label to value(s), got {selector!r}")
        if not selector:
            return len(self._labels) - len(self._lost)
        if len(selector) == 1:
            ((name, value),) = selector.items()
            if isinstance(name, str) and name and isinstance(value, str):
                return len(self._postings.get((name, value), ()))
        return int(self.select(selector).size)

    @property
    def dirty(self) -> bool:
        """True while created series are written but not yet fsynced."""
        return self._dirty

    def sync(self) -> None:
        """Make every created series durable (called before a WAL record may reference them)."""
        if self._dirty:
            os.fsync(self._fd)
            self._dirty = False

    def size(self) -> int:
        """Bytes of the catalog file."""
        return os.fstat(self._fd).st_size

    def close(self) -> None:
        """Sync and close the file."""
        if self._fd >= 0:
            self.sync()
            os.close(self._fd)
            self._fd = -1

    def select(self, selector: Selector) -> I64:
        """Sorted ids of the series matching every label in `selector` (exact value or set of values)."""
        if not isinstance(selector, Mapping):
            raise InvalidArgumentError(f"selector must be a mapping of label to value(s), got {selector!r}")
        fast: tuple[object, ...] | None = None
        try:
            # Exact-match selectors (str values) are their own cache key; sets make this fail.
            fast = tuple(sorted(selector.items()))
            if len(fast) == len(self._names):
                # A whole label set (it names as many labels as the catalog has names, so a series
                # with those labels has no other): the narrow query's selector, one dict lookup.
                # With a non-str value the key is still hashable and simply matches nothing.
                sid = self._index.get(cast(LabelKey, fast))
                if sid is not None:
                    return self._one(sid)
            cached = self._selected.get(fast)
        except TypeError:
            fast, cached = None, None
        if cached is not None and fast is not None:
            self._selected.move_to_end(fast)
            return cached
        key = _selector_key(selector)
        result = self._match(key)
        result.setflags(write=False)
        self._selected[key] = result
        if fast is not None and fast != key:
            self._selected[fast] = result
        if len(self._selected) > _SELECT_CACHE:
            self._selected.popitem(last=False)
        return result

    def _one(self, sid: int) -> I64:
        """The read-only one-element answer naming series `sid` (kept per series)."""
        result = self._single.get(sid)
        if result is None:
            result = self._single[sid] = np.array([sid], dtype=np.int64)
            result.setflags(write=False)
        return result

    def _match(self, key: tuple[tuple[str, frozenset[str]], ...]) -> I64:
        """Sorted ids of the series matching a normalised selector (see _selector_key)."""
        if not key:
            return self._every()
        if (
            len(key) == len(self._names)
            and all(len(values) == 1 for _, values in key)
            and {name for name, _ in key} == self._names
        ):
            # Every label name in the catalog is named once: at most the one series with exactly
            # these labels can match (key is sorted by name, like a canonical label set).
            sid = self._index.get(tuple((name, next(iter(values))) for name, values in key))
            return np.array([] if sid is None else [sid], dtype=np.int64)

        def size(item: tuple[str, frozenset[str]]) -> int:
            return sum(len(self._postings.get((item[0], value), ())) for value in item[1])

        # Start from the label with the fewest candidates; check the others label by label.
        ordered = sorted(key, key=size)
        name, wanted = ordered[0]
        lists = [self._postings.get((name, value), []) for value in wanted]
        # Postings lists are in id order; a union of several is sorted again.
        candidates = lists[0] if len(lists) == 1 else sorted({sid for group in lists for sid in group})
        rest = ordered[1:]
        if len(candidates) <= _FILTER_IN_PYTHON:
            labels = self._labels
            for other, values in rest:
                candidates = [sid for sid in candidates if labels[sid].get(other) in values]
            return np.array(candidates, dtype=np.int64)
        result = np.array(candidates, dtype=np.int64)
        for other, values in rest:
            members = np.fromiter(
                (sid for value in values for sid in self._postings.get((other, value), ())), dtype=np.int64
            )
            result = result[np.isin(result, members)]
            if result.size == 0:
                break
        return result

    def _every(self) -> I64:
        """Every id that names a series (lost ids match no selector, not even {})."""
        if not self._lost:
            return np.arange(len(self._labels), dtype=np.int64)
        if self._live is None:
            self._live = np.flatnonzero(self.known(np.arange(len(self._labels), dtype=np.int64))).astype(np.int64)
        return self._live.copy()

    def partition_key(self, sid: int) -> tuple[str, str]:
        """(field, node) of a series: a segment's value groups never mix two partitions."""
        labels = self._labels[sid]
        return labels.get(FIELD, ""), labels.get(NODE, "")

    def order_key(self, sid: int) -> tuple[object, ...]:
        """Order of series inside a partition: by node, then GPU (numerically), then the other labels."""
        key = self._order_keys.get(sid)
        if key is None:
            # Labels never change: each series' key is built once (every flush sorts every series).
            labels = self._labels[sid]
            rest = tuple(sorted((k, v) for k, v in labels.items() if k not in (NODE, GPU, FIELD)))
            key = self._order_keys[sid] = (_natural(labels.get(NODE, "")), _natural(labels.get(GPU, "")), rest)
        return key


_NO_LABELS: Final = Labels()


def _parse_record(payload: memoryview, first: int) -> list[dict[str, str] | None]:
    """The ids a record creates, in order (None for a lost one); ValueError when the record does
    not parse or does not start at id `first`."""
    try:
        record = json.loads(bytes(payload))
    except ValueError as exc:
        raise ValueError(f"is not JSON: {exc}") from None
    if not isinstance(record, dict) or record.get("first") != first:
        start = record.get("first") if isinstance(record, dict) else None
        raise ValueError(f"starts at id {start}, expected {first}")
    lost = record.get("lost")
    if isinstance(lost, int) and not isinstance(lost, bool) and lost > 0:
        return [None] * lost
    items = record.get("labels")
    if not isinstance(items, list) or not all(isinstance(item, dict) and item for item in items):
        raise ValueError("has no label sets")
    return [{str(k): str(v) for k, v in item.items()} for item in items]


def _selector_key(selector: Selector) -> tuple[tuple[str, frozenset[str]], ...]:
    items: list[tuple[str, frozenset[str]]] = []
    for name, wanted in selector.items():
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"selector label names must be non-empty str, got {name!r}")
        if isinstance(wanted, str):
            values = frozenset((wanted,))
        elif isinstance(wanted, Collection):
            values = frozenset(wanted)
            if not all(isinstance(v, str) for v in values):
                raise InvalidArgumentError(f"selector values for {name!r} must be str, got {wanted!r}")
        else:
            raise InvalidArgumentError(f"selector value for {name!r} must be a str or a collection of str")
        items.append((name, values))
    return tuple(sorted(items, key=lambda item: item[0]))


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    return os.pread(fd, size, 0) if size else b""


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte or cut the file back to where it was, so no half record is left behind."""
    before = os.fstat(fd).st_size
    try:
        write_all(fd, data)
    except OSError as exc:
        os.ftruncate(fd, before)
        raise TsdbError(f"catalog write failed: {exc}") from exc
