"""The protobuf form of a tenant (translation only, no rules)."""

from __future__ import annotations

from gpucloud.v1 import tenant_pb2
from services.tenants.repository import Tenant
from services.timestamps import timestamp


def tenant_to_proto(row: Tenant) -> tenant_pb2.Tenant:
    """The API form of a tenant."""
    return tenant_pb2.Tenant(
        tenant_id=row.tenant_id, display_name=row.display_name, create_time=timestamp(row.created_us)
    )
