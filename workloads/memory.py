"""HBM per GPU for a deployment: weights at each part's precision, KV and KDA state, workspace, capacity."""

from __future__ import annotations

from dataclasses import dataclass

from workloads.deployment import Deployment
from workloads.model import Mixer, Part
from workloads.params import count_params, replicated_params

# Assumptions (no measured source yet; each is a line of the memory report):
GRAPH_POOL_BYTES = 1.0e9  # captured decode graphs; vLLM logs 0.5-2 GiB for graph capture (assumption)
COLLECTIVE_BUFFER_BYTES = 0.5e9  # custom all-reduce and NCCL/RCCL buffers (assumption)
ACTIVATION_BYTES_PER_VALUE = 2  # bf16 activations
# Live activations per batched token: residual, normed input, attention output, mixer projections
# (4 x hidden), and the MLP/expert up and gate outputs plus the down input (3 x per-rank intermediate).
ACTIVATION_HIDDEN_COPIES = 4
ACTIVATION_INTERMEDIATE_COPIES = 3


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes per GPU, and the context tokens that fit beside the weights and per-sequence state."""

    weights_bytes_per_gpu: float
    weights_by_part_bytes_per_gpu: dict[str, float]
    mla_kv_bytes_per_token: float  # per token of context, all MLA layers, this GPU's DCP share
    gqa_kv_bytes_per_token: float
    kda_state_bytes_per_seq: float  # recurrent fp32 state of all KDA layers, this GPU's heads
    kda_conv_bytes_per_seq: float  # short-conv history of all KDA layers
    workspace_bytes: float
    reserve_bytes: float
    usable_bytes: float
    kv_budget_bytes: float
    kv_capacity_tokens: int

    kda_checkpoint_bytes_per_token: float = 0.0  # saved KDA states of cached prefixes, one per checkpoint interval

    @property
    def kv_bytes_per_token(self) -> float:
        """Bytes a cached token holds: its attention history plus its share of the saved KDA checkpoints."""
        return self.mla_kv_bytes_per_token + self.gqa_kv_bytes_per_token + self.kda_checkpoint_bytes_per_token

    @property
    def kda_checkpoint_bytes(self) -> float:
        """One saved KDA state (recurrent + conv) for resuming a cached prefix (Kimi K3 study, mechanism 2)."""
        return self.kda_state_bytes_per_seq + self.kda_conv_bytes_per_seq


def weights_bytes_per_gpu(d: Deployment) -> dict[Part, float]:
    """Each part's bytes on one GPU: split parts over TP, replicated parts whole."""
    total = count_params(d.model)
    whole = replicated_params(d.model, row_only_latent=d.options.moe_row_only_weights)
    return {
        part: d.weights[part].storage_bytes((total[part] - whole[part]) / d.tp) + d.weights[part].storage_bytes(
            whole[part])
        for part in total
    }


def plan_memory(d: Deployment, *, mem_fraction: float = 0.9, max_num_seqs: int = 64,
                max_batched_tokens: int = 8192, kda_checkpoint_tokens: int | None = None) -> MemoryPlan:
    """Memory per GPU at `mem_fraction` of the device memory the runtime reports (`GPU.memory_total_bytes`, as vLLM's
    gpu_memory_utilization and SGLang's mem_fraction_static take it); raises if the model cannot fit.

    With `kda_checkpoint_tokens`, a cached prefix keeps one saved KDA state (recurrent + conv) per that many
    tokens, so the cache's capacity in tokens counts each token's share of a checkpoint (Kimi K3 study,
    mechanism 2).
    """
    if not 0 < mem_fraction <= 1:
        raise ValueError(f"mem_fraction must be in (0, 1], got {mem_fraction}")
    if max_num_seqs < 1 or max_batched_tokens < 1:
        raise ValueError("max_num_seqs and max_batched_tokens must be at least 1")
    m = d.model
    counts = m.layer_counts()
    by_part = weights_bytes_per_gpu(d)
    weights = sum(by_part.values())
    kv_bytes = d.kv_dtype.bits / 8
    mla_kv = counts[Mixer.MLA.value] * m.mla.latent_width * kv_bytes / d.dcp if m.mla else 0.0
    gqa_kv = 0.0
    if m.gqa is not None:
        kv_heads = max(1, m.gqa.kv_heads // d.tp)  # TP beyond the KV heads replicates them
        # assumption: sliding-window layers priced as full attention: every GQA layer holds the K and V of every
        # cached token, as a single-type paged cache does. A cache that frees what leaves the window (vLLM's
        # hybrid KV cache manager) holds only `sliding_window` tokens a sequence in those layers, so this
        # under-states the capacity of such models (up to 2x for gpt-oss, half of whose layers slide).
        gqa_kv = counts[Mixer.GQA.value] * 2 * kv_heads * m.gqa.head_dim * kv_bytes / d.dcp
    kda_state = kda_conv = 0.0
    if m.kda is not None:
        heads = m.kda.heads // d.tp
        kda_state = counts[Mixer.KDA.value] * heads * m.kda.state_bytes_per_head
        kda_conv = counts[Mixer.KDA.value] * (m.kda.conv_kernel - 1) * 3 * heads * m.kda.head_dim * 2
    workspace = max_batched_tokens * ACTIVATION_BYTES_PER_VALUE * (
        ACTIVATION_HIDDEN_COPIES * m.hidden_size + ACTIVATION_INTERMEDIATE_COPIES * _intermediate_per_rank(d))
    reserve = GRAPH_POOL_BYTES + COLLECTIVE_BUFFER_BYTES
    usable = d.gpu.memory_total_bytes * mem_fraction
    budget = usable - weights - workspace - reserve - max_num_seqs * (kda_state + kda_conv)
    if budget <= 0:
        raise ValueError(
            f"{m.name} does not fit on {d.gpu.name} at tp={d.tp}: weights {weights / 1e9:.1f} GB + workspace "
            f"{(workspace + reserve) / 1e9:.1f} GB + state of {max_num_seqs} sequences "
            f"{max_num_seqs * (kda_state + kda_conv) / 1e9:.1f} GB exceed {usable / 1e9:.1f} GB "
            f"({mem_fraction:.0%} of {d.gpu.memory_total_bytes / 1e9:.1f} GB); raise tp or lower the precision")
    checkpoint = 0.0
    if m.kda is not None and kda_checkpoint_tokens:
        if kda_checkpoint_tokens < 1:
            raise ValueError(f"kda_checkpoint_tokens must be at least 1, got {kda_checkpoint_tokens}")
        checkpoint = (kda_state + kda_conv) / kda_checkpoint_tokens
    per_token = mla_kv + gqa_kv + checkpoint
    capacity = int(budget // per_token) if per_token else 0
    return MemoryPlan(
        weights_bytes_per_gpu=weights,
        weights_by_part_bytes_per_gpu={p.value: b for p, b in by_part.items()},
        mla_kv_bytes_per_token=mla_kv,
        gqa_kv_bytes_per_token=gqa_kv,
        kda_state_bytes_per_seq=kda_state,
        kda_conv_bytes_per_seq=kda_conv,
        workspace_bytes=workspace,
        reserve_bytes=reserve,
        usable_bytes=usable,
        kv_budget_bytes=budget,
        kv_capacity_tokens=capacity,
        kda_checkpoint_bytes_per_token=checkpoint,
    )


def _intermediate_per_rank(d: Deployment) -> float:
    """The widest MLP activation one rank holds per token: dense MLP, or top-k experts plus shared ones."""
    m = d.model
    widest = float(m.intermediate_size)
    if m.moe is not None:
        widest = max(widest, (m.moe.top_k + m.moe.shared_experts) * m.moe.expert_intermediate_size)
    return widest / d.tp
