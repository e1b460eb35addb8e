"""One engine step as kernels: exact lists and FLOP totals on tiny configs, and 2 x active params x tokens."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from hwmodels.dtypes import Dtype
from hwmodels.spec import load_gpu
from hwmodels.specfile import FieldError
from hwmodels.work import Family
from workloads.collectives import CollectiveOp
from workloads.deployment import Deployment, KernelOptions
from workloads.kernels import Gemm
from workloads.layers import build_step
from workloads.model import load_model
from workloads.params import active_matmul_params
from workloads.step import Batch, PrefillChunk, parse_shape

FIXTURES = Path(__file__).parent / "fixtures"
H200 = load_gpu("h200")


def deploy(name: str, **kwargs) -> Deployment:
    model = load_model(str(FIXTURES / f"{name}.yaml")) if name.startswith("tiny") else load_model(name)
    if name.startswith("tiny") and model.kda is not None:  # tiny KDA heads are narrower than the default tile
        kwargs["options"] = replace(kwargs.get("options", KernelOptions()), kda_verify_tile_cols=model.kda.head_dim)
    return Deployment(model, kwargs.pop("gpu", H200), **kwargs)


def layer_flop(plan, layer: int) -> float:
    return sum(item.kernel.work().flop for item in plan.kernels if item.layer == layer)


def names(plan, layer: int) -> list[str]:
    return [item.name for item in plan.items if item.layer == layer]


def test_gqa_dense_prefill_step_is_exact():
    plan = build_step(Batch(prefills=(PrefillChunk(4),)), deploy("tiny-gqa"))
    assert names(plan, 1) == ["input_norm", "gqa.qkv", "gqa.rope", "gqa.cache_write", "gqa.prefill_attention",
                              "gqa.o_proj", "post_attention_norm", "mlp.gate_up", "mlp.act", "mlp.down"]
    t, h = 4, 8
    pairs = 1 + 2 + 3 + 4  # causal, no cached prefix
    expected = (5 * t * h                      # fused residual add + RMSNorm
                + 2 * t * (2 + 2 * 1) * 4 * h  # qkv: 2 query heads + K and V of one KV head, head_dim 4
                + 3 * t * (2 + 1) * 4          # RoPE of q and k: 3 ops a value (the cache write has none)
                + 4 * 2 * 4 * pairs            # QK^T and PV over 2 heads of 4
                + 5 * 2 * pairs                # softmax
                + 2 * t * h * 8                # o_proj
                + 5 * t * h                    # post-attention norm
                + 2 * t * 32 * h               # gate and up
                + 4 * t * 16                   # SwiGLU
                + 2 * t * h * 16)              # down
    assert layer_flop(plan, 1) == expected
    assert names(plan, 2) == ["final_norm", "lm_head", "sampling"]
    assert layer_flop(plan, 2) == 4 * t * h + 2 * 1 * 10 * h + 4 * 10  # one sampled position
    assert plan.collectives == []  # TP1 needs no collective


def test_kda_layer_with_dense_mlp_decode_is_exact():
    plan = build_step(Batch(decodes=(10, 10)), deploy("tiny-hybrid"))
    assert names(plan, 1) == [
        "input_norm", "kda.qkv", "kda.decay_gate", "kda.beta", "kda.output_gate_a", "kda.output_gate_b",
        "kda.short_conv", "kda.dispatcher_copy", "kda.decode", "kda.gated_norm", "kda.o_proj",
        "post_attention_norm", "mlp.gate_up", "mlp.act", "mlp.down"]
    t, h, w, k = 2, 16, 8, 4  # 2 heads x head_dim 4
    expected = (5 * t * h + 2 * t * 3 * w * h + 2 * t * w * h + 2 * t * 2 * h + 2 * t * k * h + 2 * t * w * k
                + 3 * w * t * 2 * 2            # short conv: 2 ops per tap, 2 taps
                + 2 * 2 * (7 * k * k + k + 4 * k)  # recurrence per sequence and head, gate prep, output gating
                + 6 * t * w + 2 * t * h * w + 5 * t * h
                + 2 * t * 64 * h + 4 * t * 32 + 2 * t * h * 32)
    assert layer_flop(plan, 1) == expected
    kda = next(i.kernel for i in plan.kernels if i.name == "kda.decode")
    assert len(kda.launches()) == 5  # Kimi K3 study, mechanism 4: 3 compute kernels + 2 output copies
    fused = build_step(Batch(decodes=(10, 10)), deploy("tiny-hybrid", options=KernelOptions(
        kda_decode_fused=True, dispatcher_copies=False)))
    assert "kda.dispatcher_copy" not in names(fused, 1)
    assert len(next(i.kernel for i in fused.kernels if i.name == "kda.decode").launches()) == 1


def test_mla_layer_with_latent_moe_decode_is_exact():
    plan = build_step(Batch(decodes=(10, 10)), deploy("tiny-hybrid"))
    assert names(plan, 2) == [
        "input_norm", "mla.qkv_a", "mla.q_a_norm", "mla.q_b", "mla.kv_a_norm", "mla.rope",
        "mla.cache_write", "mla.absorb_k",
        "mla.decode", "mla.absorb_v", "mla.o_proj", "post_attention_norm", "moe.router", "moe.topk",
        "moe.latent_down", "moe.latent_norm", "moe.routed_up", "moe.routed_act", "moe.routed_down", "moe.combine",
        "moe.latent_out_norm", "moe.routed_out_proj", "moe.shared_gate_up", "moe.shared_act", "moe.shared_down"]
    t, h = 2, 16
    context = 10 + 1  # the new token attends to itself too
    mla = (5 * t * h + 2 * t * 8 * h + 4 * t * 8 + 2 * t * 2 * 6 * 8 + 2 * t * 10 * h + 4 * t * 8
           + 3 * t * (2 + 1) * 2                          # RoPE of 2 query heads and the shared key, rope dim 2
           + 2 * t * 2 * 8 * 4                            # absorb W_UK: 2 heads x latent 8 from nope 4
           + 2 * 2 * 2 * context * 10 + 2 * 2 * 2 * context * 8 + 5 * 2 * 2 * context  # scores, values, softmax
           + 2 * t * 2 * 4 * 8 + 2 * t * h * 8 + 5 * t * h)
    # 4 routings over 4 experts hit 4 * (1 - (3/4)^4) = 2.73 -> 3 experts of 2 tokens, padded to 16 rows
    moe = (2 * t * 4 * h + 4 * t * 4 + 2 * t * 8 * h + 4 * t * 8
           + 2 * 3 * 16 * 16 * 8 + 4 * 3 * 2 * 8 + 2 * 3 * 16 * 8 * 8
           + 2 * 2 * t * 8                                # each token's 2 expert outputs summed, latent 8
           + 4 * t * 8 + 2 * t * h * 8
           + 2 * t * 16 * h + 4 * t * 8 + 2 * t * h * 8)
    assert layer_flop(plan, 2) == mla + moe


def test_attnres_block_start_mixes_earlier_blocks():
    plan = build_step(Batch(decodes=(10, 10)), deploy("tiny-hybrid"))
    assert names(plan, 3)[0] == "attnres_mix"
    mix = plan.kernels[[i.name for i in plan.kernels].index("attnres_mix")].kernel
    assert mix.sources == 2 and len(mix.launches()) == 2  # mix, then an RMSNorm that re-reads it
    t, h = 2, 16
    assert mix.work().flop == t * (4 * 2 * h + 5 * 2) + 4 * t * h
    fused = build_step(Batch(decodes=(10, 10)), deploy("tiny-hybrid", options=KernelOptions(attnres_norm_fused=True)))
    fused_mix = next(i.kernel for i in fused.kernels if i.name == "attnres_mix")
    assert len(fused_mix.launches()) == 1 and fused_mix.work().bytes < mix.work().bytes


def test_sliding_window_layers_read_at_most_the_window():
    d = deploy("gpt-oss-120b", tp=8)
    plan = build_step(Batch(prefills=(PrefillChunk(512, 4096),), decodes=(32768, 100)), d)
    attention = {(i.layer, i.name): i.kernel for i in plan.kernels if i.name.endswith("_attention")}
    # layer 1 slides (128 tokens), layer 2 attends to everything; the mean decode context is 16434
    assert attention[(1, "gqa.decode_attention")].cached == 128
    assert attention[(2, "gqa.decode_attention")].cached == 16434
    assert attention[(1, "gqa.prefill_attention")].cached == 128
    assert attention[(2, "gqa.prefill_attention")].cached == 4096
    assert attention[(1, "gqa.decode_attention")].work().flop < attention[(2, "gqa.decode_attention")].work().flop
    dcp = build_step(Batch(decodes=(32768,)), replace(d, dcp=8))
    windowed = next(i.kernel for i in dcp.kernels if (i.layer, i.name) == (3, "gqa.decode_attention"))
    assert windowed.cached == 128 // 8  # each rank holds its share of the window


@pytest.mark.parametrize("name", ["qwen3-32b", "llama-3.1-70b", "deepseek-v3", "kimi-k3", "qwen3-235b-a22b",
                                  "gpt-oss-120b"])
def test_matmul_flop_is_twice_active_params_times_tokens(name):
    model = load_model(name)
    # tokens chosen so each expert gets a whole number of 64-row tiles (no padding FLOP)
    tokens = 64 * model.moe.experts // model.moe.top_k * 4 if model.moe else 4096
    gpu = load_gpu("mi355x")
    plan = build_step(Batch(prefills=(PrefillChunk(tokens),)), Deployment(model, gpu, tp=1,
                      weights={p: w for p, w in model.weights.items() if gpu.supports(w)}))
    matmul = sum(i.kernel.work().flop for i in plan.kernels
                 if i.kernel.work().family in (Family.GEMM, Family.MOE_GEMM) and i.name != "lm_head")
    expected = 2 * (active_matmul_params(model) - model.vocab_size * model.hidden_size) * tokens
    assert matmul == pytest.approx(expected, rel=0.01)


def test_tensor_parallel_step_has_its_collectives():
    k3 = deploy("kimi-k3", gpu=load_gpu("mi355x"), tp=8)
    plan = build_step(Batch(decodes=(32768,) * 64), k3)
    ops = [i.collective.op for i in plan.collectives]
    # embedding + every mixer and MLP output + the latent MoE's gather and reduction + logits
    assert ops.count(CollectiveOp.ALL_REDUCE) == 1 + 93 + 1 + 92 * 2
    assert ops.count(CollectiveOp.ALL_GATHER) == 92 + 1
    assert all(c.group_size == 8 for c in (i.collective for i in plan.collectives))
    dcp = build_step(Batch(decodes=(32768,) * 64), replace(k3, dcp=8))
    exchanges = [i for i in dcp.collectives if i.name.startswith("mla.dcp")]
    assert len(exchanges) == 2 * 24  # query exchange and partial-result exchange per MLA layer
    merge = [i for i in dcp.kernels if i.name == "mla.dcp_merge"]
    assert len(merge) == 24
    # DCP leaves the attention arithmetic about the same and cuts the history each rank reads (one split each, so
    # that no split's partials stand beside the history)
    one = replace(k3, options=replace(k3.options, mla_num_splits=1))
    attn = next(i.kernel for i in build_step(Batch(decodes=(32768,) * 64), one).kernels if i.name == "mla.decode")
    attn8 = next(i.kernel for i in build_step(Batch(decodes=(32768,) * 64), replace(one, dcp=8)).kernels
                 if i.name == "mla.decode")
    assert attn8.work().flop == pytest.approx(attn.work().flop, rel=0.01)
    assert attn8.work().read_bytes < attn.work().read_bytes / 7


def test_mechanism_options_change_the_kernels():
    k3 = deploy("kimi-k3", gpu=load_gpu("mi355x"), tp=8)
    batch = Batch(verifies=(4096,), drafts=3)
    before = build_step(batch, k3)
    after = build_step(batch, replace(k3, options=KernelOptions(
        mla_pad_heads_to=16, mla_num_splits=16, kda_verify_tile_cols=4, moe_output_dedup=True)))
    verify = next(i.kernel for i in before.kernels if i.name == "kda.verify")
    verify4 = next(i.kernel for i in after.kernels if i.name == "kda.verify")
    assert (verify.work().workgroups, verify4.work().workgroups) == (48, 384)
    proj = next(i.kernel for i in before.kernels if i.name == "moe.routed_out_proj")
    proj8 = next(i.kernel for i in after.kernels if i.name == "moe.routed_out_proj")
    assert proj.work().flop == 8 * proj8.work().flop
    mla = next(i.kernel for i in after.kernels if i.name == "mla.decode")
    assert len(mla.launches()) == 3  # padding copy, split attention, merge


def test_shapes_parse_and_reject_bad_text():
    assert parse_shape("64x32768", "decode") == (64, 32768, 0)
    assert parse_shape("2x8192@4096", "prefill") == (2, 8192, 4096)
    with pytest.raises(ValueError, match="expected COUNTxLENGTH"):
        parse_shape("64*32768", "decode")
    with pytest.raises(ValueError, match="only a prefill has a cached prefix"):
        parse_shape("1x5@3", "decode")
    with pytest.raises(ValueError, match="empty batch"):
        Batch()


def test_auto_mla_splits_follow_the_backends_heuristic_as_batch_and_context_change():
    from workloads.attention_backends import MlaBackend, mean_splits
    from workloads.layers import mla_backend

    def splits(d, contexts):
        plan = build_step(Batch(decodes=contexts), d)
        return next(i.kernel for i in plan.kernels if i.name == "mla.decode").num_splits

    r1 = deploy("deepseek-r1", gpu=load_gpu("mi355x"), tp=8)
    assert r1.options.mla_num_splits == 0 and r1.options.mla_backend == "auto"  # the defaults: auto
    assert mla_backend(r1) is MlaBackend.TRITON_VLLM  # vLLM on ROCm without VLLM_ROCM_USE_AITER: Triton MLA, 4 splits
    aiter = replace(r1, options=replace(r1.options, mla_backend="aiter"))
    seen = {}
    for batch in (1, 8, 64, 256):
        for context in (1024, 8192, 32768):
            got = splits(aiter, (context,) * batch)
            # the step's count is the backend's own, for the history each request attends (context + the new token)
            assert got == min(mean_splits(MlaBackend.AITER, aiter.gpu, (context + 1,) * batch, 16), context + 1)
            seen[batch, context] = got
    # AITER spreads a small batch over the CUs (16 splits) and splits less as the batch fills them
    assert seen[1, 8192] == 16 and seen[256, 8192] < seen[8, 8192]
    h200 = deploy("deepseek-r1", gpu=load_gpu("h200"), tp=8)
    assert mla_backend(h200) is MlaBackend.FLASH_ATTN_VLLM  # vLLM on Hopper with a bf16 KV cache: FlashAttention-3
    fp8 = replace(h200, kv_cache=Dtype.FP8)
    assert mla_backend(fp8) is MlaBackend.FLASHMLA  # FA3's MLA takes no fp8 cache: FlashMLA
    assert splits(h200, (32768,)) > splits(h200, (32768,) * 64) >= 1
    assert splits(h200, (1024,) * 8) <= splits(h200, (32768,) * 8)
    fixed = replace(h200, options=replace(h200.options, mla_num_splits=16))
    assert splits(fixed, (32768,) * 64) == 16  # a number is held whatever the batch


@pytest.mark.parametrize("gpu,quantized", [
    ("h200", ["mla.qkv_a", "mla.q_b", "mla.o_proj", "moe.routed_up", "moe.routed_down", "moe.shared_gate_up",
              "moe.shared_down"]),
    ("b200", ["mla.qkv_a", "mla.q_b", "mla.o_proj", "moe.routed_up", "moe.routed_down", "moe.shared_gate_up",
              "moe.shared_down"]),
    ("mi300x", ["mla.qkv_a", "mla.q_b", "mla.o_proj", "moe.shared_gate_up", "moe.shared_down"]),
    ("mi355x", []),
])
def test_fp8_block_scaled_gemms_quantize_their_input_where_the_engine_launches_it(gpu, quantized):
    """DeepSeek-R1's FP8 GEMMs take inputs quantized per token group: a launch of its own before each on CUDA, before
    the dense ones on CDNA3 (AITER's fused MoE quantizes inside), none on CDNA4 (fused into the norm and the MoE)."""
    d = Deployment(load_model("deepseek-r1"), load_gpu(gpu), tp=8)
    items = build_step(Batch(decodes=(1500,) * 4), d).items
    layer = [i for i in items if i.layer == 10 and i.kernel is not None]
    names = [i.name for i in layer]
    found = [n.removesuffix(".act_quant") for n in names if n.endswith(".act_quant")]
    assert found == quantized
    for name in found:  # each right before its GEMM (qkv_a: q's and the latent KV's down-projections in one)
        assert names[names.index(f"{name}.act_quant") + 1] == name
    quant = next((i.kernel for i in layer if i.name == "moe.routed_up.act_quant"), None)
    if quant is not None:
        assert quant.elements == 4 * 7168  # the four tokens' hidden states
    # a bf16 model has none
    dense = Deployment(load_model("qwen3-32b"), load_gpu(gpu), tp=8)
    assert not any(i.name.endswith(".act_quant") for i in build_step(Batch(decodes=(1500,) * 4), dense).items)


def test_aiters_generic_fp8_config_pins_cdna3s_block_scaled_projections_and_nothing_else():
    """`kernels.fp8_gemm_configs: generic`: AITER v0.1.10's one gfx942 config (128 x 128 tiles, no split-K) for every
    FP8 projection; the router stays a bf16 GEMM at the library's tiles; refused off CDNA3."""
    mi300x = load_gpu("mi300x")
    tuned = Deployment(load_model("deepseek-r1"), mi300x, tp=8)
    generic = replace(tuned, options=replace(tuned.options, fp8_gemm_configs="generic"))

    def gemms(d: Deployment) -> dict[str, object]:
        return {i.name: i.kernel for i in build_step(Batch(decodes=(1500,) * 4), d).items
                if i.layer == 10 and isinstance(i.kernel, Gemm)}

    before, after = gemms(tuned), gemms(generic)
    assert after["mla.qkv_a"].n == 1536 + 576 and after["mla.qkv_a"].dtype is Dtype.FP8
    for name in ("mla.qkv_a", "mla.q_b", "mla.o_proj"):
        g = after[name]
        assert (g.tile_m, g.tile_n, g.tile_k, g.split_k) == (128, 128, 128, 1)
    assert (before["mla.qkv_a"].tile_m, before["mla.qkv_a"].split_k) != (128, 1)
    assert after["moe.router"] == before["moe.router"] and after["moe.router"].dtype is Dtype.BF16
    with pytest.raises(FieldError, match="generic is AITER's generic gfx942 config; h200 is not a CDNA3") as err:
        Deployment(load_model("deepseek-r1"), load_gpu("h200"), tp=8,
                   options=KernelOptions(fp8_gemm_configs="generic"))
    assert err.value.key == "fp8_gemm_configs"
    with pytest.raises(FieldError, match="'newest' is not one of tuned, generic"):
        KernelOptions(fp8_gemm_configs="newest")
