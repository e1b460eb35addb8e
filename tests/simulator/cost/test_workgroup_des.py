"""The workgroup-level DES: equal to the analytic waves on uniform grids, and what sets an irregular grid's time."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels.calibration import load_calibration
from hwmodels.cycle_time import MemoryCurve, Residency, bound_dispatch_s, grid_s, waves_s
from hwmodels.program import Chain, Program
from hwmodels.roofline import LaunchMode, kernel_time
from hwmodels.spec import load_gpu
from hwmodels.work import Family, Work
from simulator.cost.workgroup_des import dispatch_s

H200 = load_gpu("h200")
CURVE = MemoryCurve(H200.dram_latency_s, 1.0)
HBM = H200.hbm_bandwidth_bytes_per_s * 0.9


@settings(max_examples=60, deadline=None)
@given(duration=st.floats(1e-7, 1e-3), slots=st.integers(1, 600), waves=st.integers(1, 12))
def test_uniform_grids_take_whole_waves(duration, slots, waves):
    assert dispatch_s([duration] * (slots * waves), slots) == pytest.approx(waves * duration)


@settings(max_examples=40, deadline=None)
@given(trips=st.integers(1, 200), waves=st.integers(1, 6), resident=st.integers(1, 4))
def test_the_des_equals_the_analytic_wave_count_on_uniform_grids(trips, waves, resident):
    program = Program(trips=trips, trip_instructions=150, trip_chain=Chain(reduction=1, alu=4))
    workgroups = waves * resident * H200.compute_units
    residency = Residency(workgroups, 4, resident)
    analytic = grid_s(program, H200, residency, CURVE, HBM)  # the waves, or the dispatcher if slower
    assert analytic >= waves_s(program, H200, residency, CURVE, HBM)
    irregular = Program(trips=trips, trip_instructions=150, trip_chain=Chain(reduction=1, alu=4),
                        trip_counts=(trips,) * workgroups)
    assert grid_s(irregular, H200, residency, CURVE, HBM, dispatch_s) == pytest.approx(analytic)


def test_a_long_workgroup_dispatched_last_sets_the_time():
    durations = [1.0] * 8 + [4.0]
    assert dispatch_s(durations, 4) == pytest.approx(2.0 + 4.0)  # two full waves, then the long one
    assert dispatch_s(list(reversed(durations)), 4) == pytest.approx(4.0)  # started first, it hides the rest
    assert dispatch_s(durations, 4) >= bound_dispatch_s(durations, 4)


def test_split_kv_over_uneven_histories_is_set_by_the_longest():
    uneven = Program(trips=1, trip_load_bytes=36864, prefetch=1, trip_chain=Chain(mma=38, reduction=2),
                     trip_counts=(1024,) + (32,) * 63)
    even = Program(trips=1, trip_load_bytes=36864, prefetch=1, trip_chain=Chain(mma=38, reduction=2),
                   trip_counts=(int(sum(uneven.trip_counts) / 64),) * 64)
    calib = load_calibration("h200")

    def launch(program: Program) -> float:
        work = Work({}, 1e6, 1e4, workgroups=64, threads_per_workgroup=128, family=Family.MLA_DECODE,
                    program=program)
        return kernel_time(work, H200, calib, LaunchMode.GRAPH, dispatch_s).time_s

    # the same rows in all: one long sequence keeps its workgroup busy long after the others are done
    assert launch(uneven) > 5 * launch(even)


def test_the_des_rejects_no_slots():
    with pytest.raises(ValueError, match="slots"):
        dispatch_s([1.0], 0)


def test_a_two_shot_that_pulls_its_data_is_bound_by_its_loads_in_flight():
    from hwmodels.interconnect import build_fabric
    from hwmodels.spec import load_platform
    from simulator.cost.collective_algorithms import Algorithm, allreduce_phases, custom_ar_in_flight, peer_loads_s
    from simulator.cost.collective_policy import collective_time
    from workloads.collectives import Collective, CollectiveOp

    platform = load_platform("h200-2")
    fabric = build_fabric(platform, H200)
    size = 1 << 30
    phases = allreduce_phases(Algorithm.TWO_SHOT, size, 2, fabric)
    # 36 blocks x 512 threads x 16 B from the one peer: 295 KB in flight over the peer-load latency
    rate = custom_ar_in_flight(2) / platform.peer_load_latency_s
    assert peer_loads_s(phases[0], fabric) == pytest.approx(platform.peer_load_latency_s + size / 2 / rate)
    t = collective_time(Collective(CollectiveOp.ALL_REDUCE, size, 2, "x"), fabric, H200, load_calibration("h200"),
                        mode=LaunchMode.GRAPH, algorithm=Algorithm.TWO_SHOT)
    assert t.time_s >= 2 * (size / 2) / rate
    # pushed data (QuickReduce) is not bound this way
    assert peer_loads_s(allreduce_phases(Algorithm.QUICKREDUCE, size, 2, fabric)[0], fabric) == 0.0


def _simpy_dispatch_s(durations: list[float], slots: int) -> float:
    """The dispatch as a process per workgroup in simpy: the reference the heap must equal."""
    import simpy

    env = simpy.Environment()
    cus = simpy.Resource(env, capacity=slots)

    def workgroup(duration: float):
        with cus.request() as slot:
            yield slot
            yield env.timeout(duration)

    def dispatcher():
        for duration in durations:  # grid order: a workgroup is handed out only when a slot is free
            with cus.request() as slot:
                yield slot
            env.process(workgroup(duration))
            yield env.timeout(0)

    env.process(dispatcher())
    env.run()
    return env.now


@settings(max_examples=200, deadline=None)
@given(durations=st.lists(st.floats(1e-9, 1e-2), min_size=1, max_size=300), slots=st.integers(1, 40),
       repeats=st.integers(1, 4))
def test_the_heap_dispatch_equals_a_process_per_workgroup_bit_for_bit(durations, slots, repeats):
    durations = durations * repeats  # equal lengths, as split grids have, tie in the heap
    assert dispatch_s(durations, slots) == _simpy_dispatch_s(durations, slots)
