"""Entry point of the ``gpucloud`` command."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from clients.cli import agent as agent_verbs
from clients.cli import allocations as allocations_verbs
from clients.cli import audit as audit_verbs
from clients.cli import billing as billing_verbs
from clients.cli import exercises as exercises_verbs
from clients.cli import fleet as fleet_verbs
from clients.cli import health as health_verbs
from clients.cli import metrics as metrics_verbs
from clients.cli import nodes as nodes_verbs
from clients.cli import operations as operations_verbs
from clients.cli import tenants as tenants_verbs
from clients.cli import tokens as tokens_verbs
from clients.cli.context import DEFAULT_ADDR, Connection
from clients.cli.times import INSTANT_FORMS
from services.log_config import LogFormat, LogLevel

# serve's bounds on its durations: a scrub simulated for longer than a day, or a drain that
# keeps a stopping server for over an hour, is a typo, not a setting.
MAX_SCRUB_SECONDS = 86_400.0
MAX_GRACE_SECONDS = 3_600.0

app = typer.Typer(
    help="gpucloud: the control plane of a GPU cloud, and a client for it.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(tenants_verbs.tenants, name="tenants")
app.add_typer(tokens_verbs.tokens, name="tokens")
app.add_typer(nodes_verbs.nodes, name="nodes")
app.add_typer(fleet_verbs.fleet, name="fleet")
app.add_typer(health_verbs.health, name="health")
app.add_typer(audit_verbs.audit, name="audit")
app.add_typer(allocations_verbs.allocations, name="allocations")
app.add_typer(operations_verbs.operations, name="operations")
app.add_typer(billing_verbs.usage, name="usage")
app.add_typer(metrics_verbs.metrics, name="metrics")
app.add_typer(agent_verbs.agent, name="agent")
app.add_typer(exercises_verbs.exercises, name="exercises")


@app.callback()
def connect(
    ctx: typer.Context,
    addr: Annotated[str, typer.Option(envvar="GPUCLOUD_ADDR", help="Control plane address.")] = DEFAULT_ADDR,
    token: Annotated[str | None, typer.Option(help="Bearer token; default: $GPUCLOUD_TOKEN.")] = None,
    token_file: Annotated[Path | None, typer.Option(help="Read the bearer token from this file.")] = None,
) -> None:
    """Connection settings for the client verbs."""
    if token and token_file is not None:
        raise typer.BadParameter("pass --token or --token-file, not both", param_hint="--token-file")
    # Either flag wins over GPUCLOUD_TOKEN: a token file named on the command line must not
    # silently lose to an operator token exported earlier in the shell.
    if token is None and token_file is None:
        token = os.environ.get("GPUCLOUD_TOKEN")
    ctx.obj = Connection(addr, token, token_file)


@app.command()
def serve(
    data_dir: Annotated[Path, typer.Option(help="SQLite database, operator token.")] = Path("./data"),
    listen: Annotated[str, typer.Option(help="host:port to serve gRPC on.")] = DEFAULT_ADDR,
    database_url: Annotated[
        str | None,
        typer.Option(envvar="GPUCLOUD_DATABASE_URL", help="postgresql+asyncpg://... (default: SQLite in data dir)"),
    ] = None,
    scrub_seconds: Annotated[
        float, typer.Option(help=f"Simulated scrub time of a released node, 0-{MAX_SCRUB_SECONDS:g} s (a day).")
    ] = 1.0,
    rates: Annotated[Path | None, typer.Option(help="Rate card JSON to price invoices (default: built-in).")] = None,
    grace_seconds: Annotated[
        float,
        typer.Option(
            help=f"On SIGTERM or Ctrl-C, how long calls in flight get to finish, 0-{MAX_GRACE_SECONDS:g} s (an hour)."
        ),
    ] = 2.0,
    tenant_max_calls: Annotated[
        int | None, typer.Option(help="Calls one tenant may have in flight; beyond, RESOURCE_EXHAUSTED.")
    ] = None,
    tenant_max_waits: Annotated[int | None, typer.Option(help="WaitOperation calls one tenant may have in flight.")] = (
        None
    ),
    tenant_max_heavy_calls: Annotated[
        int | None, typer.Option(help="Invoice and metrics queries one tenant may have in flight.")
    ] = None,
    agent_max_calls: Annotated[int | None, typer.Option(help="Calls one node's agent may have in flight.")] = None,
    max_calls_in_flight: Annotated[
        int | None, typer.Option(help="Calls in flight from every caller together (operators and agents: +25%).")
    ] = None,
    metrics_max_series_per_node: Annotated[int | None, typer.Option(help="Metrics series one node may hold.")] = None,
    metrics_max_series: Annotated[int | None, typer.Option(help="Metrics series the whole store may hold.")] = None,
    heartbeat_interval: Annotated[float | None, typer.Option(help="Seconds between agents' heartbeats.")] = None,
    missed_beats: Annotated[
        int | None, typer.Option(help="Heartbeats a node may miss before it is marked unreachable (3 or more).")
    ] = None,
    burn_in_timeout: Annotated[float | None, typer.Option(help="Seconds a burn-in may take before it fails.")] = None,
    scrub_timeout: Annotated[float | None, typer.Option(help="Seconds a scrub may take before it fails.")] = None,
    lease_duration: Annotated[
        float | None, typer.Option(help="Seconds of the reconciler's lease: the most a failover takes.")
    ] = None,
    health_removals_per_hour: Annotated[
        int | None, typer.Option(help="Nodes of a pool the health controller may remove in an hour (default 3).")
    ] = None,
    health_removal_share: Annotated[
        float | None,
        typer.Option(help="...or this share of the pool, 0-1, when larger (default 0.10); past both it stops."),
    ] = None,
    health_removals_per_leaf: Annotated[
        int | None, typer.Option(help="Nodes under one leaf switch the health controller may remove an hour (3).")
    ] = None,
    slow_gpu_k: Annotated[
        float | None, typer.Option(help="Spreads below its peers' median that make a GPU slow (default 5).")
    ] = None,
    placement: Annotated[
        list[str] | None,
        typer.Option(
            help="MODEL=POLICY: the placement policy of a pool's creates (first-fit, best-fit, worst-fit, fgd,"
            " fgd-refined; default first-fit). Repeat for each model."
        ),
    ] = None,
    log_level: Annotated[LogLevel, typer.Option(case_sensitive=False, help="Least severe level logged.")] = (
        LogLevel.INFO
    ),
    log_format: Annotated[
        LogFormat, typer.Option(case_sensitive=False, help="auto: console on a terminal, else JSON lines.")
    ] = LogFormat.AUTO,
) -> None:
    """Run a control plane until interrupted. The bounds on calls and series default to those in
    docs/api.md ("Concurrent calls", "Metrics"); one under 1 is refused at start."""
    for option, seconds, most in (
        ("--scrub-seconds", scrub_seconds, MAX_SCRUB_SECONDS),
        ("--grace-seconds", grace_seconds, MAX_GRACE_SECONDS),
    ):
        # Checked here rather than by a declared range, so that nan and inf (a ValueError and
        # an OverflowError deep in the server) get the same one line as a negative value.
        if not (math.isfinite(seconds) and 0 <= seconds <= most):
            typer.echo(f"error: {option} {seconds:g}: must be 0-{most:g} seconds", err=True)
            raise typer.Exit(2)
    from accounting import InputError
    from clients.cli.serve import serve as run_server
    from services.allocations.placement import Policies, UnknownPolicy
    from services.fleet.config import FleetConfig, UnusableFleetConfig
    from services.health.config import HealthConfig, UnusableHealthConfig
    from services.server import ServerConfig, StartError

    timings: dict[str, Any] = {
        "heartbeat_interval_s": heartbeat_interval,
        "missed_beats": missed_beats,
        "burn_in_timeout_s": burn_in_timeout,
        "scrub_timeout_s": scrub_timeout,
        "lease_duration_s": lease_duration,
    }
    health_settings: dict[str, Any] = {
        "removals_per_hour": health_removals_per_hour,
        "removal_share_per_hour": health_removal_share,
        "removals_per_leaf_hour": health_removals_per_leaf,
        "slow_gpu_k": slow_gpu_k,
    }
    try:
        fleet = FleetConfig(**{name: value for name, value in timings.items() if value is not None})
        health = HealthConfig(**{name: value for name, value in health_settings.items() if value is not None})
        policies = Policies(_placement_option(placement or []))
    except (UnusableFleetConfig, UnusableHealthConfig, UnknownPolicy) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None

    bounds: dict[str, Any] = {
        "tenant_max_calls": tenant_max_calls,
        "tenant_max_waits": tenant_max_waits,
        "tenant_max_heavy_calls": tenant_max_heavy_calls,
        "agent_max_calls": agent_max_calls,
        "max_calls_in_flight": max_calls_in_flight,
        "metrics_max_series_per_node": metrics_max_series_per_node,
        "metrics_max_series": metrics_max_series,
    }
    config = ServerConfig(
        data_dir=data_dir,
        listen=listen,
        database_url=database_url,
        scrub_seconds=scrub_seconds,
        rates_path=rates,
        grace_seconds=grace_seconds,
        fleet=fleet,
        health=health,
        placement=policies,
    )
    # Only the bounds given: the others keep the server's defaults, stated once, in ServerConfig.
    config = dataclasses.replace(config, **{name: bound for name, bound in bounds.items() if bound is not None})
    try:
        asyncio.run(run_server(config, log_level=log_level, log_format=log_format))
    except InputError as error:  # a bad --rates file: say where, not a traceback
        typer.echo(f"error: --rates: {error}", err=True)
        raise typer.Exit(2) from None
    except StartError as error:  # port taken, database unreachable: one line, not a traceback
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None


def _placement_option(given: list[str]) -> dict[str, str]:
    """``--placement`` values as {model: policy}; a value without ``=`` is UnknownPolicy's kind of mistake."""
    from services.allocations.placement import UnknownPolicy

    chosen: dict[str, str] = {}
    for value in given:
        model, sep, policy = value.partition("=")
        if not sep or not model or not policy:
            raise UnknownPolicy(f"--placement {value!r}: give MODEL=POLICY, as in H100=best-fit")
        chosen[model] = policy
    return chosen


@app.command()
def demo(
    data_dir: Annotated[
        Path | None,
        typer.Option(help="Keep the demo's data here (a new or empty directory) instead of a temp dir."),
    ] = None,
) -> None:
    """Start an embedded control plane on a throwaway data directory and walk through it: a
    fleet, a tenant, an allocation and its retry, a capacity refusal, metrics, the cancel and
    its release, the invoice."""
    from clients.cli.demo import run_demo
    from services.server import StartError

    if data_dir is not None and data_dir.exists() and (not data_dir.is_dir() or any(data_dir.iterdir())):
        # The demo registers its own fleet and tenant: on an earlier run's data it would fail
        # halfway, on a server's it would change a real fleet.
        typer.echo(f"error: --data-dir {data_dir}: must be a new or empty directory", err=True)
        raise typer.Exit(2)
    try:
        asyncio.run(run_demo(data_dir))
    except StartError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None


@app.command()
def invoice(
    ctx: typer.Context,
    period: Annotated[str | None, typer.Option(help="Online: the billing period YYYY-MM (UTC) to ask for.")] = None,
    tenant: Annotated[str, typer.Option(help="Online: whose invoice (default: the token's own tenant).")] = "",
    finalize: Annotated[
        bool,
        typer.Option("--finalize", help="Online: freeze the invoice (operators); --json adds newly_finalized."),
    ] = False,
    events: Annotated[Path | None, typer.Option(help="Offline: usage events JSONL (an exported log).")] = None,
    rates: Annotated[
        Path | None, typer.Option(help="Offline: the rate card JSON (default: the server's built-in card).")
    ] = None,
    start: Annotated[str | None, typer.Option(help=f"Offline: period start, inclusive: {INSTANT_FORMS}.")] = None,
    end: Annotated[str | None, typer.Option(help=f"Offline: period end, exclusive: {INSTANT_FORMS}.")] = None,
    outages: Annotated[Path | None, typer.Option(help="Offline: GPU outages JSONL, credited.")] = None,
    engine: Annotated[
        str, typer.Option(help="Offline: duckdb, or reference (pure Python, to cross-check).")
    ] = "duckdb",
    max_anomalies: Annotated[int, typer.Option(min=0, help="Anomaly rows shown in the table (--json has all).")] = 50,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Invoices for a period, with anomalies and reconciliation; offline from files when --events is given."""
    # --events chooses the offline mode; without it, --period or --finalize the online one.
    online_only = {"--period": period is not None, "--tenant": bool(tenant), "--finalize": finalize}
    offline_only = {
        "--rates": rates is not None,
        "--start": start is not None,
        "--end": end is not None,
        "--outages": outages is not None,
        "--engine": engine != "duckdb",
    }
    online = events is None and (period is not None or finalize)
    if events is not None:
        misplaced = [name for name, given in online_only.items() if given]
        why = "only for online invoices, not with --events (offline)"
    elif online:
        misplaced = [name for name, given in offline_only.items() if given]
        why = "only for offline invoices (--events); not used here"
    else:
        misplaced, why = (["--tenant"] if tenant else []), "only for online invoices (--period); not used here"
    if misplaced:
        typer.echo(f"error: {', '.join(misplaced)}: {why}", err=True)
        raise typer.Exit(2)
    if online:
        from clients.cli.billing import online_invoice

        online_invoice(
            ctx,
            tenant=tenant,
            period=period,
            finalize=finalize,
            json_out=json_out,
            max_anomalies=max_anomalies,
        )
        return
    from clients.cli.invoice import run_invoice_command

    run_invoice_command(events, rates, start, end, outages, engine, json_out, max_anomalies)


def main() -> None:
    """The ``gpucloud`` console script: run the app, with 160 columns for rich when stdout is not a terminal
    (unless ``COLUMNS`` is set)."""
    # Rich wraps tables to the terminal; under CI with no terminal give it room to be readable.
    if not os.isatty(1):
        os.environ.setdefault("COLUMNS", "160")
    app()
