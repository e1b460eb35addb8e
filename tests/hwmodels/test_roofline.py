"""The roofline model: never below the floor, monotone, faster hardware never slower, partial grids."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels.calibration import load_calibration
from hwmodels.dtypes import Dtype
from hwmodels.roofline import Bound, LaunchMode, kernel_busy, kernel_time, roofline_floor_s
from hwmodels.spec import load_gpu, spec_names
from hwmodels.specfile import FieldError
from hwmodels.work import Family, Work

GPUS = [load_gpu(n) for n in spec_names("gpus")]
MATH = [Dtype.BF16, Dtype.FP8, Dtype.FP32]
families = st.sampled_from(list(Family))


@st.composite
def works(draw):
    flop = {d: draw(st.floats(0, 1e13)) for d in draw(st.sets(st.sampled_from(MATH), max_size=3))}
    workgroups = draw(st.integers(1, 100_000))
    return Work(
        flop_by_dtype=flop,
        read_bytes=draw(st.floats(0, 1e10)),
        write_bytes=draw(st.floats(0, 1e10)),
        workgroups=workgroups,
        threads_per_workgroup=draw(st.sampled_from([64, 128, 256, 512])),
        lds_bytes_per_workgroup=draw(st.integers(0, 64 * 1024)),
        family=draw(families),
    )


@settings(max_examples=300, deadline=None)
@given(work=works(), gpu=st.sampled_from(GPUS), mode=st.sampled_from(list(LaunchMode)))
def test_never_below_the_roofline_floor(work, gpu, mode):
    t = kernel_time(work, gpu, load_calibration(gpu.name), mode)
    assert t.time_s >= t.floor_s * (1 - 1e-12)
    assert t.floor_s == roofline_floor_s(work, gpu)
    assert t.time_s >= t.launch_s > 0


@settings(max_examples=200, deadline=None)
@given(work=works(), gpu=st.sampled_from(GPUS), grow=st.floats(1.0, 100.0),
       part=st.sampled_from(["flop", "read", "write"]))
def test_more_work_on_the_same_grid_is_never_faster(work, gpu, grow, part):
    calib = load_calibration(gpu.name)
    if part == "flop":
        bigger = replace(work, flop_by_dtype=MappingProxyType({d: f * grow for d, f in work.flop_by_dtype.items()}))
    elif part == "read":
        bigger = replace(work, read_bytes=work.read_bytes * grow)
    else:
        bigger = replace(work, write_bytes=work.write_bytes * grow)
    assert kernel_time(bigger, gpu, calib).time_s >= kernel_time(work, gpu, calib).time_s * (1 - 1e-12)


@settings(max_examples=200, deadline=None)
@given(work=works(), gpu=st.sampled_from(GPUS), speedup=st.floats(1.0, 4.0))
def test_a_strictly_faster_gpu_is_never_slower(work, gpu, speedup):
    faster = replace(
        gpu,
        peak_dense_flop_per_s=MappingProxyType(
            {d: (p * speedup if p is not None else None) for d, p in gpu.peak_dense_flop_per_s.items()}),
        hbm_bandwidth_bytes_per_s=gpu.hbm_bandwidth_bytes_per_s * speedup,
        launch_eager_s=gpu.launch_eager_s / speedup,
        launch_graph_node_s=gpu.launch_graph_node_s / speedup,
        launch_eager_gpu_s=None if gpu.launch_eager_gpu_s is None else gpu.launch_eager_gpu_s / speedup,
        lds_per_cu_bytes=gpu.lds_per_cu_bytes,
    )
    calib = load_calibration(gpu.name)
    for mode in LaunchMode:
        assert kernel_time(work, faster, calib, mode).time_s <= kernel_time(work, gpu, calib, mode).time_s * (1 + 1e-12)


def test_a_grid_smaller_than_the_gpu_cannot_pull_full_bandwidth():
    # the roofline model's partial-grid heuristic (the cycle-level model's Little's law: test_cycle_time.py)
    gpu, calib = load_gpu("mi355x"), load_calibration("mi355x", cost_model="roofline")
    stream = dict(flop_by_dtype={}, read_bytes=64e6, write_bytes=64e6, threads_per_workgroup=256,
                  family=Family.COPY)
    full = kernel_time(Work(workgroups=4096, **stream), gpu, calib)
    few = kernel_time(Work(workgroups=16, **stream), gpu, calib)
    assert full.bound is Bound.MEMORY
    # 16 of 256 CUs, each able to pull 1/(0.5*256) of the bandwidth: 8x slower than the full grid.
    assert few.memory_s == pytest.approx(full.memory_s * 8)


def test_wave_tail_on_compute():
    gpu, calib = load_gpu("h200"), load_calibration("h200")
    math = dict(read_bytes=0.0, write_bytes=0.0, threads_per_workgroup=256, family=Family.GEMM)
    one_round = kernel_time(Work({Dtype.BF16: 132e9}, workgroups=132, **math), gpu, calib)
    # One more workgroup of the same size: the busiest SM runs two, sharing its math units, so the
    # tail is at the SM level even though 8 blocks of 256 threads fit at once (one residency wave).
    tail = kernel_time(Work({Dtype.BF16: 133e9}, workgroups=133, **math), gpu, calib)
    assert tail.compute_s == pytest.approx(one_round.compute_s * 2)
    assert tail.waves == one_round.waves == 1
    big = kernel_time(Work({Dtype.BF16: 133e9}, workgroups=133 * 8 + 1, **math), gpu, calib)
    assert big.waves == 2


def test_graph_launch_is_cheaper_than_eager_for_tiny_kernels():
    gpu, calib = load_gpu("h200"), load_calibration("h200")
    tiny = Work({Dtype.FP32: 256.0}, read_bytes=1024, write_bytes=1024, workgroups=1,
                threads_per_workgroup=256, family=Family.ELEMENTWISE)
    eager = kernel_time(tiny, gpu, calib, LaunchMode.EAGER)
    graph = kernel_time(tiny, gpu, calib, LaunchMode.GRAPH)
    assert eager.bound is Bound.LAUNCH and graph.time_s < eager.time_s
    assert eager.launch_s == gpu.launch_eager_s


def test_several_launches_must_be_timed_one_by_one():
    gpu, calib = load_gpu("h200"), load_calibration("h200")
    one = Work({}, 8.0, 8.0, workgroups=1, threads_per_workgroup=64, family=Family.COPY)
    with pytest.raises(ValueError, match="one launch"):
        kernel_time(one + one, gpu, calib)


def test_unsupported_dtype_is_a_clear_error():
    gpu = load_gpu("h200")
    work = Work({Dtype.MXFP4: 1e9}, 1e6, 1e6, workgroups=100, threads_per_workgroup=256, family=Family.GEMM)
    with pytest.raises(ValueError, match="h200 has no mxfp4"):
        kernel_time(work, gpu, load_calibration("h200"))


@settings(max_examples=200, deadline=None)
@given(a=works(), b=works(), c=works())
def test_work_addition_is_associative(a, b, c):
    left, right = (a + b) + c, a + (b + c)
    assert left.flop == pytest.approx(right.flop)
    assert left.bytes == pytest.approx(right.bytes)
    assert (left.workgroups, left.launches, left.family) == (right.workgroups, right.launches, right.family)
    assert left.lds_bytes_per_workgroup == right.lds_bytes_per_workgroup
    assert (a + Work.nothing()).flop == a.flop and (Work.nothing() + a).family == a.family


def test_instruction_issue_bounds_a_launch_whose_instructions_are_not_flop():
    gpu, calib = load_gpu("h200"), load_calibration("h200", cost_model="roofline")
    codec = dict(flop_by_dtype={Dtype.FP32: 1e7}, read_bytes=1e7, write_bytes=1e7, threads_per_workgroup=256,
                 family=Family.CODEC)
    plain = kernel_time(Work(workgroups=132 * 10, **codec), gpu, calib, LaunchMode.GRAPH)
    counted = kernel_time(Work(workgroups=132 * 10, warp_instructions_per_workgroup=8 * 3000, **codec), gpu, calib,
                          LaunchMode.GRAPH)
    # 10 workgroups per SM, 8 warps x 3000 instructions each, 4 schedulers issuing one per clock
    assert counted.compute_s == pytest.approx(10 * 8 * 3000 / (4 * gpu.clock_hz))
    assert counted.bound is Bound.COMPUTE and plain.bound is Bound.MEMORY
    assert counted.time_s > plain.time_s


def test_fewer_warps_than_schedulers_issue_from_fewer_schedulers():
    gpu, calib = load_gpu("h200"), load_calibration("h200")
    one_warp = Work({}, 0.0, 0.0, workgroups=1, threads_per_workgroup=32, warp_instructions_per_workgroup=1000)
    four_warps = replace(one_warp, threads_per_workgroup=128, warp_instructions_per_workgroup=4000)
    # one warp sits on one scheduler: 1000 instructions take 1000 clocks, as do four warps' 4000 on four
    assert kernel_time(one_warp, gpu, calib).compute_s == pytest.approx(1000 / gpu.clock_hz)
    assert kernel_time(four_warps, gpu, calib).compute_s == pytest.approx(1000 / gpu.clock_hz)


@settings(max_examples=200, deadline=None)
@given(work=works(), gpu=st.sampled_from(GPUS), instructions=st.floats(0, 1e7), grow=st.floats(1.0, 10.0))
def test_counting_more_instructions_is_never_faster(work, gpu, instructions, grow):
    calib = load_calibration(gpu.name)
    counted = replace(work, warp_instructions_per_workgroup=instructions)
    more = replace(work, warp_instructions_per_workgroup=instructions * grow)
    assert kernel_time(counted, gpu, calib).time_s >= kernel_time(work, gpu, calib).time_s * (1 - 1e-12)
    assert kernel_time(more, gpu, calib).time_s >= kernel_time(counted, gpu, calib).time_s * (1 - 1e-12)


def test_a_gpu_without_a_probe_takes_the_h200s_memory_curve_relative_to_its_own_idle_latency():
    h200, b200 = load_calibration("h200"), load_calibration("b200")
    # the H200's fit: a bulk latency of 431.4 ns over its 349.5 ns pointer chase, a bend of 1.155
    assert h200.mlp_latency_s == pytest.approx(431.4e-9) and h200.mlp_smoothness == pytest.approx(1.155)
    assert b200.mlp_latency_s is None and b200.mlp_smoothness == h200.mlp_smoothness
    # the default ratio is the H200 fit's bulk latency over its measured pointer chase (to the yaml's 3 decimals)
    assert b200.mlp_latency_ratio == pytest.approx(h200.mlp_latency_s / load_gpu("h200").dram_latency_s, abs=5e-4)
    # the ratio lengthens a memory-bound launch's latency path on the B200; the H200's fit ignores it
    gpu = load_gpu("b200")
    work = Work(flop_by_dtype={}, read_bytes=64e6, write_bytes=0, workgroups=64, threads_per_workgroup=256,
                family=Family.COPY)
    plain = replace(b200, mlp_latency_ratio=1.0)
    assert kernel_busy(work, gpu, b200).time_s > kernel_busy(work, gpu, plain).time_s
    assert kernel_busy(work, load_gpu("h200"), replace(h200, mlp_latency_ratio=3.0)).time_s == \
        kernel_busy(work, load_gpu("h200"), h200).time_s
    with pytest.raises(FieldError, match=r"must be in \[1, 4\], got 0.5") as raised:
        replace(b200, mlp_latency_ratio=0.5)
    assert raised.value.key == "mlp_latency_ratio"


def test_a_launchs_value_key_tells_apart_every_field_and_equal_launches_share_it():
    from dataclasses import fields

    from hwmodels.program import Program

    base = Work({Dtype.BF16: 1e9, Dtype.FP32: 2e6}, 3e6, 1e6, workgroups=64, threads_per_workgroup=256,
                family=Family.MLA_DECODE, program=Program(trips=4, trip_load_bytes=4096))
    same = Work(dict(base.flop_by_dtype), 3e6, 1e6, workgroups=64, threads_per_workgroup=256,
                family=Family.MLA_DECODE, program=Program(trips=4, trip_load_bytes=4096))
    assert same is not base and same.value_key() == base.value_key()
    changed = {"flop_by_dtype": {Dtype.BF16: 1e9, Dtype.FP32: 3e6}, "read_bytes": 4e6, "write_bytes": 2e6,
               "workgroups": 65, "threads_per_workgroup": 128, "lds_bytes_per_workgroup": 1024,
               "registers_per_thread": 64, "launches": 2, "family": Family.GEMM, "flop_per_workgroup": 1e7,
               "flop_heaviest_workgroup": 2e7, "memory_workgroups": 8, "bytes_per_workgroup": 1e5,
               "warp_instructions_per_workgroup": 100.0, "program": Program(trips=5, trip_load_bytes=4096),
               "triton_launch": True, "grouped_library": True, "grouped_tail_groups": 3, "exiting_workgroups": 7,
               "l2_phases": ((1.0, 2.0),)}
    assert set(changed) == {f.name for f in fields(Work)}  # a new field must be added here, and to the key
    for name, value in changed.items():
        assert replace(base, **{name: value}).value_key() != base.value_key(), name
    # the mapping's order is part of the key: the FLOP are summed in that order
    assert Work({Dtype.FP32: 2e6, Dtype.BF16: 1e9}, 3e6, 1e6, 64, 256).value_key() != \
        Work({Dtype.BF16: 1e9, Dtype.FP32: 2e6}, 3e6, 1e6, 64, 256).value_key()



def test_a_kernel_that_issues_matrix_instructions_runs_at_the_matrix_clock():
    from hwmodels.program import Chain, Program

    calib = load_calibration("h200")

    def busy(gpu_name: str, program: Program) -> float:
        work = Work(flop_by_dtype={}, read_bytes=0.0, write_bytes=0.0, workgroups=1, threads_per_workgroup=128,
                    program=program)
        return kernel_busy(work, load_gpu(gpu_name), calib).latency_s

    plain = Program(trips=200, trip_instructions=400, trip_chain=Chain(alu=40))
    compiled_matrix = replace(plain, matrix_units=True)  # the compiled code says so
    analytic_matrix = replace(plain, trip_chain=Chain(alu=40, mma=4))  # an analytic tile with a matrix chain
    h200 = load_gpu("h200")
    assert h200.matrix_boost_clock_hz < h200.boost_clock_hz
    ratio = h200.boost_clock_hz / h200.matrix_boost_clock_hz
    # a latency-bound loop: every cycle of it stretches by the clock's ratio
    assert busy("h200", compiled_matrix) == pytest.approx(busy("h200", plain) * ratio, rel=1e-3)
    assert analytic_matrix.issues_matrix and not plain.issues_matrix
    # a GPU that measured no such clock runs both at its boost clock
    assert load_gpu("b200").matrix_boost_clock_hz is None
    assert busy("b200", compiled_matrix) == pytest.approx(busy("b200", plain), rel=1e-12)
