"""The node agent's GPU side: what a node's GPUs are and how they are doing, read from NVML on a
real node or from a deterministic simulator, both behind one ``GpuBackend`` interface."""

from clients.agent.backend import GpuBackend, GpuBackendError, NoGpuFound
from clients.agent.inventory import GpuInfo, GpuSample, RemappedRows, ThrottleReason, XidEvent

__all__ = [
    "GpuBackend",
    "GpuBackendError",
    "GpuInfo",
    "GpuSample",
    "NoGpuFound",
    "RemappedRows",
    "ThrottleReason",
    "XidEvent",
]
