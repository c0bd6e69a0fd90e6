"""Everything that talks to the gpucloud API from outside: the Python client and the CLI.

from clients import Client
with Client("127.0.0.1:50051", token) as client:
    allocation = client.create_allocation(gpu_model="H100", node_count=2)
"""

from clients.async_client import AsyncClient, CreatedTenant, RetryPolicy
from clients.billing import FinalizedInvoice, Invoice, InvoiceAdjustment, InvoiceAnomaly, InvoiceLine, UsageEvent
from clients.errors import (
    AbortedError,
    AlreadyExistsError,
    DeadlineExceededError,
    FailedPreconditionError,
    GpucloudError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
)
from clients.models import Allocation, Gpu, Node, NodeEvent, Operation, Page, Tenant
from clients.sync_client import Client

__all__ = [
    "AbortedError",
    "Allocation",
    "AlreadyExistsError",
    "AsyncClient",
    "Client",
    "CreatedTenant",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "FinalizedInvoice",
    "Gpu",
    "GpucloudError",
    "InternalError",
    "InvalidArgumentError",
    "Invoice",
    "InvoiceAdjustment",
    "InvoiceAnomaly",
    "InvoiceLine",
    "Node",
    "NodeEvent",
    "NotFoundError",
    "Operation",
    "Page",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "RetryPolicy",
    "Tenant",
    "UnauthenticatedError",
    "UnavailableError",
    "UsageEvent",
]
