"""Helpers around a node: the CLI's HTTP client, status reports, child processes, the demo."""
