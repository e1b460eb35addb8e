"""Imports go one way (hwmodels <- workloads <- compiled <- simulator <- traces <- validation <- companion <- infersim),
simpy lives in simulator/, and the companion lab (its Triton kernels and GPU bench) may import every product package
below infersim while none imports it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

LAYERS = ["hwmodels", "workloads", "compiled", "simulator", "traces", "validation", "companion", "infersim"]


def _modules() -> list[Path]:
    return sorted(p for layer in LAYERS for p in (ROOT / layer).rglob("*.py"))


def _imports(path: Path) -> list[tuple[str, int]]:
    """Top-level package names imported anywhere in the module (lazy imports count too)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name.split(".")[0], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module.split(".")[0], node.lineno))
    return found


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_go_one_way(path):
    layer = path.relative_to(ROOT).parts[0]
    rank = LAYERS.index(layer)
    for name, line in _imports(path):
        if name in LAYERS:
            assert LAYERS.index(name) <= rank, f"{path.relative_to(ROOT)}:{line} imports {name} (upward)"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_simpy_only_in_simulator(path):
    layer = path.relative_to(ROOT).parts[0]
    for name, line in _imports(path):
        if name == "simpy":
            assert layer == "simulator", f"{path.relative_to(ROOT)}:{line} imports simpy outside simulator/"


def test_the_checker_sees_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from simulator import cli\n")
    assert ("simulator", 2) in _imports(bad)


def _full_imports(path: Path) -> list[tuple[str, int]]:
    """Dotted module names imported anywhere in the module (lazy imports count too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
    return found


@pytest.mark.parametrize("path", sorted((ROOT / "simulator" / "cost").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_the_cost_layer_sees_neither_simpy_nor_the_serving_state(path):
    # simulator/cost sits between workloads and the serving simulation: the engine asks it, never the reverse.
    # Its one simpy module is the workgroup-level DES of a single launch (workgroup_des.py), its own clock.
    for name, line in _full_imports(path):
        inside = name == "simulator.cost" or name.startswith("simulator.cost.")
        assert inside or not (name == "simulator" or name.startswith("simulator.")), \
            f"{path.relative_to(ROOT)}:{line} imports {name} from the serving layer"
        if path.name != "workgroup_des.py":
            assert name.split(".")[0] != "simpy", f"{path.relative_to(ROOT)}:{line} imports simpy"


def test_the_cost_layer_checker_sees_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from simulator.engine import simulate_stream\n")
    assert ("simulator.engine", 2) in _full_imports(bad)


def test_only_the_cost_layer_keeps_memos_of_step_times():
    # the serving loop asks one question per cycle: no other serving module builds step plans or parts
    for path in (ROOT / "simulator").glob("*.py"):
        names = {n for n, _ in _full_imports(path)}
        allowed = {"simulator.cost.cycle"}
        assert not {n for n in names if n.startswith("simulator.cost.")} - allowed, f"{path} reaches behind cycle_s"
        assert "workloads.layers" not in names and "workloads.step" not in names, f"{path} builds step plans"


def test_cost_layers_import_no_gpu_framework_at_module_level():
    for layer in ("hwmodels", "workloads", "simulator"):
        for path in (ROOT / layer).rglob("*.py"):
            names = {n for n, _ in _imports(path)}
            assert not names & {"torch", "triton"}, f"{path} imports a GPU framework"


# ---- the module-level import graph: no cycles, and the companion lab imported by no one else (it ranks above
# validation/, whose suites and measurement writers it uses, but no product package, infersim included, imports it:
# compiled/companion_sources.py reads its kernel files by path as compiler input)

PACKAGES = sorted({layer.split(".")[0] for layer in LAYERS})
COMPANION = "companion"


def _module_files(root: Path = ROOT, packages: list[str] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the packages under root (a package is its __init__)."""
    files = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest prefix of a dotted name that is one of the known modules (None: outside them)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in known:
            return ".".join(parts[:end])
    return None


def _module_imports(name: str, known: dict[str, Path]) -> set[str]:
    """Known modules that module `name` imports anywhere in its file (imports inside functions count too).

    `from pkg import x` counts as importing `pkg.x` when that is a module, else `pkg`; relative imports are
    resolved against the module's package. A submodule's implicit import of its parent packages is not an edge.
    """
    path = known[name]
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str | None] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {_resolve(alias.name, known) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
            for alias in node.names:
                found.add(_resolve(f"{base}.{alias.name}", known) if f"{base}.{alias.name}" in known
                          else _resolve(base, known))
    return {m for m in found if m is not None and m != name}


def _import_graph(root: Path = ROOT, packages: list[str] = PACKAGES) -> dict[str, set[str]]:
    known = _module_files(root, packages)
    return {name: _module_imports(name, known) for name in known}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle, as a path a -> ... -> a, per strongly connected set of two or more modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    cycles = []
    for component in components:
        start = min(component)
        paths = {start: [start]}
        queue = [start]
        while queue:  # breadth first inside the component, until an edge leads back to the start
            v = queue.pop(0)
            if start in graph[v] and len(paths[v]) > 1:
                cycles.append([*paths[v], start])
                break
            for w in sorted(graph[v] & component):
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    queue.append(w)
    return cycles


def test_no_import_cycles():
    cycles = [" -> ".join(c) for c in _cycles(_import_graph())]
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_cycle_checker_catches_a_planted_cycle(tmp_path):
    package = tmp_path / "planted"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "one.py").write_text("from planted import two\n")
    (package / "two.py").write_text("def f():\n    from planted.one import f as g\n    return g\n")
    graph = _import_graph(tmp_path, ["planted"])
    assert graph == {"planted": set(), "planted.one": {"planted.two"}, "planted.two": {"planted.one"}}
    assert _cycles(graph) == [["planted.one", "planted.two", "planted.one"]]
    (package / "two.py").write_text("from . import __name__ as name\n")  # relative: the package, no cycle
    assert _cycles(_import_graph(tmp_path, ["planted"])) == []


def test_only_the_companion_imports_the_companion():
    for name, imports in _import_graph().items():
        if name == COMPANION or name.startswith(COMPANION + "."):
            continue
        bad = sorted(m for m in imports if m == COMPANION or m.startswith(COMPANION + "."))
        assert not bad, f"{name} imports the companion kernel extension: {', '.join(bad)}"


def test_traces_and_the_validation_product_import_no_gpu_framework():
    for path in _module_files(ROOT, ["traces", "validation"]).values():
        names = {n for n, _ in _imports(path)}
        assert not names & {"torch", "triton"}, f"{path.relative_to(ROOT)} imports a GPU framework"
