"""The access log: one ``rpc`` line per call, with what an operator needs to trace it and never a secret."""

from __future__ import annotations

import asyncio

import pytest
import structlog
from structlog.typing import EventDict

from clients import AsyncClient, NotFoundError
from services.auth import tokens
from tests.conftest import RunningControlPlane, register_ready_nodes


async def test_each_call_logs_one_line_with_method_code_duration_key_and_caller(
    control_plane: RunningControlPlane, operator: AsyncClient
) -> None:
    await register_ready_nodes(operator, 1)
    created = await operator.create_tenant("acme")
    refused_logged = asyncio.Event()

    def note_refusal(logger: object, method: str, entry: EventDict) -> EventDict:
        if entry.get("event") == "rpc" and entry.get("code") == "NOT_FOUND":
            refused_logged.set()
        return entry

    async with control_plane.client(created.token) as tenant:
        with structlog.testing.capture_logs(processors=[note_refusal]) as logs:
            await tenant.create_allocation(gpu_model="H100", node_count=1, request_id="req-logged")
            with pytest.raises(NotFoundError):
                await tenant.get_allocation("alloc-00000000000000000000000000ff")
            # The server writes a refused call's line after the status went out: the client
            # can hear the answer first.
            await asyncio.wait_for(refused_logged.wait(), timeout=10)
    lines = [entry for entry in logs if entry["event"] == "rpc"]
    assert [(line["method"], line["code"]) for line in lines] == [
        ("/gpucloud.v1.AllocationService/CreateAllocation", "OK"),
        ("/gpucloud.v1.AllocationService/GetAllocation", "NOT_FOUND"),
    ]
    token_id, secret = tokens.split(created.token) or ("", "")
    for line in lines:
        assert line["tenant"] == "acme" and line["role"] == "tenant"
        assert line["token_id"] == token_id == created.token_id
        assert isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0
    assert lines[0]["request_id"] == "req-logged"
    assert lines[1]["request_id"] is None  # a read sends no key
    assert secret not in str(logs)
