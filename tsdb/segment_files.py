"""The segments directory of an open store: its files, their manifest and cached readers.

Sealing, compaction and retention write and delete segments only through SegmentFiles, so the
manifest and the reader cache always describe the files on disk. Opening it finishes what a crash
interrupted: a ``.tmp`` file never reached its rename (its samples are still in the WAL), and a
compacted file that lists its inputs was renamed into place before they were deleted (every
sample of theirs is in it), so both kinds of leftover are deleted.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import structlog

from tsdb import segment_format as fmt
from tsdb._fs import fsync_dir
from tsdb._int64 import INT64_MIN
from tsdb.errors import CorruptSegmentError
from tsdb.manifest import Manifest
from tsdb.model import SegmentInfo
from tsdb.options import Options
from tsdb.segment_reader import ReaderCache, SegmentReader
from tsdb.segment_writer import Grouping, SeriesBatch, write_segment

log = structlog.get_logger("tsdb")

_Found = dict[str, tuple[fmt.SegmentName, Path]]


class SegmentFiles:
    """The segment files of one store directory; use SegmentFiles.open()."""

    def __init__(self, directory: Path, manifest: Manifest, readers: ReaderCache, options: Options) -> None:
        self.directory = directory
        self.manifest = manifest
        self.readers = readers
        self._options = options
        self._seq = manifest.next_seq()

    @classmethod
    def open(cls, directory: Path, readers: ReaderCache, options: Options) -> SegmentFiles:
        """The segments in `directory`, after deleting what a crash left behind (see the module)."""
        for leftover in directory.glob(f"*{fmt.TMP_SUFFIX}"):
            leftover.unlink()
        found: _Found = {}
        for entry in directory.iterdir():
            name = fmt.parse_name(entry)
            if name is not None:
                found[entry.name] = (name, entry)
        superseded = _superseded(found)
        for file_name in superseded:
            log.info("tsdb_superseded_segment_removed", file=file_name)
            found[file_name][1].unlink()
        if superseded:
            fsync_dir(directory)
        segments = [
            SegmentInfo(str(entry), name.level, name.tmin, name.tmax, name.seq, entry.stat().st_size)
            for file_name, (name, entry) in found.items()
            if file_name not in superseded
        ]
        return cls(directory, Manifest(segments), readers, options)

    def write(
        self,
        batch: SeriesBatch,
        *,
        level: int,
        grouping: Grouping,
        sealed_until: int,
        forced: bool,
        sources: Sequence[str] = (),
    ) -> SegmentInfo:
        """Write `batch` as a new segment (renamed into place, durable) and add it to the manifest.

        An L0 file is one chunk at the store's zstd_level; a compacted one is cut into chunks of
        compact_chunk_ms at compact_zstd_level (tsdb.options).
        """
        compacted = level > 0
        # The number is used up even by a failed write: a file it left is never overwritten.
        seq = self._seq
        self._seq += 1
        info = write_segment(
            self.directory,
            batch,
            seq=seq,
            level=level,
            grouping=grouping,
            zstd_level=self._options.compact_zstd_level if compacted else self._options.zstd_level,
            chunk_ms=self._options.compact_chunk_ms if compacted else None,
            sealed_until=sealed_until,
            forced=forced,
            sources=sources,
        )
        self.manifest.add(info)
        return info

    def delete(self, infos: Iterable[SegmentInfo]) -> int:
        """Delete segments (those already gone too), fsync the directory, forget them; returns the
        bytes freed. Retention writes state.tss first; compaction deletes only inputs that the file
        it wrote carries whole (see tsdb.retention, tsdb.compaction)."""
        freed = 0
        paths: set[str] = set()
        for info in infos:
            self.readers.evict(info.path)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(info.path)
                freed += info.size
            paths.add(info.path)
        if paths:
            fsync_dir(self.directory)
            self.manifest.remove(paths)
        return freed

    def sealed_boundary(self) -> int:
        """The newest `sealed_until` among the segment headers (INT64_MIN: none)."""
        boundary = INT64_MIN
        for info in self.manifest.segments:
            fd = os.open(info.path, os.O_RDONLY)
            try:
                header = os.pread(fd, fmt.HEADER.size, 0)
            finally:
                os.close(fd)
            if len(header) < fmt.HEADER.size or header[:4] != fmt.MAGIC:
                log.error("tsdb_corrupt_segment", file=Path(info.path).name, error="bad header")
                continue
            boundary = max(boundary, fmt.HEADER.unpack(header)[6])
        return boundary

    def max_sid(self) -> int:
        """The largest series id any segment holds (-1: none); reads every segment's metadata."""
        largest = -1
        for info in self.manifest.segments:
            try:
                reader = SegmentReader(info.path)
            except CorruptSegmentError as exc:
                log.error("tsdb_corrupt_segment", file=Path(info.path).name, error=str(exc))
                continue
            try:
                if reader.dir_sid.size:
                    largest = max(largest, int(reader.dir_sid.max()))
            finally:
                reader.close()
        return largest


def _superseded(found: _Found) -> set[str]:
    """Files of `found` that a compacted file in it lists as its inputs."""
    superseded: set[str] = set()
    for file_name, (name, entry) in found.items():
        if name.level == 0:
            continue
        # Read the sources of a compacted file only if a lower-level file overlaps it.
        if not any(
            other.level < name.level and other.tmin >= name.tmin and other.tmax <= name.tmax
            for other_name, (other, _) in found.items()
            if other_name != file_name
        ):
            continue
        try:
            reader = SegmentReader(str(entry))
        except CorruptSegmentError as exc:
            # Keep everything: queries that reach the damaged file will raise, but opening must not.
            log.error("tsdb_corrupt_segment", file=file_name, error=str(exc))
            continue
        try:
            superseded.update(s for s in reader.sources if s in found)
        finally:
            reader.close()
    return superseded
