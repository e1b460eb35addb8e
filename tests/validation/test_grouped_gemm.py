"""The grouped GEMM's constants are what the grouped probe's rows give."""

from __future__ import annotations

import pytest

from hwmodels.calibration import load_calibration
from validation.grouped_gemm import (
    scan_s,
    setup_s,
    shared_a_round_trips,
    shared_a_trip_s,
    switch_round_trips,
    switch_s,
)
from workloads.kernels import GROUPED_SHARED_A_ROUND_TRIPS, GROUPED_SWITCH_ROUND_TRIPS


def test_the_switch_cost_is_the_probes():
    assert 0.5e-6 < switch_s("h200") < 2e-6
    assert pytest.approx(switch_round_trips("h200"), abs=0.005) == GROUPED_SWITCH_ROUND_TRIPS


def test_the_shared_a_queue_is_the_wide_layouts_median():
    assert pytest.approx(shared_a_round_trips("h200"), abs=0.0005) == GROUPED_SHARED_A_ROUND_TRIPS
    trips = {(layout, k): s for layout, k, s in shared_a_trip_s("h200")}
    assert len(trips) == 24  # eight wide layouts at k = 512, 1,024 and 2,048
    # the extra time grows with the clusters that read one group's row and falls with its rows
    assert trips[("wide2x1", 2048)] < trips[("wide8x1", 2048)] < trips[("wide1t", 2048)] < trips[("wide56x1", 2048)]
    assert trips[("wide24x8", 1024)] < trips[("wide24x2", 1024)] < trips[("wide1t", 1024)]


def test_a_grouped_gemm_of_wide_groups_waits_for_its_shared_rows():
    """The same bytes as 43 groups of 24 column tiles take longer than as 1,023 groups of one, by the shared rows'
    queue; the model priced the two alike before."""
    from compiled.launch_time import launch_times
    from hwmodels.roofline import LaunchMode
    from hwmodels.spec import load_gpu
    from workloads.kernels import GroupedMm

    gpu, calib = load_gpu("h200"), load_calibration("h200")
    narrow = GroupedMm(experts=1023, tokens_per_expert=1, n=128, k=1024)
    wide = GroupedMm(experts=43, tokens_per_expert=1, n=3072, k=1024)
    programs = [launch_times(g, gpu, calib, LaunchMode.GRAPH)[-1].time_s for g in (narrow, wide)]
    assert programs[1] > 1.1 * programs[0]
    assert wide.launches()[-1].program.trip_shared_l2 == pytest.approx(GROUPED_SHARED_A_ROUND_TRIPS * 23**0.5)
    assert narrow.launches()[-1].program.trip_shared_l2 == 0.0


def test_the_set_up_is_the_one_tile_calls_excess_over_the_model():
    assert load_calibration("h200").library_grouped_setup_s == pytest.approx(setup_s("h200"), abs=1e-9)
    assert load_calibration("h100").library_grouped_setup_s == load_calibration("h200").library_grouped_setup_s


def test_the_walk_past_empty_groups_is_the_probes():
    assert 1e-9 < scan_s("h200") < 50e-9
    assert load_calibration("h200").library_grouped_scan_s == pytest.approx(scan_s("h200"), abs=0.005e-9)
    assert load_calibration("h100").library_grouped_scan_s == load_calibration("h200").library_grouped_scan_s


def test_empty_groups_after_the_last_with_rows_cost_their_walk():
    from compiled.launch_time import launch_times
    from hwmodels.roofline import LaunchMode
    from hwmodels.spec import load_gpu
    from workloads.kernels import GroupedMm

    gpu, calib = load_gpu("h200"), load_calibration("h200")
    few = GroupedMm(experts=66, tokens_per_expert=1, n=128, k=512)
    tail = GroupedMm(experts=1023, tokens_per_expert=1, n=128, k=512, rows_by_expert=(1,) * 66 + (0,) * 957)
    lead = GroupedMm(experts=1023, tokens_per_expert=1, n=128, k=512, rows_by_expert=(0,) * 957 + (1,) * 66)

    def gemm_s(kernel):
        return launch_times(kernel, gpu, calib, LaunchMode.GRAPH)[-1].time_s

    assert gemm_s(tail) - gemm_s(few) == pytest.approx(957 * calib.library_grouped_scan_s, rel=1e-6)
    assert gemm_s(lead) == pytest.approx(gemm_s(few), rel=1e-6)  # walked on the way to rows: the switches' share
