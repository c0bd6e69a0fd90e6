"""Persistence of long-running operations, as transaction steps (store/tx.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.errors import NotFound
from services.paging import Cursor, newest_first
from services.store.tx import Sql, Tx, expand

NAME_PREFIX = "operations/"


def name_of(operation_id: str) -> str:
    """The resource name of an operation: ``operations/<id>``."""
    return NAME_PREFIX + operation_id


def id_from_name(name: str) -> str | None:
    """The id in ``operations/<id>``, or None when the name has another shape."""
    if not name.startswith(NAME_PREFIX):
        return None
    return name.removeprefix(NAME_PREFIX) or None


@dataclass(frozen=True, slots=True)
class Operation:
    """One row of the ``operations`` table (store/models.py defines the table)."""

    operation_id: str
    tenant_id: str
    kind: str
    target_id: str
    done: bool
    error_message: str | None
    created_us: int
    done_us: int | None


_COLUMNS = "operation_id, tenant_id, kind, target_id, done, error_message, created_us, done_us"
# Binds for an insert; dataclasses.asdict deep-copies and costs more than the INSERT itself.
_FIELDS = tuple(field.name for field in dataclasses.fields(Operation))


def _operation(values: Sequence[Any]) -> Operation:
    operation_id, tenant_id, kind, target_id, done, error_message, created_us, done_us = values
    # SQLite hands booleans back as 0/1.
    return Operation(operation_id, tenant_id, kind, target_id, bool(done), error_message, created_us, done_us)


def get_row(operation_id: str, *, tenant_id: str | None) -> Tx[Operation]:
    """The operation, NOT_FOUND when it does not exist or belongs to another tenant."""
    result = yield Sql(f"SELECT {_COLUMNS} FROM operations WHERE operation_id = :id", {"id": operation_id})
    found = result.first()
    return visible(operation_id, None if found is None else _operation(found), tenant_id=tenant_id)


def visible(operation_id: str, row: Operation | None, *, tenant_id: str | None) -> Operation:
    """``row``, the operation read for ``operation_id``, if a caller confined to ``tenant_id``
    (None: any) may see it; NOT_FOUND when there is none or it is another tenant's, alike."""
    if row is None or (tenant_id is not None and row.tenant_id != tenant_id):
        name = name_of(operation_id)
        # Named as the API names it (operations/<id>), in the message and the metadata alike.
        raise NotFound(
            reason="OPERATION_NOT_FOUND",
            message=f"operation {name!r} not found",
            metadata={"name": name, "field": "name"},
        )
    return row


def delete(operation_id: str) -> Tx[None]:
    """Delete the operation, done or not (the caller checks)."""
    yield Sql("DELETE FROM operations WHERE operation_id = :id", {"id": operation_id})


def for_target(kind: str, target_id: str) -> Tx[Operation | None]:
    """The ``kind`` operation about ``target_id``, if one was started."""
    result = yield Sql(
        f"SELECT {_COLUMNS} FROM operations WHERE kind = :kind AND target_id = :target",
        {"kind": kind, "target": target_id},
    )
    found = result.first()
    return None if found is None else _operation(found)


def for_targets(kind: str, target_ids: Sequence[str]) -> Tx[dict[str, Operation]]:
    """The ``kind`` operation of each of ``target_ids`` that has one: one query for many."""
    if not target_ids:
        return {}
    ids, params = expand("id", target_ids)
    result = yield Sql(
        f"SELECT {_COLUMNS} FROM operations WHERE kind = :kind AND target_id IN ({ids})", {**params, "kind": kind}
    )
    return {operation.target_id: operation for operation in map(_operation, result.rows)}


# Operations asked about in one ``done_among`` statement at most (bind parameters per statement).
_DONE_CHUNK = 512


def done_among(operation_ids: Sequence[str]) -> Tx[list[Operation]]:
    """Those of ``operation_ids`` that are done (any tenant): one statement per 512 ids."""
    found: list[Operation] = []
    for start in range(0, len(operation_ids), _DONE_CHUNK):
        ids, params = expand("id", operation_ids[start : start + _DONE_CHUNK])
        result = yield Sql(f"SELECT {_COLUMNS} FROM operations WHERE done = TRUE AND operation_id IN ({ids})", params)
        found += [_operation(r) for r in result.rows]
    return found


def insert(row: Operation) -> Tx[None]:
    """Database a new operation."""
    yield from insert_many([row])


def insert_many(rows: Sequence[Operation]) -> Tx[None]:
    """Database new operations in one statement."""
    yield Sql(
        f"INSERT INTO operations ({_COLUMNS}) VALUES (:operation_id, :tenant_id, :kind, :target_id, :done,"
        " :error_message, :created_us, :done_us)",
        rows=[{name: getattr(row, name) for name in _FIELDS} for row in rows],
    )


def complete(kind: str, target_ids: Sequence[str], *, now_us: int) -> Tx[None]:
    """Mark the ``kind`` operations of ``target_ids`` done at ``now_us``."""
    ids, params = expand("id", target_ids)
    yield Sql(
        f"UPDATE operations SET done = TRUE, done_us = :now WHERE kind = :kind AND target_id IN ({ids})",
        {**params, "now": now_us, "kind": kind},
    )


def list_page(*, tenant_id: str | None, cursor: Cursor | None, limit: int) -> Tx[list[Operation]]:
    """Newest first by (created_us, operation_id): immutable, with a unique tiebreaker."""
    page = newest_first(
        f"SELECT {_COLUMNS} FROM operations", "operation_id", {"tenant_id": tenant_id}, cursor=cursor, limit=limit
    )
    return [_operation(r) for r in (yield page).rows]
