"""The placement policy a control plane is configured with decides which nodes its creates get,
through the real API, on either database."""

from __future__ import annotations

from pathlib import Path

from services.allocations.placement import Policies
from tests.conftest import register_ready_nodes, running_control_plane


async def test_a_pool_configured_best_fit_packs_the_fullest_leaf_switch(tmp_path: Path, database_url: str) -> None:
    """Ten nodes: eight under leaf-0, two under leaf-1. First fit (the A100 pool's default)
    would take node-000 and node-001; the H100 pool, configured best fit, takes the two under
    leaf-1, the fullest block that holds them, and then four inside leaf-0."""
    placement = Policies({"H100": "best-fit"})
    async with (
        running_control_plane(tmp_path / "data", database_url, placement=placement) as plane,
        plane.client() as operator,
    ):
        await register_ready_nodes(operator, 10)
        await register_ready_nodes(operator, 10, gpu_model="A100", prefix="a100", zone="zone-b")
        await operator.create_tenant("acme")
        pair = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme")
        assert pair.node_ids == ("node-008", "node-009")
        four = await operator.create_allocation(gpu_model="H100", node_count=4, tenant_id="acme")
        assert four.node_ids == ("node-000", "node-001", "node-002", "node-003")
        first_fit = await operator.create_allocation(gpu_model="A100", node_count=2, tenant_id="acme")
        assert first_fit.node_ids == ("a100-000", "a100-001")
