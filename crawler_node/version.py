"""The package's version, in a module of its own: the node reads it without importing the
package's ``__init__``, which offers the Python API (crawler_node.embedded, which imports the node)."""

__version__ = "0.1.0"
