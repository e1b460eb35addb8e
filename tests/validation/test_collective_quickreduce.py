"""The two-GPU QuickReduce rows are the product's QuickReduce on an NVIDIA node: the Triton port's three persistent
kernels (`workloads/quickreduce_kernels.py`), timed from their compiled code (qr_* rows), the same time
`infersim collective` gives."""

from __future__ import annotations

import pytest

from compiled.companion import compiled_kernel
from compiled.kernel import Compiled
from compiled.sass_counts import per_thread
from hwmodels.interconnect import build_fabric
from hwmodels.spec import load_gpu, load_platform
from infersim.collective_queries import collective_query
from simulator.cost.collective_algorithms import Algorithm, allreduce_phases
from validation.collective_report import compare_collectives
from workloads.codecs import Codec
from workloads.kernels import Dequantize, Quantize
from workloads.quickreduce_kernels import PORT_PROGRAMS, QrGather, QrReduce, QrScatter

GiB = 1 << 30


@pytest.fixture(scope="module")
def h200x2():
    platform = load_platform("h200-2")
    gpu = load_gpu(platform.gpu)
    return build_fabric(platform, gpu), gpu


def test_on_nvidia_every_phase_is_one_persistent_port_kernel_timed_from_its_code(h200x2):
    fabric, gpu = h200x2
    phases = allreduce_phases(Algorithm.QUICKREDUCE, GiB, 2, fabric, Codec.INT4, port_kernels=True)
    names = {QrScatter: "qr_scatter", QrReduce: "qr_reduce", QrGather: "qr_gather"}
    for phase in phases:
        (kernel,) = phase.kernels  # the reduce's decode is fused into its one kernel
        counted = compiled_kernel(kernel, gpu.name)
        assert isinstance(counted, Compiled)
        (work,) = counted.launches()
        _, per_tile = per_thread(gpu.name, names[type(kernel)], "int4")
        assert work.threads_per_workgroup == 128
        assert work.program.trip_instructions == per_tile and work.program.setup_instructions == 0
        # persistent: at most 1024 programs, each issuing the tile body once per tile it owns
        assert work.workgroups == PORT_PROGRAMS
        assert work.warp_instructions_per_workgroup == 4 * per_tile * work.program.trips > 4 * per_tile


def test_on_amd_the_phases_stay_one_codec_kernel_a_tile(h200x2):
    fabric, _ = h200x2
    kinds = [[type(k) for k in p.kernels] for p in allreduce_phases(Algorithm.QUICKREDUCE, GiB, 2, fabric,
                                                                      Codec.INT4)]
    assert kinds == [[Quantize], [Dequantize, Quantize], [Dequantize]]


@pytest.mark.parametrize("codec", ["int4", "fp", "int8"])
def test_every_quickreduce_row_is_what_infersim_collective_predicts(codec):
    rows = [c for c in compare_collectives("h200x2") if c.group == f"allreduce quickreduce {codec}"]
    assert len(rows) >= 10
    for row in rows:
        size = row.label.rpartition(" ")[0].rpartition(" ")[2] + row.label.rpartition(" ")[2]  # "1 GiB" -> "1GiB"
        result = collective_query("h200-2", tp=2, op="allreduce", size=size, algo="quickreduce", codec=codec,
                                  launch="graph")
        assert result["time_s"] == row.predicted_s, row.label
