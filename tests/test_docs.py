"""Docs that state facts about the code must match it."""

from __future__ import annotations

import re
from pathlib import Path

from services import limits
from services.nodes.transitions import TRANSITIONS

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_architecture_transition_table_matches_code() -> None:
    """docs/architecture.md lists exactly the node transitions the code allows."""
    text = (DOCS / "architecture.md").read_text()
    rows = set(re.findall(r"^\| `(\w+)` \| (\w+) \| (\w+) \|$", text, flags=re.MULTILINE))
    in_code = {(event.value, state.value, target.value) for (event, state), target in TRANSITIONS.items()}
    assert rows == in_code


def test_api_guide_lists_exactly_the_error_reasons_in_the_code() -> None:
    """docs/api.md's error table names every ErrorInfo reason the services raise, and no other."""
    services = Path(__file__).resolve().parent.parent / "services"
    in_code = {
        reason
        for path in services.rglob("*.py")
        # reason="X" in a call, or reason: str = "X" as a default
        for reason in re.findall(r'reason(?:: str)? ?= ?"([A-Z][A-Z_]+)"', path.read_text())
    }
    in_code |= {f"{kind}_NOT_FOUND" for kind in ("TENANT", "NODE", "ALLOCATION", "OPERATION")}
    in_code |= {reason.value for reason in limits.Reason}
    table = [line for line in (DOCS / "api.md").read_text().splitlines() if line.startswith("| ")]
    documented = {reason for line in table for reason in re.findall(r"`([A-Z][A-Z_]+)`", line.split("|")[2])}
    assert documented == in_code
