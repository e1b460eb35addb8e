"""The kernels and collectives of each layer type for one step on one tensor-parallel rank.

Sequences of one kind in a step are modelled at their mean length (the sum of their history bytes is
kept); a varlen kernel over them is one launch. Weights run at their stored precision where the GPU
has math units for it, and in bf16 otherwise (weights upcast on load).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import lru_cache
from typing import TypeVar

from hwmodels.dtypes import Dtype
from hwmodels.spec import GPU
from workloads import tiles
from workloads.attention_backends import MlaBackend, batch_mean_splits, default_mla_backend
from workloads.collectives import Collective, CollectiveOp
from workloads.deployment import AITER_GENERIC_FP8_TILES, AUTO_SPLITS, Deployment
from workloads.kernel_base import KernelKind, cdiv
from workloads.kernels import (
    AddRmsNorm,
    AttentionPrefill,
    AttnResMix,
    Copy,
    Elementwise,
    Gemm,
    KdaDecode,
    KdaPrefill,
    KdaVerify,
    MlaDecode,
    MoeGemm,
    RmsNorm,
    worst_case_row_tiles,
)
from workloads.model import Mixer, Part
from workloads.step import Batch, Depends, StepItem, StepPlan

T = TypeVar("T")
TOKENS, SAMPLED, DECODES = Depends.TOKENS, Depends.SAMPLED, Depends.DECODES
PREFILLS, PREFILL_HISTORY, DECODE_HISTORY = Depends.PREFILLS, Depends.PREFILL_HISTORY, Depends.DECODE_HISTORY
ACT_BYTES = 2  # bf16 activations on the wire
SWIGLU_OPS = 4  # silu (sigmoid, multiply) and the gate product, per value
GATED_NORM_OPS = 6  # KDA's gated RMSNorm on the output, per value
ROPE_OPS = 3  # a value times cos plus its rotated partner times sin
# Dynamic FP8 activation quantization per group of 128 values (the block-scaled checkpoints' activation_scheme
# dynamic): the group's absolute maximum, the scale, and the scaled conversion, per value (assumption: 4 FP32 ops)
ACT_QUANT_OPS = 4


@lru_cache(maxsize=65536)
def _make(cls: type[KernelKind], **fields: object) -> KernelKind:
    """One shared, validated kernel object per shape: steps repeat the same shapes layer after layer."""
    return cls(**fields)


def _k(layer: int, name: str, depends: Depends, kernel: KernelKind) -> StepItem:
    return StepItem(layer, name, depends, kernel=kernel)


def _c(layer: int, name: str, depends: Depends, op: CollectiveOp, payload: float, group: int) -> Iterator[StepItem]:
    if group > 1:
        yield StepItem(layer, name, depends, collective=Collective(op, payload, group, name))


def _gemm(d: Deployment, part: Part, m: int, n: int, k: int) -> Gemm:
    """A projection as a BLAS would run it on the deployment's GPU (`tiles.blas_gemm`); a block-scaled FP8 one at
    AITER's generic tiles where `kernels.fp8_gemm_configs` says so (a CDNA3 GPU, checked by the deployment)."""
    dtype = d.math_dtype(part)
    generic = d.options.fp8_gemm_configs == "generic" and dtype is Dtype.FP8
    return tiles.blas_gemm(d.gpu, m, n, k, dtype, AITER_GENERIC_FP8_TILES if generic else None)


def _act_quant(layer: int, name: str, depends: Depends, rows: int, k: int, d: Deployment, part: Part
               ) -> Iterator[StepItem]:
    """The launch that quantizes an FP8 GEMM's input to FP8 with a scale per token and group of 128 values, where
    the engines run it apart:
      - CUDA: vLLM's and SGLang's block-scaled FP8 linear layers and fused-MoE paths call per_token_group_quant_fp8
        before each matmul (vllm/model_executor/layers/quantization/utils/fp8_utils.py,
        sglang/srt/layers/quantization/fp8_utils.py, fused_moe_triton).
      - CDNA3: AITER's block-scaled GEMM takes an input quantized by its own per-1x128 launch (SGLang's
        aiter_w8a8_block_fp8_linear); AITER's fused-MoE call quantizes inside it, so the routed experts get none.
      - CDNA4: SGLang's DeepSeek layers quantize inside the norm before the GEMM (deepseek_v2.py on gfx950:
        fused_rms_fp8_group_quant, fused_flatten_fp8_group_quant) and AITER's fused MoE inside its call: none
        (assumption for the other AITER paths).
    Priced as a bf16 pointwise pass over the input (the FP8 output is half of that; at decode these launches are
    latency-bound)."""
    if d.math_dtype(part) is not Dtype.FP8:
        return
    family = tiles.arch_family(d.gpu)
    if family is tiles.ArchFamily.CDNA4 or (family is tiles.ArchFamily.CDNA3 and part is Part.ROUTED_EXPERTS):
        return
    yield _k(layer, f"{name}.act_quant", depends,
             _make(Elementwise, elements=rows * k, inputs=1, ops_per_element=ACT_QUANT_OPS))


def _section(section: T | None, name: str) -> T:
    """A layer-type section the model's mixer pattern says exists."""
    if section is None:
        raise ValueError(f"the model has no {name} section for a layer that uses it")
    return section


def _mean(values: tuple[int, ...]) -> int:
    return cdiv(sum(values), len(values))


def pre_stack_items(batch: Batch, d: Deployment) -> Iterator[StepItem]:
    """Vocab-parallel embedding lookup and its all-reduce."""
    h = d.model.hidden_size
    yield _k(0, "embedding", TOKENS, _make(Copy, size_bytes=batch.tokens * h * ACT_BYTES))
    yield from _c(0, "embedding", TOKENS, CollectiveOp.ALL_REDUCE, batch.tokens * h * ACT_BYTES, d.tp)


def post_stack_items(batch: Batch, d: Deployment) -> Iterator[StepItem]:
    """Final norm, the vocab-parallel LM head on sampled positions, the logits gather and sampling."""
    m, last = d.model, d.model.layers + 1
    sampled, vocab = batch.sampled_tokens, m.vocab_size
    yield _k(last, "final_norm", TOKENS, _make(RmsNorm, tokens=batch.tokens, hidden=m.hidden_size))
    yield _k(last, "lm_head", SAMPLED, _gemm(d, Part.EMBEDDING, sampled, cdiv(vocab, d.tp), m.hidden_size))
    yield from _c(last, "logits", SAMPLED, CollectiveOp.ALL_GATHER, sampled * cdiv(vocab, d.tp) * 4, d.tp)
    yield _k(last, "sampling", SAMPLED,
             _make(Elementwise, elements=sampled * vocab, inputs=1, ops_per_element=4, dtype="fp32"))




def build_step(batch: Batch, deployment: Deployment) -> StepPlan:
    """The kernel and collective list of one step of `batch` on every rank of `deployment`."""
    items = list(pre_stack_items(batch, deployment))
    for layer in range(1, deployment.model.layers + 1):
        items.extend(layer_items(layer, batch, deployment))
    items.extend(post_stack_items(batch, deployment))
    return StepPlan(deployment, batch, tuple(items))


def layer_items(layer: int, batch: Batch, d: Deployment) -> Iterator[StepItem]:
    """Input norm (or AttnRes mixing), the token mixer, the post-attention norm, then the MLP or MoE."""
    yield from input_items(layer, batch, d)
    yield from mixer_items(layer, batch, d)
    yield from ffn_items(layer, batch, d)


def attnres_sources(layer: int, d: Deployment) -> int:
    """Earlier block outputs mixed at this layer's input: 0 unless the layer starts an AttnRes block."""
    block = d.model.attnres_block_size
    if block and layer > 1 and (layer - 1) % block == 0:
        return (layer - 1) // block + 1  # the embedding and every completed block
    return 0


def input_items(layer: int, batch: Batch, d: Deployment) -> Iterator[StepItem]:
    """The layer's input: AttnRes mixing where a block starts, else the residual add + RMSNorm. Depends on tokens."""
    m, t = d.model, batch.tokens
    sources = attnres_sources(layer, d)
    if sources:
        yield _k(layer, "attnres_mix", TOKENS, _make(AttnResMix, tokens=t, hidden=m.hidden_size, sources=sources,
                                                  fused_norm=d.options.attnres_norm_fused))
    else:
        yield _k(layer, "input_norm", TOKENS, _make(AddRmsNorm, tokens=t, hidden=m.hidden_size))


def mixer_items(layer: int, batch: Batch, d: Deployment) -> Iterator[StepItem]:
    """The token mixer of this layer: MLA, KDA or GQA. Depends on the whole batch."""
    return _MIXERS[d.model.mixer(layer)][0](layer, batch, d)


def mixer_sequence_items(layer: int, batch: Batch, d: Deployment) -> Iterator[StepItem]:
    """The items of `mixer_items` that depend on the batch's sequences (its prefill chunks, decodes and verifies),
    in the same order, without those that depend on the token count alone: what a step's sequence parts time."""
    return _MIXERS[d.model.mixer(layer)][1](layer, batch, d)


def ffn_items(layer: int, batch: Batch, d: Deployment) -> Iterator[StepItem]:
    """The post-attention norm, then the MoE or dense MLP. Depends on the batch's token count only."""
    m, t = d.model, batch.tokens
    yield _k(layer, "post_attention_norm", TOKENS, _make(AddRmsNorm, tokens=t, hidden=m.hidden_size))
    if m.is_moe_layer(layer):
        yield from _moe_items(layer, batch, d)
    else:
        yield from _dense_mlp_items(layer, batch, d)


def _output_projection(layer: int, name: str, t: int, width: int, d: Deployment) -> Iterator[StepItem]:
    h = d.model.hidden_size
    yield from _act_quant(layer, f"{name}.o_proj", TOKENS, t, width, d, Part.ATTENTION)
    yield _k(layer, f"{name}.o_proj", TOKENS, _gemm(d, Part.ATTENTION, t, h, width))
    yield from _c(layer, f"{name}.output", TOKENS, CollectiveOp.ALL_REDUCE, t * h * ACT_BYTES, d.tp)


def _rope_and_cache_write(layer: int, name: str, t: int, rope_width: int, cache_width: int,
                          d: Deployment) -> Iterator[StepItem]:
    """Rotary embedding of the new tokens' q and k (`rope_width` values a token, in place: vLLM's
    rotary_embedding), then their keys and values written into the paged cache (`cache_width` values a token:
    reshape_and_cache_flash, or concat_and_cache_mla for the latent); under DCP a rank writes its share."""
    yield _k(layer, f"{name}.rope", TOKENS, _make(Elementwise, elements=t * rope_width, inputs=1,
                                                  ops_per_element=ROPE_OPS))
    yield _k(layer, f"{name}.cache_write", TOKENS,
             _make(Copy, size_bytes=cdiv(t, d.dcp) * cache_width * ACT_BYTES))


def mla_backend(d: Deployment) -> MlaBackend:
    """The MLA decode backend the deployment runs: its option's, or, for "auto", vLLM's default for the GPU."""
    if d.options.mla_backend != "auto":
        return MlaBackend(d.options.mla_backend)
    return default_mla_backend(d.gpu, "vllm", kv_dtype=d.kv_dtype, heads=_section(d.model.mla, "mla").heads // d.tp)


_SPLITS: dict[tuple, int] = {}
_SPLITS_KEPT = 8192  # batches remembered (a serving run repeats its batch shapes)


def auto_mla_splits(backend: MlaBackend, gpu: GPU, histories: tuple[int, ...], heads: int) -> int:
    """Split-KV partitions per request that `backend`'s heuristic picks for one step's batch of `histories` (its mean
    over the requests: `MlaDecode` takes one count)."""
    key = (backend, gpu.name, gpu.arch, gpu.compute_units, histories, heads)
    if key not in _SPLITS:
        if len(_SPLITS) >= _SPLITS_KEPT:
            _SPLITS.clear()
        _SPLITS[key] = batch_mean_splits(backend, gpu, histories, heads)
    return _SPLITS[key]


def _mla_items(layer: int, batch: Batch, d: Deployment) -> Iterator[StepItem]:
    """MLA: low-rank q, the latent KV, absorbed decode (split, padded, DCP-sharded) or MHA prefill."""
    a, hid, t = _section(d.model.mla, "mla"), d.model.hidden_size, batch.tokens
    h = a.heads // d.tp
    qk = a.qk_nope_head_dim + a.qk_rope_head_dim
    # q's and the latent KV's down-projections read the same input; with a q LoRA both engines run them as one
    # GEMM of q_lora + kv_lora + rope columns (vLLM deepseek_v2.py `fused_qkv_a_proj`, SGLang deepseek_v2.py
    # `fused_qkv_a_proj_with_mqa`), else q's projection reads the input itself beside kv_a
    yield from _act_quant(layer, "mla.qkv_a" if a.q_lora_rank else "mla.kv_a", TOKENS, t, hid, d, Part.ATTENTION)
    if a.q_lora_rank:
        yield _k(layer, "mla.qkv_a", TOKENS, _gemm(d, Part.ATTENTION, t, a.q_lora_rank + a.latent_width, hid))
        yield _k(layer, "mla.q_a_norm", TOKENS, _make(RmsNorm, tokens=t, hidden=a.q_lora_rank))
        yield from _act_quant(layer, "mla.q_b", TOKENS, t, a.q_lora_rank, d, Part.ATTENTION)
    else:
        yield _k(layer, "mla.kv_a", TOKENS, _gemm(d, Part.ATTENTION, t, a.latent_width, hid))
    yield _k(layer, "mla.q_b", TOKENS, _gemm(d, Part.ATTENTION, t, h * qk, a.q_lora_rank or hid))
    yield _k(layer, "mla.kv_a_norm", TOKENS, _make(RmsNorm, tokens=t, hidden=a.kv_lora_rank))
    yield from _rope_and_cache_write(layer, "mla", t, (h + 1) * a.qk_rope_head_dim, a.latent_width, d)
    yield from _mla_sequence_items(layer, batch, d)
    width = h * a.v_head_dim
    if a.output_gate:
        yield _k(layer, "mla.gate", TOKENS, _gemm(d, Part.ATTENTION, t, width, hid))
        yield _k(layer, "mla.gate_mul", TOKENS, _make(Elementwise, elements=t * width, inputs=2, ops_per_element=4))
    yield from _output_projection(layer, "mla", t, width, d)


def _mla_sequence_items(layer: int, batch: Batch, d: Deployment) -> Iterator[StepItem]:
    """MLA's items of the decoding and prefilling sequences: absorbed decode (split, padded, DCP-sharded) and MHA
    prefill."""
    a, o = _section(d.model.mla, "mla"), d.options
    h = a.heads // d.tp
    qk = a.qk_nope_head_dim + a.qk_rope_head_dim
    positions = batch.verify_positions
    queries = len(batch.decodes) + len(batch.verifies) * positions
    if queries:
        yield _k(layer, "mla.absorb_k", DECODES,
                 _gemm(d, Part.ATTENTION, queries, h * a.kv_lora_rank, a.qk_nope_head_dim))
        yield from _c(layer, "mla.dcp_query_exchange", DECODES, CollectiveOp.ALL_GATHER,
                      queries * h * a.latent_width * ACT_BYTES, d.dcp)
        for contexts, per_seq in ((batch.decodes, 1), (batch.verifies, positions)):
            if contexts:
                # DCP: each rank attends the whole group's heads over its own share of the positions;
                # a split kernel never makes more partitions than positions (short contexts use fewer)
                context = max(1, cdiv(_mean(contexts) + 1, d.dcp))
                # uneven histories make an irregular grid (each rank holds its DCP share of each history)
                distinct = set(contexts)
                histories = tuple(map({c: max(1, cdiv(c + 1, d.dcp)) for c in distinct}.__getitem__, contexts)
                                  ) if len(distinct) > 1 else ()
                splits, backend = o.mla_num_splits, mla_backend(d)
                if splits == AUTO_SPLITS:
                    splits = auto_mla_splits(backend, d.gpu, histories or (context,) * len(contexts),
                                             h * per_seq * d.dcp)
                tiled = (tiles.aiter_persistent_mla_tiles if backend is MlaBackend.AITER_PERSISTENT
                         else tiles.mla_decode_tiles)
                yield _k(layer, "mla.decode", DECODE_HISTORY, MlaDecode(
                    seqs=len(contexts), context=context, contexts=histories,
                    heads=h * per_seq * d.dcp, kv_lora=a.kv_lora_rank, rope_dim=a.qk_rope_head_dim,
                    num_splits=min(splits, context), pad_heads_to=o.mla_pad_heads_to * per_seq * d.dcp,
                    kv_dtype=d.kv_dtype, **tiled(
                        d.gpu, kv_lora=a.kv_lora_rank, rope_dim=a.qk_rope_head_dim, kv_dtype=d.kv_dtype).fields))
        if d.dcp > 1:
            partials = queries * h * d.dcp * (a.kv_lora_rank * 4 + 4)  # fp32 output + log-sum-exp per head
            yield from _c(layer, "mla.dcp_partial_exchange", DECODES, CollectiveOp.ALL_TO_ALL, partials, d.dcp)
            yield _k(layer, "mla.dcp_merge", DECODES,
                     _make(Elementwise, elements=queries * h * a.kv_lora_rank, inputs=d.dcp,
                                                         ops_per_element=3 * d.dcp, dtype="fp32"))
        yield _k(layer, "mla.absorb_v", DECODES, _gemm(d, Part.ATTENTION, queries, h * a.v_head_dim, a.kv_lora_rank))
    if batch.prefills:
        tokens = tuple(c.tokens for c in batch.prefills)
        cached = tuple(c.cached for c in batch.prefills)
        history = sum(tokens) + sum(cached)
        up_width = h * (a.qk_nope_head_dim + a.v_head_dim)
        yield from _act_quant(layer, "mla.kv_b", PREFILL_HISTORY, history, a.kv_lora_rank, d, Part.ATTENTION)
        yield _k(layer, "mla.kv_b", PREFILL_HISTORY, _gemm(d, Part.ATTENTION, history, up_width, a.kv_lora_rank))
        yield _k(layer, "mla.prefill_attention", PREFILL_HISTORY, AttentionPrefill(
            seqs=len(tokens), q_len=_mean(tokens), heads=h, kv_heads=h, head_dim=qk, head_dim_v=a.v_head_dim,
            cached=_mean(cached), **tiles.attention_tiles(d.gpu, head_dim=qk).fields))


def _kda_items(layer: int, batch: Batch, d: Deployment) -> Iterator[StepItem]:
    """KDA: projections, short convs, the recurrence per batch kind, the gated norm, o_proj."""
    a, hid, t, o = _section(d.model.kda, "kda"), d.model.hidden_size, batch.tokens, d.options
    h, k = a.heads // d.tp, a.head_dim
    width = h * k
    yield _k(layer, "kda.qkv", TOKENS, _gemm(d, Part.ATTENTION, t, 3 * width, hid))
    if a.full_rank_gate:
        yield _k(layer, "kda.decay_gate", TOKENS, _gemm(d, Part.ATTENTION, t, width, hid))
    else:
        yield _k(layer, "kda.decay_gate_a", TOKENS, _gemm(d, Part.ATTENTION, t, k, hid))
        yield _k(layer, "kda.decay_gate_b", TOKENS, _gemm(d, Part.ATTENTION, t, width, k))
    yield _k(layer, "kda.beta", TOKENS, _gemm(d, Part.ATTENTION, t, h, hid))
    yield _k(layer, "kda.output_gate_a", TOKENS, _gemm(d, Part.ATTENTION, t, k, hid))
    yield _k(layer, "kda.output_gate_b", TOKENS, _gemm(d, Part.ATTENTION, t, width, k))
    yield _k(layer, "kda.short_conv", TOKENS, _make(Elementwise, elements=t * 3 * width, inputs=1,
                                            ops_per_element=2 * a.conv_kernel))
    if o.dispatcher_copies:
        yield _k(layer, "kda.dispatcher_copy", TOKENS, _make(Copy, size_bytes=o.dispatcher_copy_bytes))
    yield from _kda_sequence_items(layer, batch, d)
    yield _k(layer, "kda.gated_norm", TOKENS,
             _make(Elementwise, elements=t * width, inputs=2, ops_per_element=GATED_NORM_OPS))
    yield from _output_projection(layer, "kda", t, width, d)


def _kda_sequence_items(layer: int, batch: Batch, d: Deployment) -> Iterator[StepItem]:
    """KDA's recurrence per batch kind: decode, verify, chunked prefill."""
    a, o = _section(d.model.kda, "kda"), d.options
    h, k = a.heads // d.tp, a.head_dim
    if batch.decodes:
        yield _k(layer, "kda.decode", DECODES,
                 _make(KdaDecode, seqs=len(batch.decodes), heads=h, key_dim=k, value_dim=k,
                                               fused=o.kda_decode_fused))
    if batch.verifies:
        yield _k(layer, "kda.verify", DECODES,
                 _make(KdaVerify, seqs=len(batch.verifies), positions=batch.verify_positions,
                                            heads=h, head_dim=k, tile_cols=o.kda_verify_tile_cols))
    if batch.prefills:
        tokens = tuple(c.tokens for c in batch.prefills)
        yield _k(layer, "kda.prefill", PREFILLS,
                 _make(KdaPrefill, seqs=len(tokens), tokens=_mean(tokens), heads=h, key_dim=k,
                                                 value_dim=k, grouped_scan=o.kda_prefill_grouped_scan))


def _gqa_items(layer: int, batch: Batch, d: Deployment) -> Iterator[StepItem]:
    """GQA: fused QKV projection, paged attention per batch kind (DCP-sharded history), o_proj."""
    a, hid, t = _section(d.model.gqa, "gqa"), d.model.hidden_size, batch.tokens
    h, kv = a.heads // d.tp, max(1, a.kv_heads // d.tp)
    if a.q_lora_rank:
        yield _k(layer, "gqa.q_a", TOKENS, _gemm(d, Part.ATTENTION, t, a.q_lora_rank, hid))
        yield _k(layer, "gqa.q_b", TOKENS, _gemm(d, Part.ATTENTION, t, h * a.head_dim, a.q_lora_rank))
        yield _k(layer, "gqa.kv", TOKENS, _gemm(d, Part.ATTENTION, t, 2 * kv * a.head_dim, hid))
    else:
        yield _k(layer, "gqa.qkv", TOKENS, _gemm(d, Part.ATTENTION, t, (h + 2 * kv) * a.head_dim, hid))
    if a.qk_norm:  # one launch each, as vLLM's Qwen3 attention runs them
        yield _k(layer, "gqa.q_norm", TOKENS, _make(RmsNorm, tokens=t * h, hidden=a.head_dim))
        yield _k(layer, "gqa.k_norm", TOKENS, _make(RmsNorm, tokens=t * kv, hidden=a.head_dim))
    yield from _rope_and_cache_write(layer, "gqa", t, (h + kv) * a.head_dim, 2 * kv * a.head_dim, d)
    yield from _gqa_sequence_items(layer, batch, d)
    yield from _output_projection(layer, "gqa", t, h * a.head_dim, d)


def _gqa_sequence_items(layer: int, batch: Batch, d: Deployment) -> Iterator[StepItem]:
    """GQA's paged attention per batch kind (DCP-sharded history, a sliding window where the layer has one)."""
    a = _section(d.model.gqa, "gqa")
    h, kv = a.heads // d.tp, max(1, a.kv_heads // d.tp)
    positions = batch.verify_positions
    window = d.model.attention_window(layer)  # a sliding-window layer reads at most this much history
    for name, contexts, q_len in (("decode", batch.decodes, 1), ("verify", batch.verifies, positions)):
        if contexts:
            yield from _c(layer, f"gqa.dcp_query_exchange_{name}", DECODES, CollectiveOp.ALL_GATHER,
                          len(contexts) * q_len * h * a.head_dim * ACT_BYTES, d.dcp)
            yield _k(layer, f"gqa.{name}_attention", DECODE_HISTORY, AttentionPrefill(
                seqs=len(contexts), q_len=q_len, heads=h * d.dcp, kv_heads=kv, head_dim=a.head_dim,
                cached=cdiv(_windowed(_mean(contexts), window), d.dcp),
                **tiles.attention_tiles(d.gpu, head_dim=a.head_dim).fields))
            yield from _c(layer, f"gqa.dcp_partial_exchange_{name}", DECODES, CollectiveOp.ALL_TO_ALL,
                          len(contexts) * q_len * h * d.dcp * (a.head_dim * 4 + 4), d.dcp)
    if batch.prefills:
        tokens = tuple(c.tokens for c in batch.prefills)
        cached = tuple(c.cached for c in batch.prefills)
        yield _k(layer, "gqa.prefill_attention", PREFILL_HISTORY, AttentionPrefill(
            seqs=len(tokens), q_len=_mean(tokens), heads=h, kv_heads=kv, head_dim=a.head_dim,
            cached=_windowed(_mean(cached), window), **tiles.attention_tiles(d.gpu, head_dim=a.head_dim).fields))


def _windowed(history: int, window: int) -> int:
    """Cached tokens an attention reads under a sliding window (0: the whole history).

    Capping the mean history at the window is an upper bound of the mean of the capped histories. In a prefill
    chunk the causal part among the chunk's own tokens is still priced in full (assumption: the attention kernel
    has no window field; an upper bound for chunks longer than the window).
    """
    return min(history, window) if window else history


# each mixer's items: all of them, and those of the sequences alone (`mixer_items`, `mixer_sequence_items`)
_MIXERS = {Mixer.MLA: (_mla_items, _mla_sequence_items), Mixer.KDA: (_kda_items, _kda_sequence_items),
           Mixer.GQA: (_gqa_items, _gqa_sequence_items)}


def _dense_mlp_items(layer: int, batch: Batch, d: Deployment) -> Iterator[StepItem]:
    m, t = d.model, batch.tokens
    inter = cdiv(m.intermediate_size, d.tp)
    yield from _act_quant(layer, "mlp.gate_up", TOKENS, t, m.hidden_size, d, Part.DENSE_MLP)
    yield _k(layer, "mlp.gate_up", TOKENS, _gemm(d, Part.DENSE_MLP, t, 2 * inter, m.hidden_size))
    yield _k(layer, "mlp.act", TOKENS, _make(Elementwise, elements=t * inter, inputs=2, ops_per_element=SWIGLU_OPS))
    yield from _act_quant(layer, "mlp.down", TOKENS, t, inter, d, Part.DENSE_MLP)
    yield _k(layer, "mlp.down", TOKENS, _gemm(d, Part.DENSE_MLP, t, m.hidden_size, inter))
    yield from _c(layer, "mlp.output", TOKENS, CollectiveOp.ALL_REDUCE, t * m.hidden_size * ACT_BYTES, d.tp)


def active_experts(experts: int, routings: int) -> float:
    """Expected distinct experts hit by `routings` uniform independent choices."""
    return experts * -math.expm1(routings * math.log1p(-1 / experts)) if experts > 1 else 1.0


# From this many tokens AITER's fused-MoE stage 2 writes each routing's output and reduces them ("_reduce_" kernels);
# below, it adds them into the token's row atomically ("_atomic_"): its tuned MI355X table for Kimi K3
# (aiter/configs/model_configs/kimik3_a4w4_tuned_fmoe.csv, validation/published/aiter_moe.csv)
AITER_REDUCE_MIN_TOKENS = 2048


def _moe_combine(layer: int, tokens: int, per_token: int, width: int, aiter: bool) -> Iterator[StepItem]:
    """The weighted sum of each token's routed expert outputs (its `per_token` rows of `width` the down projection
    wrote) into one row: a launch of its own on CUDA (vLLM's `moe_sum` after fused_moe's second GEMM,
    vllm/model_executor/layers/fused_moe/fused_moe.py; SGLang's `moe_sum_reduce`, sglang/srt/layers/moe/
    fused_moe_triton/fused_moe.py); inside AITER's stage-2 kernel on AMD, by atomic adds (no traffic beyond the rows
    the down projection is charged for) or, from AITER_REDUCE_MIN_TOKENS tokens, a reduction that reads them back."""
    if per_token <= 1 or (aiter and tokens < AITER_REDUCE_MIN_TOKENS):
        return
    yield _k(layer, "moe.combine", TOKENS, _make(Elementwise, elements=tokens * width, inputs=per_token,
                                                 ops_per_element=2 * per_token))


def _fuses_shared(d: Deployment) -> int:
    """Shared experts run inside the routed fused MoE (0: apart; `Deployment` checked that they can)."""
    return _section(d.model.moe, "moe").shared_experts if d.options.moe_shared_fusion == "fused" else 0


def _moe_items(layer: int, batch: Batch, d: Deployment) -> Iterator[StepItem]:
    """Router, latent down-projection, routed experts, the routed output projection, shared experts."""
    m, t, o = d.model, batch.tokens, d.options
    moe = _section(m.moe, "moe")
    hid, width = m.hidden_size, moe.latent_size or m.hidden_size
    routed_dt = d.math_dtype(Part.ROUTED_EXPERTS)
    # the router is never quantized: the engines build it with no quantization config (vLLM's and SGLang's MoE
    # gates, `quant_config=None`; the checkpoints keep it in bf16), so it runs at the activations' bf16
    yield _k(layer, "moe.router", TOKENS, tiles.blas_gemm(d.gpu, t, moe.experts, hid, Dtype.BF16))
    yield _k(layer, "moe.topk", TOKENS,
             _make(Elementwise, elements=t * moe.experts, inputs=1, ops_per_element=4, dtype="fp32"))
    if moe.latent_size:
        yield _k(layer, "moe.latent_down", TOKENS, _gemm(d, Part.SHARED_EXPERTS, t, cdiv(width, d.tp), hid))
        yield from _c(layer, "moe.latent_gather", TOKENS,
                      CollectiveOp.ALL_GATHER, t * cdiv(width, d.tp) * ACT_BYTES, d.tp)
        yield _k(layer, "moe.latent_norm", TOKENS, _make(RmsNorm, tokens=t, hidden=width))
    local_experts = moe.experts // d.ep
    inter = cdiv(moe.expert_intermediate_size, d.tp // d.ep)
    routings = t * moe.top_k / d.ep
    active = max(1, round(active_experts(moe.experts, t * moe.top_k) * local_experts / moe.experts))
    per_expert = math.ceil(routings / active)
    # tile_m by tokens per expert (vLLM fused-MoE), the rest from the GPU family's config, sized to fit
    tile = tiles.moe_gemm_tiles(d.gpu, tokens_per_expert=per_expert, dtype=routed_dt).fields
    shared = _fuses_shared(d)
    # a fused shared expert is one more expert with every token's row
    grouped = ({"experts": active, "tokens_per_expert": per_expert} if not shared else
               {"experts": active + shared, "tokens_per_expert": max(per_expert, t),
                "rows_by_expert": (per_expert,) * active + (t,) * shared})
    rows = active * per_expert + shared * t
    aiter = tiles.arch_family(d.gpu) in (tiles.ArchFamily.CDNA3, tiles.ArchFamily.CDNA4)
    if not aiter:  # the engines' Triton fused-MoE kernel launches a grid for the worst padding of any routing
        grouped["grid_row_tiles"] = max(
            worst_case_row_tiles(math.ceil(routings) + shared * t, local_experts + shared, tile["tile_m"]),
            active * cdiv(per_expert, tile["tile_m"]) + shared * cdiv(t, tile["tile_m"]))
    yield from _act_quant(layer, "moe.routed_up", TOKENS, t, width, d, Part.ROUTED_EXPERTS)
    yield _k(layer, "moe.routed_up", TOKENS,
             _make(MoeGemm, n=2 * inter, k=width, dtype=routed_dt, **grouped, **tile))
    if not aiter:  # AITER's stage-1 kernels apply the activation themselves (their names: `_silu_`, `_Situv2_`)
        yield _k(layer, "moe.routed_act", TOKENS, _make(Elementwise, elements=rows * inter, inputs=2,
                                                      ops_per_element=SWIGLU_OPS))
    yield from _act_quant(layer, "moe.routed_down", TOKENS, rows, inter, d, Part.ROUTED_EXPERTS)
    yield _k(layer, "moe.routed_down", TOKENS,
             _make(MoeGemm, n=width, k=inter, dtype=routed_dt, **grouped, **tile))
    yield from _moe_combine(layer, t, (math.ceil(routings / t) if t else 0) + shared, width, aiter)
    if moe.latent_size:
        yield from _c(layer, "moe.latent_reduce", TOKENS, CollectiveOp.ALL_REDUCE, t * width * ACT_BYTES, d.tp)
        yield _k(layer, "moe.latent_out_norm", TOKENS, _make(RmsNorm, tokens=t, hidden=width))
        # MoE routed-output ownership (Kimi K3 study, mechanism 3): before, every rank projects all `hid`
        # outputs of the same latent input;
        # with ownership each projects only its own coordinates into its shared-expert partial
        out = cdiv(hid, d.tp) if o.moe_output_dedup else hid
        yield _k(layer, "moe.routed_out_proj", TOKENS, _gemm(d, Part.SHARED_EXPERTS, t, out, width))
    if moe.shared_experts and not shared:
        inter_shared = cdiv(moe.shared_experts * moe.expert_intermediate_size, d.tp)
        yield from _act_quant(layer, "moe.shared_gate_up", TOKENS, t, hid, d, Part.SHARED_EXPERTS)
        yield _k(layer, "moe.shared_gate_up", TOKENS, _gemm(d, Part.SHARED_EXPERTS, t, 2 * inter_shared, hid))
        yield _k(layer, "moe.shared_act", TOKENS, _make(Elementwise, elements=t * inter_shared, inputs=2,
                                                      ops_per_element=SWIGLU_OPS))
        yield from _act_quant(layer, "moe.shared_down", TOKENS, t, inter_shared, d, Part.SHARED_EXPERTS)
        yield _k(layer, "moe.shared_down", TOKENS, _gemm(d, Part.SHARED_EXPERTS, t, hid, inter_shared))
    yield from _c(layer, "moe.output", TOKENS, CollectiveOp.ALL_REDUCE, t * hid * ACT_BYTES, d.tp)
