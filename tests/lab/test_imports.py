"""The lab's, the implementations' and the CLI's modules import each other without a cycle, counting the
imports inside function bodies too (a cycle hidden in a function is still a cycle)."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
AREAS = ("jaggedperf.lab", "jaggedperf.impls", "jaggedperf.cli")


def _modules() -> dict[str, Path]:
    out = {}
    for area in AREAS:
        for path in (SRC / area.replace(".", "/")).rglob("*.py"):
            parts = path.relative_to(SRC).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that ``name`` imports anywhere in its body (a package's submodules named
    in ``from package import x`` count as that submodule)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in found if m in modules and m != name}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_finder_sees_a_cycle_hidden_in_a_function():
    assert _cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_the_lab_impls_and_cli():
    modules = _modules()
    assert "jaggedperf.impls.registry" in modules and "jaggedperf.lab.sweep.scheduler" in modules
    graph = {name: _imports(path, name, modules) for name, path in modules.items()}
    assert "jaggedperf.impls.registry" in graph["jaggedperf.impls.jagged_mean"]  # the finder sees real imports
    cycle = _cycle(graph)
    if cycle:
        pytest.fail("import cycle: " + " -> ".join(cycle))
