"""The grouped GEMM's constants are what the grouped probe's rows give."""

from __future__ import annotations

import pytest

from hwmodels.calibration import load_calibration
from validation.grouped_gemm import setup_s, switch_round_trips, switch_s
from workloads.kernels import GROUPED_SWITCH_ROUND_TRIPS


def test_the_switch_cost_is_the_probes():
    assert 0.5e-6 < switch_s("h200") < 2e-6
    assert pytest.approx(switch_round_trips("h200"), abs=0.005) == GROUPED_SWITCH_ROUND_TRIPS


def test_the_set_up_is_the_one_tile_calls_excess_over_the_model():
    assert load_calibration("h200").library_grouped_setup_s == pytest.approx(setup_s("h200"), abs=1e-9)
    assert load_calibration("h100").library_grouped_setup_s == load_calibration("h200").library_grouped_setup_s
