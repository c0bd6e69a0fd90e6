"""Requests refuse what no cluster could satisfy, each with its own error."""

from __future__ import annotations

import pytest

from scheduling import CpuOnly, Gpus, InvalidRequest, MigSlice, Share, UnknownProfile, WholeNodes
from scheduling.requests import gpu_milli


@pytest.mark.parametrize("count", [0, 3, 5, 16])
def test_gpus_on_one_node_come_in_1_2_4_8(count: int) -> None:
    with pytest.raises(InvalidRequest, match="count must be one of"):
        Gpus(tenant="t", count=count)


@pytest.mark.parametrize("milli", [0, 1000, -5])
def test_a_share_is_less_than_a_whole_gpu(milli: int) -> None:
    with pytest.raises(InvalidRequest, match="1-999 thousandths"):
        Share(tenant="t", milli=milli)


def test_a_mig_slice_names_a_known_profile() -> None:
    with pytest.raises(UnknownProfile, match=r"9g\.90gb"):
        MigSlice(tenant="t", profile="9g.90gb")


def test_whole_nodes_are_at_least_one() -> None:
    with pytest.raises(InvalidRequest, match="count must be positive"):
        WholeNodes(tenant="t", count=0)


def test_a_request_has_a_tenant() -> None:
    with pytest.raises(InvalidRequest, match="needs a tenant"):
        CpuOnly(tenant="", cpu_milli=1000)


def test_cpu_and_memory_are_not_negative() -> None:
    with pytest.raises(InvalidRequest, match="negative"):
        Share(tenant="t", milli=100, memory_mib=-1)


def test_the_gpu_thousandths_each_kind_takes() -> None:
    taken = [
        gpu_milli(r)
        for r in (
            Gpus(tenant="t", count=4),
            Share(tenant="t", milli=250),
            MigSlice(tenant="t", profile="3g.40gb"),
            CpuOnly(tenant="t", cpu_milli=500),
        )
    ]
    assert taken == [4000, 250, 500, 0]


def test_models_restrict_where_a_request_goes() -> None:
    request = Gpus(tenant="t", count=1, models=("H100", "A100"))
    assert [request.accepts(m) for m in ("H100", "A100", "L40S")] == [True, True, False]
    assert Gpus(tenant="t", count=1).accepts("L40S")
