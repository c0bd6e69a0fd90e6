"""The API's .proto files pass ``buf lint`` with the STANDARD rules (proto/buf.yaml), offline.

buf reads a FileDescriptorSet that proto/generate.py compiles with protoc, the google/ files the
API imports included (from googleapis-common-protos and grpc_tools), so nothing is fetched; only
the API's own files, under gpucloud/, are linted.
"""

from __future__ import annotations

import json
import runpy
import subprocess
import sysconfig
from collections.abc import Callable
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

REPO = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO / "proto"
CONFIG = PROTO_ROOT / "buf.yaml"
# buf-bin, a dev dependency, installs the binary beside the interpreter's scripts.
BUF = Path(sysconfig.get_path("scripts")) / "buf"
# buf's exit status when it ran and found violations; any other non-zero one is buf failing.
FOUND_VIOLATIONS = 100

Mutation = Callable[[dict[str, descriptor_pb2.FileDescriptorProto]], None]


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The API compiled to a FileDescriptorSet, with source positions and every imported file."""
    descriptor_set = runpy.run_path(str(PROTO_ROOT / "generate.py"))["descriptor_set"]
    path: Path = descriptor_set(tmp_path_factory.mktemp("proto") / "api.binpb")
    return path


def _violations(image: Path) -> list[tuple[str, str]]:
    """(file, rule) of each violation buf finds in the API's own files of ``image``."""
    run = subprocess.run(
        [BUF, "lint", image, "--config", CONFIG, "--path", "gpucloud", "--error-format", "json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert run.returncode in (0, FOUND_VIOLATIONS), run.stderr
    found = [json.loads(line) for line in run.stdout.splitlines()]
    return [(v["path"], v["type"]) for v in found]


def test_the_api_follows_the_standard_rules(image: Path) -> None:
    assert _violations(image) == []


def _camel_case_field(files: dict[str, descriptor_pb2.FileDescriptorProto]) -> None:
    files["gpucloud/v1/node.proto"].message_type[0].field[0].name = "UUID"


def _zero_value_without_unspecified(files: dict[str, descriptor_pb2.FileDescriptorProto]) -> None:
    files["gpucloud/v1/node.proto"].enum_type[0].value[0].name = "GPU_MODEL_NONE"


def _snake_case_message(files: dict[str, descriptor_pb2.FileDescriptorProto]) -> None:
    files["gpucloud/v1/tenant.proto"].message_type.add(name="tenant_note")


def _rpc_answering_a_resource(files: dict[str, descriptor_pb2.FileDescriptorProto]) -> None:
    # The same break as CancelAllocation's Operation, in a file the exception does not cover.
    files["gpucloud/v1/node.proto"].service[0].method[0].output_type = ".gpucloud.v1.Node"


@pytest.mark.parametrize(
    ("mutation", "expected"),
    [
        (_camel_case_field, ("gpucloud/v1/node.proto", "FIELD_LOWER_SNAKE_CASE")),
        (_zero_value_without_unspecified, ("gpucloud/v1/node.proto", "ENUM_ZERO_VALUE_SUFFIX")),
        (_snake_case_message, ("gpucloud/v1/tenant.proto", "MESSAGE_PASCAL_CASE")),
        (_rpc_answering_a_resource, ("gpucloud/v1/node.proto", "RPC_RESPONSE_STANDARD_NAME")),
    ],
)
def test_a_violation_fails_the_lint(image: Path, tmp_path: Path, mutation: Mutation, expected: tuple[str, str]) -> None:
    """The API's descriptors with one rule broken: the lint reports it, so it is not vacuous."""
    descriptors = descriptor_pb2.FileDescriptorSet.FromString(image.read_bytes())
    mutation({f.name: f for f in descriptors.file})
    broken = tmp_path / "broken.binpb"
    broken.write_bytes(descriptors.SerializeToString())
    assert expected in _violations(broken)
