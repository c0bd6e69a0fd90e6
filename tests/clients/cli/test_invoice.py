"""``gpucloud invoice --events ...``: offline invoices from real files, through the real command."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from accounting.export import write_events
from clients.cli.app import app
from tests.accounting.helpers import held, start

PERIOD_ARGS = ["--start", "2025-06-01T00:00:00Z", "--end", "2025-06-01T10:00:00Z"]


def _files(tmp_path: Path) -> tuple[Path, Path, Path]:
    events = tmp_path / "events.jsonl"
    write_events([*held("x", "acme", "a1", "GPU-1", 1, 4), start("open", "beta", "b1", "GPU-2", 7)], events)
    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps({"currency": "USD", "gpu_hour": {"H100": {"on_demand": "2.49"}}}))
    outages = tmp_path / "outages.jsonl"
    outages.write_text('{"gpu_uuid": "GPU-1", "start": "2025-06-01T03:00:00Z", "end": "2025-06-01T05:00:00Z"}\n')
    return events, rates, outages


def invoke(*args: str | Path, columns: int = 200) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns)})
    return result.exit_code, result.stdout, result.stderr


def test_offline_invoice_as_json(tmp_path: Path) -> None:
    events, rates, outages = _files(tmp_path)
    code, out, _ = invoke("invoice", "--events", events, "--rates", rates, "--outages", outages, *PERIOD_ARGS, "--json")
    assert code == 0
    document = json.loads(out)
    totals = {i["tenant_id"]: i["total"] for i in document["invoices"]}
    # acme: [1 h, 4 h) less the outage's [3 h, 4 h) = 2 h * 2.49; beta: open from 7 h to 10 h = 3 h * 2.49
    assert totals == {"acme": "4.98", "beta": "7.47"}
    assert [a["kind"] for a in document["anomalies"]] == ["OPEN_AT_PERIOD_END"]
    assert document["reconciliation"]["balanced"] is True


def test_without_rates_the_offline_invoice_prices_with_the_servers_built_in_card(tmp_path: Path) -> None:
    """The card the server uses when started without --rates: H100 on demand at 3.00 an hour."""
    events, _, _ = _files(tmp_path)
    code, out, _ = invoke("invoice", "--events", events, *PERIOD_ARGS, "--json")
    assert code == 0
    totals = {i["tenant_id"]: i["total"] for i in json.loads(out)["invoices"]}
    assert totals == {"acme": "9.00", "beta": "9.00"}  # 3 h each at 3.00


def test_offline_invoice_as_tables(tmp_path: Path) -> None:
    events, rates, _ = _files(tmp_path)
    code, out, _ = invoke("invoice", "--events", events, "--rates", rates, *PERIOD_ARGS, "--engine", "reference")
    assert code == 0
    for text in ("Invoice acme", "Invoice beta", "USD 7.47", "OPEN_AT_PERIOD_END", "Reconciliation", "balanced"):
        assert text in out


def test_a_bad_line_exits_2_naming_file_and_line(tmp_path: Path) -> None:
    events, rates, _ = _files(tmp_path)
    with events.open("a") as handle:
        handle.write('{"event_id": "e", "tenant_id": "t", "allocation_id": "a", "gpu_uuid": "g", "gpu_model": "H100",')
        handle.write(' "kind": "start", "time": "2025-06-01T00:00:00"}\n')
    code, out, err = invoke("invoice", "--events", events, "--rates", rates, *PERIOD_ARGS)
    assert code == 2
    assert out == ""
    assert err == f"error: --events: {events}:4: time '2025-06-01T00:00:00' has no UTC offset (add Z or +00:00)\n"


def test_bad_rates_and_bad_options_exit_2(tmp_path: Path) -> None:
    events, rates, _ = _files(tmp_path)
    rates.write_text('{"currency": "USD", "gpu_hour": {"H100": {"on_demand": "cheap"}}}')
    code, _, err = invoke("invoice", "--events", events, "--rates", rates, *PERIOD_ARGS)
    assert (code, err.count("\n")) == (2, 1)
    assert f"{rates}: gpu_hour.H100.on_demand" in err

    code, _, err = invoke("invoice", "--events", events, "--start", "2025-06-01T00:00:00Z")
    assert (code, err) == (2, "error: offline mode (--events) also needs --start and --end\n")

    code, _, err = invoke(
        "invoice",
        "--events",
        events,
        "--rates",
        rates,
        "--start",
        "2025-06-02T00:00:00Z",
        "--end",
        "2025-06-01T00:00:00Z",
    )
    assert code == 2
    assert "--start/--end" in err


def test_anomaly_rows_show_whole_ids_and_as_many_rows_as_asked(tmp_path: Path) -> None:
    """Six allocations still open at the period's end: six anomalies. The table prints each id
    whole at 160 columns (they were cut with an ellipsis) and as many rows as --max-anomalies says."""
    allocations = [f"alloc-01a2333dd296783b3cde0631b5{i:02x}" for i in range(6)]
    gpus = [f"GPU-fd6f44dd-0a1b-4c2d-8e3f-0000000000{i:02x}" for i in range(6)]
    events = tmp_path / "events.jsonl"
    opened = [start(f"e{i}", "acme", a, g, 1) for i, (a, g) in enumerate(zip(allocations, gpus, strict=True))]
    write_events(opened, events)
    result = CliRunner().invoke(
        app, ["invoice", "--events", str(events), *PERIOD_ARGS, "--max-anomalies", "2"], env={"COLUMNS": "160"}
    )
    assert result.exit_code == 0, result.stdout
    shown = [a for a in allocations if a in result.stdout]
    assert len(shown) == 2
    assert all(g in result.stdout for g in gpus[:2])
    assert "4 more not shown" in result.stdout


def test_a_start_after_the_end_names_both_times_as_given(tmp_path: Path) -> None:
    events, _, _ = _files(tmp_path)
    backwards = ["--start", "2025-07-01T00:00:00Z", "--end", "2025-06-01T00:00:00Z"]
    code, _, err = invoke("invoice", "--events", events, *backwards)
    assert code == 2
    assert "period end 2025-06-01T00:00:00Z is not after its start 2025-07-01T00:00:00Z" in err


def test_period_options_take_the_commands_time_forms(tmp_path: Path) -> None:
    """--start/--end take what every time option takes: a time without an offset is UTC, and a
    malformed one is an error naming its option."""
    events, rates, _ = _files(tmp_path)
    runs = [
        invoke("invoice", "--events", events, "--rates", rates, *period, "--json")
        for period in (PERIOD_ARGS, ["--start", "2025-06-01", "--end", "2025-06-01T10:00:00"])
    ]
    assert [code for code, _, _ in runs] == [0, 0]
    assert json.loads(runs[0][1]) == json.loads(runs[1][1])

    code, _, err = invoke("invoice", "--events", events, "--start", "June", "--end", "2025-06-01T10:00:00Z")
    assert code == 2
    assert err.startswith("error: --start: 'June' is not RFC 3339")


def test_options_of_the_other_mode_are_refused_not_ignored(tmp_path: Path) -> None:
    events, _, _ = _files(tmp_path)
    code, _, err = invoke("invoice", "--events", events, *PERIOD_ARGS, "--tenant", "acme")
    assert (code, err) == (2, "error: --tenant: only for online invoices, not with --events (offline)\n")
    # --events with --period: the online option is out of place, not --start and --end.
    code, _, err = invoke("invoice", "--events", events, *PERIOD_ARGS, "--period", "2026-12", "--finalize")
    assert (code, err) == (2, "error: --period, --finalize: only for online invoices, not with --events (offline)\n")
    code, _, err = invoke("--addr", "127.0.0.1:1", "--token", "x", "invoice", "--tenant", "acme")
    assert (code, err) == (2, "error: --tenant: only for online invoices (--period); not used here\n")
    online = ["--addr", "127.0.0.1:1", "--token", "x", "invoice", "--period", "2026-12"]
    code, _, err = invoke(*online, "--start", "yesterday", "--engine", "bogus")
    assert (code, err) == (2, "error: --start, --engine: only for offline invoices (--events); not used here\n")


def test_a_bad_online_period_or_row_count_is_a_usage_error(tmp_path: Path) -> None:
    """Checked before any call, like usage export's --invoice-period: exit 2, not an API error."""
    code, _, err = invoke("--addr", "127.0.0.1:1", "--token", "x", "invoice", "--period", "2026-13")
    assert code == 2
    assert err.startswith("error: --period '2026-13': month must be 01-12")
    events, _, _ = _files(tmp_path)
    code, _, _ = invoke("invoice", "--events", events, *PERIOD_ARGS, "--max-anomalies", "-3")
    assert code == 2


def test_narrow_tables_cut_no_figure_short_and_zero_anomaly_rows_say_so(tmp_path: Path) -> None:
    """At 60 and 40 columns the invoice and reconciliation tables fold or turn into records, but
    every figure is printed whole (they were cut to ``196074…``); with ``--max-anomalies 0`` the
    anomalies table says the rows are not shown, not "none"."""
    events = tmp_path / "events.jsonl"
    many = [e for g in range(300) for e in held(f"g{g}", "acme", "a1", f"GPU-{g:03d}", 0.5, 9.75)]
    write_events([*many, start("open", "acme", "a2", "GPU-999", 7)], events)
    for columns in (60, 40):
        code, out, _ = invoke("invoice", "--events", events, *PERIOD_ARGS, "--max-anomalies", "0", columns=columns)
        assert code == 0, out
        assert "…" not in out, out
        flat = " ".join(out.split())
        for figure in ("10000800", "2778.0000", "USD 8334.00"):  # 300 GPUs x 9.25 h and one open 3 h
            assert figure in flat, (columns, figure, out)
        assert "Anomalies (1)" in flat
        assert "none" not in flat
        assert "not shown: raise --max-anomalies or use --json" in flat
        assert max(len(line) for line in out.splitlines()) <= columns


def test_a_file_that_cannot_be_used_is_named_by_its_option(tmp_path: Path) -> None:
    events, _, _ = _files(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    cases: list[tuple[list[str | Path], str]] = [
        (["--events", tmp_path / "nope.jsonl"], f"error: --events: {tmp_path / 'nope.jsonl'}: cannot read"),
        (["--events", events, "--rates", bad], f"error: --rates: {bad}:1: not JSON"),
        (["--events", events, "--outages", bad], f"error: --outages: {bad}:1: not JSON"),
    ]
    for args, expected in cases:
        code, _, err = invoke("invoice", *args, *PERIOD_ARGS)
        assert code == 2, err
        assert err.startswith(expected), err
