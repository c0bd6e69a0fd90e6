"""The repository describes the system as it is: no issue numbers, dates of work or dated
narrative in any tracked text file.

History belongs in version control and CHANGELOG.md's release entries; a docstring or a doc
that says which piece of work changed it goes stale the moment the next one lands. Each hit is
reported as ``path:line: text``.

The patterns below avoid matching their own source: a phrase they look for is written with
``\\s+`` between its words, and the planted samples are split into parts joined at run time.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

_ORDINALS = r"first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|\d+(?:st|nd|rd|th)"
_DATE = r"20\d\d-\d\d-\d\d"

# Each names what it catches; case-insensitive.
PATTERNS: dict[str, re.Pattern[str]] = {
    "issue number": re.compile(r"\bissues?\s*#?\s*\d+", re.IGNORECASE),
    # A '#' directly followed by digits, standing alone: not a markdown heading ('## 1.'), a
    # shell comment, a colour ('#1f77b4') or an anchor ('page#2').
    "#number": re.compile(r"(?<![\w#&/])#\d{1,4}\b(?![\w-])"),
    "period of work": re.compile(r"\bwork[\s-]+periods?\b", re.IGNORECASE),
    # A session of work, not a database one: qualified by this, previous, next, an ordinal or a
    # number. A database session ('a session', 'the session', 'SQLAlchemy session') passes.
    "work session": re.compile(
        rf"\b(?:this|previous|earlier|next|prior|later|{_ORDINALS})\s+sessions?\b|\bsession\s+\d+\b",
        re.IGNORECASE,
    ),
    "addressed to a reader": re.compile(r"\bfor\s+whoever\b", re.IGNORECASE),
    "dated state": re.compile(rf"\bas\s+of\s+{_DATE}\b", re.IGNORECASE),
}
# A heading that carries a date of work: '## Results (YYYY-MM-DD)'.
_DATED_HEADING = re.compile(rf"^\s*#+\s.*\(\s*{_DATE}\s*\)")

# Generated code and data are not prose anyone writes.
_SKIPPED_NAMES = frozenset({"uv.lock"})
_GENERATED = re.compile(r"^proto/gpucloud/.*_pb2(?:_grpc)?\.pyi?$")
_DATA_SUFFIXES = frozenset({".csv", ".jsonl", ".parquet", ".png", ".svg", ".db", ".gz", ".zst", ".tss"})


def history_in(line: str) -> list[str]:
    """The names of the patterns ``line`` matches: empty when it describes the present."""
    found = [name for name, pattern in PATTERNS.items() if pattern.search(line)]
    if _DATED_HEADING.search(line):
        found.append("dated heading")
    return found


def _tracked_text_files() -> list[Path]:
    """Every tracked file that is prose or code someone writes, as a path under ROOT."""
    # The tests run in a checkout (CI clones one): without git there is nothing to check against.
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, text=True).stdout
    paths = []
    for name in filter(None, listed.split("\0")):
        path = ROOT / name
        if Path(name).name in _SKIPPED_NAMES or _GENERATED.match(name) or path.suffix in _DATA_SUFFIXES:
            continue
        if path.is_file():  # deleted in the working tree but not yet from the index
            paths.append(path)
    return paths


def _hits(path: Path) -> list[str]:
    data = path.read_bytes()
    if b"\0" in data:
        return []  # binary
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return []  # binary
    relative = path.relative_to(ROOT).as_posix()
    return [
        f"{relative}:{number}: {', '.join(names)}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), start=1)
        if (names := history_in(line))
    ]


def test_no_tracked_file_tells_the_history_of_its_work() -> None:
    files = _tracked_text_files()
    assert any(path.name == "README.md" for path in files)  # a wrong ROOT would find nothing and pass
    hits = [hit for path in files for hit in _hits(path)]
    assert hits == [], "\n".join(hits)


@pytest.mark.parametrize(
    "parts",
    [
        ("Goal (issue", " #", "4): a million samples a second"),
        ("    # see Issue", " 12 for the numbers"),
        ("fixed in #", "123, see there"),
        ("(#", "7)"),
        ("Measured in the work", " period before the release."),
        ("## Fifth", " session"),
        ("## 3rd", " session: the writer"),
        ("The previous", " session left the writer slower."),
        ("In this", " session we found that the pool leaks."),
        ("session", " 4 results"),
        ("Notes for", " whoever picks this up"),
        ("Throughput as", " of 2026-03-14: 900 pairs/s"),
        ("## Results (", "2026-03-14)"),
    ],
)
def test_history_is_found(parts: tuple[str, ...]) -> None:
    """Each sample is split so that this file's own source does not match."""
    assert history_in("".join(parts)) != []


@pytest.mark.parametrize(
    "line",
    [
        "## 1. Billing GPU time from messy intervals",
        "# Run from the repository root.",
        "#!/usr/bin/env bash",
        'plt.plot(x, y, color="#1f77b4")',
        "see docs/api.md#tokens",
        "async with store.read() as session:",
        "Reads and the less frequent writes use SQLAlchemy sessions (`Database.read()`).",
        "a session per request, and the session is closed on return",
        "The period 2026-12 is billed at month end.",
        "## [0.1.0]",
        "A repeat of an event id is one event.",
    ],
)
def test_present_tense_passes(line: str) -> None:
    assert history_in(line) == []
