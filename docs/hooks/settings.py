"""MkDocs hook: every setting of `crawler-node run`, rendered into configuration.md.

The lines come from where `--help` takes them: `crawler_node.settings_help` (each setting's
help line and its group) and the `Settings` dataclass (its default), so the page lists the
same settings, in the same groups, as `crawler-node run --help`. The marker `<!-- settings -->`
in configuration.md is replaced at build time.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

MARKER = "<!-- settings -->"
PAGE = "configuration.md"


def on_config(config: Any) -> Any:
    root = str(Path(config.config_file_path).resolve().parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lost its {MARKER} marker: the settings have nowhere to go")
    return markdown.replace(MARKER, render())


def render() -> str:
    from crawler_node import settings_help
    from crawler_node.settings import ENV_PREFIX, Settings

    try:  # the CLI's singular names for repeatable options (--peer, --seed); else the field's name
        from crawler_node.cli import _FLAG_NAMES as flag_names
    except ImportError:
        flag_names = {}
    defaults = {field.name: _default(field) for field in dataclasses.fields(Settings)}
    out: list[str] = []
    for title, names in settings_help.GROUPS.items():
        out += [f"### {title[0].upper()}{title[1:]}", "", "| option | default | what it sets |", "|---|---|---|"]
        for name in names:
            flag = "--" + flag_names.get(name, name.replace("_", "-"))
            env = ENV_PREFIX + name.upper()
            out.append(f"| `{flag}`<br>`{env}` | {defaults.get(name, '')} | {_cell(settings_help.HELP[name])} |")
        out.append("")
    return "\n".join(out)


def _default(field: dataclasses.Field) -> str:
    if field.name == "node_id":
        return "the host name"
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return ""
    if value is None or value == []:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, Path):
        return f"`{value if value.is_absolute() else './' + str(value)}`"
    if isinstance(value, int):
        return f"{value:,}"
    return f"`{value}`"


def _cell(text: str) -> str:
    text = " ".join(str(text).split())
    return text.replace("|", "\\|").replace("*", "\\*").replace("<", "&lt;").replace(">", "&gt;")
