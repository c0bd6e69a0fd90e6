"""The committed generated API code is exactly what proto/generate.py produces from the .proto files."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO / "proto"
COMMITTED = PROTO_ROOT / "gpucloud" / "v1"


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpucloud_proto_generate", PROTO_ROOT / "generate.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _generated_files(root: Path) -> dict[str, bytes]:
    """Every non-.proto file under ``root``/gpucloud, by path relative to ``root``."""
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted((root / "gpucloud").rglob("*"))
        if path.is_file() and path.suffix != ".proto" and "__pycache__" not in path.parts
    }


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    """Regenerating into a temporary folder gives byte-identical files and no file more or less."""
    generated = _load_generator().generate(tmp_path)
    assert generated, "generate() produced no files"
    assert all(p.is_relative_to(tmp_path) for p in generated)
    fresh = _generated_files(tmp_path)
    committed = _generated_files(PROTO_ROOT)
    assert sorted(committed) == sorted(fresh), "generated file set differs: run `uv run python proto/generate.py`"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert stale == [], f"stale generated code in {stale}: run `uv run python proto/generate.py`"


def test_every_proto_has_its_generated_modules() -> None:
    """Each committed .proto has its _pb2, _pb2_grpc modules and their type stubs beside it."""
    protos = sorted(COMMITTED.glob("*.proto"))
    assert protos
    for proto in protos:
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi"):
            assert (COMMITTED / f"{proto.stem}{suffix}").is_file(), proto.stem + suffix
