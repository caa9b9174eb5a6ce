"""``--pipeline`` values to callables.

``module:attr`` imports `module` (from the installed packages, or from the working directory)
and looks up `attr` in it (dotted: ``pkg.mod:Class.method``);
a name without ``:`` is an entry point in the group ``crawler_node.pipelines``, so any installed
package can offer pipelines by name. Each failure is a `PipelineError` whose text is one line
naming the spec and the cause: the CLI prints it and exits 2, before the node starts.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata

from crawler_node.pipelines import ENTRY_POINT_GROUP, Pipeline


class PipelineError(ValueError):
    """A ``--pipeline`` value that does not name a callable. `spec` is the value as given,
    `reason` the cause; the message is one line."""

    def __init__(self, spec: str, reason: str) -> None:
        self.spec = spec
        self.reason = reason
        super().__init__(f"--pipeline {spec!r}: {reason}")


@dataclass(frozen=True, slots=True)
class NamedPipeline:
    """A loaded pipeline and the name it is reported under (its spec, as given)."""

    name: str
    pipeline: Pipeline


def load_pipelines(specs: Sequence[str]) -> list[NamedPipeline]:
    """The pipelines named by `specs`, in order. Raises `PipelineError` for the first that fails."""
    loaded: list[NamedPipeline] = []
    seen: set[str] = set()
    for raw_spec in specs:
        spec = raw_spec.strip()
        if spec in seen:
            # Its items would be written twice and its errors could not be told apart.
            raise PipelineError(raw_spec, "given more than once")
        seen.add(spec)
        loaded.append(NamedPipeline(spec, load_pipeline(spec)))
    return loaded


def load_pipeline(spec: str) -> Pipeline:
    """The callable `spec` names: ``module:attr`` or an entry point name."""
    if ":" in spec:
        module_name, _, attr_path = spec.partition(":")
        if not module_name or not attr_path or ":" in attr_path:
            raise PipelineError(spec, "expected MODULE:CALLABLE (e.g. mypkg.pipes:extract) or an entry point name")
        target = _from_module(spec, module_name.strip(), attr_path.strip())
    elif spec:
        target = _from_entry_point(spec)
    else:
        raise PipelineError(spec, "empty; expected MODULE:CALLABLE or an entry point name")
    if not callable(target):
        raise PipelineError(spec, f"is not callable (it is a {type(target).__name__})")
    return target


def _from_module(spec: str, module_name: str, attr_path: str) -> object:
    _search_working_directory()
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as exc:
        where = f"searched the working directory {os.getcwd()} and the installed packages"
        raise PipelineError(spec, f"cannot import module {module_name!r}: {_one_line(exc)} ({where})") from exc
    except Exception as exc:  # the module's own code failed while importing (SyntaxError, ...)
        raise PipelineError(
            spec, f"importing module {module_name!r} failed: {type(exc).__name__}: {_one_line(exc)}"
        ) from exc
    owner = f"module {module_name!r}"
    looked_up = f"{module_name}:"
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise PipelineError(spec, f"{owner} has no attribute {part!r}") from exc
        looked_up += part
        owner = repr(looked_up)
        looked_up += "."
    return target


def _search_working_directory() -> None:
    """A pipeline module beside the crawl (`mypipe.py` in the directory the node is run from)
    imports, as Scrapy's project modules do: the console script's sys.path starts with its own
    bin directory, not the working directory. Appended, so an installed package of the same name
    wins; the parser processes do the same when they load the pipelines."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


def _from_entry_point(spec: str) -> object:
    found = metadata.entry_points(group=ENTRY_POINT_GROUP)
    matches = [entry_point for entry_point in found if entry_point.name == spec]
    if not matches:
        names = sorted({entry_point.name for entry_point in found})
        installed = ", ".join(names) if names else "none is installed"
        raise PipelineError(
            spec, f"no entry point of that name in group {ENTRY_POINT_GROUP!r} (installed: {installed})"
        )
    entry_point = matches[0]  # two distributions offering one name: the first found, as pip's scripts do
    try:
        return entry_point.load()
    except Exception as exc:
        raise PipelineError(
            spec, f"entry point {entry_point.value!r} failed to load: {type(exc).__name__}: {_one_line(exc)}"
        ) from exc


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
