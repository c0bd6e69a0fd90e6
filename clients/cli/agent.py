"""``gpucloud agent``: run this machine's node agent (NVML), or a simulated fleet of them with
``--simulate N``; ``gpucloud agent inject`` queues a fault for a running simulated fleet."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import structlog
import typer

from clients.agent.backend import NoGpuFound
from clients.agent.control import ControlLineError, Fault, Injection, append, format_line
from clients.agent.fleet import DEFAULT_MAX_IN_FLIGHT, SimulatedFleet, UnknownNode
from clients.agent.journal import Journal, journal_path
from clients.agent.runner import (
    DEFAULT_INTERVAL_S,
    DEFAULT_JITTER,
    GPU_MODELS,
    NodeAgent,
    NodeIdentity,
    RegistrationRefused,
    check_timing,
)
from clients.agent.work import UnsupportedWork
from clients.cli import render
from clients.cli.context import EXIT_ERROR, EXIT_USAGE, TokenFileError, connection, is_address
from clients.errors import GpucloudError

# Where `gpucloud serve` writes the first operator token in its data directory.
OPERATOR_TOKEN_FILE = "operator.token"
# The control file a simulated fleet watches, under the data directory.
CONTROL_FILE = Path("agents") / "inject.jsonl"
# Each node's journal of the XID events its agent has not delivered, under the data directory.
JOURNAL_DIR = Path("agents") / "journal"
DEFAULT_DATA_DIR = Path("./data")

agent = typer.Typer(help="Node agents: this machine's, a simulated fleet, and faults injected into it.")

DataDir = Annotated[
    Path,
    typer.Option(
        help=f"The data directory: agents keep their journals in <data dir>/{JOURNAL_DIR}; the control file"
        f" defaults to <data dir>/{CONTROL_FILE}."
    ),
]
ControlFile = Annotated[
    Path | None, typer.Option("--control", help=f"The control file (default: <data dir>/{CONTROL_FILE}).")
]


@agent.callback(invoke_without_command=True)
def agent_run(
    ctx: typer.Context,
    simulate: Annotated[int | None, typer.Option(min=1, help="Simulate this many nodes instead.")] = None,
    interval: Annotated[float, typer.Option(help="Seconds between heartbeats (the server may set another).")] = (
        DEFAULT_INTERVAL_S
    ),
    jitter: Annotated[float, typer.Option(help="Spread of each interval, a share within [0, 1).")] = DEFAULT_JITTER,
    max_in_flight: Annotated[int, typer.Option(min=1, help="Calls in flight toward the control plane.")] = (
        DEFAULT_MAX_IN_FLIGHT
    ),
    seed: Annotated[int, typer.Option(help="Simulated: fixes every node's GPUs, figures and jitter.")] = 0,
    slow: Annotated[
        list[str] | None, typer.Option(help="Simulated: NODE=FACTOR, a node measuring FACTOR of healthy speed.")
    ] = None,
    control: ControlFile = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    node_id: Annotated[str | None, typer.Option(help="Real agent: this node's id.")] = None,
    token: Annotated[
        str | None, typer.Option(envvar="GPUCLOUD_AGENT_TOKEN", help="Real agent: the node's agent token.")
    ] = None,
    zone: Annotated[str | None, typer.Option(help="Real agent: the node's zone.")] = None,
    rack: Annotated[str | None, typer.Option(help="Real agent: the node's rack.")] = None,
    leaf_switch: Annotated[str | None, typer.Option(help="Real agent: the node's leaf switch.")] = None,
    gpu_model: Annotated[str | None, typer.Option(help=f"Real agent: {', '.join(GPU_MODELS)}.")] = None,
) -> None:
    """Run this machine's agent (NVML GPUs; needs --node-id, --token, --zone, --rack, --leaf-switch,
    --gpu-model), or with --simulate N a fleet of simulated nodes, which mints its agent tokens with
    the operator token (gpucloud --token ... agent, GPUCLOUD_TOKEN, or <data dir>/operator.token).
    Runs until Ctrl-C."""
    if ctx.invoked_subcommand is not None:
        return
    try:
        check_timing(interval, jitter)
    except ValueError as error:
        # The message starts with the parameter's name: interval_s or jitter.
        option = "--interval" if str(error).startswith("interval_s") else "--jitter"
        _usage(f"{option}: {str(error).removeprefix('interval_s ').removeprefix('jitter ')}")
    real = {
        "--node-id": node_id,
        "--zone": zone,
        "--rack": rack,
        "--leaf-switch": leaf_switch,
        "--gpu-model": gpu_model,
    }
    if simulate is not None:
        given = [name for name, value in real.items() if value is not None]
        if _typed(ctx, "token"):
            given.append("--token")
        if given:
            _usage(f"{', '.join(given)}: only for the real agent, not with --simulate")
        _run_simulated(
            ctx,
            simulate,
            interval,
            jitter,
            max_in_flight,
            seed,
            slow or [],
            control or data_dir / CONTROL_FILE,
            data_dir,
        )
        return
    simulated_only = {"--slow": bool(slow), "--control": control is not None, "--seed": _typed(ctx, "seed")}
    misplaced = [name for name, given_ in simulated_only.items() if given_]
    if misplaced:
        _usage(f"{', '.join(misplaced)}: only with --simulate")
    if not (node_id and zone and rack and leaf_switch and gpu_model and token):
        missing = [name for name, value in real.items() if not value] + ([] if token else ["--token"])
        _usage(f"{', '.join(missing)}: required for the real agent (or pass --simulate N)")
    try:
        identity = NodeIdentity(node_id, gpu_model, zone, rack, leaf_switch)
    except ValueError as error:
        _usage(f"--gpu-model {gpu_model}: {str(error).removeprefix('gpu_model: ')}")
    _run_real(ctx, identity, token, interval, jitter, max_in_flight, data_dir)


def _typed(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def _say(line: str) -> None:
    """One plain line on stdout: never wrapped, never read as markup."""
    render.console.print(line, highlight=False, markup=False, soft_wrap=True)


def _usage(message: str) -> NoReturn:
    render.fail(message)
    raise typer.Exit(EXIT_USAGE)


def _address(ctx: typer.Context) -> str:
    address = connection(ctx).address
    if not is_address(address):
        _usage(f"--addr {address!r}: give host:port, not a URL or a host alone")
    return address


def _configure_logging() -> None:
    # Log lines go to stderr, leaving stdout to the status lines; per-node chatter is debug.
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


def _run_real(
    ctx: typer.Context,
    identity: NodeIdentity,
    token: str,
    interval: float,
    jitter: float,
    max_in_flight: int,
    data_dir: Path,
) -> None:
    address = _address(ctx)
    from clients.agent.nvml import NvmlBackend

    try:
        backend = NvmlBackend()
    except NoGpuFound as error:
        render.fail(str(error))
        raise typer.Exit(EXIT_ERROR) from None
    _configure_logging()
    try:
        journal = Journal(journal_path(data_dir / JOURNAL_DIR, identity.node_id))
    except OSError as error:
        backend.close()
        render.fail(f"the agent's journal: {error}")
        raise typer.Exit(EXIT_ERROR) from None
    node_agent = NodeAgent(
        address,
        identity,
        token,
        backend,
        UnsupportedWork(),
        interval_s=interval,
        jitter=jitter,
        semaphore=asyncio.Semaphore(max_in_flight),
        journal=journal,
    )
    _say(
        f"agent of node {identity.node_id} ({len(backend.inventory())} GPUs) reporting to {address}"
        f" every {interval:g} s; Ctrl-C stops"
    )
    try:
        asyncio.run(node_agent.run())
    except RegistrationRefused as error:
        render.fail(str(error))
        raise typer.Exit(EXIT_ERROR) from None
    except KeyboardInterrupt:
        _say(f"stopped: {node_agent.stats.summary()}")
    finally:
        backend.close()


def _operator_token(ctx: typer.Context, data_dir: Path) -> str:
    try:
        credential = connection(ctx).credential()
    except TokenFileError as error:
        _usage(str(error))
    if credential:
        return credential
    path = data_dir / OPERATOR_TOKEN_FILE
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        _usage(
            "no operator token to mint the simulated nodes' agent tokens: pass it before `agent`"
            " (gpucloud --token ... agent), set GPUCLOUD_TOKEN,"
            f" or point --data-dir at the server's ({path} unreadable)"
        )


def _run_simulated(
    ctx: typer.Context,
    count: int,
    interval: float,
    jitter: float,
    max_in_flight: int,
    seed: int,
    slow: list[str],
    control: Path,
    data_dir: Path,
) -> None:
    address = _address(ctx)
    operator_token = _operator_token(ctx, data_dir)
    try:
        fleet = SimulatedFleet(
            address,
            count,
            interval_s=interval,
            jitter=jitter,
            max_in_flight=max_in_flight,
            seed=seed,
            control_path=control,
            journal_dir=data_dir / JOURNAL_DIR,
        )
    except OSError as error:
        render.fail(f"the agents' journals: {error}")
        raise typer.Exit(EXIT_ERROR) from None
    for entry in slow:
        node, _, factor = entry.partition("=")
        try:
            fleet.apply(Injection.of(node, Fault.SLOW, factor=float(factor)))
        except (ValueError, UnknownNode) as error:
            _usage(f"--slow {entry}: give NODE=FACTOR with a node of the fleet and a factor within (0, 1]: {error}")
    _configure_logging()
    _say(
        f"simulating {count} nodes against {address}, heartbeats every {interval:g} s;"
        f" inject faults with `gpucloud agent inject NODE FAULT --control {control}`; Ctrl-C stops"
    )
    try:
        asyncio.run(_simulate(fleet, operator_token))
    except GpucloudError as error:
        render.error(error, address=address)
        raise typer.Exit(EXIT_ERROR) from None
    except RegistrationRefused as error:
        render.fail(str(error))
        raise typer.Exit(EXIT_ERROR) from None
    except KeyboardInterrupt:
        _say(f"stopped: {fleet.stats.summary()}")


async def _simulate(fleet: SimulatedFleet, operator_token: str) -> None:
    """Mint the tokens, run the fleet, say once when every node has registered; a refused
    registration ends the run."""
    await fleet.mint_tokens(operator_token)
    running = asyncio.create_task(fleet.run())
    registered = asyncio.create_task(fleet.wait_registered())
    try:
        await asyncio.wait({running, registered}, return_when=asyncio.FIRST_COMPLETED)
        if registered.done():
            registered.result()
            _say(f"all {len(fleet.nodes)} nodes registered")
        await running
    finally:
        for task in (running, registered):
            task.cancel()
        await asyncio.gather(running, registered, return_exceptions=True)


# The command-line name of each field of an injection.
_LABELS = {"node_id": "NODE", "fault": "FAULT"}


@agent.command("inject")
def agent_inject(
    node: Annotated[str, typer.Argument(help="The simulated node, e.g. sim-0003.")],
    fault: Annotated[str, typer.Argument(help=f"One of: {', '.join(f.value for f in Fault)}.")],
    gpu: Annotated[int | None, typer.Option(help="GPU index 0-7 (xid, ecc, throttle, off-bus; slow, clear).")] = None,
    code: Annotated[int | None, typer.Option(help="xid: the XID code, e.g. 79 or 48.")] = None,
    seconds: Annotated[float | None, typer.Option(help="lost-heartbeat, flapping-link: how long.")] = None,
    factor: Annotated[float | None, typer.Option(help="slow: share of healthy speed, within (0, 1].")] = None,
    reason: Annotated[str | None, typer.Option(help="throttle: e.g. hw_thermal_slowdown.")] = None,
    per_sample: Annotated[int | None, typer.Option(help="ecc: corrected errors added at every sample.")] = None,
    period: Annotated[
        float | None, typer.Option(help="flapping-link: seconds down, then up (default: 2 intervals).")
    ] = (None),
    key: Annotated[int | None, typer.Option(help="partition-leak: the partition key (1-32766) kept.")] = None,
    control: ControlFile = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Queue a fault for a node of a running simulated fleet (gpucloud agent --simulate), which
    applies it within a second. Checked before it is written."""
    try:
        injection = Injection.of(
            node,
            fault,
            gpu=gpu,
            code=code,
            seconds=seconds,
            factor=factor,
            reason=reason,
            per_sample=per_sample,
            period=period,
            key=key,
        )
    except ControlLineError as error:
        label = _LABELS.get(error.field, "--" + error.field.replace("_", "-"))
        _usage(f"{label}: {error.reason}")
    path = control or data_dir / CONTROL_FILE
    try:
        append(path, injection)
    except OSError as error:
        render.fail(f"--control {path}: {error.strerror or error}")
        raise typer.Exit(EXIT_ERROR) from None
    _say(f"queued in {path}: {format_line(injection)}")
