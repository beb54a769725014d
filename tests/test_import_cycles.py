"""No import circles among Winnow's modules, inside a folder included.

import-linter's floors (pyproject ``[tool.importlinter]``) stop an import running up a floor, but two
modules of one floor or one folder may still import each other, often hidden by an import inside a
function or under ``TYPE_CHECKING``. grimp (which import-linter runs on) counts every import, those
included; this test finds each strongly connected group of the graph and fails on any of more than
one module, naming the modules and an import that closes the circle.
"""

from __future__ import annotations

import grimp

#: Circles known and owned elsewhere, each with why it is allowed for now. The test also fails when
#: one of these is gone, so the allowance goes with it.
KNOWN: dict[frozenset[str], str] = {}


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's groups of mutually reachable modules, iteratively (the graph is a few hundred deep)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    groups.append(group)
    return groups


def import_graph() -> tuple[grimp.ImportGraph, dict[str, set[str]]]:
    graph = grimp.build_graph("winnow", exclude_type_checking_imports=False)
    return graph, {module: set(graph.find_modules_directly_imported_by(module)) for module in graph.modules}


def test_the_cycle_finder_finds_a_circle_and_only_it():
    groups = strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()})
    assert sorted(map(sorted, (g for g in groups if len(g) > 1))) == [["a", "b", "c"]]


def test_no_import_circles():
    graph, edges = import_graph()
    circles = [group for group in strongly_connected(edges) if len(group) > 1]
    unexpected = []
    for group in circles:
        if frozenset(group) in KNOWN:
            continue
        # One import of the circle, where it is, so the message says what to untie.
        first = min(group)
        back = next(m for m in sorted(group) if first in edges[m])
        lines = graph.get_import_details(importer=back, imported=first)
        where = ", ".join(f"{d['importer']} line {d['line_number']}: {d['line_contents']}" for d in lines)
        unexpected.append(f"{' ↔ '.join(sorted(group))} (e.g. {where})")
    assert not unexpected, "import circles (move what both need into a small module both import):\n" + \
        "\n".join(unexpected)
    stale = [sorted(known) for known in KNOWN if not any(frozenset(group) == known for group in circles)]
    assert not stale, f"no longer circles: remove them from KNOWN: {stale}"
