"""Create+cancel pairs of this working tree against another git revision, in one run.

    uv run python bench/api_compare.py REV [--rounds 8] [--seconds 2] [--concurrency 64]

Checks ``REV`` out into a temporary git worktree and starts a control plane from each tree
(each on its own SQLite file, with ``bench/api.py``'s settings) and the empty-call server, then
alternates rounds of pairs between the trees, with an empty-call round before each, so that a
shared machine speeding up or slowing down weighs on both trees alike: two separate runs of
``bench/api.py`` cannot tell a 10% change from the machine's drift between sittings, this can.
The revision's product code is served through this tree's ``bench.api.serve_control_plane``,
so ``REV`` must have the same ``ControlPlane``, ``ServerConfig``, ``tune_collector`` and
``log_config.configure``. A comparison of the tree against itself reads within a few percent:
differences smaller than that are noise.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, bench/ comes first on sys.path, where bench/tsdb.py would hide the tsdb package.
sys.path[:0] = [str(ROOT), str(ROOT / "proto")]

from bench.api import (  # noqa: E402  (needs the path above)
    Measured,
    bench_control_plane,
    bench_empty,
    register_fleet,
    serve_control_plane,
    serve_empty,
    start_server,
)


def serve_tree(tree: str, data_dir: str, port_queue: mp.Queue[int]) -> None:
    """Serve the control plane of the checkout at ``tree``: its packages and generated API go
    first on this (spawned) process's sys.path before any of them is imported."""
    sys.path[:0] = [tree, str(Path(tree) / "proto")]
    serve_control_plane(data_dir, None, False, port_queue)


def measure(trees: dict[str, str], rounds: int, seconds: float, concurrency: int) -> None:
    """Alternate rounds of empty calls and of each tree's pairs; print the pairs' rates per tree."""
    with tempfile.TemporaryDirectory(prefix="gpucloud-compare-") as scratch:
        empty_process, empty_port = start_server(serve_empty)
        planes: dict[str, tuple[mp.process.BaseProcess, int, str]] = {}
        try:
            for name, tree in trees.items():
                data_dir = Path(scratch) / str(len(planes))
                data_dir.mkdir()
                process, port = start_server(serve_tree, tree, str(data_dir))
                token = (data_dir / "operator.token").read_text().strip()
                planes[name] = (process, port, asyncio.run(register_fleet(port, token, 256)))
            empty: list[Measured] = []
            pairs: dict[str, list[Measured]] = {name: [] for name in trees}
            for index in range(rounds):
                assert empty_process.pid is not None
                empty.append(asyncio.run(bench_empty(empty_port, empty_process.pid, seconds, concurrency)))
                # Alternate which tree goes first, so neither always follows the empty round.
                for name in list(trees) if index % 2 == 0 else list(trees)[::-1]:
                    process, port, token = planes[name]
                    assert process.pid is not None
                    pairs[name].append(asyncio.run(bench_control_plane(port, process.pid, token, seconds, concurrency)))
        finally:
            empty_process.kill()
            for process, _, _ in planes.values():
                process.kill()
    total_empty = sum(empty[1:], empty[0])
    print(f"{concurrency} in flight, {rounds} rounds of {seconds:g} s; empty calls: {total_empty.rate:.0f}/s")
    print(f"{'tree':>12}  {'pairs/s':>8}  {'pairs / empty':>13}  {'loop us/pair':>12}  pairs/s by round")
    for name, measured in pairs.items():
        total = sum(measured[1:], measured[0])
        loop = total.per_call(total.server_main)
        loop_text = "n/a" if loop is None else f"{1e6 * loop:.1f}"
        by_round = " ".join(f"{m.rate:.0f}" for m in measured)
        print(f"{name:>12}  {total.rate:>8.0f}  {total.rate / total_empty.rate:>13.1%}  {loop_text:>12}  {by_round}")


def main() -> None:
    """Check the revision out beside this tree, compare the two, remove the checkout."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("revision", help="a git revision to compare this working tree against")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=2.0, help="per round and server")
    parser.add_argument("--concurrency", type=int, default=64, help="calls in flight")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    with tempfile.TemporaryDirectory(prefix="gpucloud-compare-tree-") as checkout:
        worktree = Path(checkout) / "tree"
        try:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(worktree), args.revision],
                check=True,
            )
        except subprocess.CalledProcessError:
            parser.error(f"cannot check out {args.revision!r}")
        try:
            trees = {args.revision: str(worktree), "working tree": str(ROOT)}
            measure(trees, args.rounds, args.seconds, args.concurrency)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)], check=False)


if __name__ == "__main__":
    main()
