"""A credential pasted into any string field of any RPC is refused, and never comes back whole
or in part: not in the status message, not in its details, not in the server's log.

Every string field of every request is found from the API's descriptors (nested messages,
repeated fields and map keys and values included), so a new field is covered when it is added.
Each gets the operator's own token, and a long value that starts with it: one an error would
cut to its first characters, which are the token, and one that must not make the error long.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, cast

import grpc
import pytest
import structlog
from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from structlog.typing import EventDict

from clients import AsyncClient, InvalidArgumentError
from services.auth import policy, tokens
from services.auth.principal import Role
from services.server import SERVICE_NAMES
from tests.conftest import RunningControlPlane, register_ready_nodes

# Past this, an error's message and details do not fit in what gRPC sends back (8-16 KB of headers).
MOST_ERROR_BYTES = 4096


def _message_type(field: FieldDescriptor) -> Descriptor:
    """The type of a message field (the stubs allow None, which only fields of other kinds have)."""
    return cast(Descriptor, field.message_type)


def _string_paths(descriptor: Descriptor, depth: int = 0) -> Iterator[tuple[FieldDescriptor, ...]]:
    """Every path from ``descriptor`` to a string field, through message fields (not the well-known types)."""
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_STRING:
            yield (field,)
        elif (
            field.type == FieldDescriptor.TYPE_MESSAGE
            and depth < 4
            and not _message_type(field).full_name.startswith("google.protobuf.")
        ):
            for rest in _string_paths(_message_type(field), depth + 1):
                yield (field, *rest)


def _is_map(field: FieldDescriptor) -> bool:
    return field.type == FieldDescriptor.TYPE_MESSAGE and _message_type(field).GetOptions().map_entry


def _put(message: Any, path: tuple[FieldDescriptor, ...], value: str) -> None:
    """Set the string at ``path`` in ``message`` to ``value``, making what leads to it."""
    field, rest = path[0], path[1:]
    if _is_map(field):
        entries = getattr(message, field.name)
        # rest is (key,) or (value,): a map<string, string> or map<string, number|message>.
        if rest[0].name == "value":
            entries["k"] = value
        elif _message_type(field).fields_by_name["value"].type == FieldDescriptor.TYPE_STRING:
            entries[value] = "v"
        else:
            entries[value] = 1
        return
    if not rest:
        if field.is_repeated:
            getattr(message, field.name).append(value)
        else:
            setattr(message, field.name, value)
        return
    inner = getattr(message, field.name).add() if field.is_repeated else getattr(message, field.name)
    _put(inner, rest, value)


def _cases() -> Iterator[tuple[MethodDescriptor, tuple[FieldDescriptor, ...]]]:
    pool = descriptor_pool.Default()
    for service in SERVICE_NAMES:
        for method in pool.FindServiceByName(service).methods:
            assert f"/{service}/{method.name}" in policy.METHOD_ROLES
            for path in _string_paths(method.input_type):
                yield method, path


CASES = list(_cases())


def _label(case: tuple[MethodDescriptor, tuple[FieldDescriptor, ...]]) -> str:
    method, path = case
    return f"{method.name}:{'.'.join(f.name for f in path)}"


async def _call(channel: grpc.aio.Channel, token: str, method: MethodDescriptor, request: Message) -> Any:
    """Call ``method`` with ``request`` as the holder of ``token``; the error it ends with, or None."""
    response_class = message_factory.GetMessageClass(method.output_type)
    callable_ = channel.unary_unary(
        f"/{method.containing_service.full_name}/{method.name}",
        request_serializer=type(request).SerializeToString,
        response_deserializer=response_class.FromString,
    )
    try:
        await callable_(request, metadata=(("authorization", f"Bearer {token}"),), timeout=30)
    except grpc.aio.AioRpcError as error:
        return error
    return None


def test_every_string_field_is_covered() -> None:
    """The walk finds every id and name field a token may be pasted into (the ones below among
    them), nested ones and map keys and values included."""
    labels = {_label(case) for case in CASES}
    assert {
        "GetTenant:tenant_id",
        "CreateTenant:tenant_id",
        "CreateTenant:display_name",
        "GetAllocation:allocation_id",
        "CreateAllocation:request_id",
        "GetOperation:name",
        "CreateAgentToken:node_id",
        "RevokeToken:token_id",
        "RegisterNode:gpus.uuid",
        "WriteSamples:nodes.gpus.fields.key",
        "WriteSamples:series.labels.key",
        "WriteSamples:series.labels.value",
        "QueryRange:selector.node_ids",
    } <= labels
    assert len(CASES) > 40


@pytest.mark.parametrize("case", CASES, ids=[_label(case) for case in CASES])
async def test_a_token_in_any_field_is_refused_and_never_echoed(
    control_plane: RunningControlPlane, case: tuple[MethodDescriptor, tuple[FieldDescriptor, ...]]
) -> None:
    method, path = case
    token = control_plane.operator_token
    _, secret = tokens.split(token) or ("", "")
    assert secret
    # The call is made with a credential its method takes: an agent's for AgentService.
    caller = token
    if Role.OPERATOR not in policy.METHOD_ROLES[f"/{method.containing_service.full_name}/{method.name}"]:
        async with control_plane.client() as operator:
            caller = (await operator.create_agent_token("node-x")).token
    request_class = message_factory.GetMessageClass(method.input_type)
    logged = asyncio.Event()

    def note_line(logger: object, name: str, entry: EventDict) -> EventDict:
        if entry.get("event") == "rpc":
            logged.set()
        return entry

    async with grpc.aio.insecure_channel(control_plane.address) as channel:
        for value in (token, f"{token} " * 2000):
            request = request_class()
            _put(request, path, value)
            logged.clear()
            with structlog.testing.capture_logs(processors=[note_line]) as logs:
                error = await _call(channel, caller, method, request)
                await asyncio.wait_for(logged.wait(), timeout=10)
            assert error is not None, f"{_label(case)}: a token was accepted"
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, f"{error.code()}: {error.details()}"
            answer = (error.details() or "").encode() + b"".join(
                v if isinstance(v, bytes) else v.encode() for _, v in error.trailing_metadata() or ()
            )
            # Not even a part of the secret: an error that cuts a value short must cut the secret out.
            assert secret[:8].encode() not in answer, error.details()
            assert len(answer) < MOST_ERROR_BYTES
            assert secret[:8] not in repr(logs)
            assert len(repr(logs)) < MOST_ERROR_BYTES


async def test_a_token_in_free_text_is_refused_rather_than_stored(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    """Free text (a display name, a reason) would be stored and shown to every operator who lists
    it: a credential pasted there is refused like one in an id field, and nothing changes."""
    token = control_plane.operator_token
    (node_id,) = await register_ready_nodes(operator, 1)
    with pytest.raises(InvalidArgumentError) as refused:
        await operator.create_tenant("acme", display_name=f"Acme ({token})")
    assert set(refused.value.field_violations) == {"display_name"}
    with pytest.raises(InvalidArgumentError) as refused:
        await operator.cordon_node(node_id, reason=f"rotate {token}")
    assert set(refused.value.field_violations) == {"reason"}
    assert token not in str(refused.value)
    assert [t.tenant_id for t in await operator.list_tenants()] == []
    assert not (await operator.get_node(node_id)).cordoned
