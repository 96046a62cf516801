"""The house rules, checked on the source: imports flow one way, from the pytest side and the
command down to the cost model, and only the layers that need them import pytest or torch.
Lazy imports (inside functions) count: they are dependencies all the same."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_neuronprof"

# Bottom to top. A module may import modules of its own layer and of the layers below it.
LAYERS = (
    ("errors", "vocabulary", "defaults", "values", "formatting", "files", "safetext", "jsontext",
     "inifiles"),
    ("costmodel",),
    ("profiler",),
    ("gate",),
    ("outputs",),
    ("plugin", "cli"),
)
TOP = ("__init__", "__main__")  # the package's face: may import anything
# Who may import these third-party packages (by first name part), anywhere in the module.
ALLOWED = {
    "pytest": ("plugin",),
    "torch": ("costmodel", "profiler", "plugin"),  # plugin: torch.__version__ for a summary
}


def _layer(part: str) -> int:
    for index, names in enumerate(LAYERS):
        if part in names:
            return index
    raise AssertionError(f"pytest_neuronprof/{part} is in no layer of tests/test_layers.py")


def _modules() -> dict[str, Path]:
    return {".".join(p.relative_to(PACKAGE).with_suffix("").parts): p
            for p in sorted(PACKAGE.rglob("*.py"))}


def _anchor(name: str, node: ast.expr | None) -> str | None:
    """The package a relative ``importlib.import_module(".x", package)`` resolves against, for
    module ``name``: ``__package__``, or ``__name__`` (in a package ``__init__``, the package)."""
    parts = name.split(".")
    if isinstance(node, ast.Name) and node.id == "__package__":
        parts = parts[:-1]
    elif isinstance(node, ast.Name) and node.id == "__name__":
        parts = parts[:-1] if parts[-1] == "__init__" else parts
    else:
        return None
    return ".".join(["pytest_neuronprof", *parts])


def _dynamic_imports(name: str, tree: ast.AST) -> tuple[set[str], list[str]]:
    """Modules imported by ``importlib.import_module`` or ``__import__`` calls with a literal
    name; and the calls the checker cannot follow (a computed name), unless the name is computed
    after a single leading dot against the module's own package (a lazy attribute of a package
    ``__init__``: it stays in that package)."""
    found: set[str] = set()
    unfollowed: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if called not in ("import_module", "__import__"):
            continue
        target = node.args[0]
        package = node.args[1] if called == "import_module" and len(node.args) > 1 else None
        package = next((k.value for k in node.keywords if k.arg == "package"), package)
        if isinstance(target, ast.Constant) and isinstance(target.value, str):
            module = target.value
            level = len(module) - len(module.lstrip("."))
            if not level:
                found.add(module)
                continue
            anchor = _anchor(name, package)
            if anchor is not None and anchor.count(".") >= level - 1:
                base = anchor.rsplit(".", level - 1)[0] if level > 1 else anchor
                found.add(".".join(filter(None, [base, module[level:]])))
                continue
        elif (isinstance(target, ast.JoinedStr) and target.values
              and isinstance(target.values[0], ast.Constant) and target.values[0].value == "."
              and _anchor(name, package) is not None):
            found.add(_anchor(name, package))
            continue
        unfollowed.append(f"{called}(...) at line {node.lineno}")
    return found, unfollowed


def _imports(name: str, source: str) -> set[str]:
    """Absolute names this module imports (package-internal ones as 'pytest_neuronprof.x.y'):
    the module of every import, and each name a ``from`` import takes from it, which may be a
    module too (``from .. import gate``: 'pytest_neuronprof.gate')."""
    package = name.split(".")[:-1]  # "plugin.session" and "plugin.__init__": ["plugin"]
    tree = ast.parse(source)
    found, _ = _dynamic_imports(name, tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                stem = ".".join(["pytest_neuronprof", *base, *([node.module] if node.module else [])])
            else:
                stem = node.module or ""
            found.add(stem)
            found.update(f"{stem}.{alias.name}" for alias in node.names if alias.name != "*")
    return found


def _face(source: str) -> dict[str, str]:
    """What the package's own ``__init__`` (its face, in TOP) gives by name: the module each
    name comes from, imported or lazily (``_LAZY``, relative to the package)."""
    names: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            stem = ".".join(["pytest_neuronprof", *([node.module] if node.module else [])]) \
                if node.level == 1 else node.module or ""
            for alias in node.names:
                names[alias.asname or alias.name] = f"{stem}.{alias.name}"
        elif (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
              and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets)):
            for key, value in zip(node.value.keys, node.value.values):
                if isinstance(key, ast.Constant) and isinstance(value, ast.Constant):
                    names[key.value] = f"pytest_neuronprof.{value.value}.{key.value}"
    return names


MODULES = _modules()
FACE = _face(MODULES["__init__"].read_text(encoding="utf-8"))


def _violations(name: str, source: str) -> list[str]:
    """Why module ``name`` (as in MODULES: "gate.compare", "gate.__init__"), whose text is
    ``source``, breaks the house rules; empty if it does not. A package ``__init__`` is checked
    at the layer of its package."""
    top = name.split(".")[0]
    if top in TOP:
        return []
    packages = {n.split(".")[0] for n in MODULES}
    problems = [f"{name}: {call} imports a module the checker cannot follow (name it literally)"
                for call in _dynamic_imports(name, ast.parse(source))[1]]
    for imported in sorted(_imports(name, source)):
        first = imported.split(".")[0]
        if first in ALLOWED and top not in ALLOWED[first]:
            problems.append(f"{name} imports {imported}")
        if first != "pytest_neuronprof":
            continue
        parts = imported.split(".")[1:]
        if parts and parts[0] not in packages:  # a name the package's __init__ gives
            if parts[0] not in FACE:
                problems.append(f"{name} imports {imported} from the package's __init__: import "
                                "it from the module that defines it")
                continue
            imported = FACE[parts[0]]
            parts = imported.split(".")[1:]
            if imported.split(".")[0] != "pytest_neuronprof" or parts[0] not in packages:
                continue
        if parts and _layer(parts[0]) > _layer(top):
            problems.append(f"{name} imports {imported}: a layer may only import its own layer "
                            "and those below it (see LAYERS)")
    return problems


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_flow_one_way(name: str):
    assert not _violations(name, MODULES[name].read_text(encoding="utf-8"))


# Modules the checker must catch, as (name, source): what the earlier checker let through (an
# absolute from-import of a package, a name of the package's __init__, import_module and
# __import__), and what it caught already (a package, a package __init__, lazy imports).
BREAKS = {
    "from .. import <package>": ("costmodel.roofline", "from .. import gate\ngate.compare.Status\n"),
    "absolute from-import of a package": ("costmodel.roofline", "from pytest_neuronprof import gate\n"),
    "a name of the package's __init__": ("costmodel.roofline", "from .. import NeuronConfig\n"),
    "a lazy name of the package's __init__": ("costmodel.roofline", "from .. import NeuronProfiler\n"),
    "a name the package's __init__ does not give": ("costmodel.roofline", "from .. import nothing\n"),
    "import_module with a literal name": (
        "costmodel.roofline",
        "import importlib\nimportlib.import_module('pytest_neuronprof.plugin')\n"),
    "import_module, imported by name": (
        "gate.compare", "from importlib import import_module\nimport_module('pytest_neuronprof.outputs')\n"),
    "relative import_module": (
        "costmodel.__init__", "import importlib\nimportlib.import_module('..plugin', __name__)\n"),
    "__import__": ("profiler.profiler", "__import__('pytest_neuronprof.gate.compare')\n"),
    "import_module with a computed name": (
        "costmodel.registry", "import importlib\nimportlib.import_module(f'pytest_neuronprof.{x}')\n"),
    "a package __init__, at its package's layer": ("gate.__init__", "from ..plugin import session\n"),
    "a lazy import in a package __init__": (
        "costmodel.__init__", "def load():\n    from ..profiler import profiler\n"),
    "torch outside its layers": ("gate.__init__", "def f():\n    import torch.nn\n"),
}


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_the_checker_catches(case: str):
    name, source = BREAKS[case]
    assert _violations(name, source), f"{case}: {source!r} as {name} passed the checker"


def test_the_checker_resolves_relative_imports_in_a_package_init():
    # In gate/__init__.py "." is the gate package (in gate/compare.py it is gate, too).
    assert "pytest_neuronprof.gate.compare" in _imports("gate.__init__", "from . import compare\n")
    assert "pytest_neuronprof.costmodel.registry" in _imports(
        "costmodel.__init__", "import importlib\nimportlib.import_module('.registry', __name__)\n")
    assert "pytest_neuronprof.costmodel" in _imports(
        "costmodel.__init__", "import importlib\nimportlib.import_module(f'.{x}', __name__)\n")
    assert _face("_LAZY = {'X': 'gate.compare'}\n") == {"X": "pytest_neuronprof.gate.compare.X"}
    # Allowed: the package's own modules, lower layers, and what the package's __init__ gives
    # from a layer at or below the importer's.
    assert not _violations("gate.__init__", "from . import compare\nfrom ..costmodel import roofline\n")
    assert not _violations("plugin.session", "from .. import NeuronConfig\n")


def test_no_import_cycles_between_modules():
    graph = {}
    for name, path in MODULES.items():
        graph[name] = {imported[len("pytest_neuronprof."):]
                       for imported in _imports(name, path.read_text(encoding="utf-8"))
                       if imported.startswith("pytest_neuronprof.")
                       and imported[len("pytest_neuronprof."):] in MODULES
                       and imported[len("pytest_neuronprof."):] != name}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if nxt.split(".")[-1] == "__init__" or nxt in TOP:
                continue
            if state.get(nxt) == 1:
                cycle = trail[trail.index(nxt):] + [nxt] if nxt in trail else [node, nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if not state.get(nxt):
                visit(nxt, trail + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if not state.get(node):
            visit(node, [node])
