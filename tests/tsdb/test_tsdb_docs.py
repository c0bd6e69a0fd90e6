"""docs/tsdb.md states sizes and layouts that must stay equal to the code."""

from __future__ import annotations

import re
from pathlib import Path

import tsdb.sealing
from tsdb import catalog, framing, options, segment_format, state, wal

DOC = (Path(__file__).resolve().parents[2] / "docs" / "tsdb.md").read_text()


def test_fixed_sizes_in_the_docs_match_the_code() -> None:
    assert f"header {segment_format.HEADER.size} B" in DOC
    assert f"footer {segment_format.FOOTER.size} B" in DOC
    assert f"entry is {segment_format.DIR_ENTRY_BYTES} bytes" in DOC
    assert f"LRU ({options.READER_CACHE} segments)" in DOC
    assert f"at {wal.MAX_FILE_BYTES >> 20} MiB" in DOC
    assert f"holds {tsdb.sealing.WAL_ROTATE_BYTES >> 20} MiB" in DOC
    assert f"zstd level\n{options.COMPACT_ZSTD_LEVEL} or higher" in DOC
    assert framing.FRAME.format == "<II"
    for magic in (segment_format.MAGIC, segment_format.FOOTER_MAGIC, wal.MAGIC, catalog.MAGIC, state.MAGIC):
        assert f'"{magic.decode()}"' in DOC


def test_documented_tables_list_the_code_columns_in_order() -> None:
    def documented(table: str) -> list[str]:
        row = re.search(rf"^\| {table} \| [^|]+ \| ([^|]+) \|$", DOC, flags=re.MULTILINE)
        assert row is not None, table
        return [column.split()[0] for column in row.group(1).split(",")]

    renamed = {"off": "offset", "len": "length", "ts": "ts_group", "crc": "crc32"}
    for table, columns in (
        ("chunks", segment_format.CHUNK_COLUMNS),
        ("timestamp groups", segment_format.TS_COLUMNS),
        ("value groups", segment_format.VG_COLUMNS),
        ("directory", segment_format.DIR_COLUMNS),
    ):
        assert documented(table) == [renamed.get(name, name) for name, _ in columns]


def test_the_module_list_names_every_module() -> None:
    section = DOC.split("## Modules", 1)[1].split("\n## ", 1)[0]
    package = Path(tsdb.sealing.__file__).parent
    modules = {path.name for path in package.glob("*.py") if path.name != "__init__.py"}
    named = set(re.findall(r"\b[a-z0-9_]+\.py\b", section))
    codecs_glob = {name for name in modules if name.startswith("_codec_")}
    assert modules - codecs_glob <= named, sorted(modules - codecs_glob - named)
    assert "_codec_*.py" in section
    assert named <= modules, sorted(named - modules)
