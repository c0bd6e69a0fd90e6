"""The server process's garbage collector: keep what startup built out of every full collection.

A started control plane holds about 120,000 objects that live as long as the process (modules,
protobuf descriptors, SQLAlchemy's metadata, grpc's and structlog's state). CPython's cyclic
collector walks all of them in every full (generation 2) collection, and under load full
collections come often: each one holds the event loop for the whole walk, which stalls every
call in flight and costs loop CPU on every create and cancel (docs/performance.md has the
figures). Freezing them moves them to a permanent generation the collector does not visit;
objects made afterwards, the requests' included, are collected as usual.
"""

from __future__ import annotations

import gc

import structlog

log = structlog.get_logger(__name__)


def freeze_startup_heap() -> int:
    """Collect startup's garbage, then exempt everything still alive from later collections.

    Called once by the process that owns the server (``gpucloud serve``), after the control
    plane has started: not by ``ControlPlane`` itself, since a process embedding several (the
    tests) would pin each one's objects for good. Returns how many objects were frozen.
    """
    # Collect first: garbage frozen now would never be reclaimed.
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("startup_heap_frozen", objects=frozen)
    return frozen
