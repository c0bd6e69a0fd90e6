"""A/B of the create path: this working tree against another revision, in one run.

    uv run python bench/api_ab.py REV [--rounds 8] [--seconds 2] [--concurrency 64]

Checks ``REV`` out into a temporary git worktree, starts a control plane from each tree (each
through its own ``bench/api.py``, so as ``gpucloud serve`` runs it in that tree) and the
empty-call server, and alternates rounds of create+cancel pairs among them, with an empty-call
round before each, so that a shared machine speeding up or slowing down weighs on both trees
alike. Comparing two separate runs of ``bench/api.py`` cannot tell a 10% change from this
VM's drift between sittings; this can. ``REV``'s ``bench/api.py`` must have this tree's
``_serve_control_plane(data_dir, database_url, no_database, port_queue)``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import api  # noqa: E402  (bench/api.py, beside this file)


def _serve_tree(tree: str, data_dir: str, port_queue: object) -> None:
    """Run the control plane of ``tree`` through that tree's own bench/api.py."""
    spec = importlib.util.spec_from_file_location("tree_api", Path(tree) / "bench" / "api.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    # Its import puts its tree first on sys.path; nothing of ours (services, proto) is loaded yet.
    spec.loader.exec_module(module)
    module._serve_control_plane(data_dir, None, False, port_queue)


def _measure(trees: dict[str, str], rounds: int, seconds: float, concurrency: int) -> None:
    with tempfile.TemporaryDirectory(prefix="gpucloud-ab-") as scratch:
        empty_process, empty_port = api._start(api._serve_empty)
        planes = {}
        try:
            for name, tree in trees.items():
                data_dir = Path(scratch) / name
                data_dir.mkdir()
                process, port = api._start(_serve_tree, tree, str(data_dir))
                token = (data_dir / "operator.token").read_text().strip()
                planes[name] = (process, port, asyncio.run(api.register_fleet(port, token, 256)))
            empty: list[api.Measured] = []
            pairs: dict[str, list[api.Measured]] = {name: [] for name in trees}
            for index in range(rounds):
                assert empty_process.pid is not None
                empty.append(asyncio.run(api.bench_empty(empty_port, empty_process.pid, seconds, concurrency)))
                # Alternate which tree goes first, so neither always follows the empty round.
                for name in list(trees) if index % 2 == 0 else list(trees)[::-1]:
                    process, port, token = planes[name]
                    assert process.pid is not None
                    pairs[name].append(
                        asyncio.run(api.bench_control_plane(port, process.pid, token, seconds, concurrency))
                    )
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
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("revision", help="a git revision to compare this working tree against")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=2.0, help="per round and server")
    parser.add_argument("--concurrency", type=int, default=64, help="calls in flight")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    root = HERE.parent
    with tempfile.TemporaryDirectory(prefix="gpucloud-ab-tree-") as checkout:
        worktree = Path(checkout) / "tree"
        try:
            subprocess.run(
                ["git", "-C", str(root), "worktree", "add", "--detach", "--quiet", str(worktree), args.revision],
                check=True,
            )
        except subprocess.CalledProcessError:
            parser.error(f"cannot check out {args.revision!r}")
        try:
            trees = {args.revision: str(worktree), "working tree": str(root)}
            _measure(trees, args.rounds, args.seconds, args.concurrency)
        finally:
            subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(worktree)], check=False)


if __name__ == "__main__":
    main()
