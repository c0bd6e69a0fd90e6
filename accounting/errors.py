"""The exceptions the accounting library raises."""

from __future__ import annotations

from pathlib import Path


class AccountingError(Exception):
    """Base of every error raised on purpose by ``accounting``."""


class InputError(AccountingError, ValueError):
    """An input file that cannot be billed from, with the place at fault.

    ``line`` is the 1-based line number in JSONL files (and for JSON syntax errors); a rates
    file's semantic errors have no line and name the JSON path in ``message`` instead.
    """

    def __init__(self, path: Path | str, line: int | None, message: str) -> None:
        self.path = Path(path)
        self.line = line
        self.message = message
        where = f"{self.path}:{line}" if line is not None else str(self.path)
        super().__init__(f"{where}: {message}")
