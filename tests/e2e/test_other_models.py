"""Allocations that accept more than one GPU model, through the real server: placed by the
scheduling cycle on the first model with room, in preference order, waiting with every
model's reasons when none has, and refused field by field when malformed."""

from __future__ import annotations

import pytest

from clients import AsyncClient, InvalidArgumentError, ResourceExhaustedError
from clients.models import Allocation
from tests.conftest import RunningControlPlane, register_ready_nodes


async def _settled(client: AsyncClient, allocation_id: str) -> Allocation:
    """The allocation once a scheduling cycle has admitted it."""
    admitted = await client.wait_admitted(allocation_id, timeout=15, poll_s=0.02)
    assert admitted.state == "ACTIVE"
    return admitted


async def test_it_goes_to_the_first_model_with_room_in_preference_order(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    await register_ready_nodes(operator, 1, gpu_model="H100", prefix="h100")
    await register_ready_nodes(operator, 2, gpu_model="H200", prefix="h200")
    await register_ready_nodes(operator, 2, gpu_model="A100", prefix="a100")
    await operator.create_tenant("acme")
    # Both A100 and H200 have room: the order asked decides.
    created = await operator.create_allocation(
        gpu_model="H100", node_count=2, tenant_id="acme", other_models=["H200", "A100"]
    )
    assert (created.state, created.gpu_model) == ("ACTIVE", "H200"), "placed in the pass that took it in"
    admitted = await _settled(operator, created.allocation_id)
    assert admitted.gpu_model == "H200"
    assert admitted.other_models == ("H100", "A100"), "the models it accepts, its own first"
    assert {n[:4] for n in admitted.node_ids} == {"h200"}
    events = (await operator.list_usage_events(tenant_id="acme")).items
    assert {e.gpu_model for e in events} == {"H200"}, "billed as the model it got"

    # Its first choice fits now: it is taken.
    first = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme", other_models=["A100"])
    assert (await _settled(operator, first.allocation_id)).gpu_model == "H100"
    # Part of a node may go to another model too.
    part = await operator.create_allocation(gpu_model="H100", gpus=2, tenant_id="acme", other_models=["A100"])
    settled = await _settled(operator, part.allocation_id)
    assert (settled.gpu_model, settled.node_ids[0][:4]) == ("A100", "a100")


async def test_when_no_model_has_room_it_waits_with_each_models_reason(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    await register_ready_nodes(operator, 2, gpu_model="H100", prefix="h100")
    await register_ready_nodes(operator, 2, gpu_model="H200", prefix="h200")
    await operator.create_tenant("acme")
    for model in ("H100", "H200"):
        assert (await operator.create_allocation(gpu_model=model, node_count=1, tenant_id="acme")).state == "ACTIVE"
    waiting = await operator.create_allocation(gpu_model="H100", node_count=2, tenant_id="acme", other_models=["H200"])
    reasons = (await operator.explain_allocation(waiting.allocation_id)).reasons
    assert [(r.kind, r.figures["free"]) for r in reasons] == [("WAITING_FOR_CAPACITY", 1)] * 2
    assert ["H100" in reasons[0].message, "H200" in reasons[1].message] == [True, True]
    with pytest.raises(ResourceExhaustedError):
        await operator.create_allocation(
            gpu_model="H100", node_count=2, tenant_id="acme", other_models=["H200"], fail_if_unavailable=True
        )
    # It holds the H100 queue, its first choice: a one-node request waits behind it there. In
    # the H200 queue it is a guest and holds nothing: a one-node request goes ahead of it.
    h100 = await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme")
    assert h100.state == "PENDING"
    assert [r.kind for r in (await operator.explain_allocation(h100.allocation_id)).reasons] == ["BEHIND_GANGS"]
    h200 = await operator.create_allocation(gpu_model="H200", node_count=1, tenant_id="acme")
    assert (await _settled(operator, h200.allocation_id)).gpu_model == "H200"


@pytest.mark.parametrize(
    ("others", "field"),
    [
        (["H100"], "other_models[0]"),
        (["H200", "H200"], "other_models[1]"),
        (["H200", "A100", "B200", "L40S", "H200"], "other_models"),
    ],
)
async def test_a_bad_list_of_models_names_its_field(
    control_plane: RunningControlPlane, operator: AsyncClient, others: list[str], field: str
) -> None:
    await operator.create_tenant("acme")
    with pytest.raises(InvalidArgumentError) as refused:
        await operator.create_allocation(gpu_model="H100", node_count=1, tenant_id="acme", other_models=others)
    assert field in refused.value.field_violations


async def test_a_mig_slice_no_node_of_its_first_model_holds_may_go_to_another(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    await register_ready_nodes(operator, 1, gpu_model="H100", prefix="h100")
    await operator.create_tenant("acme")
    with pytest.raises(InvalidArgumentError) as refused:
        await operator.create_allocation(gpu_model="L40S", mig_profile="1g.10gb", tenant_id="acme")
    assert "mig_profile" in refused.value.field_violations
    created = await operator.create_allocation(
        gpu_model="L40S", mig_profile="1g.10gb", tenant_id="acme", other_models=["H100"]
    )
    assert (await _settled(operator, created.allocation_id)).gpu_model == "H100"
