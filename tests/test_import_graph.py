"""Our modules' imports: no cycles between modules nor between packages (every module imports in isolation), and
no module imports a higher level. Covers the library, data_prep and the experiments."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("electra_tf", "data_prep", "experiments")


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def our_modules() -> dict:
    return {module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def imported(path: pathlib.Path, name: str, modules) -> set:
    """Our modules that `path` imports, at any depth of its code (function-level imports count too)."""
    return imported_source(path.read_text(encoding="utf-8"), name, modules, is_package=path.name == "__init__.py")


def imported_source(source: str, name: str, modules, is_package: bool = False) -> set:
    """Our modules that the source of module `name` imports (see `imported`)."""
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
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


# A library package's command-line modules (`python -m electra_tf.convert`: its `__main__` and the `cli` it runs).
COMMAND_MODULES = ("cli", "__main__")


def package_of(module: str) -> str:
    """The unit whose ties the package-cycle check reads: a package of the library (`electra_tf.serving`) or a
    module directly in it (`electra_tf.config`), a package's command line (`electra_tf.convert.cli`,
    `electra_tf.convert.__main__`), `data_prep`, the experiments' library (`experiments.lib`), or an experiment's
    module (each experiment is its own unit).

    A command is an application above the library packages (as `electra_tf.ask` and `electra_tf.tag` are, level 6):
    `python -m electra_tf.convert` may hand a fine-tuned run to serving, which imports fine-tuning, which imports
    convert's library. So the command is a unit of its own, not part of its package: its ties do not count as its
    package's, while a library module of the package importing its command (or what the command imports) still
    closes a cycle."""
    parts = module.split(".")
    if parts[0] == "electra_tf":
        if len(parts) == 3 and parts[2] in COMMAND_MODULES:
            return module
        return ".".join(parts[:2])
    if parts[0] == "experiments" and len(parts) > 2:
        return ".".join(parts[:2])
    return module if parts[0] == "experiments" else parts[0]


def package_graph(graph: dict) -> dict:
    """`graph` (module → the modules it imports) read between packages: package → the other packages it imports."""
    packages = {}
    for name, children in graph.items():
        edges = packages.setdefault(package_of(name), set())
        edges.update(package_of(child) for child in children if package_of(child) != package_of(name))
    return packages


def test_no_package_imports_another_that_imports_it():
    """One direction between packages (serving imports fine-tuning, never the reverse), function-level imports
    included: a lazy import does not hide a tie."""
    cycle = find_cycle(package_graph(import_graph()))
    assert cycle is None, "packages that import each other: " + " -> ".join(cycle)


def test_the_package_graph_sees_a_tie_hidden_in_a_function():
    graph = {"electra_tf.serving.tagging": {"electra_tf.finetuning.conll"},
             "electra_tf.finetuning.export": {"electra_tf.serving.squad"},
             "electra_tf.finetuning.conll": set(), "electra_tf.serving.squad": set()}
    assert find_cycle(package_graph(graph)) == ["electra_tf.finetuning", "electra_tf.serving", "electra_tf.finetuning"]
    assert package_of("experiments.lib.runner") == "experiments.lib"
    assert package_of("experiments.efficiency_report") == "experiments.efficiency_report"
    source = "def report():\n    from experiments import efficiency_report\n"
    modules = {"experiments.efficiency_curve": None, "experiments.efficiency_report": None}
    assert "experiments.efficiency_report" in imported_source(source, "experiments.efficiency_curve", modules)


def test_a_command_is_a_unit_above_its_package():
    """Convert's command may reach fine-tuning through serving; convert's library modules may not."""
    commands = {"electra_tf.convert.cli": {"electra_tf.serving.convert_finetuned", "electra_tf.convert.api"},
                "electra_tf.serving.convert_finetuned": {"electra_tf.finetuning.finetuned_run"},
                "electra_tf.finetuning.finetuned_run": {"electra_tf.convert.finetuned"},
                "electra_tf.convert.api": {"electra_tf.convert.finetuned"}, "electra_tf.convert.finetuned": set()}
    assert package_of("electra_tf.convert.cli") == "electra_tf.convert.cli"
    assert package_of("electra_tf.detect.__main__") == "electra_tf.detect.__main__"
    assert package_of("electra_tf.convert.api") == "electra_tf.convert"
    assert find_cycle(package_graph(commands)) is None
    # ... but a library module of the package may not: nor may it import its own command back.
    library_tie = {**commands, "electra_tf.convert.api": {"electra_tf.serving.convert_finetuned"}}
    assert find_cycle(package_graph(library_tie)) == [
        "electra_tf.convert", "electra_tf.serving", "electra_tf.finetuning", "electra_tf.convert"]
    command_back = {**commands, "electra_tf.convert.api": {"electra_tf.convert.cli"}}
    assert find_cycle(package_graph(command_back)) == [
        "electra_tf.convert", "electra_tf.convert.cli", "electra_tf.convert"]


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("module", ["electra_tf.convert.export_dir", "electra_tf.convert.api", "electra_tf.training.pretraining"])
def test_graph_sees_known_edges(module):
    graph = import_graph()
    expected = {"electra_tf.convert.export_dir": "electra_tf.model.encoder", "electra_tf.convert.api": "electra_tf.convert.export_dir",
                "electra_tf.training.pretraining": "electra_tf.convert.export_dir"}[module]
    assert expected in graph[module]


# Levels by module-name prefix (the longest matching prefix wins): a module may import its own level and
# those below, never a higher one. The table states the intended architecture; where today's code breaks
# it, ALLOWED_VIOLATIONS lists the import with its reason.
LEVELS = {
    "electra_tf.text": 0,  # the text contract: tokenizer, manifest; shared by data_prep and the library
    "electra_tf.runtime": 0,  # the entry points' process set-up; imports nothing
    "electra_tf.config": 1,
    "electra_tf.objective_registry": 1,  # the objectives by name; imports their implementations (model) by name
    "electra_tf.options": 1,
    "electra_tf.ops": 1,  # the ops: reference (Keras ops) and XLA:CPU kernels, random bits, constants, replica sums
    "electra_tf.model": 2,  # layers, embeddings, transformer layer, encoder, heads, masking, pre-trainer, FLOPs
    "electra_tf.training": 3,  # loop, optimizer, distribution, pre-emption, input, run lock, the run itself
    "electra_tf.finetuning": 4,  # tasks, the fine-tuning run; never serving (run_finetuning.py hands it the export)
    "electra_tf.convert": 4,
    "electra_tf.convert.cli": 6,  # the command: converts a fine-tuning run through serving (convert_finetuned)
    "electra_tf.convert.__main__": 6,
    "electra_tf.detect": 4,
    "electra_tf.serving": 5,  # text-in SavedModels of fine-tuned models: imports fine-tuning's model, tasks, schemes
    "electra_tf.ask": 6,  # the commands over serving's exports
    "electra_tf.tag": 6,
    "data_prep": 4,  # command-line tools: may import electra_tf.text; nothing in electra_tf imports them
    # The experiments: above the library; nothing in electra_tf or data_prep imports them.
    "experiments.provenance": 7,  # a run's commit and machine
    "experiments.lib": 8,  # what several experiments share: the protocol, the runner, the records
    "experiments": 10,  # an experiment's script (its entry point); it may import its own level-9 modules
    "experiments.objectives_report": 9,  # an experiment's report and plan: below its script, never importing it
    "experiments.efficiency_milestones": 9,
    "experiments.efficiency_report": 9,
    "experiments.domain_adaptation_plan": 9,
    "experiments.domain_adaptation_data": 9,
    "experiments.domain_adaptation_report": 9,
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


def test_no_experiment_script_imports_another():
    """Scripts (level 10) share code through experiments.lib, not through one another."""
    graph = import_graph()
    scripts = {name for name in graph if name.startswith("experiments.") and level_of(name) == LEVELS["experiments"]}
    found = sorted((name, child) for name in scripts for child in graph[name] if child in scripts)
    assert not found, "experiment scripts importing one another: " + ", ".join(f"{a} -> {b}" for a, b in found)


def test_serving_sits_above_finetuning_and_the_experiments_above_the_library():
    assert level_of("electra_tf.serving.export") > level_of("electra_tf.finetuning.runner")
    assert level_of("experiments.efficiency_curve") > level_of("experiments.efficiency_report") \
        > level_of("experiments.lib.runner") > level_of("electra_tf.serving.tagging")


def test_the_level_checker_finds_an_upward_import():
    graph = {"electra_tf.config": {"electra_tf.training.pretraining"}, "electra_tf.training.pretraining": {"electra_tf.config"}}
    assert upward_imports(graph) == [("electra_tf.config", 1, "electra_tf.training.pretraining", 3)]
    assert level_of("electra_tf.convert.cli") == 6 and level_of("electra_tf.convert.api") == 4
    assert level_of("electra_tf") == 0
    assert level_of("electra_tf.unknown") is None
