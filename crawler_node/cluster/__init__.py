"""The ring, membership, heartbeats, outbox senders and hand-off sweeps between nodes."""
