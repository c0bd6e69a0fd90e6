"""The segment-based metrics store (a library with no gRPC in it); built by a later issue."""
