"""The durable frontier: per-host queues, the exact seen-set, priorities, leases, and the outbox of URLs owed to peers."""
