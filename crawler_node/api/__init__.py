"""The node's HTTP API: endpoints, status, Prometheus metrics and the dashboard."""
