"""`traces.alignment`: a trace with no sizes matched to a model's step by the order of its kernels."""

from __future__ import annotations

import random

import pytest

from hwmodels.calibration import load_calibration
from hwmodels.spec import load_gpu
from traces.alignment import ALIGNED, align, lcs_pairs, name_class, planned_launches
from traces.formats import Trace, TracedKernel
from traces.predict import kind_busy_s, predict_trace
from workloads.deployment import Deployment
from workloads.layers import build_step
from workloads.model import load_model
from workloads.step import Batch

# names as the engines' kernels are named, one per class (a graph replay records no grid)
NAMES = {"gemm": "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT32x32x256_MI16x16x1_SN",
         "moe": "_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu",
         "attention": "kernel_unified_attention_3d",
         "norm": "_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePass",
         "pointwise": "triton_poi_fused__to_copy_1",
         "collective": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"}


def test_names_fall_into_their_classes():
    assert [name_class(n) for n in NAMES.values()] == list(NAMES)
    assert name_class("void moe::dev::routing::routingIndicesHistogramKernel<...>") == "other"
    assert name_class("void vllm::reshape_and_cache_flash_kernel<__hip_bfloat16>") == "pointwise"
    assert name_class("bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_dynBatch_sm100f") == "moe"


def test_the_heaviest_common_subsequence_keeps_the_gemms():
    # the engine fuses the activation into its first expert GEMM: pairing the plan's activation with the trace's
    # quantize kernel would leave that GEMM out; the weights keep it
    traced = ["gemm", "pointwise", "other", "moe", "moe", "collective"]
    planned = ["gemm", "pointwise", "moe", "pointwise", "moe", "collective"]
    assert lcs_pairs(traced, planned) == [(0, 0), (1, 1), (3, 2), (4, 4), (5, 5)]
    assert lcs_pairs([], planned) == [] and lcs_pairs(traced, []) == []


@pytest.fixture(scope="module")
def mi300x_decode():
    gpu, calib = load_gpu("mi300x"), load_calibration("mi300x")
    plan = build_step(Batch(decodes=(1500,) * 24), Deployment(load_model("gpt-oss-20b"), gpu, tp=1))
    return gpu, calib, plan


def _replay(plan, gpu, calib, seed: int) -> tuple[list[TracedKernel], list]:
    """The plan's launches as a graph replay would record them, each as long as the model says, with an engine's
    differences: routing kernels the plan does not hold, and the activation fused into the expert GEMM."""
    rng = random.Random(seed)
    kernels, truth, t = [], [], 0.0
    for p in planned_launches(plan, gpu):
        if p.item.endswith("routed_act"):
            continue  # fused into the GEMM before it
        if p.item.endswith("routed_up"):
            for _ in range(rng.randint(1, 3)):
                kernels.append(TracedKernel("void moe::dev::routing::routingRenormalize<...>", t, 2e-6, "0", 0))
                truth.append(None)
                t += 1e-5
        if p.kind is None:
            continue  # a single GPU: no collectives
        seconds = kind_busy_s(p.kind, gpu, calib, p.launch)[0]
        kernels.append(TracedKernel(NAMES[p.klass], t, seconds, "0", 0))
        truth.append(p)
        t += seconds + 1e-6
    return kernels, truth


@pytest.mark.parametrize("seed", [3, 11])
def test_a_replay_of_the_step_aligns_launch_for_launch(mi300x_decode, seed):
    gpu, calib, plan = mi300x_decode
    kernels, truth = _replay(plan, gpu, calib, seed)
    placed, summary = align(kernels, plan, gpu)
    assert summary.steps == 1
    for i, planned in enumerate(truth):
        if planned is None:
            assert i not in placed
        else:
            assert (placed[i].layer, placed[i].item, placed[i].launch) == (planned.layer, planned.item,
                                                                           planned.launch)
    prediction = predict_trace(Trace("replay", "kineto", tuple(kernels)), gpu, calib, plan=plan)
    aligned = [g for g in prediction.groups if g.group.method == ALIGNED]
    assert len(aligned) == sum(p is not None for p in truth)
    # each kernel lasted what the model says its planned launch takes: aligned right, the error is nil
    assert prediction.matched_predicted_s == pytest.approx(prediction.matched_traced_s, rel=1e-9)


def test_two_steps_in_one_trace_meet_the_plan_twice(mi300x_decode):
    gpu, calib, plan = mi300x_decode
    kernels, truth = _replay(plan, gpu, calib, 5)
    shift = kernels[-1].end_s + 1e-3
    second = [TracedKernel(k.name, k.start_s + shift, k.duration_s, k.stream, k.device) for k in kernels]
    placed, summary = align(kernels + second, plan, gpu)
    assert summary.steps == 2
    assert len(placed) == 2 * sum(p is not None for p in truth)
