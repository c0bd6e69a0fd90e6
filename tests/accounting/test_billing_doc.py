"""docs/billing.md's example: its input files, run through the command, give the output it shows."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from clients.cli.app import app

DOC = Path(__file__).resolve().parents[2] / "docs" / "billing.md"


def _examples() -> dict[str, str]:
    """Each ``<!-- example: NAME -->`` marker and the fenced block right after it."""
    found = re.findall(r"<!-- example: (.+?) -->\n```\w*\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    return dict(found)


def test_the_documented_example_is_what_the_command_prints(tmp_path: Path) -> None:
    examples = _examples()
    for name in ("events.jsonl", "rates.json", "outages.jsonl"):
        (tmp_path / name).write_text(examples[name])
    files = {option: str(tmp_path / name) for option, name in (("--events", "events.jsonl"), ("--rates", "rates.json"))}
    files["--outages"] = str(tmp_path / "outages.jsonl")
    period = ["--start", "2025-06-01T00:00:00Z", "--end", "2025-06-02T00:00:00Z"]
    result = CliRunner().invoke(app, ["invoice", *[x for pair in files.items() for x in pair], *period, "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == json.loads(examples["output --json"])
