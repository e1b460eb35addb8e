"""Every notebook in `notebooks/` (jupytext percent-format `.py` files) runs top to bottom through the README's
command (`jupytext --to ipynb --execute`, a Jupyter kernel under nbconvert) and writes its figures; a cell that
raises fails the test with the cell's error."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.py"))
FIGURES = {  # what each notebook must write
    "quickreduce_study": ("quickreduce_speedup.html", "quickreduce_end_to_end.html"),
    "calibration": ("calibration_kernel_rows.html", "calibration_engine_steps.html"),
    "kimi_k3_study": ("kimi_k3_frontier.html", "kimi_k3_mechanisms.html", "kimi_k3_drafts_dcp.html"),
}
TIMEOUT_S = 300  # per cell; each notebook is meant to finish in under 3 minutes on two cores


def test_every_notebook_has_its_figures_listed():
    assert {p.stem for p in NOTEBOOKS} == set(FIGURES)


# about four minutes for the three on two cores: behind the slow marker, run by CI as a step of its own
# (`pytest -m slow tests/notebooks`)
@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_readme_notebook_command_runs_each_notebook_and_writes_its_figures(path: Path, tmp_path):
    # as the README gives it, `jupytext --to ipynb --execute notebooks/NAME.py`, from a folder that is not the
    # repository's: the notebook finds its data as package data and writes figures/ beside itself
    pytest.importorskip("nbconvert")
    folder = tmp_path / "notebooks"
    folder.mkdir()
    shutil.copy(path, folder / path.name)
    env = {k: v for k, v in os.environ.items() if k != "INFERSIM_NOTEBOOK_OUT"}
    jupytext = Path(sys.executable).with_name("jupytext")
    done = subprocess.run([str(jupytext), "--to", "ipynb", "--execute", f"notebooks/{path.name}"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=TIMEOUT_S * 3)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (folder / f"{path.stem}.ipynb").is_file()
    for name in FIGURES[path.stem]:
        page = folder / "figures" / name
        assert page.is_file() and page.stat().st_size > 100_000, f"{path.name} did not write {name}"
    assert not (folder / "notebooks").exists()  # no stray notebooks/notebooks/figures
