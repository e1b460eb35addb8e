"""A DeepSeek-style shared expert run inside the routed experts' fused MoE kernel (`kernels.moe_shared_fusion`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hwmodels.spec import load_gpu
from hwmodels.specfile import FieldError
from simulator.scenario import ScenarioError, load_scenario
from simulator.simulate import deployment_of
from workloads.deployment import Deployment, KernelOptions, default_shared_fusion
from workloads.kernels import MoeGemm
from workloads.layers import build_step
from workloads.model import load_model
from workloads.step import Batch


def _deployment(model: str, fusion: str = "separate", hw: str = "h200") -> Deployment:
    return Deployment(load_model(model), load_gpu(hw), tp=8, options=KernelOptions(moe_shared_fusion=fusion))


def test_the_engine_default_follows_sglangs_model_code():
    assert default_shared_fusion(_deployment("deepseek-r1"), "sglang") == "fused"
    assert default_shared_fusion(_deployment("deepseek-r1", hw="mi355x"), "sglang") == "fused"
    assert default_shared_fusion(_deployment("deepseek-r1"), "vllm") == "separate"
    assert default_shared_fusion(_deployment("deepseek-r1"), "trtllm") == "separate"
    # Kimi K3's routed experts run in a latent space its shared experts do not
    assert default_shared_fusion(_deployment("kimi-k3", hw="mi355x"), "sglang") == "separate"
    scenario = load_scenario(None, sets=["model.name=deepseek-r1", "hardware.platform=h200-8", "parallel.tp=8",
                                         "parallel.dcp=1", "serving.engine=sglang"])
    assert deployment_of(scenario).options.moe_shared_fusion == "fused"


def test_a_fused_shared_expert_is_one_more_expert_with_every_token():
    batch = Batch(decodes=(1500,) * 4)
    separate = build_step(batch, _deployment("deepseek-r1"))
    fused = build_step(batch, _deployment("deepseek-r1", "fused"))
    layer = next(i.layer for i in separate.kernels if i.name == "moe.routed_up")  # the first MoE layer

    def names(plan):
        return [i.name for i in plan.kernels if i.layer == layer]

    assert [n for n in names(separate) if n.startswith("moe.shared")]
    assert not [n for n in names(fused) if n.startswith("moe.shared")]
    up_separate, up_fused = (next(i.kernel for i in p.kernels if i.layer == layer and i.name == "moe.routed_up")
                             for p in (separate, fused))
    assert isinstance(up_fused, MoeGemm)
    assert up_fused.experts == up_separate.experts + 1
    assert up_fused.rows_by_expert[-1] == 4  # the shared expert takes every token of the batch
    # the weights the step reads do not change: the shared expert's move from its GEMMs into the grouped one
    def expert_reads(plan) -> float:
        gemms = ("moe.routed_up", "moe.routed_down", "moe.shared_gate_up", "moe.shared_down")
        return sum(i.kernel.work().read_bytes for i in plan.kernels if i.layer == layer and i.name in gemms)

    assert expert_reads(fused) == pytest.approx(expert_reads(separate), rel=0.02)


def test_fusion_asked_where_it_cannot_be_names_why():
    with pytest.raises(FieldError, match="latent space"):
        _deployment("kimi-k3", "fused", hw="mi355x")
    with pytest.raises(FieldError, match=r"'on' is not one of auto, fused, separate"):
        replace(KernelOptions(), moe_shared_fusion="on")
    with pytest.raises(ScenarioError, match=r"kernels\.moe_shared_fusion: .* latent space"):
        deployment_of(load_scenario(None, sets=["kernels.moe_shared_fusion=fused"]))
