"""The QuickReduce all-reduce rows are timed with the compiled Triton kernels' SASS counts (qr_* rows)."""

from __future__ import annotations

import math

import pytest

from compiled.kernel import Compiled
from compiled.sass_counts import per_thread
from hwmodels.calibration import load_calibration
from hwmodels.interconnect import build_fabric
from hwmodels.roofline import LaunchMode
from hwmodels.spec import load_gpu, load_platform
from simulator.cost.collective_algorithms import Algorithm, allreduce_phases
from simulator.cost.collective_policy import collective_time
from validation.collective_report import QR_KERNELS, QR_PROGRAMS, compare_collectives, quickreduce_kernels
from workloads.codecs import Codec
from workloads.collectives import Collective, CollectiveOp

GiB = 1 << 30


@pytest.fixture(scope="module")
def h200x2():
    platform = load_platform("h200-2")
    gpu = load_gpu(platform.gpu)
    return build_fabric(platform, gpu), gpu, load_calibration(gpu.name)


def test_every_phase_maps_to_its_counted_kernel(h200x2):
    fabric, gpu, _ = h200x2
    kernel_as = quickreduce_kernels(gpu.name, Codec.INT4, 2)
    phases = allreduce_phases(Algorithm.QUICKREDUCE, GiB, 2, fabric, Codec.INT4)
    assert [p.name for p in phases] == list(QR_KERNELS)
    for phase in phases:
        launched = [w for k in phase.kernels for w in kernel_as(phase, k).launches()]
        assert len(launched) == 1  # the reduce phase's Dequantize is fused into its one kernel
        _, per_tile = per_thread(gpu.name, QR_KERNELS[phase.name], "int4")
        (work,) = launched
        assert work.threads_per_workgroup == 128
        assert work.program.trip_instructions == per_tile and work.program.setup_instructions == 0
        # persistent: at most 1024 programs, each issuing the tile body once per tile it owns
        assert work.workgroups == QR_PROGRAMS
        assert work.warp_instructions_per_workgroup == 4 * per_tile * work.program.trips > 4 * per_tile
    assert all(isinstance(kernel_as(p, k), Compiled) for p in phases[::2] for k in p.kernels)


def test_int4_1gib_with_compiled_counts_differs_and_is_finite(h200x2):
    fabric, gpu, calib = h200x2
    collective = Collective(CollectiveOp.ALL_REDUCE, GiB, 2, "test")
    args = dict(mode=LaunchMode.GRAPH, algorithm=Algorithm.QUICKREDUCE, codec=Codec.INT4)
    model = collective_time(collective, fabric, gpu, calib, **args)
    counted = collective_time(collective, fabric, gpu, calib, **args,
                              kernel_as=quickreduce_kernels(gpu.name, Codec.INT4, 2))
    # the compiled kernels' counts and timelines replace the model's own estimates of the codec kernels
    assert math.isfinite(counted.time_s) and counted.time_s != pytest.approx(model.time_s, rel=1e-3)


def test_report_rows_use_the_counts(h200x2):
    fabric, gpu, calib = h200x2
    rows = {c.label: c for c in compare_collectives("h200x2")}
    row = rows["quickreduce_int4_all_reduce 1 GiB"]
    model = collective_time(Collective(CollectiveOp.ALL_REDUCE, GiB, 2, "test"), fabric, gpu, calib,
                            mode=LaunchMode.GRAPH, algorithm=Algorithm.QUICKREDUCE, codec=Codec.INT4)
    counted = collective_time(Collective(CollectiveOp.ALL_REDUCE, GiB, 2, "test"), fabric, gpu, calib,
                              mode=LaunchMode.GRAPH, algorithm=Algorithm.QUICKREDUCE, codec=Codec.INT4,
                              kernel_as=quickreduce_kernels(gpu.name, Codec.INT4, 2))
    assert row.predicted_s == pytest.approx(counted.time_s) and row.predicted_s != pytest.approx(model.time_s)
