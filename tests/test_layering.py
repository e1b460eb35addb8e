"""Imports go one way (hwmodels <- workloads <- simulator <- validation <- infersim), and simpy lives in simulator/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

LAYERS = ["hwmodels", "workloads", "simulator", "validation", "infersim"]


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


def test_cost_layers_import_no_gpu_framework_at_module_level():
    for layer in ("hwmodels", "workloads", "simulator"):
        for path in (ROOT / layer).rglob("*.py"):
            names = {n for n, _ in _imports(path)}
            assert not names & {"torch", "triton"}, f"{path} imports a GPU framework"
