"""ListAllocations paging: keyset page tokens, page_size rules and token validation."""

from __future__ import annotations

import asyncio

import pytest

from clients import Allocation, AsyncClient, InvalidArgumentError
from tests.conftest import RunningControlPlane, register_ready_nodes
from tests.e2e.helpers import list_all, new_tenant


async def allocate(client: AsyncClient, count: int) -> list[Allocation]:
    """Create ``count`` one-node allocations one after the other."""
    return [await client.create_allocation(gpu_model="H100", node_count=1) for _ in range(count)]


def tamper(token: str) -> str:
    """The token with one character in the middle replaced by another base64url character."""
    middle = len(token) // 2
    replacement = "A" if token[middle] != "A" else "B"
    return token[:middle] + replacement + token[middle + 1 :]


async def test_pages_cover_every_allocation_newest_first(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """page_size splits the listing into pages that together hold every allocation once, newest first."""
    await register_ready_nodes(operator, 7)
    async with await new_tenant(operator, control_plane, "acme") as tenant:
        created = await allocate(tenant, 7)
        sizes: list[int] = []
        seen: list[str] = []
        token = ""
        for _ in range(10):
            page = await tenant.list_allocations(page_size=3, page_token=token)
            sizes.append(len(page))
            seen.extend(a.allocation_id for a in page)
            token = page.next_page_token
            if not token:
                break

    assert sizes == [3, 3, 1]
    assert seen == [a.allocation_id for a in reversed(created)]


async def test_paging_while_others_insert_never_skips_or_repeats(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """Allocations inserted by a concurrent task during paging cause no skips or repeats of existing ones."""
    await register_ready_nodes(operator, 16)
    token = (await operator.create_tenant("acme")).token
    async with control_plane.client(token) as pager, control_plane.client(token) as writer:
        existing = {a.allocation_id for a in await allocate(writer, 10)}
        inserted: list[str] = []
        progressed = asyncio.Event()

        async def insert_more() -> None:
            for _ in range(6):
                inserted.append((await writer.create_allocation(gpu_model="H100", node_count=1)).allocation_id)
                progressed.set()

        inserter = asyncio.create_task(insert_more())
        seen: list[str] = []
        page_token = ""
        try:
            for _ in range(50):
                page = await pager.list_allocations(page_size=2, page_token=page_token)
                seen.extend(a.allocation_id for a in page)
                page_token = page.next_page_token
                if not page_token:
                    break
                if not inserter.done():
                    # Let the inserter commit at least one more row before the next page.
                    progressed.clear()
                    await asyncio.wait_for(progressed.wait(), timeout=10)
        finally:
            await inserter

    assert inserted, "the inserter made no rows while paging"
    assert len(seen) == len(set(seen)), "a row was returned twice"
    assert existing <= set(seen), f"skipped: {existing - set(seen)}"
    assert set(seen) <= existing | set(inserted)


async def test_page_size_zero_means_default(control_plane: RunningControlPlane, operator: AsyncClient) -> None:
    """page_size 0 returns a default-sized page: here every allocation, with no next page."""
    await register_ready_nodes(operator, 3)
    async with await new_tenant(operator, control_plane, "acme") as tenant:
        created = await allocate(tenant, 3)
        page = await tenant.list_allocations(page_size=0)

    assert {a.allocation_id for a in page} == {a.allocation_id for a in created}
    assert page.next_page_token == ""


async def test_page_size_above_maximum_is_capped(control_plane: RunningControlPlane, operator: AsyncClient) -> None:
    """A page_size above the maximum is accepted (coerced), not rejected."""
    await register_ready_nodes(operator, 2)
    async with await new_tenant(operator, control_plane, "acme") as tenant:
        created = await allocate(tenant, 2)
        page = await tenant.list_allocations(page_size=1_000_000)
    assert sorted(a.allocation_id for a in page) == sorted(a.allocation_id for a in created)
    assert page.next_page_token == ""


async def test_negative_page_size_is_invalid(operator: AsyncClient) -> None:
    """A negative page_size is INVALID_ARGUMENT naming page_size."""
    with pytest.raises(InvalidArgumentError) as caught:
        await operator.list_allocations(page_size=-1)
    assert "page_size" in caught.value.field_violations


@pytest.mark.parametrize("kind", ["tampered", "garbage", "other-filter"])
async def test_bad_page_token_is_invalid(control_plane: RunningControlPlane, operator: AsyncClient, kind: str) -> None:
    """A tampered, garbage, or re-filtered page token is INVALID_ARGUMENT naming page_token."""
    await register_ready_nodes(operator, 3)
    async with await new_tenant(operator, control_plane, "acme") as tenant:
        await allocate(tenant, 3)
        first = await tenant.list_allocations(page_size=1)
        assert first.next_page_token
        # The genuine token works.
        assert len(await tenant.list_allocations(page_size=1, page_token=first.next_page_token)) == 1
        token = {
            "tampered": tamper(first.next_page_token),
            "garbage": "this-is-not-a-page-token",
            "other-filter": first.next_page_token,  # valid, but for the listing without a filter
        }[kind]
        state = "ACTIVE" if kind == "other-filter" else None
        with pytest.raises(InvalidArgumentError) as caught:
            await tenant.list_allocations(page_size=1, state=state, page_token=token)
    assert "page_token" in caught.value.field_violations


async def test_page_token_of_another_tenant_is_invalid(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """A page token issued to one tenant is INVALID_ARGUMENT naming page_token for another tenant."""
    await register_ready_nodes(operator, 4)
    async with (
        await new_tenant(operator, control_plane, "tenant-a") as a,
        await new_tenant(operator, control_plane, "tenant-b") as b,
    ):
        await allocate(a, 2)
        await allocate(b, 2)
        token_of_a = (await a.list_allocations(page_size=1)).next_page_token
        assert token_of_a
        with pytest.raises(InvalidArgumentError) as caught:
            await b.list_allocations(page_size=1, page_token=token_of_a)
    assert "page_token" in caught.value.field_violations


async def test_operator_lists_one_tenant_with_tenant_id_filter(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """An operator's tenant_id filter pages through exactly that tenant's allocations; a token is bound to it."""
    await register_ready_nodes(operator, 5)
    async with (
        await new_tenant(operator, control_plane, "tenant-a") as a,
        await new_tenant(operator, control_plane, "tenant-b") as b,
    ):
        of_a = {x.allocation_id for x in await allocate(a, 3)}
        of_b = {x.allocation_id for x in await allocate(b, 2)}

    listed_a = await list_all(operator, tenant_id="tenant-a", page_size=2)
    listed_b = await list_all(operator, tenant_id="tenant-b", page_size=1)
    listed_all = await list_all(operator, page_size=2)
    assert [x.allocation_id for x in listed_a]
    assert {x.allocation_id for x in listed_a} == of_a
    assert len(listed_a) == 3
    assert {x.tenant_id for x in listed_a} == {"tenant-a"}
    assert {x.allocation_id for x in listed_b} == of_b
    assert sorted(x.allocation_id for x in listed_all) == sorted(of_a | of_b)

    token_for_a = (await operator.list_allocations(tenant_id="tenant-a", page_size=1)).next_page_token
    with pytest.raises(InvalidArgumentError) as caught:
        await operator.list_allocations(tenant_id="tenant-b", page_size=1, page_token=token_for_a)
    assert "page_token" in caught.value.field_violations


async def test_a_tenant_naming_itself_reads_the_same_list_with_the_same_tokens(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """For a tenant, tenant_id set to itself is the list it reads anyway: a page token from
    either form of the request continues the other, and a different filter still refuses it."""
    await register_ready_nodes(operator, 3)
    async with await new_tenant(operator, control_plane, "acme") as tenant:
        created = [a.allocation_id for a in reversed(await allocate(tenant, 3))]
        unnamed = await tenant.list_allocations(page_size=1)
        named = await tenant.list_allocations(page_size=1, tenant_id="acme", page_token=unnamed.next_page_token)
        last = await tenant.list_allocations(page_size=1, page_token=named.next_page_token)
        assert [a.allocation_id for page in (unnamed, named, last) for a in page] == created
        with pytest.raises(InvalidArgumentError) as caught:
            await tenant.list_allocations(page_size=1, state="ACTIVE", page_token=unnamed.next_page_token)
    assert "page_token" in caught.value.field_violations
