"""The interface every GPU backend of the agent offers, and its errors."""

from __future__ import annotations

import time
from typing import Protocol

from clients.agent.inventory import GpuInfo, GpuSample, XidEvent


class GpuBackendError(Exception):
    """A GPU backend could not do what was asked."""


class NoGpuFound(GpuBackendError):
    """There is no NVIDIA driver or no GPU on this machine; the message says what to check."""

    def __init__(self, cause: str) -> None:
        super().__init__(f"no NVIDIA driver or GPU found: {cause}")


class UnknownGpu(GpuBackendError, LookupError):
    """A GPU index the backend does not have."""

    def __init__(self, index: int, count: int) -> None:
        super().__init__(f"no GPU {index}: the node has GPUs 0-{count - 1}")


class GpuBackend(Protocol):
    """A node's GPUs as the agent sees them. Calls do not block on the GPUs' activity."""

    def inventory(self) -> tuple[GpuInfo, ...]:
        """Every GPU present, in index order."""
        ...

    def sample(self) -> tuple[GpuSample, ...]:
        """One reading of every GPU present, in index order."""
        ...

    def xid_events(self) -> tuple[XidEvent, ...]:
        """The XID events reported since the previous call (each is returned once); does not wait."""
        ...

    def close(self) -> None:
        """Releases what the backend holds; calling it again does nothing."""
        ...


def now_ms() -> int:
    """The wall clock in milliseconds since the Unix epoch, the time samples and events carry."""
    return time.time_ns() // 1_000_000
