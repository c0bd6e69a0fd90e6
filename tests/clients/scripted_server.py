"""A scripted gRPC server for client tests: it answers ``service/Method`` paths with raw-bytes
behaviours, to play what a real control plane does only by accident (a lost reply, a restart,
a call that never answers). An async generator function is served as a bidirectional stream."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc

UnaryBehaviour = Callable[[bytes, grpc.aio.ServicerContext[bytes, bytes]], Awaitable[bytes]]
StreamBehaviour = Callable[[AsyncIterator[bytes], grpc.aio.ServicerContext[bytes, bytes]], AsyncIterator[bytes]]
Behaviour = UnaryBehaviour | StreamBehaviour
Start = Callable[[dict[str, Behaviour]], Awaitable[str]]


async def serve(methods: dict[str, Behaviour], port: int = 0) -> tuple[grpc.aio.Server, int]:
    """A started server on 127.0.0.1:``port`` (0: any free port) answering ``methods``; and its port."""
    by_service: dict[str, dict[str, grpc.RpcMethodHandler[bytes, bytes]]] = {}
    for path, behaviour in methods.items():
        service, method = path.rsplit("/", 1)
        handler: grpc.RpcMethodHandler[bytes, bytes] = (
            grpc.stream_stream_rpc_method_handler(behaviour)
            if inspect.isasyncgenfunction(behaviour)
            else grpc.unary_unary_rpc_method_handler(behaviour)
        )
        by_service.setdefault(service, {})[method] = handler
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler(name, handlers) for name, handlers in by_service.items()]
    )
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server, bound
