"""The wheel is the product: every data file the packages carry in the repository (specs, calibrations, catalog
models, scenarios and overlays, the measured rows and compiled-code tables `validate` reads, the published tables)
is in the built wheel, so that `pip install .` runs what a clone runs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hwmodels", "workloads", "compiled", "simulator", "traces", "validation", "companion", "infersim")
# generated pages, rewritten by `infersim validate --write-report`; the commands that read data never open them
NOT_PACKAGED = {"validation/report_h200.html"}


def _wheel(tmp_path: Path) -> Path:
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", *isolation, "-w", str(tmp_path),
                    str(ROOT)], check=True, capture_output=True, timeout=600)
    (wheel,) = tmp_path.glob("infersim-*.whl")
    return wheel


def test_every_data_file_of_the_packages_is_in_the_wheel(tmp_path):
    tracked = subprocess.run(["git", "ls-files", *PACKAGES], cwd=ROOT, check=True, capture_output=True,
                             text=True).stdout.split()
    data = {p for p in tracked if not p.endswith(".py")} - NOT_PACKAGED
    assert len(data) > 100  # specs, models, scenarios, measured rows: the listing found them
    with zipfile.ZipFile(_wheel(tmp_path)) as wheel:
        packaged = set(wheel.namelist())
    assert not sorted(data - packaged), "data files missing from the wheel (pyproject.toml package-data)"
    assert {"compiled/data/h200_timing.json", "simulator/scenarios/changes/dcp8.yaml",
            "validation/published/serving.csv"} <= packaged
