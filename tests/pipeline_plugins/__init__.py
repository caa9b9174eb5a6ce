"""Pipelines the tests load by MODULE:CALLABLE (tests/ is put on the node's PYTHONPATH)."""
