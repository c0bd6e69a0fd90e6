"""``gpucloud allocations ...``: allocate whole nodes or part of one node (safe to retry with the
same request id), waiting for the admission of one that queues if asked; list and show
allocations, say why one waits, and cancel them, waiting for the release if asked."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Annotated

import typer
from rich.text import Text

from clients import models
from clients.async_client import AsyncClient
from clients.cli import render
from clients.cli.context import (
    EXIT_ERROR,
    EXIT_NOT_DONE,
    EXIT_USAGE,
    call,
    call_noting,
    check_wait_timeout,
    exit_not_done,
    int32,
)
from clients.cli.listing import show_listing
from clients.cli.options import AllPages, JsonFlag, PageSize, PageToken
from clients.errors import DeadlineExceededError, UnavailableError
from clients.request_ids import new_request_id

allocations = typer.Typer(help="Allocate and release whole nodes, or part of one node.", no_args_is_help=True)

# The state of an allocation that waits in its model's queue, holding nothing.
PENDING = "PENDING"
# How often --wait reads the allocation again, and how often its spinner shows the queue position.
_POLL_S = 0.5
_REDRAW_S = 2.0
# The options that ask for part of one node rather than whole nodes.
_PART_OPTIONS = "--gpus, --mig, --share, --cpu or --memory"


def cores(text: str) -> int:
    """Parse ``--cpu``: cores, fractions of a core too (``0.5``), as the thousandths of a core the
    API carries; refused when not a finite number, or one that is not 0 but rounds to no thousandth."""
    try:
        value = float(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a number of cores") from None
    if not math.isfinite(value):
        raise typer.BadParameter(f"{text!r} is not a number of cores")
    milli = round(value * 1000)
    if milli == 0 and value != 0:
        raise typer.BadParameter(f"{text}: less than a thousandth of a core")
    # Within int32 as thousandths; the server says what a node holds.
    return int32(str(milli))


@allocations.command("create")
def allocations_create(
    ctx: typer.Context,
    gpu_model: Annotated[str, typer.Option(help="A100, H100, H200, B200 or L40S.")],
    nodes_: Annotated[
        int | None,
        typer.Option(
            "--nodes",
            parser=int32,
            show_default=False,
            help=f"Whole nodes, all or nothing (default 1; leave it out with {_PART_OPTIONS}).",
        ),
    ] = None,
    tenant: Annotated[str, typer.Option(help="Operators: the tenant to allocate for.")] = "",
    request_id: Annotated[str | None, typer.Option(help="Idempotency key; default a fresh UUIDv7.")] = None,
    priority: Annotated[
        int, typer.Option(parser=int32, help="0-1000: in its model's queue, higher is admitted first.")
    ] = 0,
    fail_if_unavailable: Annotated[
        bool, typer.Option("--fail-if-unavailable", help="Refuse rather than wait PENDING if not placeable now.")
    ] = False,
    same_block: Annotated[
        bool, typer.Option("--same-block", help="Every node under one leaf switch, or wait until one has them.")
    ] = False,
    gpus: Annotated[
        int,
        typer.Option(
            "--gpus", show_default=False, parser=int32, help="Part of one node: 1, 2, 4 or 8 whole GPUs on it."
        ),
    ] = 0,
    mig_profile: Annotated[
        str,
        typer.Option(
            "--mig",
            show_default=False,
            help="Part of one node: one MIG slice of a GPU (1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb).",
        ),
    ] = "",
    share_milli: Annotated[
        int,
        typer.Option(
            "--share",
            show_default=False,
            parser=int32,
            help="Part of one node: a soft share of one GPU, 1-999 thousandths.",
        ),
    ] = 0,
    cpu_milli: Annotated[
        int,
        typer.Option(
            "--cpu",
            metavar="<float>",
            parser=cores,
            show_default=False,
            help="Part of one node: CPU cores (0.5 too), beside the GPUs, or alone.",
        ),
    ] = 0,
    memory_mib: Annotated[
        int,
        typer.Option(
            "--memory",
            show_default=False,
            parser=int32,
            help="Part of one node: memory in MiB, beside the GPUs, or alone.",
        ),
    ] = 0,
    or_models: Annotated[
        list[str] | None,
        typer.Option(
            "--or-model",
            show_default=False,
            help="Another GPU model it accepts, after --gpu-model (repeat in order of preference).",
        ),
    ] = None,
    wait: Annotated[bool, typer.Option(help="If it waits PENDING, wait until it is admitted.")] = False,
    timeout: Annotated[
        float, typer.Option(min=0, help="With --wait: seconds to wait at most (then exit code 3).")
    ] = 300.0,
    json_out: JsonFlag = False,
) -> None:
    """Allocate whole nodes of one GPU model, or part of one node without --nodes: one of
    --gpus, --mig or --share, with --cpu and --memory beside, or these two alone; --or-model
    MODEL (repeatable) for further models it accepts, in order. The scheduler places it at once
    when there is room, else it is PENDING in the model's queue, holding nothing, until the
    scheduler admits it whole (`allocations explain ID` says why it waits; --fail-if-unavailable
    refuses instead, exit code 1). `allocations get ID` shows the GPUs a part-node allocation
    holds. With --wait, exit code 3 if it is still PENDING after --timeout; it stays
    queued. When the outcome is unknown (the server did not answer), the command names the key it
    sent: run it again with that --request-id to get the allocation the first try may have made
    instead of a second one; such a rerun says it was replayed (JSON: "replayed": true)."""
    if request_id is not None and not request_id:
        # An unset shell variable ("--request-id $RID") must not quietly become a fresh key:
        # the script's retry would then allocate twice.
        render.fail("--request-id: must not be empty; leave the option out for a fresh key")
        raise typer.Exit(EXIT_USAGE)
    part = bool(gpus or mig_profile or share_milli or cpu_milli or memory_mib)
    if part and nodes_ is not None:
        render.fail(f"--nodes: whole nodes; leave it out with {_PART_OPTIONS} (part of one node)")
        raise typer.Exit(EXIT_USAGE)
    node_count = 0 if part else 1 if nodes_ is None else nodes_
    check_wait_timeout(timeout)
    key = request_id or new_request_id()
    outcome_unknown = False
    created: models.CreatedAllocation | None = None

    async def create(client: AsyncClient) -> models.CreatedAllocation:
        nonlocal outcome_unknown, created
        try:
            created = await client.create_allocation(
                gpu_model=gpu_model,
                node_count=node_count,
                tenant_id=tenant,
                request_id=key,
                priority=priority,
                fail_if_unavailable=fail_if_unavailable,
                same_block=same_block,
                gpus=gpus,
                mig_profile=mig_profile,
                share_milli=share_milli,
                cpu_milli=cpu_milli,
                memory_mib=memory_mib,
                other_models=or_models or (),
            )
        except (UnavailableError, DeadlineExceededError):
            outcome_unknown = True
            raise
        if not (wait and created.state == PENDING):
            return created
        render.errors.print(Text(f"{created.allocation_id} is {_queued(created)}; waiting for its admission"))
        return _as_created(await _wait_admitted(client, created, timeout), created.replayed)

    def note() -> str | None:
        if created is not None:
            # The wait failed, not the create: the allocation stands, queued or admitted since.
            return (
                f"{created.allocation_id} was created, queued; read it with: gpucloud allocations get"
                f" {created.allocation_id}; {_explain_hint(created)}"
            )
        if not outcome_unknown:
            return None
        return f"the outcome is unknown; to retry safely run the same command with --request-id {key}"

    allocation = call_noting(ctx, create, note)
    title = "Allocated" if allocation.state != PENDING else "Queued"
    _show(allocation, json_out, title)
    if allocation.replayed and not json_out:
        render.errors.print(
            Text(f"replayed: an earlier call with --request-id {key} made this allocation; nothing new was allocated"),
            soft_wrap=True,
        )
    _say_what_it_waits_for(allocation, waited=wait, timeout=timeout, json_out=json_out)


def _show(allocation: models.Allocation, json_out: bool, title: str) -> None:
    """One allocation: as JSON, or its row and, for a part-node one, the GPUs it holds."""
    if json_out:
        render.print_json(allocation)
    else:
        render.console.print(render.allocation_detail(allocation, title))


async def _wait_admitted(client: AsyncClient, allocation: models.Allocation, timeout: float) -> models.Allocation:
    """Wait up to ``timeout`` seconds for ``allocation`` to leave PENDING, with a spinner that
    shows its place in the queue as it moves up; the last read."""
    deadline = time.monotonic() + timeout
    with render.console.status(_waiting(allocation)) as spinner:
        while True:
            # In slices, so that the spinner shows the position as the queue moves.
            left = max(0.0, deadline - time.monotonic())
            allocation = await client.wait_admitted(
                allocation.allocation_id, timeout=min(left, _REDRAW_S), poll_s=_POLL_S
            )
            if allocation.state != PENDING or time.monotonic() >= deadline:
                return allocation
            spinner.update(_waiting(allocation))


def _waiting(allocation: models.Allocation) -> str:
    return f"waiting for admission: {_queued(allocation)}..."


def _queued(allocation: models.Allocation) -> str:
    """``PENDING at position 3 in the H100 queue``; without the position where the answer has
    none (0: a server that does not say)."""
    at = f" at position {allocation.queue_position}" if allocation.queue_position else ""
    return f"PENDING{at} in the {allocation.gpu_model} queue"


def _explain_hint(allocation: models.Allocation) -> str:
    return f"see why with: gpucloud allocations explain {allocation.allocation_id}"


def _as_created(allocation: models.Allocation, replayed: bool) -> models.CreatedAllocation:
    """``allocation`` read again after its create, still saying whether the create was replayed."""
    fields = {field.name: getattr(allocation, field.name) for field in dataclasses.fields(allocation)}
    return models.CreatedAllocation(**fields, replayed=replayed)


def _say_what_it_waits_for(allocation: models.Allocation, *, waited: bool, timeout: float, json_out: bool) -> None:
    """Under a create's output, on stderr: that it is still queued and how to see why (exit 3 when
    --wait ran out of time), or that it was cancelled while it waited (exit 1)."""
    if allocation.state in ("CANCELLING", "CANCELLED") and waited:
        # Admitted and cancelled between two reads, or cancelled before its admission.
        held = "after its admission" if allocation.admit_time is not None else "while it waited; nothing was allocated"
        render.errors.print(Text(f"{allocation.allocation_id} was cancelled {held}"))
        raise typer.Exit(EXIT_ERROR)
    if allocation.state != PENDING:
        return
    if waited:
        render.errors.print(
            Text(
                f"still {_queued(allocation)} after {timeout:g} s; it stays queued (cancel it with:"
                f" gpucloud allocations cancel {allocation.allocation_id}); {_explain_hint(allocation)}"
            ),
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_NOT_DONE)
    if not json_out:
        until = "the scheduler places it (--wait waits)" if allocation.part_node else "it is admitted whole"
        render.errors.print(
            Text(f"{_queued(allocation)}, holding nothing until {until}; {_explain_hint(allocation)}"),
            soft_wrap=True,
        )


@allocations.command("list")
def allocations_list(
    ctx: typer.Context,
    tenant: Annotated[str, typer.Option(help="Operators: only this tenant.")] = "",
    state: Annotated[str | None, typer.Option(help="PENDING, ACTIVE, CANCELLING or CANCELLED.")] = None,
    page_size: PageSize = 0,
    page_token: PageToken = "",
    all_pages: AllPages = False,
    json_out: JsonFlag = False,
) -> None:
    """List allocations, newest first."""
    show_listing(
        ctx,
        lambda client, token: client.list_allocations(
            tenant_id=tenant, state=state, page_size=page_size, page_token=token
        ),
        page_token=page_token,
        all_pages=all_pages,
        json_out=json_out,
        as_table=render.allocations_table,
    )


@allocations.command("get")
def allocations_get(ctx: typer.Context, allocation_id: str, json_out: JsonFlag = False) -> None:
    """Show one allocation; for part of one node, the GPUs it holds there."""
    _show(call(ctx, lambda c: c.get_allocation(allocation_id)), json_out, "Allocation")


@allocations.command("explain")
def allocations_explain(ctx: typer.Context, allocation_id: str, json_out: JsonFlag = False) -> None:
    """Why a PENDING allocation waits, most binding reason first, with its place in its model's
    queue; for an allocation in any other state, that it is not pending."""
    explained = call(ctx, lambda c: c.explain_allocation(allocation_id))
    if json_out:
        render.print_json(explained)
        return
    render.console.print(render.explanation(explained))


@allocations.command("cancel")
def allocations_cancel(
    ctx: typer.Context,
    allocation_id: str,
    wait: Annotated[bool, typer.Option(help="Wait until every node is released.")] = False,
    timeout: Annotated[
        float, typer.Option(min=0, help="With --wait: seconds to wait at most (then exit code 3).")
    ] = 600.0,
    json_out: JsonFlag = False,
) -> None:
    """Cancel an allocation; prints the operation that tracks the release. With --wait, exit
    code 3 if the nodes are not released within --timeout, as `operations wait`."""
    check_wait_timeout(timeout)
    accepted: models.Operation | None = None

    async def run(client: AsyncClient) -> models.Operation:
        nonlocal accepted
        operation = accepted = await client.cancel_allocation(allocation_id)
        if wait and not operation.done:
            # Named before the wait: the cancel stands whatever becomes of the wait, and this
            # name is how to follow it (on stderr, so that --json output stays one document).
            render.errors.print(
                Text(f"cancel accepted: {operation.name}; waiting for {operation.nodes_total} node(s) to be released")
            )
            with render.console.status(f"releasing {operation.nodes_total} node(s)..."):
                operation = await client.wait_operation(operation.name, timeout=timeout)
        return operation

    def cancel_accepted() -> str | None:
        # The wait failed, not the cancel: say so under the error, or the user may cancel again.
        if accepted is None:
            return None
        return f"the cancel was accepted; wait for it with: gpucloud operations wait {accepted.name}"

    operation = call_noting(ctx, run, cancel_accepted)
    render.show_one(operation, json_out, render.operations_table([operation], "Cancel"))
    if wait and not operation.done:
        exit_not_done(operation, timeout)
