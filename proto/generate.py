"""Regenerate the Python code for the gpucloud API from proto/gpucloud/v1/*.proto.

Run from the repository root: ``uv run python proto/generate.py``. Output is deterministic,
so tests/test_proto_fresh.py can regenerate into a temporary folder and compare byte for byte.

googleapis-common-protos ships google/longrunning/operations.proto under the file name
``operations_proto.proto``; the import path our protos use is the canonical one, so a temporary
include folder maps the canonical name onto the shipped file.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent
API_DIR = PROTO_ROOT / "gpucloud" / "v1"


def _site_packages() -> Path:
    import google.rpc

    return Path(next(iter(google.rpc.__path__))).parent.parent


def _protoc(*options: str) -> None:
    """Run protoc with ``options`` over every API proto, with what they import on its path."""
    from grpc_tools import protoc

    site = _site_packages()
    with tempfile.TemporaryDirectory() as shim:
        shim_lro = Path(shim) / "google" / "longrunning"
        shim_lro.mkdir(parents=True)
        shutil.copyfile(site / "google/longrunning/operations_proto.proto", shim_lro / "operations.proto")
        grpc_include = Path(protoc.__file__).parent / "_proto"
        protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in API_DIR.glob("*.proto"))
        includes = [f"-I{PROTO_ROOT}", f"-I{shim}", f"-I{site}", f"-I{grpc_include}"]
        if protoc.main(["grpc_tools.protoc", *includes, *options, *protos]) != 0:
            raise SystemExit("protoc failed")


def descriptor_set(out: Path) -> Path:
    """Compile every API proto, with the files it imports and its source positions, into one
    FileDescriptorSet at ``out`` (what ``buf lint`` reads); return ``out``."""
    _protoc("--include_imports", "--include_source_info", f"--descriptor_set_out={out}")
    return out


def generate(out_dir: Path = PROTO_ROOT) -> list[Path]:
    """Compile every API proto into ``out_dir``; return the generated files."""
    bin_dir = Path(sys.executable).parent
    _protoc(
        f"--plugin=protoc-gen-mypy={bin_dir / 'protoc-gen-mypy'}",
        f"--plugin=protoc-gen-mypy_grpc={bin_dir / 'protoc-gen-mypy_grpc'}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_out={out_dir}",
        # Stubs typed for grpc.aio alone: the project calls gRPC only through grpc.aio, and stubs
        # typed for both declared every async method over its sync one, silencing the checker.
        f"--mypy_grpc_out=only_async:{out_dir}",
    )
    generated = sorted((out_dir / "gpucloud" / "v1").glob("*_pb2*.py*"))
    for package_dir in (out_dir / "gpucloud", out_dir / "gpucloud" / "v1"):
        (package_dir / "__init__.py").touch()
    (out_dir / "gpucloud" / "py.typed").touch()
    return generated


if __name__ == "__main__":
    for path in generate():
        print(path.relative_to(PROTO_ROOT.parent) if path.is_relative_to(PROTO_ROOT.parent) else path)
