"""The grader's modules import one another without a cycle, type-only imports (``if
TYPE_CHECKING:``) included: every module can be read, and moved, knowing only what is below it.

The graph is built by grimp (import-linter's graph library) from the source, nothing is imported.
"""

from __future__ import annotations

import grimp


def _graph(package: str, prefix: str) -> dict[str, set[str]]:
    """Module -> the modules it imports, for the modules of package `prefix` (its
    ``__init__`` included) and type-only imports included."""
    graph = grimp.build_graph(package, include_external_packages=False, cache_dir=None,
                              exclude_type_checking_imports=False)
    modules = {m for m in graph.modules if m == prefix or m.startswith(prefix + ".")}
    return {m: {i for i in graph.find_modules_directly_imported_by(m) if i in modules}
            for m in modules}


def _a_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules in order, the first repeated at the end), or None."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(module: str) -> list[str] | None:
        path.append(module)
        on_path.add(module)
        for imported in sorted(edges[module]):
            if imported in on_path:
                return path[path.index(imported):] + [imported]
            if imported not in done:
                found = visit(imported)
                if found:
                    return found
        on_path.discard(path.pop())
        done.add(module)
        return None

    for module in sorted(edges):
        if module not in done:
            found = visit(module)
            if found:
                return found
    return None


def test_the_grader_has_no_import_cycle_not_even_a_type_only_one():
    edges = _graph("scans", "scans.grader")
    assert "scans.grader.runner" in edges and "scans.grader.preflight" in edges
    assert edges["scans.grader.runner"] >= {"scans.grader.preflight", "scans.grader.measurement"}
    assert _a_cycle(edges) is None, " -> ".join(_a_cycle(edges) or [])


def test_the_check_sees_a_cycle_made_of_type_only_imports(tmp_path, monkeypatch):
    package = tmp_path / "cyclic_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from cyclic_pkg.b import B\n\nclass A:\n    b: B\n")
    (package / "b.py").write_text("from __future__ import annotations\n\n"
                                  "from typing import TYPE_CHECKING\n\n"
                                  "if TYPE_CHECKING:\n    from cyclic_pkg.a import A\n\n"
                                  "class B:\n    a: A\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    edges = _graph("cyclic_pkg", "cyclic_pkg")
    assert _a_cycle(edges) == ["cyclic_pkg.a", "cyclic_pkg.b", "cyclic_pkg.a"]


def test_the_preflight_types_live_with_what_a_scan_measured():
    from scans.grader import measurement, preflight

    assert preflight.Preflight is measurement.Preflight
    assert preflight.ModelsListing is measurement.ModelsListing
