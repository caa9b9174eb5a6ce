"""The package's layers, checked on its import graph: no import cycle between modules (nor between
the packages of crawler_node), `core/` imports nothing of the package outside itself, `cluster/`
does not import the settings, and the data directory's names sit below everything.

The graph is grimp's (the one import-linter checks its contracts on), read from the source: every
import counts, at module level, inside a function (a lazy import is still a dependency) and under
`if TYPE_CHECKING:` (the type checker follows it: a module still knows the other)."""

from __future__ import annotations

import grimp
import pytest

PACKAGE = "crawler_node"
CORE = f"{PACKAGE}.core"
CLUSTER = f"{PACKAGE}.cluster"
SETTINGS = f"{PACKAGE}.settings"
LAYOUT = f"{PACKAGE}.datadir_layout"

# The imports that break these rules today, each (importer, imported), allowed until the grouped
# configuration of issue 45 takes Settings out of cluster/ and core/. Delete an entry with the
# import it names (an entry whose import is gone fails test_the_allowance_names_imports_that_exist),
# and the allowance with its last entry.
KNOWN_UNTIL_CONFIG_GROUPS: frozenset[tuple[str, str]] = frozenset()  # none left: the config groups landed


@pytest.fixture
def graph() -> grimp.ImportGraph:
    """The package's import graph, less the imports allowed above."""
    graph = grimp.build_graph(PACKAGE, cache_dir=None)
    for importer, imported in KNOWN_UNTIL_CONFIG_GROUPS:
        if graph.direct_import_exists(importer=importer, imported=imported):
            graph.remove_import(importer=importer, imported=imported)
    return graph


def _imports(graph: grimp.ImportGraph) -> list[tuple[str, str]]:
    return sorted((module, imported) for module in graph.modules
                  for imported in graph.find_modules_directly_imported_by(module))


def _cycles(graph: grimp.ImportGraph) -> list[tuple[str, ...]]:
    """One shortest cycle through each import that closes one (a cycle exists if and only if
    some import a -> b has a way back b ->* a), each cycle once."""
    cycles: dict[frozenset[str], tuple[str, ...]] = {}
    for importer, imported in _imports(graph):
        back = graph.find_shortest_chain(importer=imported, imported=importer)
        if back is not None:
            cycles.setdefault(frozenset(back), (importer, *back))
    return sorted(cycles.values())


def _where(graph: grimp.ImportGraph, importer: str, imported: str) -> str:
    lines = sorted(detail["line_number"] for detail in graph.get_import_details(importer=importer, imported=imported))
    return f"{importer} -> {imported} (line {', '.join(map(str, lines))})"


def test_the_allowance_names_imports_that_exist() -> None:
    graph = grimp.build_graph(PACKAGE, cache_dir=None)
    gone = sorted((importer, imported) for importer, imported in KNOWN_UNTIL_CONFIG_GROUPS
                  if not graph.direct_import_exists(importer=importer, imported=imported))
    assert not gone, f"these imports are gone: delete them from KNOWN_UNTIL_CONFIG_GROUPS: {gone}"


def test_no_import_cycle_between_modules(graph: grimp.ImportGraph) -> None:
    cycles = _cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_no_import_cycle_between_the_packages(graph: grimp.ImportGraph) -> None:
    """crawler_node's packages (core, cluster, frontier, store, runtime, ...) and top-level
    modules (settings, cli, ...), each taken whole: one may use another, never both ways."""
    def part(module: str) -> str:
        return ".".join(module.split(".")[:2])

    parts = grimp.ImportGraph()
    for importer, imported in _imports(graph):
        if part(importer) != part(imported):
            parts.add_import(importer=part(importer), imported=part(imported))
    cycles = _cycles(parts)
    assert not cycles, "package cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_core_imports_nothing_of_the_package_outside_core(graph: grimp.ImportGraph) -> None:
    """core/ is the pure policy (ring, limiter, backoff, URLs, scope...): it takes plain values,
    never the settings or a component."""
    outside = [_where(graph, module, imported) for module, imported in _imports(graph)
               if (module == CORE or module.startswith(f"{CORE}."))
               and not (imported == CORE or imported.startswith(f"{CORE}."))]
    assert not outside, "core/ imports:\n" + "\n".join(outside)


def test_cluster_does_not_import_the_settings(graph: grimp.ImportGraph) -> None:
    """cluster/ takes its configuration as typed values from the one place that reads Settings."""
    found = [_where(graph, module, imported) for module, imported in _imports(graph)
             if module.startswith(f"{CLUSTER}.") and imported.split(".")[:2] == SETTINGS.split(".")]
    assert not found, "cluster/ imports the settings:\n" + "\n".join(found)


def test_the_data_directory_layout_imports_nothing_of_the_package(graph: grimp.ImportGraph) -> None:
    assert graph.find_modules_directly_imported_by(LAYOUT) == set()
