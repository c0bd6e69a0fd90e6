"""Which roles may call which method: the one table the auth interceptor consults.

A method missing from this table is refused for everyone (PERMISSION_DENIED), so a new RPC
is closed until someone decides who may call it. Health checking and reflection are public
and never reach this table.
"""

from __future__ import annotations

from collections.abc import Mapping

from services.auth.principal import Role

OPERATOR = frozenset({Role.OPERATOR})
OPERATOR_OR_TENANT = frozenset({Role.OPERATOR, Role.TENANT})
FLEET = frozenset({Role.OPERATOR, Role.AGENT})
AGENT = frozenset({Role.AGENT})

PUBLIC_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.")

METHOD_ROLES: Mapping[str, frozenset[Role]] = {
    "/gpucloud.v1.TenantService/CreateTenant": OPERATOR,
    "/gpucloud.v1.TenantService/GetTenant": OPERATOR_OR_TENANT,
    "/gpucloud.v1.TenantService/ListTenants": OPERATOR,
    "/gpucloud.v1.TenantService/CreateTenantToken": OPERATOR,
    "/gpucloud.v1.TokenService/CreateAgentToken": OPERATOR,
    "/gpucloud.v1.TokenService/CreateOperatorToken": OPERATOR,
    "/gpucloud.v1.TokenService/ListTokens": OPERATOR,
    "/gpucloud.v1.TokenService/RevokeToken": OPERATOR,
    "/gpucloud.v1.NodeService/RegisterNode": FLEET,
    "/gpucloud.v1.NodeService/GetNode": FLEET,
    "/gpucloud.v1.NodeService/ListNodes": OPERATOR,
    "/gpucloud.v1.NodeService/CompleteBurnIn": FLEET,
    "/gpucloud.v1.NodeService/CordonNode": OPERATOR,
    "/gpucloud.v1.NodeService/UncordonNode": OPERATOR,
    "/gpucloud.v1.NodeService/DrainNode": OPERATOR,
    "/gpucloud.v1.NodeService/StartRepair": OPERATOR,
    "/gpucloud.v1.NodeService/ReturnToService": OPERATOR,
    "/gpucloud.v1.NodeService/RetireNode": OPERATOR,
    "/gpucloud.v1.NodeService/ListNodeEvents": OPERATOR,
    "/gpucloud.v1.NodeService/SetHealthAutomation": OPERATOR,
    "/gpucloud.v1.NodeService/GetHealthAutomation": OPERATOR,
    "/gpucloud.v1.NodeService/ListHealthEvents": OPERATOR,
    "/gpucloud.v1.NodeService/AuditIsolation": OPERATOR,
    "/gpucloud.v1.NodeService/SetSparePool": OPERATOR,
    "/gpucloud.v1.NodeService/ListSparePools": OPERATOR,
    "/gpucloud.v1.NodeService/GetFragmentation": OPERATOR,
    "/gpucloud.v1.NodeService/PlanDefragmentation": OPERATOR,
    "/gpucloud.v1.NodeService/ApplyDefragmentation": OPERATOR,
    "/gpucloud.v1.AgentService/RegisterAgent": AGENT,
    "/gpucloud.v1.AgentService/Heartbeat": AGENT,
    "/gpucloud.v1.AgentService/Connect": AGENT,
    "/gpucloud.v1.AgentService/ReportStatus": AGENT,
    "/gpucloud.v1.AllocationService/CreateAllocation": OPERATOR_OR_TENANT,
    "/gpucloud.v1.AllocationService/GetAllocation": OPERATOR_OR_TENANT,
    "/gpucloud.v1.AllocationService/ExplainAllocation": OPERATOR_OR_TENANT,
    "/gpucloud.v1.AllocationService/SetQuota": OPERATOR,
    "/gpucloud.v1.AllocationService/ListQuotas": OPERATOR_OR_TENANT,
    "/gpucloud.v1.AllocationService/ListAllocations": OPERATOR_OR_TENANT,
    "/gpucloud.v1.AllocationService/CancelAllocation": OPERATOR_OR_TENANT,
    "/google.longrunning.Operations/GetOperation": OPERATOR_OR_TENANT,
    "/google.longrunning.Operations/WaitOperation": OPERATOR_OR_TENANT,
    "/google.longrunning.Operations/ListOperations": OPERATOR_OR_TENANT,
    "/google.longrunning.Operations/DeleteOperation": OPERATOR_OR_TENANT,
    "/google.longrunning.Operations/CancelOperation": OPERATOR_OR_TENANT,
    "/gpucloud.v1.MetricsService/WriteSamples": FLEET,
    "/gpucloud.v1.MetricsService/Query": OPERATOR_OR_TENANT,
    "/gpucloud.v1.MetricsService/QueryRange": OPERATOR_OR_TENANT,
    "/gpucloud.v1.MetricsService/ListOutliers": OPERATOR,
    "/gpucloud.v1.BillingService/GetInvoice": OPERATOR_OR_TENANT,
    "/gpucloud.v1.BillingService/FinalizeInvoice": OPERATOR,
    "/gpucloud.v1.BillingService/ListUsageEvents": OPERATOR_OR_TENANT,
}


def is_public(method: str) -> bool:
    """Whether ``method`` is served without a token (health checking and reflection)."""
    return method.startswith(PUBLIC_PREFIXES)
