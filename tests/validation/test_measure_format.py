"""The recorded measurement CSVs keep their contract, and the suites' cases, counts and columns are right.

Needs neither torch nor a GPU: the CSVs are read with the csv module.
"""

from __future__ import annotations

import csv
import datetime
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from validation import measure_output, suites
from validation.suites import gemm

DATA_DIR = ROOT / "validation" / "data" / "h200"
# Every one-GPU folder's rows keep the contract (data/h100/ holds a held-out draw and two probes measured on an H100)
GPU_DIRS = (DATA_DIR, ROOT / "validation" / "data" / "h100")
# The suites' CSVs; the probes' (probe_*.csv) have their own columns, checked below.
CSV_PATHS = sorted(p for d in GPU_DIRS for p in d.glob("*.csv") if not p.name.startswith("probe_"))
PROBE_PATHS = sorted(p for d in GPU_DIRS for p in d.glob("probe_*.csv"))
H200_PROBE_PATHS = sorted(DATA_DIR.glob("probe_*.csv"))

REQUIRED = (
    "kernel",
    "dtype",
    "launch_mode",
    "time_s_median",
    "time_s_p10",
    "time_s_p90",
    "repeats",
    "flop",
    "bytes",
    "sm_count",
    "gpu_name",
    "driver",
    "torch",
    "triton",
    "date",
)
PROVENANCE = ("sm_count", "gpu_name", "driver", "torch", "triton", "date")
SHAPE = {
    "gemm": ("m", "n", "k"),
    "copy_grid": ("grid", "n_elems", "block", "num_warps"),
    "launch": ("numel",),
}
TIMES = ("time_s_p10", "time_s_median", "time_s_p90")


def _read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def test_every_suite_has_a_csv():
    assert {p.stem for p in DATA_DIR.glob("*.csv")} >= set(suites.NAMES)


def test_the_h100_provenance_names_every_csv():
    folder = GPU_DIRS[1]
    text = (folder / "PROVENANCE.md").read_text()
    undocumented = [p.name for p in folder.glob("*.csv") if f"`{p.name}`" not in text]
    assert not undocumented, f"{folder.name}/PROVENANCE.md does not name {undocumented}"


@pytest.mark.parametrize("path", CSV_PATHS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_csv_has_required_columns_and_rows(path):
    header, rows = _read(path)
    missing = [c for c in (*REQUIRED, *SHAPE.get(path.stem, ())) if c not in header]
    assert not missing, f"{path.name} lacks columns {missing}"
    assert rows, f"{path.name} has no rows"


@pytest.mark.parametrize("path", CSV_PATHS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_times_positive_finite_and_ordered(path):
    _, rows = _read(path)
    for i, row in enumerate(rows, start=2):
        p10, median, p90 = (float(row[c]) for c in TIMES)
        for t in (p10, median, p90):
            assert math.isfinite(t) and t > 0, f"{path.name} line {i}: time {t}"
        assert p10 <= median <= p90, f"{path.name} line {i}: p10 {p10} median {median} p90 {p90}"
        assert int(row["repeats"]) >= 5, f"{path.name} line {i}: repeats {row['repeats']}"


@pytest.mark.parametrize("path", CSV_PATHS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_provenance_and_modes(path):
    _, rows = _read(path)
    for i, row in enumerate(rows, start=2):
        empty = [c for c in PROVENANCE if not row[c].strip()]
        assert not empty, f"{path.name} line {i}: empty provenance {empty}"
        assert row["launch_mode"] in {"eager", "graph"}, f"{path.name} line {i}: {row['launch_mode']}"
        assert int(row["sm_count"]) > 0
        assert int(row["flop"]) >= 0 and int(row["bytes"]) >= 0
        stamp = datetime.datetime.fromisoformat(row["date"].replace("Z", "+00:00"))
        assert stamp.utcoffset() == datetime.timedelta(0), f"{path.name} line {i}: date not UTC"


def test_every_probe_has_a_csv():
    from validation import probes

    one_gpu = [name for name in probes.PROBES if name not in (*probes.MULTI_GPU_PROBES, *probes.PENDING_PROBES)]
    assert {p.name for p in H200_PROBE_PATHS} == {probes.csv_name(name) for name in one_gpu}


@pytest.mark.parametrize("path", PROBE_PATHS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_probe_csvs_have_their_columns_times_and_provenance(path):
    from validation import probes

    header, rows = _read(path)
    name = path.stem.removeprefix("probe_")
    assert list(header) == list(probes.COLUMNS[name]), f"{path.name}: columns differ from validation/probes.py"
    assert rows, f"{path.name} has no rows"
    for i, row in enumerate(rows, start=2):
        untimed = probes.UNTIMED_ROWS.get(name)
        if name in probes.CLOCK_PROBES:  # read with %clock64 inside the kernel, not timed with events
            assert not any(row[c] for c in TIMES) and all(float(row[c]) > 0 for c in probes.CLOCK_PROBES[name])
        elif untimed and row[untimed[0][0]] == untimed[0][1]:  # nothing beside the measurement to time
            assert not any(row[c] for c in TIMES) and float(row[untimed[1]]) > 0
        else:
            p10, median, p90 = (float(row[c]) for c in TIMES)
            assert math.isfinite(median) and 0 < p10 <= median <= p90, f"{path.name} line {i}: {p10} {median} {p90}"
        assert not [c for c in ("gpu_name", "sm_count", "driver", "torch", "triton", "date") if not row[c].strip()]
        stamp = datetime.datetime.fromisoformat(row["date"].replace("Z", "+00:00"))
        assert stamp.utcoffset() == datetime.timedelta(0), f"{path.name} line {i}: date not UTC"


def test_gemm_counts_match_shapes():
    path = DATA_DIR / "gemm.csv"
    if not path.exists():
        pytest.skip("no gemm.csv recorded")
    _, rows = _read(path)
    elem = {"bfloat16": 2, "float8_e4m3fn": 1}
    for row in rows:
        m, n, k = (int(row[c]) for c in ("m", "n", "k"))
        assert int(row["flop"]) == 2 * m * n * k
        assert int(row["bytes"]) == (m * k + k * n) * elem[row["dtype"]] + m * n * 2


def test_copy_bytes_are_read_plus_write():
    path = DATA_DIR / "copy_grid.csv"
    if not path.exists():
        pytest.skip("no copy_grid.csv recorded")
    _, rows = _read(path)
    for row in rows:
        assert int(row["bytes"]) == 2 * int(row["n_elems"]) * 4
        assert int(row["flop"]) == 0


# ---- the suites' cases and counts, and the writers, on the CPU


def test_gemm_counts_exact_on_tiny_shape():
    assert gemm.gemm_flop(2, 3, 4) == 48
    assert gemm.gemm_bytes(2, 3, 4, in_element_bytes=2) == (8 + 12) * 2 + 6 * 2
    case = gemm.GemmCase("torch_scaled_mm", suites.FP8, 2, 3, 4, suites.EAGER, 1)
    assert case.bytes() == (8 + 12) * 1 + 6 * 2


def test_percentile_matches_linear_interpolation():
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert measure_output.percentile(values, 50) == 3.0
    assert measure_output.percentile(values, 10) == pytest.approx(1.4)
    assert measure_output.percentile(values, 90) == pytest.approx(4.6)
    assert measure_output.percentile([7.0], 90) == 7.0


def test_summarize_rejects_bad_times():
    with pytest.raises(ValueError, match="non-positive"):
        measure_output.summarize([1e-3, 0.0])
    s = measure_output.summarize([3e-6, 1e-6, 2e-6])
    assert s["time_s_median"] == 2e-6 and s["repeats"] == 3


def test_write_csv_atomic_round_trip(tmp_path):
    header = suites.columns("launch")
    row = {"kernel": "k", "numel": 1, "time_s_median": 1.5e-6, "grid_unused": None}
    with pytest.raises(ValueError, match="grid_unused"):
        measure_output.write_csv_atomic(tmp_path / "launch.csv", header, [row])
    del row["grid_unused"]
    measure_output.write_csv_atomic(tmp_path / "launch.csv", header, [row])
    got_header, rows = _read(tmp_path / "launch.csv")
    assert got_header == header
    assert float(rows[0]["time_s_median"]) == 1.5e-6 and rows[0]["dtype"] == ""
    assert [p.name for p in tmp_path.iterdir()] == ["launch.csv"]


def test_cases_are_counted_and_modes_valid():
    for suite in suites.NAMES:
        for case in suites.cases(suite):
            row = suites.case_row(case)
            assert row["launch_mode"] in suites.LAUNCH_MODES
            assert row["host_gaps"] in suites.HOST_GAPS
            assert set(row) <= set(suites.columns(suite))
    skinny = [c for c in gemm.cases() if c.m < gemm.GEMM_EAGER_BATCH_BELOW_M]
    assert {c.launch_mode for c in skinny} == {"eager", "graph"}
    assert suites.expand(["launch", "all"]) == ["launch", "gemm", "copy_grid", *suites.COMPANION]


def test_the_product_side_imports_without_torch():
    modules = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                     for package in ("traces", "validation") for p in (ROOT / package).rglob("*.py"))
    code = f"import sys; import {', '.join(modules)}; print('torch' in sys.modules, 'triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split() == ["False", "False"]
