"""The library GEMM set-up constant is what its probe gives, and the recorded cuBLAS choices parse as they read."""

from __future__ import annotations

import csv

import pytest

from hwmodels.calibration import load_calibration
from tests.conftest import ROOT
from validation.gemm_floor import derive, excess
from workloads import gemm_library


def test_the_h200_set_up_is_the_probe_s_median_excess():
    rows = excess("h200")
    assert len(rows) == 6 and all(1e-6 < extra < 2e-6 for _, extra in rows)
    assert load_calibration("h200").library_gemm_setup_s == pytest.approx(derive("h200"), abs=1e-9)


def test_nvjet_names_give_tiles_in_the_model_s_orientation():
    assert gemm_library.parse("nvjet_sm90_tst_256x160_64x4_1x2_h_bz_coopA_TNT") == {
        "tile_m": 160, "tile_n": 256, "tile_k": 64, "stages": 4}
    assert gemm_library.parse("nvjet_sm90_qqtst_64x8_128x16_4x1_v_bz_algo2_splitK_TNT")["tile_m"] == 8
    assert gemm_library.parse("void cutlass::Kernel2<cutlass_80_wmma_tensorop>") is None


def test_the_shipped_table_is_derived_from_the_recorded_profile():
    with open(ROOT / "validation" / "data" / "h200" / "library" / "gemm_choices.csv", newline="") as f:
        derived = gemm_library.derive(list(csv.DictReader(f)))
    with open(gemm_library.CHOICES_FILE, newline="") as f:
        shipped = list(csv.DictReader(f))
    assert [{k: str(v) for k, v in r.items()} for r in derived] == shipped
    split = [r for r in derived if r["split_k"] > 1]
    assert split and all("splitK" in r["kernel"] for r in split)
