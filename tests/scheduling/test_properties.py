"""Random arrivals and departures through every policy never break the cluster's rules."""

from __future__ import annotations

from collections import defaultdict
from typing import NamedTuple

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling import (
    POLICIES,
    PROFILES,
    Cluster,
    CpuOnly,
    Gpus,
    MigSlice,
    Placement,
    Request,
    Share,
    WholeNodes,
    apply,
    is_valid_layout,
    release,
)
from tests.scheduling.helpers import node

TENANTS = st.sampled_from(["a", "b", "c"])
CPU = st.integers(0, 24_000)
MEMORY = st.integers(0, 200_000)
REQUESTS = st.one_of(
    st.builds(
        lambda t, n, c, m: Gpus(tenant=t, count=n, cpu_milli=c, memory_mib=m),
        TENANTS,
        st.sampled_from([1, 2, 4, 8]),
        CPU,
        MEMORY,
    ),
    st.builds(
        lambda t, s, c, m: Share(tenant=t, milli=s, cpu_milli=c, memory_mib=m),
        TENANTS,
        st.integers(1, 999),
        CPU,
        MEMORY,
    ),
    st.builds(
        lambda t, p, c: MigSlice(tenant=t, profile=p, cpu_milli=c), TENANTS, st.sampled_from(sorted(PROFILES)), CPU
    ),
    st.builds(lambda t, c, m: CpuOnly(tenant=t, cpu_milli=c, memory_mib=m), TENANTS, CPU, MEMORY),
    st.builds(lambda t, n: WholeNodes(tenant=t, count=n), TENANTS, st.integers(1, 2)),
)


class Place(NamedTuple):
    """A request placed by a policy (when it finds room)."""

    policy: str
    request: Request


class Release(NamedTuple):
    """One of the held placements released: ``pick`` modulo how many are held."""

    pick: int


ACTIONS = st.lists(
    st.one_of(st.builds(Place, st.sampled_from(sorted(POLICIES)), REQUESTS), st.builds(Release, st.integers(0, 99))),
    max_size=30,
)


def _cluster() -> Cluster:
    return Cluster(
        [
            node("m1", 8, mig=True, cpu=48_000, memory=400_000, block="b1"),
            node("m2", 2, mig=True, cpu=24_000, memory=300_000, block="b1"),
            node("g1", 4, model="A100", cpu=32_000, memory=256_000, block="b2"),
            node("g2", 1, model="A100", cpu=8_000, memory=64_000, block="b2"),
        ]
    )


def _snapshot(cluster: Cluster) -> list[list[int]]:
    arrays = (cluster.cpu_free, cluster.memory_free, cluster.gpu_free, cluster.mig_layout)
    return [a.tolist() for a in arrays]


def _check_rules(cluster: Cluster) -> None:
    mig: dict[tuple[int, int], list[Placement]] = defaultdict(list)
    shares: dict[tuple[int, int], list[Placement]] = defaultdict(list)
    for placed, times in cluster.applied.items():
        for _ in range(times):
            for gpu in placed.gpus:
                at = (cluster.index[placed.nodes[0]], gpu)
                if isinstance(placed.request, MigSlice):
                    mig[at].append(placed)
                elif isinstance(placed.request, Share):
                    shares[at].append(placed)
    for at, instances in mig.items():
        layout = [(PROFILES[p.request.profile], p.mig_start or 0) for p in instances if isinstance(p.request, MigSlice)]
        assert is_valid_layout(layout)
        assert len({p.request.tenant for p in instances}) == 1
        assert at not in shares
    for held in shares.values():
        assert len({p.request.tenant for p in held}) == 1
        assert sum(p.request.milli for p in held if isinstance(p.request, Share)) <= 1000
    assert ((cluster.gpu_free >= 0) & (cluster.gpu_free <= 1000)).all()
    assert ((cluster.cpu_free >= 0) & (cluster.cpu_free <= cluster.cpu_total)).all()
    assert ((cluster.memory_free >= 0) & (cluster.memory_free <= cluster.memory_total)).all()


def _rebuilt(held: list[Placement]) -> Cluster:
    """A fresh cluster holding exactly ``held``: what the released one must equal."""
    cluster = _cluster()
    for placed in held:
        apply(cluster, placed)
    return cluster


def _run(cluster: Cluster, actions: list[Place | Release], held: list[Placement]) -> None:
    for action in actions:
        if isinstance(action, Place):
            placed = POLICIES[action.policy](cluster, action.request)
            if placed is not None:
                apply(cluster, placed)
                held.append(placed)
        elif held:
            release(cluster, held.pop(action.pick % len(held)))
            assert _snapshot(cluster) == _snapshot(_rebuilt(held))
        _check_rules(cluster)


@settings(max_examples=200, deadline=None)
@given(ACTIONS)
def test_random_arrivals_and_departures_keep_every_rule(actions: list[Place | Release]) -> None:
    cluster = _cluster()
    empty = _snapshot(cluster)
    held: list[Placement] = []
    _run(cluster, actions, held)
    for placed in held:
        release(cluster, placed)
    assert _snapshot(cluster) == empty
    assert np.array_equal(cluster.share_tenant, np.full_like(cluster.share_tenant, -1))
