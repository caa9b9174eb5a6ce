"""crawler_node: a peer-to-peer distributed web crawler with flow control at every stage."""

__version__ = "0.1.0"
