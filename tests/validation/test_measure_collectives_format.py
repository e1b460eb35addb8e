"""The recorded 2×H200 NCCL collectives CSV keeps its contract; the sweep's sizes, factors and rows are right.

Needs neither torch nor a GPU: the CSV is read with the csv module.
"""

from __future__ import annotations

import csv
import datetime
import math
from collections import defaultdict

import pytest

from tests.conftest import ROOT
from validation import collective_sweep as mc

CSV_PATH = ROOT / "validation" / "data" / "h200x2" / "collectives_nccl.csv"

REQUIRED = (
    "kernel",
    "size_bytes",
    "world_size",
    "dtype",
    "launch_mode",
    "time_s_median",
    "time_s_p10",
    "time_s_p90",
    "time_s_median_max_rank",
    "repeats",
    "ops_per_sample",
    "algbw_bytes_per_s",
    "busbw_bytes_per_s",
    "gpu_name",
    "driver",
    "torch",
    "triton",
    "cuda",
    "nccl",
    "date",
    "NCCL_NVLS_ENABLE",
    "NCCL_ALGO",
    "NCCL_PROTO",
)
PROVENANCE = ("gpu_name", "driver", "torch", "triton", "cuda", "nccl", "date")
KERNELS = ("nccl_all_reduce", "nccl_all_gather", "nccl_reduce_scatter")
MODES = ("eager", "graph")
SIZES = [1 << k for k in range(12, 31)]  # 4 KiB .. 1 GiB
BUSBW_FACTOR = {"nccl_all_reduce": 1.0, "nccl_all_gather": 0.5, "nccl_reduce_scatter": 0.5, "p2p_copy": 1.0}


@pytest.fixture(scope="module")
def table() -> tuple[list[str], list[dict[str, str]]]:
    with CSV_PATH.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def test_required_columns(table):
    header, rows = table
    missing = [c for c in REQUIRED if c not in header]
    assert not missing, f"missing columns {missing}"
    assert rows


def test_every_op_and_mode_has_all_19_sizes(table):
    _, rows = table
    seen = defaultdict(list)
    for row in rows:
        seen[(row["kernel"], row["launch_mode"])].append(int(row["size_bytes"]))
    for kernel in KERNELS:
        for mode in MODES:
            assert sorted(seen[(kernel, mode)]) == SIZES, f"{kernel} {mode}: sizes {sorted(seen[(kernel, mode)])}"
    assert set(seen) <= {(k, m) for k in KERNELS for m in MODES} | {("p2p_copy", "eager")}


def test_times_positive_finite_ordered_and_enough_repeats(table):
    _, rows = table
    for i, row in enumerate(rows, start=2):
        p10, median, p90 = (float(row[c]) for c in ("time_s_p10", "time_s_median", "time_s_p90"))
        for t in (p10, median, p90):
            assert math.isfinite(t) and t > 0, f"line {i}: time {t}"
        assert p10 <= median <= p90, f"line {i}: p10 {p10} median {median} p90 {p90}"
        assert int(row["repeats"]) >= 5, f"line {i}: repeats {row['repeats']}"
        assert int(row["ops_per_sample"]) >= 1
        assert int(row["world_size"]) == 2, f"line {i}: world_size {row['world_size']}"
        assert row["dtype"] == "bfloat16"
        if row["kernel"] in KERNELS:
            t_max = float(row["time_s_median_max_rank"])
            assert math.isfinite(t_max) and t_max >= median * (1 - 1e-6), f"line {i}: max-rank median {t_max}"


def test_bandwidth_columns_follow_nccl_tests_convention(table):
    _, rows = table
    for row in rows:
        size, t = int(row["size_bytes"]), float(row["time_s_median"])
        algbw, busbw = float(row["algbw_bytes_per_s"]), float(row["busbw_bytes_per_s"])
        assert algbw == pytest.approx(size / t, rel=1e-5)
        assert busbw == pytest.approx(algbw * BUSBW_FACTOR[row["kernel"]], rel=1e-5)


def test_provenance_filled_and_multicast_off(table):
    _, rows = table
    for i, row in enumerate(rows, start=2):
        empty = [c for c in PROVENANCE if not row[c].strip() or row[c] in {"none", "unknown"}]
        assert not empty, f"line {i}: empty provenance {empty}"
        assert "H200" in row["gpu_name"]
        assert row["NCCL_NVLS_ENABLE"] == "0", f"line {i}: NVLS must stay off"
        stamp = datetime.datetime.fromisoformat(row["date"].replace("Z", "+00:00"))
        assert stamp.utcoffset() == datetime.timedelta(0), f"line {i}: date not UTC"


def test_time_grows_with_size(table):
    _, rows = table
    t = {(r["kernel"], r["launch_mode"], int(r["size_bytes"])): float(r["time_s_median"]) for r in rows}
    for kernel in KERNELS:
        for mode in MODES:
            small, large = t[(kernel, mode, SIZES[0])], t[(kernel, mode, SIZES[-1])]
            assert large > small, f"{kernel} {mode}: 1 GiB {large} s not slower than 4 KiB {small} s"


def test_p2p_copy_row(table):
    _, rows = table
    p2p = [r for r in rows if r["kernel"] == "p2p_copy"]
    assert len(p2p) == 1
    assert int(p2p[0]["size_bytes"]) == 1 << 30


# ---- the sweep's helpers, on the CPU


def test_planned_sizes_and_factors():
    assert mc.sizes() == SIZES
    assert mc.sizes(4096, 16384) == [4096, 8192, 16384]
    assert mc.busbw_factor("all_reduce", 2) == 1.0
    assert mc.busbw_factor("all_reduce", 8) == pytest.approx(1.75)
    assert mc.busbw_factor("all_gather", 8) == mc.busbw_factor("reduce_scatter", 8) == pytest.approx(0.875)
    with pytest.raises(ValueError):
        mc.busbw_factor("broadcast", 2)


def test_build_rows_reports_rank0_and_max_rank_median():
    prov = {k: "x" for k in ("gpu_name", "driver", "torch", "triton", "cuda", "nccl", *mc.ENV_COLUMNS)}
    base = {"op": "all_reduce", "size_bytes": 4096, "mode": "eager", "ops_per_sample": 20, "date": "d"}
    rank0 = [{**base, "times_s": [1e-5, 2e-5, 3e-5]}, {**base, "mode": "graph", "error": "boom"}]
    rank1 = [{**base, "times_s": [4e-5, 5e-5, 6e-5]}]
    (row,) = mc.build_rows([rank0, rank1], 2, "nccl", prov)
    assert row["kernel"] == "nccl_all_reduce" and row["time_s_median"] == 2e-5
    assert row["time_s_median_max_rank"] == 5e-5
    assert row["busbw_bytes_per_s"] == pytest.approx(4096 / 2e-5)
    assert set(row) <= set(mc.COLUMNS)
