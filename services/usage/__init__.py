"""Usage events: the durable record of which tenant held which GPU when, for billing."""
