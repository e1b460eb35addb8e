"""Every notebook in `notebooks/` (jupytext percent-format `.py` files) runs top to bottom in a Jupyter kernel
(nbclient) and writes its figures; a cell that raises fails the test with the cell's error."""

from __future__ import annotations

import os
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
def test_notebook_runs_and_writes_its_figures(path: Path, tmp_path, monkeypatch):
    jupytext = pytest.importorskip("jupytext")
    nbclient = pytest.importorskip("nbclient")
    notebook = jupytext.read(path)
    monkeypatch.setenv("INFERSIM_NOTEBOOK_OUT", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    client = nbclient.NotebookClient(notebook, timeout=TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT)}})
    client.execute()
    for name in FIGURES[path.stem]:
        page = tmp_path / name
        assert page.is_file() and page.stat().st_size > 100_000, f"{path.name} did not write {name}"
