"""``gpucloud fleet fragmentation|defrag``: each pool's free capacity and how it lies across leaf
switches, as tables, JSON or a PNG picture; and the plan of moves that would free whole leaf
switches, made only on an operator's go (``defrag --apply``, which shows the plan and asks)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from clients import models
from clients.cli import render
from clients.cli.context import EXIT_USAGE, call, int32, refuse_unwritable_path
from clients.cli.options import JsonFlag

if TYPE_CHECKING:
    # For the annotations only: matplotlib is imported when a picture is drawn.
    from matplotlib.axes import Axes

fleet = typer.Typer(
    help="The fleet's free capacity across leaf switches, and plans to defragment it (operator).",
    no_args_is_help=True,
)

# The picture's colour of each kind of node (render.capacity_kind), and its legend's words.
CAPACITY_COLOURS: dict[render.CapacityKind, tuple[str, str]] = {
    "free": ("#2ca02c", "free"),
    "held": ("#1f77b4", "held by an allocation"),
    "shared": ("#9467bd", "shared by part-node allocations"),
    "stranded": ("#ff7f0e", "stranded (READY, cordoned or unreachable)"),
    "other": ("#b0b0b0", "other state (burn-in, scrub, out of service)"),
}
# Node ids are written in their cells only while the cells are wide enough to hold them.
_LABELLED_COLUMNS = 16
# Agg refuses a canvas over 2**16 pixels a side: a picture of a huge pool is drawn smaller.
_MOST_INCHES = 300.0

NOT_WITHOUT_PLAN = (
    "fleet defrag: say what to do: --plan to see the moves that would free whole leaf switches and what"
    " they cost each allocation, or --apply to see them and, on your go, make them"
)


def draw_capacity(pools: list[models.PoolFragmentation], path: Path) -> None:
    """Draw each pool's free capacity by node into a PNG: a row per leaf switch, a cell per node
    in fabric order, coloured free, held, stranded or other state, under a legend; one panel per
    pool, its model in the title (matplotlib's Agg canvas, no display needed)."""
    # Imported here: matplotlib costs about a second to import, and only --png needs it.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    layouts = [(pool, list(render.by_leaf_switch(pool).items())) for pool in pools]
    widest = max((len(nodes) for _, switches in layouts for _, nodes in switches), default=1)
    rows = sum(max(len(switches), 1) for _, switches in layouts)
    # Cells wide enough for a node id where there are few, narrow where there are too many to label.
    cell = 0.75 if widest <= _LABELLED_COLUMNS else 0.25
    width = min(max(7.0, cell * widest + 2.5), _MOST_INCHES)
    height = min(1.2 + 1.1 * max(len(layouts), 1) + 0.45 * rows, _MOST_INCHES)
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    if not layouts:
        axes = figure.add_subplot()
        axes.set_axis_off()
        axes.text(0.5, 0.5, "no nodes in service", ha="center", va="center", transform=axes.transAxes)
    else:
        panels = figure.subplots(len(layouts), 1, squeeze=False, height_ratios=[max(len(s), 1) for _, s in layouts])
        for (pool, switches), axes in zip(layouts, panels[:, 0], strict=True):
            _draw_pool(axes, pool, switches, widest)
    counts = {kind: 0 for kind in CAPACITY_COLOURS}
    for pool in pools:
        for node in pool.node_capacity:
            counts[render.capacity_kind(node)] += 1
    legend = [Patch(color=c, label=f"{words} ({counts[kind]})") for kind, (c, words) in CAPACITY_COLOURS.items()]
    figure.legend(handles=legend, loc="outside lower center", ncols=2, fontsize="small", frameon=False)
    figure.savefig(path, format="png", dpi=100)


def _draw_pool(
    axes: Axes, pool: models.PoolFragmentation, switches: list[tuple[str, list[models.NodeCapacity]]], widest: int
) -> None:
    """One pool's panel: leaf switches top to bottom in fabric order, their nodes left to right."""
    from matplotlib.patches import Rectangle

    labelled = widest <= _LABELLED_COLUMNS
    for row, (_, nodes) in enumerate(switches):
        for column, node in enumerate(nodes):
            colour, _ = CAPACITY_COLOURS[render.capacity_kind(node)]
            axes.add_patch(Rectangle((column, row), 0.92, 0.85, facecolor=colour, edgecolor="none"))
            if labelled:
                axes.text(column + 0.46, row + 0.425, node.node_id, ha="center", va="center", fontsize=6, clip_on=True)
    axes.set_xlim(-0.1, widest)
    axes.set_ylim(max(len(switches), 1), -0.15)  # the first switch on top
    labels = [
        f"{leaf or '-'}\n{sum(render.capacity_kind(n) == 'free' for n in nodes)} of {len(nodes)} free"
        for leaf, nodes in switches
    ]
    axes.set_yticks([row + 0.425 for row in range(len(switches))], labels, fontsize="small")
    axes.set_xticks([])
    axes.tick_params(axis="y", length=0)
    for side in axes.spines.values():
        side.set_visible(False)
    axes.set_title(
        f"{pool.gpu_model}: free capacity by node ({pool.free_nodes} of {pool.nodes} nodes free,"
        f" largest free block {pool.largest_free_block}, {pool.stranded_gpus} GPUs stranded)",
        loc="left",
        fontsize="medium",
    )


@fleet.command("fragmentation")
def fleet_fragmentation(
    ctx: typer.Context,
    json_out: JsonFlag = False,
    png: Annotated[
        Path | None, typer.Option("--png", help="Also draw each pool's free capacity by node into this PNG.")
    ] = None,
) -> None:
    """Each pool's free capacity: nodes in service, free nodes and GPUs, the largest free block (the
    most free nodes under one leaf switch: the largest same-block gang that fits now) and the GPUs
    stranded on READY nodes cordoned or unreachable; then each pool's leaf switches."""
    if png is not None:
        refuse_unwritable_path("--png", png)
    pools = call(ctx, lambda client: client.get_fragmentation())
    if png is not None:
        try:
            draw_capacity(pools, png)
        except OSError as error:
            render.fail(f"--png {png}: {error.strerror or error}")
            raise typer.Exit(EXIT_USAGE) from None
    if json_out:
        render.print_json(pools)
        return
    render.console.print(render.fragmentation_table(pools))
    for pool in pools:
        render.console.print(render.leaf_switches_table(pool))
    if png is not None:
        render.console.print(Text(f"picture written to {png}"), soft_wrap=True)


@fleet.command("defrag")
def fleet_defrag(
    ctx: typer.Context,
    plan: Annotated[bool, typer.Option("--plan", help="Plan only: print the moves; nothing moves.")] = False,
    apply: Annotated[
        bool, typer.Option("--apply", help="Plan, print the moves, and make them on your go (or --yes).")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="With --apply: make the moves without asking.")] = False,
    gpu_model: Annotated[str | None, typer.Option("--gpu-model", help="The pool to plan for: H100, A100, ...")] = None,
    blocks: Annotated[int, typer.Option(parser=int32, help="Leaf switches to free whole.")] = 1,
    max_allocation_nodes: Annotated[
        int, typer.Option(parser=int32, help="Move only allocations of at most this many nodes.")
    ] = 4,
    json_out: JsonFlag = False,
) -> None:
    """Plan the fewest moves of small allocations to free nodes elsewhere that would free whole
    leaf switches of a pool, for same-block gangs: the summary, the moves and what they cost each
    allocation (every move checkpoints and restarts the work on the node). --plan only prints
    them; --apply prints them and, once you say yes, makes them, all or none."""
    if plan == apply:
        render.fail(NOT_WITHOUT_PLAN if not plan else "fleet defrag: --plan or --apply, not both")
        raise typer.Exit(EXIT_USAGE)
    if not gpu_model:
        render.fail("--gpu-model: give the pool to plan for, as in --gpu-model H100")
        raise typer.Exit(EXIT_USAGE)
    if apply and json_out and not yes:
        render.fail("--json with --apply needs --yes: a JSON reader cannot answer the question")
        raise typer.Exit(EXIT_USAGE)
    model = gpu_model
    made = call(
        ctx,
        lambda client: client.plan_defragmentation(model, blocks=blocks, max_allocation_nodes=max_allocation_nodes),
    )
    if json_out and not apply:
        render.print_json(made)
        return
    if not json_out:
        render.console.print(Text(made.summary), soft_wrap=True)
        if made.moves:
            render.console.print(render.defrag_moves_table(made.moves))
            render.console.print(render.defrag_costs_table(made.costs))
    if not apply or not made.moves:
        if json_out:
            render.print_json({"plan": made, "applied": None})
        else:
            render.console.print(Text("a plan only: nothing has moved"), style="dim")
        return
    if not yes and not _go(made):
        render.console.print(Text("nothing has moved"), style="dim")
        raise typer.Exit(1)
    moves = made.moves
    done = call(ctx, lambda client: client.apply_defragmentation(moves))
    if json_out:
        render.print_json({"plan": made, "applied": done})
        return
    earlier = len(done.moves) - done.made
    render.console.print(
        Text(
            f"moved {len(done.moves)} node(s) of {len({m.allocation_id for m in done.moves})} allocation(s)"
            + (f" ({earlier} of them by an earlier call)" if earlier else "")
            + f"; once the nodes left finish their scrub, leaf switch(es) {', '.join(made.freed_leaf_switches)}"
            " will be wholly free"
        ),
        soft_wrap=True,
    )


def _go(made: models.DefragmentationPlan) -> bool:
    """Ask the operator whether to make the plan's moves."""
    allocations = len({m.allocation_id for m in made.moves})
    return typer.confirm(
        f"Move {len(made.moves)} node(s) of {allocations} allocation(s)? Each move checkpoints and restarts"
        " the work on its node",
        default=False,
    )
