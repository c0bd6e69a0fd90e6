"""What a part-node allocation asks for, shared by the request (requests.py) and the stored row
(repository.py). No I/O."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class PartShape:
    """Part of one node, asked with ``node_count`` 0: whole GPUs (1, 2, 4 or 8), one MIG slice
    or a soft share of one GPU (at most one of the three), and CPU (thousandths of a core) and
    memory (MiB) beside them; or CPU and memory alone (part_node.py places it)."""

    gpus: int = 0
    mig_profile: str = ""
    share_milli: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0

    @property
    def part_node(self) -> bool:
        """Whether it asks for part of one node rather than whole nodes (its ``node_count`` is then 0)."""
        return bool(self.gpus or self.mig_profile or self.share_milli or self.cpu_milli or self.memory_mib)
