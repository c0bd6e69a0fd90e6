"""A scripted gRPC server for client tests: it answers ``service/Method`` paths with raw-bytes
behaviours, to play what a real control plane does only by accident (a lost reply, a restart,
a call that never answers)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc

Behaviour = Callable[[bytes, grpc.aio.ServicerContext[bytes, bytes]], Awaitable[bytes]]
Start = Callable[[dict[str, Behaviour]], Awaitable[str]]


async def serve(methods: dict[str, Behaviour], port: int = 0) -> tuple[grpc.aio.Server, int]:
    """A started server on 127.0.0.1:``port`` (0: any free port) answering ``methods``; and its port."""
    by_service: dict[str, dict[str, grpc.RpcMethodHandler[bytes, bytes]]] = {}
    for path, behaviour in methods.items():
        service, method = path.rsplit("/", 1)
        by_service.setdefault(service, {})[method] = grpc.unary_unary_rpc_method_handler(behaviour)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler(name, handlers) for name, handlers in by_service.items()]
    )
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server, bound
