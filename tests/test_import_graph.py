"""No import cycles among our modules (every module imports in isolation)."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("electra_tf", "data_prep")


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def our_modules() -> dict:
    return {module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def imported(path: pathlib.Path, name: str, modules) -> set:
    """Our modules that `path` imports, at any depth of its code (function-level imports count too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            candidates = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for candidate in candidates:
            # `import a.b.c` also runs a and a.b: the closest module of ours counts.
            while candidate and candidate not in modules:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                found.add(candidate)
    return found


def find_cycle(graph: dict):
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for child in sorted(graph[node]):
            if state.get(child) == "open":
                return stack[stack.index(child):] + [child]
            if child not in state:
                cycle = visit(child)
                if cycle:
                    return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def package_parents(name: str) -> set:
    """A module's own packages: importing it runs their __init__, which is not a cycle of its own making."""
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def import_graph() -> dict:
    modules = our_modules()
    return {name: imported(path, name, modules) - package_parents(name) for name, path in modules.items()}


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("module", ["electra_tf.convert.ours", "electra_tf.convert.api", "electra_tf.training"])
def test_graph_sees_known_edges(module):
    graph = import_graph()
    expected = {"electra_tf.convert.ours": "electra_tf.modeling", "electra_tf.convert.api": "electra_tf.convert.ours",
                "electra_tf.training": "electra_tf.convert.api"}[module]
    assert expected in graph[module]
