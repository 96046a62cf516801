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
    ("errors", "vocabulary", "defaults", "values", "formatting", "files", "safetext"),
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


def _imports(name: str, path: Path) -> set[str]:
    """Absolute names this module imports (package-internal ones as 'pytest_neuronprof.x.y')."""
    package = name.split(".")[:-1]  # "plugin.session" and "plugin.__init__": ["plugin"]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                stem = ".".join(["pytest_neuronprof", *base, *([node.module] if node.module else [])])
                found.add(stem)
                found.update(f"{stem}.{alias.name}" for alias in node.names)
            else:
                found.add(node.module or "")
    return found


MODULES = _modules()


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_flow_one_way(name: str):
    path = MODULES[name]
    top = name.split(".")[0]
    for imported in sorted(_imports(name, path)):
        first = imported.split(".")[0]
        if first in ALLOWED and top not in TOP:
            assert top in ALLOWED[first], f"{name} imports {imported}"
        if first != "pytest_neuronprof" or top in TOP:
            continue
        parts = imported.split(".")[1:]
        if not parts or parts[0] not in {n.split(".")[0] for n in MODULES}:
            continue  # an attribute of the package, or of a module (checked as that module)
        assert _layer(parts[0]) <= _layer(top), (
            f"{name} imports {imported}: a layer may only import its own layer and those below "
            "it (see LAYERS)")


def test_no_import_cycles_between_modules():
    graph = {}
    for name, path in MODULES.items():
        graph[name] = {imported[len("pytest_neuronprof."):] for imported in _imports(name, path)
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
