"""Which product kernels are timed from their compiled code, and that every command then gives the same time."""

from __future__ import annotations

import pytest

from compiled.companion import compiled_kernel
from compiled.kernel import Compiled
from compiled.launch_time import ProgramSource, launch_times, timed_kernel
from hwmodels.calibration import load_calibration
from hwmodels.roofline import LaunchMode
from hwmodels.spec import load_gpu
from infersim.queries import kernel_query
from workloads.attention_kernels import MlaDecode
from workloads.kda_kernels import KdaDecode, KdaVerify
from workloads.kernels import Dequantize, Gemm, Quantize

MLA = dict(seqs=2, context=4096, heads=12, kv_dtype="bf16", q_dtype="bf16", heads_per_workgroup=16, threads=128,
           block_n=32, num_splits=4)


@pytest.mark.parametrize("kernel", [MlaDecode(**MLA), KdaVerify(seqs=1, positions=4, heads=12, tile_cols=4),
                                    KdaDecode(seqs=8, heads=12), Quantize(values=1 << 20, codec="int4"),
                                    Dequantize(values=1 << 20, codec="int3")])
def test_a_companion_kernel_at_a_compiled_configuration_is_timed_from_its_code(kernel):
    counted = compiled_kernel(kernel, "h200")
    assert isinstance(counted, Compiled) and counted.kernel == kernel
    assert len(counted.launches()) == len(kernel.launches())
    assert timed_kernel(kernel, load_gpu("h200"))[1] is ProgramSource.COMPILED
    # no code was compiled for the MI355X (gfx950) yet: its analytic program
    assert compiled_kernel(kernel, "mi355x") is None


@pytest.mark.parametrize("kernel", [
    MlaDecode(**{**MLA, "heads_per_workgroup": 64}),  # FlashMLA's tile, not the companion kernel's
    MlaDecode(**{**MLA, "kv_dtype": "fp8"}),  # compiled for bf16 only
    MlaDecode(**{**MLA, "num_splits": 2}),  # a split count that was not compiled
    KdaVerify(seqs=1, positions=4, heads=12, tile_cols=4, threads=256),  # other warps than compiled
    KdaDecode(seqs=8, heads=12, fused=False),  # three kernels, not the fused one
    Quantize(values=1 << 20, codec="int4", threads=128),
    Gemm(m=64, n=4096, k=4096),  # a library kernel: no companion kernel
])
def test_anything_else_is_timed_from_its_analytic_program(kernel):
    assert compiled_kernel(kernel, "h200") is None
    assert timed_kernel(kernel, load_gpu("h200"))[1] is ProgramSource.ANALYTIC


def test_infersim_kernel_reports_the_one_prediction_and_where_its_program_came_from():
    gpu, calib = load_gpu("h200"), load_calibration("h200")
    params = {k: str(v) for k, v in MLA.items()}
    for launch in ("eager", "graph", "queued"):
        result = kernel_query("h200", "mla-decode", params, launch=launch)
        assert result["program"] == "compiled"
        expected = launch_times(MlaDecode(**MLA), gpu, calib, LaunchMode(launch))
        assert result["time_s"] == sum(t.time_s for t in expected)
    # the compiled code's instructions, not the kind's estimate, set the issue time
    analytic = [w.warp_instructions_per_workgroup for w in MlaDecode(**MLA).launches()]
    compiled = [w.warp_instructions_per_workgroup for w in compiled_kernel(MlaDecode(**MLA), "h200").launches()]
    assert compiled != analytic
    assert kernel_query("mi355x", "mla-decode", params, launch="graph")["program"] == "analytic"
