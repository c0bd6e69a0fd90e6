"""One way to the database, checked on the source: outside services/store/, code reads and
writes through SQL steps (``Database.query``, ``Database.transact``), never through ORM
sessions, SQLAlchemy statements or sqlite3 connections of its own."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
STORE = ROOT / "services" / "store"
# What of SQLAlchemy other code may use: parsing a database URL and naming its errors.
ALLOWED_SQLALCHEMY = frozenset({"sqlalchemy.engine", "sqlalchemy.exc"})


def _outside_store() -> list[Path]:
    return sorted(path for path in (ROOT / "services").rglob("*.py") if STORE not in path.parents)


def _imported(node: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of each module ``node`` imports."""
    if isinstance(node, ast.Import):
        return [(node.lineno, alias.name) for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [(node.lineno, node.module)]
    return []


def _session_block(node: ast.AST) -> bool:
    """``async with <something>.read()`` or ``.write()``: a session of its own."""
    if not isinstance(node, ast.AsyncWith):
        return False
    return any(
        isinstance(item.context_expr, ast.Call)
        and isinstance(item.context_expr.func, ast.Attribute)
        and item.context_expr.func.attr in ("read", "write")
        for item in node.items
    )


def _raw_sqlite(node: ast.AST) -> bool:
    """``sqlite3.<anything but an error class>``: a connection or cursor of its own."""
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "sqlite3"
        and not node.attr.endswith("Error")
    )


def _offences(source: str) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        for line, module in _imported(node):
            top = module.partition(".")[0]
            if top == "sqlmodel" or (top == "sqlalchemy" and module not in ALLOWED_SQLALCHEMY):
                found.append(f"line {line}: imports {module}")
            if module == "services.store.models":
                found.append(f"line {line}: imports the ORM tables")
        if _session_block(node):
            found.append(f"line {getattr(node, 'lineno', 0)}: opens a session")
        if _raw_sqlite(node):
            found.append(f"line {getattr(node, 'lineno', 0)}: uses sqlite3 directly")
    return found


def test_only_the_store_reaches_the_database_other_than_through_steps() -> None:
    modules = _outside_store()
    assert len(modules) > 50  # a wrong ROOT would find nothing and pass
    offending = {path.relative_to(ROOT).as_posix(): _offences(path.read_text()) for path in modules}
    assert {path: found for path, found in offending.items() if found} == {}


def test_the_check_finds_each_other_way() -> None:
    source = (
        "import sqlite3\n"
        "from sqlmodel import select\n"
        "from sqlalchemy import text\n"
        "from services.store.models import TenantRow\n"
        "async def f(store):\n"
        "    async with store.write() as session:\n"
        "        sqlite3.connect('x')\n"
        "    try:\n"
        "        pass\n"
        "    except sqlite3.OperationalError:\n"
        "        pass\n"
    )
    assert _offences(source) == [
        "line 2: imports sqlmodel",
        "line 3: imports sqlalchemy",
        "line 4: imports the ORM tables",
        "line 6: opens a session",
        "line 7: uses sqlite3 directly",
    ]
