"""Which product kernels are timed from their compiled code, and that every command then gives the same time."""

from __future__ import annotations

import pytest

from compiled import triton_build
from compiled.companion import compiled_kernel
from compiled.kernel import Compiled
from compiled.kernel_code import kernel_code, why_not
from compiled.launch_time import ProgramSource, launch_times, timed_kernel
from compiled.triton_build import triton_version
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
    # the MI355X's code is compiled here for gfx950: waves of 64, its own instruction counts
    amd = compiled_kernel(kernel, "mi355x")
    assert isinstance(amd, Compiled) and len(amd.launches()) == len(kernel.launches())
    assert amd.warp_instructions != counted.warp_instructions


@pytest.mark.parametrize(("kernel", "config"), [
    (MlaDecode(**{**MLA, "num_splits": 2}), "splits=2 even=False"),  # a split count the table does not hold
    (KdaVerify(seqs=1, positions=4, heads=12, tile_cols=4, threads=256), "bv=4 store=True warps=8"),  # other warps
    (Quantize(values=1 << 20, codec="int4", threads=128), "int4 warps=4"),
])
def test_a_configuration_outside_the_table_is_compiled_here(kernel, config):
    counted = compiled_kernel(kernel, "h200")
    assert isinstance(counted, Compiled)
    name = {MlaDecode: "mla_decode", KdaVerify: "kda_recurrent", Quantize: "triton_quantize"}[type(kernel)]
    code = kernel_code("h200", name, config)
    assert code["origin"] == "compiled" and code["target"] == "sm_90" and code["triton"] == triton_version()
    assert code["prologue_instructions"] > 0 and code["timeline"]["prologue"]["stream"]


def test_without_triton_a_configuration_outside_the_table_is_timed_analytically(monkeypatch):
    monkeypatch.setattr(triton_build, "triton_version", lambda: None)
    kernel_code.cache_clear()
    try:
        assert compiled_kernel(MlaDecode(**{**MLA, "num_splits": 3}), "h200") is None
        assert "Triton is not installed" in why_not("h200", "mla_decode", "splits=3 even=False")
        assert isinstance(compiled_kernel(MlaDecode(**MLA), "h200"), Compiled)  # the shipped table still serves
        assert compiled_kernel(MlaDecode(**MLA), "mi355x") is None
    finally:
        kernel_code.cache_clear()


@pytest.mark.parametrize("kernel", [
    MlaDecode(**{**MLA, "heads_per_workgroup": 64}),  # FlashMLA's tile, not the companion kernel's
    MlaDecode(**{**MLA, "kv_dtype": "fp8"}),  # compiled for bf16 only
    KdaVerify(seqs=1, positions=4, heads=12, tile_cols=4, threads=100),  # not a whole number of warps
    KdaDecode(seqs=8, heads=12, fused=False),  # three kernels, not the fused one
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
    amd = kernel_query("mi355x", "mla-decode", params, launch="graph")
    assert amd["program"] == "compiled"
    # what the gfx950 code says, read off the assembly: the attention kernel and the merge
    (attention, merge) = amd["compiled_code"]
    assert (attention["kernel"], attention["target"], attention["origin"]) == ("mla_decode", "gfx950", "compiled")
    assert attention["num_warps"] == 2  # the kind's 128 threads: two waves of 64
    assert attention["registers"] > 0 and attention["agprs"] >= 0 and attention["sgprs"] > 0
    assert attention["shared_bytes"] > 0 and attention["loop_instructions"] > 0 and merge["kernel"] == "mla_merge"
    assert result["compiled_code"][0]["origin"] == "table" and result["compiled_code"][0]["target"] == "sm_90"
    gemm = {"m": "64", "n": "4096", "k": "4096"}
    assert kernel_query("mi355x", "gemm", gemm, launch="graph")["program"] == "analytic"


AITER = dict(n=2112, k=7168, dtype="fp8", tile_m=128, tile_n=128, tile_k=128, split_k=1, stages=2, threads=256,
             scale_group_k=128, aiter_triton=True)


def test_aiter_s_triton_gemm_is_timed_from_its_gfx942_code_with_its_loop_unrolled_as_compiled():
    """SGLang's block-scaled FP8 GEMM on gfx942 (AITER's generic configuration) is the companion port compiled
    here: LLVM unrolls its k loop by two, read off the code's bytes a trip, so the program runs half the trips with
    twice the loads; M only sets the configuration's specialisation (rows wrap modulo M)."""
    kernel = Gemm(m=64, **AITER)
    counted = compiled_kernel(kernel, "mi300x")
    assert isinstance(counted, Compiled) and counted.unroll == (2,)
    (analytic,), (work,) = kernel.launches(), counted.launches()
    assert analytic.program.trips == 56 and work.program.trips == 28
    assert work.program.trip_load_bytes == 2 * analytic.program.trip_load_bytes
    code = kernel_code("mi300x", "aiter_gemm_blockscale", "m=16 n=16 ks=any ns=any")
    assert code["target"] == "gfx942" and code["num_warps"] == 4 and work.registers_per_thread == code["registers"]
    assert code["loop_load_bytes"] == 2 * analytic.program.trip_load_bytes / 256
    # every row count of a tile is the same code, specialised by M's value alone
    assert compiled_kernel(Gemm(m=48, **AITER), "mi300x").registers == counted.registers
    assert kernel_query("mi300x", "gemm", {k: str(v) for k, v in {"m": 64, **AITER}.items()},
                        launch="graph")["program"] == "compiled"


def test_a_vendor_library_gemm_or_another_tile_is_not_aiter_s_kernel():
    assert compiled_kernel(Gemm(m=64, **{**AITER, "aiter_triton": False}), "mi300x") is None
    assert compiled_kernel(Gemm(m=64, **{**AITER, "tile_n": 64}), "mi300x") is None  # not the compiled configuration
    assert compiled_kernel(Gemm(m=64, **{**AITER, "split_k": 2}), "mi300x") is None
