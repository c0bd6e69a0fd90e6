"""What a node registration must carry, checked before anything is stored."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from services.validation import Violations

GPUS_PER_NODE = 8
GPU_UUID_PATTERN = re.compile(r"GPU-[0-9A-Za-z-]{1,92}")


class GpuModel(StrEnum):
    """The GPU models the fleet is built from; every GPU of a node is the same model."""

    A100 = "A100"
    H100 = "H100"
    H200 = "H200"
    B200 = "B200"
    L40S = "L40S"


@dataclass(frozen=True)
class GpuSpec:
    """One GPU as registered: its NVML UUID and its index on the node."""

    uuid: str
    index: int


@dataclass(frozen=True)
class Inventory:
    """What an agent (or operator) reports about a node when registering it."""

    node_id: str
    gpu_model: GpuModel
    gpus: tuple[GpuSpec, ...]
    zone: str
    rack: str
    leaf_switch: str


def canonical_gpu_uuid(uuid: str) -> str:
    """``uuid`` in NVML's form, ``GPU-`` then lower case: a UUID is hex, so ``GPU-ABC1`` and
    ``GPU-abc1`` are one GPU, and one GPU must not be registered on two nodes."""
    prefix = "GPU-"
    return prefix + uuid[len(prefix) :].lower() if uuid.startswith(prefix) else uuid


def check_gpus(v: Violations, gpus: tuple[GpuSpec, ...]) -> None:
    """Exactly eight GPUs, indexes 0-7 once each, distinct well-formed UUIDs."""
    if len(gpus) != GPUS_PER_NODE:
        v.add("gpus", f"a node has exactly {GPUS_PER_NODE} GPUs; got {len(gpus)}")
        return
    seen_uuids: set[str] = set()
    for i, gpu in enumerate(gpus):
        if not GPU_UUID_PATTERN.fullmatch(gpu.uuid):
            v.add(f"gpus[{i}].uuid", "must be 'GPU-' then 1-92 letters, digits or dashes (NVML's form: GPU-<UUID>)")
        elif gpu.uuid in seen_uuids:
            v.add(f"gpus[{i}].uuid", f"{gpu.uuid!r} appears twice")
        seen_uuids.add(gpu.uuid)
    indexes = sorted(g.index for g in gpus)
    if indexes != list(range(GPUS_PER_NODE)):
        v.add("gpus", f"indexes must be 0-{GPUS_PER_NODE - 1} once each; got {indexes}")
