"""The protobuf forms of API tokens and their roles (translation only, no rules)."""

from __future__ import annotations

from gpucloud.v1 import token_pb2
from services.auth.principal import Role
from services.auth.repository import TokenInfo
from services.timestamps import timestamp

# Roles' values are lower case (``operator``); the proto's names take the member's name. Built
# from both enums, so a role missing from one fails at import.
ROLE_TO_PROTO = {r: token_pb2.TokenRole.Value(f"TOKEN_ROLE_{r.name}") for r in Role}
ROLE_FROM_PROTO = {number: role for role, number in ROLE_TO_PROTO.items()}


def token_to_proto(info: TokenInfo) -> token_pb2.ApiToken:
    """The API form of a token: never its secret, which is not even stored."""
    return token_pb2.ApiToken(
        token_id=info.token_id,
        role=ROLE_TO_PROTO[info.role],
        tenant_id=info.tenant_id or "",
        node_id=info.node_id or "",
        create_time=timestamp(info.created_us),
        revoke_time=timestamp(info.revoked_us),
    )
