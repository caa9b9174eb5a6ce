"""One node: its pipeline stages, the per-host table, admission, and the wiring that starts them in order."""
