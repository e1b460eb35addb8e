"""The cycle-level model: chains, trips, waves and the cost-model switch, on the real specs."""

from __future__ import annotations

import heapq
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels.calibration import CostModel, load_calibration
from hwmodels.cycle_time import (
    MemoryCurve,
    Residency,
    bound_dispatch_s,
    burst_s,
    grid_s,
    steady_trip_s,
    trip_s,
    waves_s,
    workgroup_s,
)
from hwmodels.program import Chain, Program, evolved, reduction_chain, streaming_program
from hwmodels.roofline import Bound, LaunchMode, kernel_time, roofline_floor_s
from hwmodels.spec import load_gpu, spec_names
from hwmodels.work import Family, Work

H200 = load_gpu("h200")
CURVE = MemoryCurve(H200.dram_latency_s, 1.0)
HBM = H200.hbm_bandwidth_bytes_per_s * 0.9


def test_a_chain_costs_its_steps_at_the_gpus_latencies():
    chain = Chain(mma=36, reduction=2, sfu=1, dram=1)
    cycles = 36 * H200.mma_latency_cycles + 2 * H200.reduction_latency_cycles + H200.sfu_latency_cycles
    assert chain.seconds(H200) == pytest.approx(cycles / H200.boost_clock_hz + H200.dram_latency_s)
    assert (chain + chain).seconds(H200) == pytest.approx(2 * chain.seconds(H200))
    assert (3 * chain).seconds(H200) == pytest.approx(3 * chain.seconds(H200))
    with pytest.raises(ValueError, match="alu"):
        Chain(alu=float("nan"))


def test_a_reduction_crosses_warps_only_when_the_workgroup_has_several():
    assert reduction_chain(32, 1, 32) == Chain(shuffle=5)
    assert reduction_chain(8, 1, 32) == Chain(shuffle=3)
    assert reduction_chain(128, 4, 32) == Chain(reduction=1)


def test_a_trip_waits_for_its_load_unless_it_was_prefetched():
    compute = Program(trips=1, trip_load_bytes=4096, trip_instructions=200, trip_chain=Chain(reduction=1))
    waited = trip_s(compute, H200, 1, 4, H200.compute_units, CURVE, HBM)
    pipelined = trip_s(replace(compute, prefetch=1), H200, 1, 4, H200.compute_units, CURVE, HBM)
    alone = trip_s(replace(compute, trip_load_bytes=0), H200, 1, 4, H200.compute_units, CURVE, HBM)
    assert alone == pytest.approx(200 / H200.boost_clock_hz + Chain(reduction=1).seconds(H200))
    assert waited > alone + 0.9 * H200.dram_latency_s  # serial: the load, then the work
    assert pipelined == pytest.approx(max(alone, waited - alone))  # overlapped: the slower of the two


def test_loads_issued_ahead_of_the_wait_fly_under_the_trips_own_work():
    # a trip that issues its 36 KiB of copies over its last 400 cycles and waits for them at the top of the next
    # one: the transfer runs from the first copy on, the round trip from the last; what is left is exposed
    work = Program(trips=1, trip_load_bytes=36864, trip_instructions=3000)
    at_wait = trip_s(work, H200, 1, 4, 16, CURVE, HBM)
    early = trip_s(replace(work, trip_load_lead_cycles=(400.0, 10.0)), H200, 1, 4, 16, CURVE, HBM)
    compute = 3000 / H200.boost_clock_hz
    assert early == pytest.approx(at_wait - 400 / H200.boost_clock_hz)  # bandwidth-bound: the first copy's lead
    assert early > compute + CURVE.latency_s - 10 / H200.boost_clock_hz - 1e-12  # never below the last's round trip
    hidden = trip_s(replace(work, trip_load_bytes=64, trip_load_lead_cycles=(2000.0, 2000.0)), H200, 1, 4, 16,
                    CURVE, HBM)
    assert hidden == pytest.approx(compute)  # issued long before the wait: nothing left to wait for


def test_warps_sharing_a_scheduler_issue_in_turn():
    program = Program(trips=1, trip_instructions=1000)
    one = trip_s(program, H200, 1, 4, 1, CURVE, HBM)  # 4 warps on 4 schedulers
    eight = trip_s(program, H200, 8, 4, 1, CURVE, HBM)  # 32 warps: 8 per scheduler
    assert one == pytest.approx(1000 / H200.boost_clock_hz)
    assert eight == pytest.approx(8 * one)


def test_waves_run_full_then_partial():
    program = Program(trips=10, trip_instructions=100, trip_chain=Chain(alu=50))
    one_wave = waves_s(program, H200, Residency(132, 4, 2), CURVE, HBM)
    assert one_wave == pytest.approx(workgroup_s(program, H200, 1, 4, 132, CURVE, HBM))
    three = waves_s(program, H200, Residency(132 * 2 * 3, 4, 2), CURVE, HBM)
    assert three == pytest.approx(3 * workgroup_s(program, H200, 2, 4, 132, CURVE, HBM))


def test_no_grid_finishes_before_the_dispatcher_hands_out_its_workgroups():
    empty = Program()
    big = Residency(132 * 256, 4, 16)
    assert grid_s(empty, H200, big, CURVE, HBM) == pytest.approx(256 * H200.workgroup_dispatch_s)


def test_a_grid_on_every_cu_pays_the_first_load_burst_once():
    loads = Program(trips=4, trip_load_bytes=4096, trip_instructions=50)
    assert H200.hbm_burst_latency_s > 0
    assert burst_s(loads, H200, 1) == pytest.approx(H200.hbm_burst_latency_s / 132)
    assert burst_s(loads, H200, 66) == pytest.approx(H200.hbm_burst_latency_s / 2)
    assert burst_s(loads, H200, 132 * 40) == pytest.approx(H200.hbm_burst_latency_s)  # once, not per wave
    assert burst_s(Program(trips=4, trip_instructions=50), H200, 132) == 0.0  # no loads, no burst
    for workgroups in (1, 132, 132 * 40):
        residency = Residency(workgroups, 4, 8)
        assert grid_s(loads, H200, residency, CURVE, HBM) == pytest.approx(
            waves_s(loads, H200, residency, CURVE, HBM) + burst_s(loads, H200, workgroups))


def test_input_the_launch_before_wrote_is_read_from_l2_when_it_fits():
    merge = Program(trips=16, trip_load_bytes=32768, trip_instructions=300, trip_chain=Chain(dram=2))
    fresh = replace(merge, fresh_input_bytes=H200.l2_bytes / 2)
    assert fresh.in_l2(H200) and not merge.in_l2(H200)
    assert not replace(merge, fresh_input_bytes=2 * H200.l2_bytes).in_l2(H200)  # too big to stay
    one, l2 = (workgroup_s(p, H200, 1, 4, 32, CURVE, HBM) for p in (merge, fresh))
    assert l2 < one
    # the chain's two memory round trips cost L2's latency instead of DRAM's
    assert one - l2 >= 16 * 2 * (H200.dram_latency_s - H200.l2_latency_s) * 0.99


def test_a_setup_load_takes_a_round_trip_and_its_bytes_at_the_cus_share():
    state = Program(trips=4, trip_load_bytes=1024, trip_instructions=100, setup_load_bytes=16384)
    without = replace(state, setup_load_bytes=0)
    alone = workgroup_s(state, H200, 1, 4, 1, CURVE, HBM) - workgroup_s(without, H200, 1, 4, 1, CURVE, HBM)
    assert alone >= CURVE.latency_s  # at least the round trip
    # eight resident workgroups on every CU load eight states through the CU's share of HBM
    crowded = workgroup_s(state, H200, 8, 4, 132, CURVE, HBM) - workgroup_s(without, H200, 8, 4, 132, CURVE, HBM)
    assert crowded >= 8 * 16384 / (HBM / 132) * 0.99
    with pytest.raises(ValueError, match="setup_load_bytes"):
        Program(setup_load_bytes=-1)


TILE = Program(trips=1, trip_load_bytes=4096, trip_store_bytes=4096, trip_instructions=270)


def test_drifted_resident_workgroups_overlap_but_pass_no_bound():
    one = steady_trip_s(TILE, H200, 1, 4, 132, CURVE, HBM)
    assert one == pytest.approx(trip_s(TILE, H200, 1, 4, 132, CURVE, HBM))
    share = HBM / 132
    for resident in (2, 4, 8, 16):
        steady = steady_trip_s(TILE, H200, resident, 4, 132, CURVE, HBM)
        lockstep = trip_s(TILE, H200, resident, 4, 132, CURVE, HBM)
        compute = resident * 4 * TILE.trip_instructions / (4 * H200.boost_clock_hz)
        memory = resident * 8192 / share
        assert max(compute, memory, one) <= steady * (1 + 1e-9)  # the busier queue, and one workgroup's own trip
        assert steady < lockstep  # while one waits for its loads, the others compute



def _exponential_mva_s(compute: float, memory: float, delay: float, resident: int) -> float:
    """Exact mean value analysis of two exponential queues and a delay: seconds per trip of each resident."""
    queued_c = queued_m = throughput = 0.0
    for n in range(1, resident + 1):
        at_c, at_m = compute * (1 + queued_c), memory * (1 + queued_m)
        throughput = n / (at_c + at_m + delay)
        queued_c, queued_m = throughput * at_c, throughput * at_m
    return resident / throughput


def _deterministic_network_s(compute: float, memory: float, delay: float, resident: int, trips: int = 200) -> float:
    """The same network with fixed service times, simulated event by event (first come, first served at each
    queue): seconds per trip of each resident over the second half of `trips` trips each."""
    free = [0.0, 0.0]
    events = [(0.0, n, 0) for n in range(resident)]  # (time, order of arrival, queue)
    ends: list[float] = []
    while events:
        now, order, queue = heapq.heappop(events)
        free[queue] = max(now, free[queue]) + (compute, memory)[queue]
        if queue == 0:
            heapq.heappush(events, (free[0], order, 1))
        else:
            ends.append(free[1])
            if len(ends) < trips * resident:
                heapq.heappush(events, (free[1] + delay, order + resident, 0))
    half = len(ends) // 2
    return (ends[-1] - ends[half]) / (len(ends) - 1 - half) * resident


@pytest.mark.parametrize(("load_bytes", "instructions"), [(8192, 270), (8192, 540), (4096, 540), (16384, 100)])
def test_fixed_trips_queue_between_a_deterministic_and_an_exponential_network(load_bytes, instructions):
    """A trip of loads only is a fixed instruction stream and a fixed tile: the residual correction at both queues
    puts it between the same network simulated with fixed service times (no better than that) and the exact
    exponential analysis, and a crowded CU reaches its busier queue's rate."""
    share = HBM / 132
    loads = Program(trips=1, trip_load_bytes=load_bytes, trip_instructions=instructions)
    one = trip_s(loads, H200, 1, 4, 132, CURVE, HBM)
    compute, memory = 4 * instructions / (4 * H200.boost_clock_hz), load_bytes / share
    delay = max(0.0, one - compute - memory)
    for resident in (2, 3, 4, 8, 16):
        steady = steady_trip_s(loads, H200, resident, 4, 132, CURVE, HBM)
        assert _deterministic_network_s(compute, memory, delay, resident) * (1 - 1e-6) <= steady
        assert steady <= _exponential_mva_s(compute, memory, delay, resident) * (1 + 1e-9)
        assert steady >= resident * max(compute, memory) * (1 - 1e-9)
    crowded = 16
    assert steady_trip_s(loads, H200, crowded, 4, 132, CURVE, HBM) == pytest.approx(
        crowded * max(compute, memory))
    assert _exponential_mva_s(compute, memory, delay, 4) > steady_trip_s(loads, H200, 4, 4, 132, CURVE, HBM)


def test_stores_queue_as_bursts_at_the_memory_path():
    """A trip's stores leave in bursts (exponential): a store-only trip with no instructions is the exact
    exponential analysis, and half its bytes as a fixed tile of loads runs faster than that."""
    share = HBM / 132
    stores = Program(trips=1, trip_load_bytes=0, trip_store_bytes=8192, trip_instructions=0)
    one = trip_s(stores, H200, 1, 4, 132, CURVE, HBM)
    memory = 8192 / share
    assert steady_trip_s(stores, H200, 8, 4, 132, CURVE, HBM) == pytest.approx(
        _exponential_mva_s(0.0, memory, max(0.0, one - memory), 8))
    tile = Program(trips=1, trip_load_bytes=4096, trip_store_bytes=4096, trip_instructions=0)
    tile_one = trip_s(tile, H200, 1, 4, 132, CURVE, HBM)
    for resident in (2, 4, 8):
        assert steady_trip_s(tile, H200, resident, 4, 132, CURVE, HBM) < _exponential_mva_s(
            0.0, memory, max(0.0, tile_one - memory), resident)


def test_an_unpipelined_grid_runs_its_first_trip_in_lockstep_then_drifts():
    residency = Residency(132 * 16 * 10, 4, 16)  # ten full waves of 16 per CU
    steady = steady_trip_s(TILE, H200, 16, 4, 132, CURVE, HBM)
    first = trip_s(TILE, H200, 16, 4, 132, CURVE, HBM)
    assert waves_s(TILE, H200, residency, CURVE, HBM) == pytest.approx(first + 9 * steady)
    assert waves_s(TILE, H200, residency, CURVE, HBM) < 10 * first
    # pipelined trips are not drifted: they already overlap their loads with their compute
    piped = replace(TILE, prefetch=1)
    assert waves_s(piped, H200, residency, CURVE, HBM) == pytest.approx(
        10 * workgroup_s(piped, H200, 16, 4, 132, CURVE, HBM))


def test_short_rows_move_whole_sectors():
    # a 4-column fp32 tile of a row-major state: its 16-byte rows are stored in 32-byte sectors, each partly
    # written one read to be merged (the rows probe: 1.79 x a whole sector's store), and loaded in 64-byte granules
    narrow = Program(trips=4, trip_load_bytes=1024, trip_store_bytes=2048, setup_load_bytes=2048,
                     trip_instructions=100, row_run_bytes=16)
    partial = H200.partial_sector_store_factor
    assert narrow.sector_factor(H200) == pytest.approx(2.0 * partial)
    assert replace(narrow, row_run_bytes=64).sector_factor(H200) == 1.0  # whole sectors: no merge
    assert replace(narrow, row_run_bytes=48).sector_factor(H200) == pytest.approx(64 / 48 * partial)
    assert narrow.load_sector_factor(H200) == 64 / 16 and replace(narrow, row_run_bytes=128).load_sector_factor(
        H200) == 1.0
    moved_narrow = replace(narrow, row_run_bytes=0, setup_load_bytes=2048 * 4, trip_store_bytes=2048 * 2 * partial)
    assert workgroup_s(narrow, H200, 8, 4, 132, CURVE, HBM) == pytest.approx(
        workgroup_s(moved_narrow, H200, 8, 4, 132, CURVE, HBM))
    wide = replace(moved_narrow, setup_load_bytes=2048, trip_store_bytes=2048)
    assert workgroup_s(wide, H200, 8, 4, 132, CURVE, HBM) < workgroup_s(narrow, H200, 8, 4, 132, CURVE, HBM)


def test_without_a_dispatcher_an_irregular_grid_gets_two_lower_bounds():
    assert bound_dispatch_s([5.0, 1.0, 1.0], 2) == 5.0  # the longest workgroup
    assert bound_dispatch_s([1.0] * 10, 2) == 5.0  # the work spread over the slots
    assert bound_dispatch_s([], 4) == 0.0


def test_a_small_grid_cannot_pull_full_bandwidth():
    # Little's law: 16 workgroups of 256 threads keep 16 x 16 KiB in flight, far from what HBM needs
    stream = dict(flop_by_dtype={}, read_bytes=64e6, write_bytes=64e6, threads_per_workgroup=256, family=Family.COPY)
    calib = load_calibration("h200")
    full = kernel_time(Work(workgroups=8192, **stream), H200, calib, LaunchMode.GRAPH)
    few = kernel_time(Work(workgroups=16, **stream), H200, calib, LaunchMode.GRAPH)
    # 16 CUs at the probe curve's ~27 GB/s for 16 KiB in flight: about 0.43 TB/s of the 4.3 a full grid gets
    assert few.bound is Bound.LATENCY and full.time_s == pytest.approx(full.memory_s + full.launch_s, rel=0.05)
    assert 4 * full.time_s < few.time_s < 12 * full.time_s


def test_the_roofline_model_stays_selectable_and_differs():
    work = Work({}, 1e6, 1e6, workgroups=1, threads_per_workgroup=256, program=streaming_program(1e6, 16384))
    cycle = kernel_time(work, H200, load_calibration("h200"), LaunchMode.GRAPH)
    roofline = kernel_time(work, H200, load_calibration("h200", cost_model="roofline"), LaunchMode.GRAPH)
    assert load_calibration("h200").cost_model is CostModel.CYCLE
    assert cycle.bound is Bound.LATENCY and roofline.bound is not Bound.LATENCY
    assert cycle.time_s != roofline.time_s
    with pytest.raises(ValueError, match="unknown cost model 'fast'"):
        load_calibration("h200", cost_model="fast")


@settings(max_examples=150, deadline=None)
@given(gpu=st.sampled_from(spec_names("gpus")), workgroups=st.integers(1, 50_000), trips=st.integers(0, 500),
       load=st.floats(0, 1e6), instructions=st.floats(0, 1e4), prefetch=st.integers(0, 6),
       reductions=st.integers(0, 8), mode=st.sampled_from(list(LaunchMode)))
def test_no_cycle_prediction_is_below_the_roofline_floor(gpu, workgroups, trips, load, instructions, prefetch,
                                                         reductions, mode):
    spec = load_gpu(gpu)
    program = Program(trips=trips, trip_load_bytes=load, trip_instructions=instructions, prefetch=prefetch,
                      trip_chain=Chain(reduction=reductions))
    work = Work({}, workgroups * trips * load, 1e3, workgroups=workgroups, threads_per_workgroup=128,
                program=program)
    t = kernel_time(work, spec, load_calibration(gpu), mode)
    assert t.time_s >= roofline_floor_s(work, spec) and t.time_s > 0


def test_a_deep_thread_that_reduces_its_loads_keeps_half_of_them_in_flight():
    curve = MemoryCurve(H200.dram_latency_s, 1.0, deep_thread_share=0.5)
    shallow = Program(trips=1, trip_load_bytes=128 * 32, reduces_loads=True)  # 32 B per thread of 4 warps
    deep = Program(trips=1, trip_load_bytes=128 * 128, reduces_loads=True)  # 128 B per thread
    streamed = Program(trips=1, trip_load_bytes=128 * 128)  # loaded then stored: no measured share
    t = {name: trip_s(p, H200, 1, 4, 1, curve, HBM) for name, p in
         (("shallow", shallow), ("deep", deep), ("streamed", streamed))}
    half = trip_s(deep, H200, 1, 4, 1, MemoryCurve(H200.dram_latency_s, 1.0), HBM)
    assert t["deep"] > half == pytest.approx(t["streamed"])  # the same bytes at half the parallelism take longer
    assert t["shallow"] == pytest.approx(trip_s(shallow, H200, 1, 4, 1, MemoryCurve(H200.dram_latency_s, 1.0), HBM))


def test_stores_queue_ahead_of_the_next_loads_and_share_the_bandwidth():
    loads_only = Program(trips=1, trip_load_bytes=1024, trip_instructions=100)
    with_stores = replace(loads_only, trip_store_bytes=16384)
    one = trip_s(with_stores, H200, 1, 4, 132, CURVE, HBM) - trip_s(loads_only, H200, 1, 4, 132, CURVE, HBM)
    three = trip_s(with_stores, H200, 3, 4, 132, CURVE, HBM) - trip_s(loads_only, H200, 3, 4, 132, CURVE, HBM)
    share = HBM / 132
    assert one == pytest.approx(16384 / share)  # one workgroup's 16 KiB leaves at the CU's share
    assert three == pytest.approx(3 * 16384 / share, rel=0.05)  # three resident: the next loads wait behind all
    # many resident workgroups of a streaming kernel: the CU's share of bandwidth for loads and stores together
    stream = Program(trips=1, trip_load_bytes=16384, trip_store_bytes=16384)
    assert trip_s(stream, H200, 16, 4, 132, CURVE, HBM) >= 16 * 2 * 16384 / share


def test_a_simulated_trip_interpolates_between_the_simulated_warp_counts():
    from hwmodels.cycle_time import shared_cycles

    table = ((1, 1000.0), (2, 1100.0), (4, 1500.0), (8, 2600.0))
    assert shared_cycles(table, 1) == 1000.0 and shared_cycles(table, 1.5) == 1100.0  # rounded up to 2
    assert shared_cycles(table, 3) == pytest.approx(1300.0)
    assert shared_cycles(table, 16) == pytest.approx(2600.0 * 2)  # beyond the table: its cycles per warp
    program = Program(trips=1, trip_instructions=100, trip_cycles_by_warps=table)
    assert trip_s(program, H200, 2, 4, 1, CURVE, HBM) == pytest.approx(1100.0 / H200.boost_clock_hz)


def test_a_simulated_setup_replaces_the_issue_count_and_keeps_its_memory_waits():
    from hwmodels.cycle_time import workgroup_s

    table = ((1, 20000.0), (2, 50000.0))
    plain = Program(setup_instructions=5000, setup_chain=Chain(dram=2.0))
    simulated = replace(plain, setup_cycles_by_warps=table)
    dram = Chain(dram=2.0).seconds(H200)
    # two resident workgroups of 4 warps: two warps a scheduler, the table's second row, plus the two round trips
    assert workgroup_s(simulated, H200, 2, 4, 132, CURVE, HBM) == pytest.approx(50000.0 / H200.boost_clock_hz + dram)
    assert workgroup_s(plain, H200, 2, 4, 132, CURVE, HBM) == pytest.approx(2 * 5000 / H200.boost_clock_hz + dram)


@settings(max_examples=50, deadline=None)
@given(trips=st.integers(0, 10_000), counts=st.lists(st.integers(0, 64), max_size=20),
       dram=st.floats(0, 8), l2=st.floats(0, 8), latency=st.floats(1e-7, 1e-5))
def test_the_fast_copy_of_a_value_class_is_its_replacement(trips, counts, dram, l2, latency):
    program = Program(trips=7, trip_load_bytes=4096.0, trip_chain=Chain(mma=4, dram=1), trip_counts=(1, 2, 3),
                      prefetch=1)
    for old, changes in ((program, {"trips": trips, "trip_counts": tuple(counts)}),
                         (program.trip_chain, {"dram": dram, "l2": l2}),
                         (MemoryCurve(6e-7, 2.0), {"latency_s": latency})):
        new = evolved(old, **changes)
        assert new == replace(old, **changes) and hash(new) == hash(replace(old, **changes))
        assert type(new) is type(old) and new is not old
    assert program.trips == 7 and program.trip_counts == (1, 2, 3)  # the original is untouched


def test_the_fast_copy_names_a_field_that_does_not_exist():
    with pytest.raises(TypeError, match="Program has no field 'trip'"):
        evolved(Program(), trip=3)


def test_a_workgroup_past_the_slots_costs_a_generation_when_workgroups_live_long():
    """Five workgroups a CU on four slots: long-lived workgroups (64 trips) leave their slots together, so the
    fifth runs as a generation of its own, alone (about one more workgroup's life at one resident); one-trip
    workgroups have drifted apart, and the fifth fills whichever slot frees first (the even split over the slots:
    a quarter of a workgroup's life at four residents)."""
    from hwmodels.cycle_time import TRIP_TIME_CV, drifting_s

    assert TRIP_TIME_CV == 1.0
    cus = H200.compute_units
    added = {}
    for trips in (64, 1):
        tile = Program(trips=trips, trip_load_bytes=8192, trip_instructions=540)
        four, five = (drifting_s(tile, H200, Residency(cus * n, 4, 4), CURVE, HBM) for n in (4, 5))
        steady = steady_trip_s(tile, H200, 4, 4, 132, CURVE, HBM)
        alone = steady_trip_s(tile, H200, 1, 4, 132, CURVE, HBM)
        added[trips] = (five - four, trips * steady / 4, trips * alone)
    tail, even, generation = added[64]
    assert even < generation
    # a = min(1, sqrt(1 generation / 64 trips)) = 1/8 of the way from the generation back to the even split
    assert generation * 0.8 < tail <= generation * 1.05
    tail, even, generation = added[1]
    assert tail == pytest.approx(even, rel=1e-6)  # a = 1: the even split
