"""Everything that talks to the gpucloud API from outside: the Python client and the CLI.

from clients import Client
with Client("127.0.0.1:50051", tenant_token) as client:
    allocation = client.create_allocation(gpu_model="H100", node_count=2)

README.md's "From Python" has the whole example; every type a caller meets is importable from here.
"""

from clients.async_client import AsyncClient, CreatedTenant, RetryPolicy
from clients.billing import (
    FinalizedInvoice,
    Invoice,
    InvoiceAdjustment,
    InvoiceAnomaly,
    InvoiceLine,
    InvoiceReconciliation,
    UsageEvent,
)
from clients.errors import (
    AbortedError,
    AlreadyExistsError,
    DeadlineExceededError,
    FailedPreconditionError,
    GpucloudError,
    InternalError,
    InvalidArgumentError,
    InvalidValueError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
)
from clients.metrics import (
    GpuOutlier,
    MetricsResult,
    NodeSamples,
    Outliers,
    PeerGroup,
    QueryStats,
    Series,
    SeriesSamples,
    WriteResult,
)
from clients.models import (
    Allocation,
    ApiToken,
    CreatedAllocation,
    CreatedToken,
    Gpu,
    HealthAutomation,
    IsolationAudit,
    IsolationViolation,
    Node,
    NodeEvent,
    NodeReplacement,
    Operation,
    Page,
    SparePool,
    Tenant,
)
from clients.sync_client import Client

__all__ = [
    "AbortedError",
    "Allocation",
    "AlreadyExistsError",
    "ApiToken",
    "AsyncClient",
    "Client",
    "CreatedAllocation",
    "CreatedTenant",
    "CreatedToken",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "FinalizedInvoice",
    "Gpu",
    "GpuOutlier",
    "GpucloudError",
    "HealthAutomation",
    "InternalError",
    "InvalidArgumentError",
    "InvalidValueError",
    "Invoice",
    "InvoiceAdjustment",
    "InvoiceAnomaly",
    "InvoiceLine",
    "InvoiceReconciliation",
    "IsolationAudit",
    "IsolationViolation",
    "MetricsResult",
    "Node",
    "NodeEvent",
    "NodeReplacement",
    "NodeSamples",
    "NotFoundError",
    "Operation",
    "Outliers",
    "Page",
    "PeerGroup",
    "PermissionDeniedError",
    "QueryStats",
    "ResourceExhaustedError",
    "RetryPolicy",
    "Series",
    "SeriesSamples",
    "SparePool",
    "Tenant",
    "UnauthenticatedError",
    "UnavailableError",
    "UsageEvent",
    "WriteResult",
]
