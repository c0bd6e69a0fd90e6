"""What a tenant asks for: whole nodes, GPUs on one node, a soft share of one GPU, a MIG slice,
or CPU and memory alone. Every kind carries the tenant, the CPU and memory it needs beside its
GPUs, and the GPU models it accepts (empty: any)."""

from __future__ import annotations

from dataclasses import dataclass

from scheduling import mig
from scheduling.errors import InvalidRequest

GPU_COUNTS = (1, 2, 4, 8)
MILLI = 1000


@dataclass(frozen=True, kw_only=True)
class Base:
    """The fields every request has."""

    tenant: str
    cpu_milli: int = 0
    memory_mib: int = 0
    models: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.tenant:
            raise InvalidRequest("a request needs a tenant")
        if self.cpu_milli < 0 or self.memory_mib < 0:
            raise InvalidRequest(f"negative CPU or memory: {self.cpu_milli} milli, {self.memory_mib} MiB")

    def accepts(self, model: str) -> bool:
        """Whether a GPU of ``model`` will do."""
        return not self.models or model in self.models


@dataclass(frozen=True, kw_only=True)
class WholeNodes(Base):
    """``count`` nodes with nothing else on them, all of one model (the first of ``models`` in
    their order that has enough). CPU and memory are the nodes' own, so those fields stay 0.
    ``same_block``: every node in one fabric block, or none (a gang whose traffic must not cross
    a block's uplinks); otherwise a job no block holds spreads over blocks in fabric order."""

    count: int
    same_block: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.count <= 0:
            raise InvalidRequest(f"whole nodes: count must be positive, not {self.count}")


@dataclass(frozen=True, kw_only=True)
class Gpus(Base):
    """``count`` whole GPUs (1, 2, 4 or 8) on one node."""

    count: int

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.count not in GPU_COUNTS:
            raise InvalidRequest(f"GPUs on one node: count must be one of {GPU_COUNTS}, not {self.count}")


@dataclass(frozen=True, kw_only=True)
class Share(Base):
    """A soft share of one GPU in thousandths (1-999); a GPU holds shares of one tenant only."""

    milli: int

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.milli < MILLI:
            raise InvalidRequest(f"a share is 1-999 thousandths of a GPU (1000: ask for Gpus), not {self.milli}")


@dataclass(frozen=True, kw_only=True)
class MigSlice(Base):
    """One GPU instance of a MIG profile (``mig.PROFILES``), on a GPU whose slices are all this
    tenant's."""

    profile: str

    def __post_init__(self) -> None:
        super().__post_init__()
        mig.profile(self.profile)


@dataclass(frozen=True, kw_only=True)
class CpuOnly(Base):
    """CPU and memory on any node, no GPU."""


Request = WholeNodes | Gpus | Share | MigSlice | CpuOnly


def gpu_milli(request: Request) -> int:
    """The thousandths of a GPU the request takes on its node (whole nodes: 0, counted apart)."""
    if isinstance(request, Gpus):
        return MILLI * request.count
    if isinstance(request, Share):
        return request.milli
    if isinstance(request, MigSlice):
        return mig.MILLI_PER_SLICE * mig.profile(request.profile).size
    return 0
