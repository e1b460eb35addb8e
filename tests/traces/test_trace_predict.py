"""Traced kernels matched to kinds, predicted, and a calibration fitted on traces (`traces.matching`,
`traces.predict`), on small hand-made kernels and on one committed H200 engine-step trace."""

from __future__ import annotations

import csv
import dataclasses

import pytest

from hwmodels.calibration import load_calibration
from hwmodels.roofline import LaunchMode, kernel_time
from hwmodels.spec import load_gpu
from tests.conftest import ROOT
from traces.formats import Trace, TracedKernel, read_trace
from traces.matching import LAUNCH, NAME, kind_of, match_kernels
from traces.predict import TraceCalibrator, family_totals, predict_trace
from workloads import tiles
from workloads.attention_kernels import AttentionPrefill
from workloads.kernels import Copy, Elementwise, Gemm, RmsNorm

STEPS = ROOT / "validation" / "data" / "h200" / "engine_step"
BF = "c10::BFloat16"


@pytest.fixture(scope="module")
def h200():
    return load_gpu("h200"), load_calibration("h200")


def _k(name, op=None, shapes=None, dtypes=None, start=0.0, dur=1e-6, kind="kernel"):
    return TracedKernel(name=name, start_s=start, duration_s=dur, stream="7", device=0, op=op, shapes=shapes,
                        dtypes=dtypes, kind=kind)


def test_a_traced_scaled_mm_is_not_block_scaled():
    """`torch._scaled_mm` scales once per tensor or per row and column, after its loop: on CDNA it gets no
    block-scaled rescale, where the engine's block-scaled FP8 projection of the same shape does."""
    gpu = load_gpu("mi300x")
    fp8 = "c10::Float8_e4m3fn"
    scaled = kind_of("aten::_scaled_mm", ((64, 7168), (7168, 2112)), (fp8, fp8), gpu)
    assert isinstance(scaled, Gemm) and scaled.dtype.value == "fp8" and scaled.scale_group_k == 0
    assert tiles.blas_gemm(gpu, 64, 2112, 7168, scaled.dtype).scale_group_k == tiles.BLOCK_SCALE_GROUP_K


def test_kinds_of_operators(h200):
    gpu, _ = h200
    g = kind_of("aten::mm", ((8, 5120), (5120, 10240)), (BF, BF), gpu)
    assert isinstance(g, Gemm) and (g.m, g.n, g.k) == (8, 10240, 5120)
    assert g == tiles.blas_gemm(gpu, 8, 10240, 5120)  # the library's tiles on the GPU
    lin = kind_of("aten::linear", ((2, 3, 64), (128, 64)), (BF, BF), gpu)
    assert (lin.m, lin.n, lin.k) == (6, 128, 64)
    with pytest.raises(ValueError, match="inner dimensions"):
        kind_of("aten::mm", ((8, 64), (32, 16)), (BF, BF), gpu)
    att = kind_of("aten::_cudnn_attention_forward", ((8, 64, 1, 128), (8, 8, 1025, 128), (8, 8, 1025, 128)),
                  (BF, BF, BF), gpu)
    assert isinstance(att, AttentionPrefill)
    assert (att.seqs, att.q_len, att.heads, att.kv_heads, att.cached, att.causal) == (8, 1, 64, 8, 1024, False)
    pre = kind_of("aten::_flash_attention_forward", ((1, 512, 32, 128), (1, 512, 8, 128)), (BF, BF), gpu)
    assert (pre.q_len, pre.heads, pre.kv_heads, pre.cached, pre.causal) == (512, 32, 8, 0, True)
    norm = kind_of("aten::_fused_rms_norm", ((8, 64, 128), (), (128,), ()), (BF, "ScalarList", BF, "Scalar"), gpu)
    assert norm == RmsNorm(tokens=8 * 64, hidden=128)
    mul = kind_of("aten::mul", ((8, 64, 128), (8, 1, 128)), (BF, BF), gpu)
    assert mul == Elementwise(elements=8 * 64 * 128, inputs=1, ops_per_element=1)  # the broadcast input is small
    add = kind_of("aten::add", ((8, 5120), (8, 5120), ()), (BF, BF, "Scalar"), gpu)
    assert add.inputs == 2 and add.elements == 8 * 5120
    assert kind_of("aten::copy_", ((4, 8), (4, 8), ()), (BF, BF, "Scalar"), gpu) == Copy(size_bytes=64)
    cast = kind_of("aten::copy_", ((4, 8), (4, 8), ()), (BF, "float", "Scalar"), gpu)
    assert isinstance(cast, Elementwise) and cast.elements == 32
    cat = kind_of("aten::cat", (((8, 64, 64), (8, 64, 64)), ()), ("TensorList", "Scalar"), gpu)
    assert cat == Copy(size_bytes=2 * 8 * 64 * 64 * 2)
    emb = kind_of("aten::index_select", ((151936, 5120), (), (8,)), (BF, "Scalar", "long int"), gpu)
    assert emb == Copy(size_bytes=8 * 5120 * 2)
    assert kind_of("aten::unheard_of", ((4,),), (BF,), gpu) is None


def test_groups_keep_one_main_kernel_and_attach_auxiliaries(h200):
    gpu, _ = h200
    mm = ("aten::mm", ((8, 8192), (8192, 5120)), (BF, BF))
    mul = ("aten::mul", ((8, 64), (8, 64)), (BF, BF))
    kernels = [_k("Memset (Device)", *mm, kind="memset"), _k("nvjet_sm90_tst_256x8_splitK_TNT", *mm),
               _k("void cublasLt::splitKreduce_kernel<32, 16>", *mm),
               _k("elementwise_kernel<mul>", *mul), _k("elementwise_kernel<mul>", *mul),  # two calls, two groups
               _k("ampere_sgemm_128x64_nn"), _k("mystery_kernel", "aten::frobnicate", ((4,),), (BF,))]
    groups = match_kernels(kernels, gpu)
    assert [len(g.kernels) for g in groups] == [3, 1, 1, 1, 1]
    assert sum(len(g.kernels) for g in groups) == len(kernels)  # nothing dropped
    assert groups[0].family == "gemm" and isinstance(groups[0].kernel, Gemm)
    assert groups[1].kernel == groups[2].kernel and groups[1] is not groups[2]
    assert groups[3].family == "gemm" and groups[3].kernel is None and "no launching operator" in groups[3].reason
    assert groups[4].kernel is None and "aten::frobnicate" in groups[4].reason


def test_predicted_time_is_the_launch_without_its_overhead(h200):
    gpu, calib = h200
    shapes = ((64, 4096), (4096, 4096))
    trace = Trace("t.json", "kineto", (_k("nvjet_gemm", "aten::mm", shapes, (BF, BF), dur=50e-6),
                                       _k("mystery", dur=10e-6, start=1e-4)))
    p = predict_trace(trace, gpu, calib)
    work = tiles.blas_gemm(gpu, 64, 4096, 4096).launches()[0]
    t = kernel_time(work, gpu, calib, LaunchMode.GRAPH)
    assert p.groups[0].predicted_s == pytest.approx(t.time_s - t.launch_s)
    assert p.groups[0].bound in ("compute", "memory", "latency")
    assert p.unmatched_share == pytest.approx(10 / 60)
    assert p.predicted_kernels_s == pytest.approx(p.groups[0].predicted_s + 10e-6)  # unmatched at traced time
    assert p.predicted_step_s == pytest.approx(p.predicted_kernels_s + 2 * gpu.launch_graph_node_s)
    totals = family_totals([p])
    assert totals["gemm"].traced_s == pytest.approx(50e-6) and totals["unknown"].unmatched_s == pytest.approx(10e-6)


def test_calibrator_recovers_known_factors(h200):
    """Traces whose kernels took exactly 2x (norms) and 0.5x (GEMMs) the model's time: the fit finds 2 and 0.5,
    and, given step times with 1 us a launch of graph overhead, that overhead."""
    gpu, calib = h200
    norm_shapes, mm_shapes = ((16, 5120), (), (5120,), ()), ((16, 5120), (5120, 5120))
    norm_s = predict_trace(Trace("n", "kineto", (_k("layer_norm", "aten::_fused_rms_norm", norm_shapes, (BF,)),)),
                           gpu, calib).groups[0].predicted_s
    mm_s = predict_trace(Trace("g", "kineto", (_k("nvjet", "aten::mm", mm_shapes, (BF, BF)),)),
                         gpu, calib).groups[0].predicted_s
    kernels = []
    for i in range(4):
        kernels.append(_k("layer_norm", "aten::_fused_rms_norm", norm_shapes, (BF,), start=i, dur=2 * norm_s))
        kernels.append(_k("nvjet", "aten::mm", mm_shapes, (BF, BF), start=i + 0.5, dur=0.5 * mm_s))
    preds = [predict_trace(Trace(f"t{j}", "kineto", tuple(kernels)), gpu, calib) for j in range(2)]
    steps = [sum(k.duration_s for k in kernels) + len(kernels) * 1e-6] * 2
    fitted = TraceCalibrator().fit(preds, steps)
    assert fitted.scale("norm", preds[0].groups[0].bound) == pytest.approx(2.0)
    assert fitted.scale("gemm", "default") == pytest.approx(0.5)
    assert fitted.launch_graph_node_s_ == pytest.approx(1e-6)
    assert fitted.predict(preds[0]) == pytest.approx(steps[0])
    # the calibration applies the same factors when the model times a kernel
    cal = fitted.calibration(calib, "test")
    again = predict_trace(Trace("n", "kineto", (_k("layer_norm", "aten::_fused_rms_norm", norm_shapes, (BF,)),)),
                          gpu, cal).groups[0].predicted_s
    assert again == pytest.approx(2 * norm_s)


def test_calibration_scales_never_go_below_the_roofline(h200):
    gpu, calib = h200
    work = Gemm(m=8192, n=8192, k=8192).launches()[0]
    tiny = dataclasses.replace(calib, family_time_scale={"gemm": {"default": 0.05}})
    t = kernel_time(work, gpu, tiny, LaunchMode.GRAPH)
    assert t.time_s - t.launch_s == pytest.approx(t.floor_s)


def test_committed_engine_step_trace_is_matched_and_predicted(h200):
    """The H200 Qwen3-32B decode step (1 sequence, 1K context): every kernel matched, the step within 15 %."""
    gpu, calib = h200
    with open(STEPS / "engine_step.csv", newline="") as f:
        rows = {r["trace"]: float(r["time_s_median"]) for r in csv.DictReader(f)}
    name = "qwen3-32b_decode_1x1024.trace.json.gz"
    p = predict_trace(read_trace(STEPS / name), gpu, calib)
    assert p.unmatched_share < 0.02
    assert {g.group.family for g in p.groups} == {"gemm", "attention_prefill", "norm", "elementwise", "copy"}
    gemms = [g for g in p.groups if g.group.family == "gemm"]
    assert len(gemms) == 4 * 64 + 1  # qkv, o, gate_up, down per layer, and the LM head
    assert abs(p.predicted_step_s / rows[name] - 1) < 0.15


def test_vllm_operators_varlen_attention_and_collectives(h200):
    gpu, calib = h200
    assert kind_of("_C::rms_norm", ((16, 5120), (16, 5120), (5120,), ()), (BF, BF, BF, "double"), gpu) == \
        RmsNorm(tokens=16, hidden=5120)
    fused = kind_of("_C::fused_add_rms_norm", ((16, 5120), (16, 5120), (5120,), ()), (BF, BF, BF, "double"), gpu)
    assert (fused.tokens, fused.hidden, fused.fused) == (16, 5120, True)
    act = kind_of("_C::silu_and_mul", ((16, 12800), (16, 25600)), (BF, BF), gpu)
    assert act == Elementwise(elements=16 * 12800, inputs=2, ops_per_element=4)
    rope = kind_of("_C::rotary_embedding", ((16,), (16, 8192), (16, 1024), (), (40960, 128), ()),
                   ("long int", BF, BF, "long int", BF, "bool"), gpu)
    assert rope.elements == 16 * (8192 + 1024) and rope.inputs == 1
    cache = kind_of("_C_cache_ops::reshape_and_cache_flash", ((16, 8, 128), (16, 8, 128), (900, 16, 8, 128),
                                                              (900, 16, 8, 128), (16,)), (BF,) * 4 + ("long int",), gpu)
    assert cache == Copy(size_bytes=2 * 16 * 8 * 128 * 2)
    # varlen: 16 sequences (17 offsets) of one query against 256 keys each
    varlen = kind_of("aten::_flash_attention_forward", ((16, 32, 128), (4096, 8, 128), (4096, 8, 128), (17,), (17,)),
                     (BF,) * 3 + ("int", "int"), gpu)
    assert (varlen.seqs, varlen.q_len, varlen.heads, varlen.kv_heads, varlen.cached) == (16, 1, 32, 8, 255)
    # a collective: unpredicted without the group's size; with it, timed on the GPU's node
    nccl = _k("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "nccl:all_reduce", ((16, 5120),), (BF,), dur=40e-6)
    (alone,) = match_kernels([nccl], gpu)
    assert alone.family == "collective" and not alone.matched and "--group-size" in alone.reason
    (grouped,) = match_kernels([nccl], gpu, group_size=8)
    assert grouped.collective.payload_bytes == 16 * 5120 * 2 and grouped.collective.group_size == 8
    from hwmodels.interconnect import build_fabric
    from hwmodels.spec import load_platform

    fabric = build_fabric(load_platform("h200-8"), gpu)
    p = predict_trace(Trace("c", "kineto", (nccl,)), gpu, calib, fabric, group_size=8)
    assert p.groups[0].predicted_s > 0 and p.unmatched_share == 0
    assert predict_trace(Trace("c", "kineto", (nccl,)), gpu, calib).unmatched_share == 1.0


# PyTorch's pointwise kernels as CUPTI/Kineto and as Nsight spell them: each thread handles the kernel's template
# count of values, so the grid and workgroup give the size without the operator's shapes
_VECTORIZED = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, "
               "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, "
               "3ul> >(int, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
               "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)")
_NSYS_FILL = ("void at::native::vectorized_elementwise_kernel<(int)8, at::native::FillFunctor<float>, "
              "std::array<char *, (unsigned long)1>>(int, T2, T3)")
_UNROLLED = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
             "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::"
             "operator()() const::{lambda(c10::Half)#1}>(at::TensorIteratorBase&, ...)")


@pytest.mark.parametrize(("name", "grid", "block", "elements", "inputs", "dtype"), [
    (_VECTORIZED, (4919, 1, 1), (128, 1, 1), 4919 * 128 * 4, 2, "bf16"),
    (_NSYS_FILL, (3, 7, 1), (256, 1, 1), 21 * 256 * 8, 0, "fp32"),
    (_UNROLLED, (1789, 1, 1), (128, 1, 1), 1789 * 128 * 4, 1, "fp16"),
])
def test_a_pointwise_kernel_without_shapes_is_sized_by_its_launch(h200, name, grid, block, elements, inputs, dtype):
    kernel = TracedKernel(name, 0.0, 3e-5, "7", 0, grid=grid, block=block)
    (group,) = match_kernels([kernel], h200[0])
    assert group.method == LAUNCH and group.kernel == Elementwise(elements=elements, inputs=inputs, dtype=dtype)
    (predicted,) = predict_trace(Trace("t", "nsys-sqlite", (kernel,)), *h200).groups
    assert predicted.predicted_s > 0


def test_copies_fills_and_replays_match_only_as_far_as_the_trace_tells(h200):
    kernels = [TracedKernel("Memcpy DtoD (Device -> Device)", 0.0, 2e-5, "7", 0, kind="memcpy", bytes=5_114_880),
               TracedKernel("[CUDA memset]", 1e-4, 2e-6, "7", 0, kind="memset", bytes=65_536),
               TracedKernel("[CUDA memcpy Host-to-Device]", 2e-4, 1e-3, "7", 0, kind="memcpy", bytes=1 << 24),
               TracedKernel("Memcpy DtoD (Device -> Device)", 3e-4, 2e-5, "7", 0, kind="memcpy"),
               TracedKernel("_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1", 4e-4, 1e-4, "7", 0),
               TracedKernel("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN", 5e-4, 1e-4, "7", 0, grid=(2, 66, 1),
                            block=(384, 1, 1))]
    copy, fill, host, sizeless, replay, gemm = match_kernels(kernels, h200[0])
    assert copy.kernel == Copy(size_bytes=5_114_880) and copy.method == LAUNCH
    assert fill.kernel == Elementwise(elements=65_536, inputs=0, dtype="int8") and fill.method == LAUNCH
    # a host copy is timed over the GPU's host link (its bytes at PCIe's usable rate)
    assert host.kernel is None and host.host_copy_bytes == 1 << 24 and host.method == LAUNCH
    (predicted,) = predict_trace(Trace("t", "nsys-sqlite", (kernels[2],)), *h200).groups
    assert predicted.predicted_s == pytest.approx((1 << 24) / (h200[0].host_link_bytes_per_s * 0.8))
    assert sizeless.kernel is None and "without its bytes" in sizeless.reason
    assert replay.kernel is None and "graph replay" in replay.reason
    # a library GEMM's grid gives its tiles, not its depth: left unmatched, never guessed
    assert gemm.kernel is None and gemm.family == "gemm" and gemm.method == NAME
