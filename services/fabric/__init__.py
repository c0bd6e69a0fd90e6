"""Fabric isolation: each tenant's partition key, the partitions a node must be in, and the
audit of what agents report against that."""
