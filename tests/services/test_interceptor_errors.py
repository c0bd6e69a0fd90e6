"""Every error the server's own code answers carries an ErrorInfo, a defect included."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from clients import AsyncClient, InternalError
from gpucloud.v1 import tenant_pb2
from services.auth.authenticator import Authenticator
from services.auth.repository import bootstrap_operator
from services.interceptors import ControlPlaneInterceptor
from services.store.engine import Database


async def test_a_defect_is_internal_with_a_reason(store: Database, tmp_path: Path) -> None:
    """A handler that raises something nobody foresaw: INTERNAL with reason INTERNAL_ERROR, and
    nothing of the exception in the answer (the server logs it as ``rpc_failed``)."""
    token_file = await bootstrap_operator(store, tmp_path)
    assert token_file is not None

    async def defective(request: tenant_pb2.GetTenantRequest, context: object) -> tenant_pb2.GetTenantResponse:
        raise RuntimeError("a secret detail of the defect")

    handler = grpc.unary_unary_rpc_method_handler(
        defective,
        request_deserializer=tenant_pb2.GetTenantRequest.FromString,
        response_serializer=tenant_pb2.GetTenantResponse.SerializeToString,
    )
    server = grpc.aio.server(interceptors=[ControlPlaneInterceptor(Authenticator(store))])
    service = grpc.method_handlers_generic_handler("gpucloud.v1.TenantService", {"GetTenant": handler})
    server.add_generic_rpc_handlers([service])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with AsyncClient(f"127.0.0.1:{port}", token_file.read_text().strip()) as client:
            with pytest.raises(InternalError) as caught:
                await client.get_tenant("acme")
    finally:
        await server.stop(None)
    assert caught.value.reason == "INTERNAL_ERROR"
    assert "secret detail" not in str(caught.value)
