"""What `gpucloud serve` logs of a defect: the traceback, never the values in its frames.

A frame's local variables hold the call's bearer token (the authenticator's) and the request
message, so a traceback that printed them would copy secrets and strangers' fields into the log.
The server runs as a process of its own: configuring logging is process-wide.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from sqlalchemy import text

from gpucloud.v1 import node_pb2, node_pb2_grpc
from services.store.engine import Database
from tests.clients.cli.served import Served


@pytest.mark.parametrize("log_format", ["console", "json"])
async def test_a_defect_while_authenticating_logs_no_token(tmp_path: Path, database_url: str, log_format: str) -> None:
    """A token row the code cannot read (a role it does not know) fails the call INTERNAL and
    logs ``rpc_failed`` with a traceback through the authenticator, whose frames hold the token:
    the log shows the error, not the token's secret."""
    data_dir = tmp_path / "data"
    served = Served(
        "--data-dir",
        str(data_dir),
        "--listen",
        "127.0.0.1:0",
        "--database-url",
        database_url,
        "--log-format",
        log_format,
    )
    try:
        address = served.until(r"(?=.*control_plane_started).*?address\W+([0-9.]+:[0-9]+)").group(1)
        token = (data_dir / "operator.token").read_text().strip()
        _, token_id, secret = token.split("_", 2)
        store = await Database.open(database_url)
        try:
            async with store.write() as session:
                await (await session.connection()).execute(
                    text("UPDATE api_tokens SET role = 'auditor' WHERE token_id = :token_id"),
                    {"token_id": token_id},
                )
        finally:
            await store.close()
        async with grpc.aio.insecure_channel(address) as channel:
            stub = node_pb2_grpc.NodeServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await stub.GetNode(
                    node_pb2.GetNodeRequest(node_id="node-1"),
                    metadata=(("authorization", f"Bearer {token}"),),
                    timeout=30,
                )
        assert failed.value.code() == grpc.StatusCode.INTERNAL
        served.until("rpc_failed")
    finally:
        output = served.stop()
    assert "'auditor' is not a valid Role" in output  # the error itself is logged
    assert "authenticate" in output  # through the authenticator's frame
    assert secret not in output
