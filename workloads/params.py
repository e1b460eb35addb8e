"""Parameter counts of a model, per weight part and per layer type, from its architecture alone.

Counts follow the Hugging Face / vLLM module layouts: projections are counted as matrices, RMSNorm
weights as vectors, biases where the model has them. Next-token-prediction (MTP) layers are not in
the total, as the vendors' published totals leave them out (DeepSeek-V3: 671B main + 14B MTP).
"""

from __future__ import annotations

from workloads.model import Gqa, Kda, Mixer, Mla, ModelSpec, Moe, Part


def gqa_params(hidden: int, a: Gqa) -> int:
    """q (optionally low rank), k, v, o (optionally grouped low rank), biases, a sparse-attention indexer, and
    one attention-sink logit per query head."""
    q_width = a.heads * a.head_dim
    q = _low_rank(hidden, a.q_lora_rank, q_width)
    kv = 2 * hidden * a.kv_heads * a.head_dim
    bias = (q_width + 2 * a.kv_heads * a.head_dim) if a.qkv_bias else 0
    # DeepSeek-V4's grouped low-rank output: heads*dim -> o_groups x o_lora, then -> hidden
    o = q_width * a.o_lora_rank + a.o_groups * a.o_lora_rank * hidden if a.o_lora_rank else q_width * hidden
    indexer = 0
    if a.indexer_heads:
        indexer_q = (a.q_lora_rank or hidden) * a.indexer_heads * a.indexer_head_dim
        indexer = indexer_q + hidden * a.indexer_head_dim + hidden * a.indexer_heads
    sinks = a.heads if a.attention_sinks else 0
    return q + kv + bias + o + indexer + sinks


def _low_rank(hidden: int, rank: int, out: int) -> int:
    """A projection hidden -> out, factored through `rank` with a norm between (rank 0: one full matrix)."""
    return hidden * rank + rank + rank * out if rank else hidden * out


def mla_params(hidden: int, a: Mla) -> int:
    """q (a then b with its norm, or one full-rank matrix), kv_a with the RoPE key, kv_b, o, output gate."""
    qk = a.qk_nope_head_dim + a.qk_rope_head_dim
    q = _low_rank(hidden, a.q_lora_rank, a.heads * qk)
    kv_a = hidden * a.latent_width + a.kv_lora_rank
    kv_b = a.kv_lora_rank * a.heads * (a.qk_nope_head_dim + a.v_head_dim)
    o = a.heads * a.v_head_dim * hidden
    gate = hidden * a.heads * a.v_head_dim if a.output_gate else 0
    return q + kv_a + kv_b + o + gate


def kda_params(hidden: int, a: Kda) -> int:
    """FLA KimiDeltaAttention: q, k, v, o; short convs; decay gate; beta; low-rank output gate; A, dt_bias."""
    width = a.heads * a.head_dim  # K = V = head_dim
    qkvo = 4 * hidden * width
    conv = a.conv_kernel * 3 * width
    decay_gate = hidden * width if a.full_rank_gate else hidden * a.head_dim + a.head_dim * width
    beta = hidden * a.heads
    output_gate = hidden * a.head_dim + a.head_dim * width
    decay_params = a.heads + width  # A_log per head, dt_bias per key channel
    return qkvo + conv + decay_gate + beta + output_gate + decay_params + a.head_dim  # + output norm


def moe_params(hidden: int, m: Moe) -> dict[Part, int]:
    """Routed experts (gate, up, down in their width), latent projections, shared experts, router."""
    width = m.latent_size or hidden
    routed = m.experts * 3 * width * m.expert_intermediate_size
    latent = 2 * hidden * m.latent_size + m.latent_size if m.latent_size else 0
    shared = m.shared_experts * 3 * hidden * m.expert_intermediate_size
    router = hidden * m.experts + m.experts  # weight and score-correction bias
    return {Part.ROUTED_EXPERTS: routed, Part.SHARED_EXPERTS: latent + shared + router}


def mixer_params(model: ModelSpec, mixer: Mixer) -> int:
    """One layer's token-mixer parameters."""
    if mixer is Mixer.GQA and model.gqa is not None:
        return gqa_params(model.hidden_size, model.gqa)
    if mixer is Mixer.MLA and model.mla is not None:
        return mla_params(model.hidden_size, model.mla)
    if mixer is Mixer.KDA and model.kda is not None:
        return kda_params(model.hidden_size, model.kda)
    raise ValueError(f"{model.name} has no {mixer.value} layers")


def count_params(model: ModelSpec) -> dict[Part, int]:
    """Parameters of the main stack per weight part (norms go with attention; MTP layers excluded)."""
    h = model.hidden_size
    parts = {p: 0 for p in Part}
    parts[Part.EMBEDDING] = model.vocab_size * h * (1 if model.tie_word_embeddings else 2)
    moe = model.moe
    for layer in range(1, model.layers + 1):
        parts[Part.ATTENTION] += mixer_params(model, model.mixer(layer)) + 2 * h  # + two RMSNorms
        if moe is not None and model.is_moe_layer(layer):
            for part, n in moe_params(h, moe).items():
                parts[part] += n
        else:
            parts[Part.DENSE_MLP] += 3 * h * model.intermediate_size
    parts[Part.ATTENTION] += h  # final norm
    if model.attnres_block_size:
        blocks = -(-model.layers // model.attnres_block_size)
        parts[Part.ATTENTION] += blocks * 2 * h  # a depth-attention query and its norm per block
    return parts


def total_params(model: ModelSpec) -> int:
    return sum(count_params(model).values())


def active_matmul_params(model: ModelSpec) -> int:
    """Matrix parameters one token multiplies through: top-k routed experts, not all; the LM head, not the embedding."""
    h = model.hidden_size
    active = model.vocab_size * h  # LM head (the embedding is a lookup)
    moe = model.moe
    for layer in range(1, model.layers + 1):
        active += mixer_params(model, model.mixer(layer))
        if moe is not None and model.is_moe_layer(layer):
            width = moe.latent_size or h
            active += moe.top_k * 3 * width * moe.expert_intermediate_size
            active += 2 * h * moe.latent_size + moe.shared_experts * 3 * h * moe.expert_intermediate_size
            active += h * moe.experts
        else:
            active += 3 * h * model.intermediate_size
    return active


def replicated_params(model: ModelSpec, *, row_only_latent: bool = False) -> dict[Part, int]:
    """Parameters every tensor-parallel rank holds whole, as vLLM loads them.

    Norm weights; MLA's q_a and kv_a down-projections (ReplicatedLinear); KDA's low-rank gate
    down-projections; the MoE router; and the routed output projection of a latent MoE, which every
    rank holds whole until it loads only the rows it uses (row-only weights: Kimi K3 study, mechanism 3).
    """
    h = model.hidden_size
    parts = {p: 0 for p in Part}
    moe = model.moe
    for layer in range(1, model.layers + 1):
        parts[Part.ATTENTION] += 2 * h
        mixer = model.mixer(layer)
        if mixer is Mixer.MLA and model.mla is not None:
            parts[Part.ATTENTION] += h * model.mla.q_lora_rank + model.mla.q_lora_rank
            parts[Part.ATTENTION] += h * model.mla.latent_width + model.mla.kv_lora_rank
        if mixer is Mixer.KDA and model.kda is not None:
            low_rank_gates = 1 if model.kda.full_rank_gate else 2
            parts[Part.ATTENTION] += low_rank_gates * h * model.kda.head_dim
        if moe is not None and model.is_moe_layer(layer):
            parts[Part.SHARED_EXPERTS] += h * moe.experts + moe.experts
            if moe.latent_size and not row_only_latent:
                parts[Part.SHARED_EXPERTS] += h * moe.latent_size
    parts[Part.ATTENTION] += h
    return parts
