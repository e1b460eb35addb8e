"""Predictions against the H200 measurements they were not fitted on (validation/data/h200/gemm.csv)."""

from __future__ import annotations

import pytest

from validation import suites
from validation.report import DATA_DIR, compare_suite, error_summary

GEMM_CSV = DATA_DIR / "h200" / "gemm.csv"


@pytest.fixture(scope="module")
def rows():
    return compare_suite(GEMM_CSV, "h200")


def test_the_8192_cube_bf16_gemm_is_within_15_percent_of_its_measurement(rows):
    (row,) = [r for r in rows if r.label == "8192x8192x8192" and r.group == "gemm bf16 prefill"]
    assert row.measured_s > 1e-3  # a real, sustained-rate row, not a placeholder
    assert abs(row.error) < 0.15, f"predicted {row.predicted_s:.6f} s, measured {row.measured_s:.6f} s"


def test_every_group_has_a_bounded_median_error(rows):
    # The bound is loose on purpose: the default efficiencies are published figures, not fits.
    summary = error_summary(rows)
    assert set(summary) == {"gemm bf16 decode", "gemm bf16 prefill", "gemm fp8 prefill"}
    for name, group in summary.items():
        assert group["median_abs_pct"] < 15, (name, group)


def test_decode_gemms_are_predicted_memory_bound_and_large_ones_compute_bound(rows):
    for row in rows:
        if row.label.startswith(("1x", "8x")):
            # streaming the weights: HBM's bandwidth, or the latency of the loads a pipeline keeps in flight
            assert row.bound in ("memory", "latency"), row
        if row.label.startswith(("4096x", "8192x", "16384x")):
            assert row.bound == "compute", row


def test_every_recorded_suite_is_compared_row_by_row():
    for suite in suites.NAMES:
        path = DATA_DIR / "h200" / f"{suite}.csv"
        compared = compare_suite(path, "h200")
        with path.open() as handle:
            assert len(compared) == sum(1 for _ in handle) - 1
        assert all(r.predicted_s > 0 and r.measured_s > 0 for r in compared)
