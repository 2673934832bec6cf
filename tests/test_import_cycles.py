"""No module of the host imports itself round a circle: a cycle between two modules (even through an
import inside a function or under TYPE_CHECKING) means neither can be read, tested or moved without the
other, and is where import-order bugs start. The packages are those the import-linter contracts cover
(pyproject's `root_packages`), so a new app is checked as soon as it is listed there."""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent


def host_packages() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(config["tool"]["importlinter"]["root_packages"])


def module_cycles(graph: grimp.ImportGraph) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[frozenset[str]] = []
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            module, imported = work[-1]
            step = next(imported, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.find_modules_directly_imported_by(step)))))
                elif step in on_stack:
                    low[module] = min(low[module], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == module:
                        break
                if len(component) > 1:
                    cycles.append(frozenset(component))
    return cycles


def test_no_module_of_the_host_is_part_of_an_import_cycle():
    graph = grimp.build_graph(*host_packages(), cache_dir=None)

    cycles = module_cycles(graph)

    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(sorted(cycle)) for cycle in cycles)


def test_the_cycle_finder_finds_a_cycle_of_three():
    graph = grimp.ImportGraph()
    for importer, imported in [("a.x", "a.y"), ("a.y", "a.z"), ("a.z", "a.x"), ("a.z", "a.w")]:
        graph.add_import(importer=importer, imported=imported)

    assert module_cycles(graph) == [frozenset({"a.x", "a.y", "a.z"})]
