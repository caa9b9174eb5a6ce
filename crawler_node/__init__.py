"""crawler_node: a peer-to-peer distributed web crawler with flow control at every stage."""

from crawler_node.version import __version__

# The Python API (crawler_node.embedded): imported on first use, so that `import crawler_node`
# (the CLI's) stays light.
__all__ = ["Crawl", "Page", "Settings", "__version__", "make_settings"]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from crawler_node.embedded import Crawl, Page, make_settings
    from crawler_node.settings import Settings


def __getattr__(name: str) -> object:
    if name in ("Crawl", "Page", "make_settings"):
        from crawler_node import embedded

        return getattr(embedded, name)
    if name == "Settings":
        from crawler_node.settings import Settings

        return Settings
    raise AttributeError(f"module 'crawler_node' has no attribute {name!r}")
