"""The server process's garbage collector: startup's objects out of its way, young objects
collected in larger batches.

A started control plane holds about 120,000 objects that live as long as the process (modules,
protobuf descriptors, SQLAlchemy's metadata, grpc's and structlog's state). CPython's cyclic
collector walks all of them in every full (generation 2) collection, and under load full
collections come often: each one holds the event loop for the whole walk, which stalls every
call in flight and costs loop CPU on every create and cancel (docs/performance.md has the
figures). Freezing them moves them to a permanent generation the collector does not visit;
objects made afterwards, the requests' included, are collected as usual.

The youngest generation is collected every ``YOUNG_THRESHOLD`` net allocations instead of
CPython's 700. Under load a scheduling pass holds the requests of dozens of calls at once: at
700 a young collection came every few pairs of calls and promoted whatever was in flight, so
that the older generations filled with request objects and were walked for them too. At 10,000
the collector took a third of the loop time it did (75 against 210 ms of young collections a
run, 2 against 100 middle ones), each young collection holding the loop for at most about 4 ms.
"""

from __future__ import annotations

import gc

import structlog

log = structlog.get_logger(__name__)

YOUNG_THRESHOLD = 10_000


def tune_collector() -> int:
    """Collect startup's garbage, exempt everything still alive from later collections, and
    collect the youngest generation every ``YOUNG_THRESHOLD`` allocations.

    Called once by the process that owns the server (``gpucloud serve``), after the control
    plane has started: not by ``ControlPlane`` itself, since a process embedding several (the
    tests) would pin each one's objects for good. Returns how many objects were frozen.
    """
    # Collect first: garbage frozen now would never be reclaimed.
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
    frozen = gc.get_freeze_count()
    log.info("collector_tuned", frozen_objects=frozen, young_threshold=YOUNG_THRESHOLD)
    return frozen
