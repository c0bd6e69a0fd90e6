"""Docs that state facts about the code must match it."""

from __future__ import annotations

import re
from pathlib import Path

from services.nodes.transitions import TRANSITIONS

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_architecture_transition_table_matches_code() -> None:
    """docs/architecture.md lists exactly the node transitions the code allows."""
    text = (DOCS / "architecture.md").read_text()
    rows = set(re.findall(r"^\| `(\w+)` \| (\w+) \| (\w+) \|$", text, flags=re.MULTILINE))
    in_code = {(event.value, state.value, target.value) for (event, state), target in TRANSITIONS.items()}
    assert rows == in_code
