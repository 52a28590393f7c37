"""Our modules' imports: no cycles (every module imports in isolation), and no module imports a higher level."""

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
            submodules = [f"{base}.{alias.name}" for alias in node.names]
            # `from package import module` runs the package's __init__ too, but imports only the module.
            names_from_base = [name for name in submodules if name not in modules]
            candidates = ([base] if names_from_base or not submodules else []) + submodules
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


@pytest.mark.parametrize("module", ["electra_tf.convert.ours", "electra_tf.convert.api", "electra_tf.training.pretraining"])
def test_graph_sees_known_edges(module):
    graph = import_graph()
    expected = {"electra_tf.convert.ours": "electra_tf.model.encoder", "electra_tf.convert.api": "electra_tf.convert.ours",
                "electra_tf.training.pretraining": "electra_tf.convert.ours"}[module]
    assert expected in graph[module]


# Levels by module-name prefix (the longest matching prefix wins): a module may import its own level and
# those below, never a higher one. The table states the intended architecture; where today's code breaks
# it, ALLOWED_VIOLATIONS lists the import with its reason.
LEVELS = {
    "electra_tf.text": 0,  # the text contract: tokenizer, manifest; shared by data_prep and the library
    "electra_tf.runtime": 0,  # the entry points' process set-up; imports nothing
    "electra_tf.config": 1,
    "electra_tf.options": 1,
    "electra_tf.ops": 1,  # the ops: reference (Keras ops) and XLA:CPU kernels, random bits, constants, replica sums
    "electra_tf.model": 2,  # layers, embeddings, transformer layer, encoder, heads, masking, pre-trainer, FLOPs
    "electra_tf.training": 3,  # loop, optimizer, distribution, pre-emption, input, run lock, the run itself
    "electra_tf.finetuning": 4,
    "electra_tf.convert": 4,
    "electra_tf.detect": 4,
    "electra_tf.serving": 4,  # text-in SavedModels of fine-tuned models; finetuning.export writes them
    "electra_tf.ask": 4,
    "electra_tf.tag": 4,
    "data_prep": 4,  # command-line tools: may import electra_tf.text; nothing in electra_tf imports them
}
# The package's __init__ (it imports nothing), matched exactly: as a prefix it would cover every module.
EXACT_LEVELS = {"electra_tf": 0}

# (importer, imported prefix): the reason the import may cross levels upwards, until the code moves.
ALLOWED_VIOLATIONS = {
    ("electra_tf.training.pretraining", "electra_tf.convert"):
        "the export lives in convert",
    ("electra_tf.training.restore", "electra_tf.convert"):
        "--init_checkpoint of any format lives in convert",
    ("electra_tf.training.run_record", "electra_tf.convert"):
        "the run config file's name and reader live in convert (its converters read a run's config)",
}


def level_of(module: str):
    """The module's level, or None when the table gives it none."""
    if module in EXACT_LEVELS:
        return EXACT_LEVELS[module]
    prefixes = [p for p in LEVELS if module == p or module.startswith(p + ".")]
    return LEVELS[max(prefixes, key=len)] if prefixes else None


def covers(entry: tuple, importer: str, imported: str) -> bool:
    """Whether the ALLOWED_VIOLATIONS entry (importer, imported prefix) is this import."""
    return importer == entry[0] and (imported == entry[1] or imported.startswith(entry[1] + "."))


def allowed(importer: str, imported: str) -> bool:
    return any(covers(entry, importer, imported) for entry in ALLOWED_VIOLATIONS)


def upward_imports(graph: dict) -> list:
    """(importer, its level, imported, its level) for every import of a higher level (modules with no level
    are left to test_every_module_has_a_level)."""
    found = []
    for name in sorted(graph):
        for child in sorted(graph[name]):
            levels = level_of(name), level_of(child)
            if None not in levels and levels[1] > levels[0]:
                found.append((name, levels[0], child, levels[1]))
    return found


def test_every_module_has_a_level():
    missing = [name for name in sorted(our_modules()) if level_of(name) is None]
    assert not missing, "no level in LEVELS (tests/test_import_graph.py) for: " + ", ".join(missing)


def test_no_module_imports_a_higher_level():
    found = [v for v in upward_imports(import_graph()) if not allowed(v[0], v[2])]
    assert not found, "imports of a higher level:\n" + "\n".join(
        f"  {a} (level {la}) -> {b} (level {lb})" for a, la, b, lb in found)


def test_allowed_violations_still_happen():
    """An entry whose import is gone (or no longer crosses levels upwards) must be removed."""
    happening = upward_imports(import_graph())
    stale = [entry for entry in ALLOWED_VIOLATIONS if not any(covers(entry, a, b) for a, _, b, _ in happening)]
    assert not stale, "ALLOWED_VIOLATIONS lists imports that no longer break the levels: " + ", ".join(
        f"{a} -> {b}" for a, b in stale)


def test_the_library_does_not_import_data_prep():
    found = [(name, child) for name, children in sorted(import_graph().items()) if name.startswith("electra_tf")
             for child in sorted(children) if child == "data_prep" or child.startswith("data_prep.")]
    assert not found, "electra_tf imports the data_prep command-line package: " + ", ".join(
        f"{a} -> {b}" for a, b in found)


def test_the_level_checker_finds_an_upward_import():
    graph = {"electra_tf.config": {"electra_tf.training.pretraining"}, "electra_tf.training.pretraining": {"electra_tf.config"}}
    assert upward_imports(graph) == [("electra_tf.config", 1, "electra_tf.training.pretraining", 3)]
    assert level_of("electra_tf.convert.cli") == 4 and level_of("electra_tf") == 0
    assert level_of("electra_tf.unknown") is None
