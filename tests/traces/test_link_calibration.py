"""The 2x H200 NCCL model: fitted on even powers of two, tested on the rest, and reproducible."""

from __future__ import annotations

import math

import pytest

from hwmodels.library import load_library
from traces.calibrate_links import fit, predict, read_rows
from validation.collective_sweep import NCCL_SWEEPS

ROWS = read_rows(NCCL_SWEEPS["h200-2"])


def test_nccl_all_reduce_is_within_15_percent_at_every_power_of_two():
    library = load_library("h200-2")
    all_reduce = [r for r in ROWS if r.op.value == "allreduce"]
    assert [r.size_bytes for r in all_reduce] == [2**e for e in range(12, 31)]
    for row, predicted in zip(all_reduce, predict(all_reduce, library, "h200-2"), strict=True):
        assert abs(predicted / row.measured_s - 1) < 0.15, (row.size_bytes, predicted, row.measured_s)


def test_held_out_gathers_have_a_bounded_median_error():
    library = load_library("h200-2")
    for op in ("allgather", "reducescatter"):
        rows = [r for r in ROWS if r.op.value == op]
        assert not any(r.trains for r in rows)
        errors = sorted(abs(p / r.measured_s - 1) for r, p in zip(rows, predict(rows, library, "h200-2"), strict=True))
        assert errors[len(errors) // 2] < 0.15, op


def test_the_committed_calibration_is_what_the_fit_produces():
    committed = load_library("h200-2")
    refitted = fit(ROWS, "h200-2")
    assert refitted.protocol_switch_bytes == committed.protocol_switch_bytes
    for name in ("small_latency_s", "small_efficiency", "large_latency_s", "large_efficiency"):
        assert math.isclose(getattr(refitted, name), getattr(committed, name), rel_tol=1e-3), name


def test_train_and_test_rows_are_disjoint_halves():
    train = [r for r in ROWS if r.trains]
    assert len(train) == 10 and {r.op.value for r in train} == {"allreduce"}
    assert all(int(math.log2(r.size_bytes)) % 2 == 0 for r in train)


def test_the_platform_without_a_fit_uses_stated_defaults():
    default = load_library("mi355x-8")
    assert default.name == "default" and "assumption" in default.sources["small_efficiency"]
    with pytest.raises(KeyError):
        NCCL_SWEEPS["mi355x-8"]
