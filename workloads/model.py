"""Model architectures: layer types, per-part precision, and parameter counts, loaded from `models/*.yaml`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import cache
from pathlib import Path

from hwmodels.dtypes import Dtype
from hwmodels.specfile import FieldError, SpecError, load_record, ranged, read_yaml

MODEL_DIR = Path(__file__).parent / "models"

# Ranges of the architecture numbers, checked when a model file is loaded. Assumptions, each well above the
# largest published model (hwmodels/specs/SOURCES.md): 126 layers (Llama 3.1 405B), 128 query heads
# (DeepSeek-V3, Kimi K2), 384 routed experts (Kimi K2), head widths of 256, a 256k vocabulary, a hidden width of
# 16,384; the upper bounds keep a hostile file from a loop over 1e30 layers or an array of 1e308 experts.
LAYERS = "assumption: the deepest published LLM has 126 layers"
HEADS = "assumption: published models have at most 128 heads"
WIDTH = "assumption: published head and rank widths are at most 1,536"
EXPERTS = "assumption: published MoE models have at most 384 routed experts"
SIZE = "assumption: published hidden and MLP widths are at most ~53,248"
WINDOW = "assumption: published sliding windows (128 tokens in gpt-oss, 4,096 in Mistral 7B) are far below 1e7 tokens"


class Mixer(Enum):
    """What mixes tokens in one layer."""

    GQA = "gqa"
    MLA = "mla"
    KDA = "kda"


class Part(Enum):
    """Groups of weights that a checkpoint may store at different precisions."""

    EMBEDDING = "embedding"
    ATTENTION = "attention"
    DENSE_MLP = "dense_mlp"
    SHARED_EXPERTS = "shared_experts"
    ROUTED_EXPERTS = "routed_experts"


@dataclass(frozen=True)
class Gqa:
    """Grouped-query attention; q_lora_rank > 0 factors the query projection (0: full rank)."""

    heads: int = ranged(1, 4096, HEADS)
    kv_heads: int = ranged(1, 4096, HEADS)
    head_dim: int = ranged(1, 4096, WIDTH)
    qkv_bias: bool = False
    q_lora_rank: int = ranged(0, 65536, WIDTH, 0)
    o_lora_rank: int = ranged(0, 65536, WIDTH, 0)  # 0: full-rank output projection; else grouped low rank (DeepSeek-V4)
    o_groups: int = ranged(1, 4096, HEADS, 1)
    # DeepSeek sparse-attention indexer: query heads of width indexer_head_dim
    indexer_heads: int = ranged(0, 4096, HEADS, 0)
    indexer_head_dim: int = ranged(0, 4096, WIDTH, 0)
    qk_norm: bool = False  # an RMSNorm over each head of q and of k before RoPE (Qwen3)
    # Sliding-window attention: the 1-based layers in sliding_window_layers attend to the last sliding_window
    # tokens only (0 and (): every layer attends to the whole context). Each listed layer's attention reads at
    # most the window of history; the KV cache still prices every layer's history in full (workloads/memory.py).
    sliding_window: int = ranged(0, 10**7, WINDOW, 0)
    sliding_window_layers: tuple[int, ...] = ()
    # Attention sinks (gpt-oss): one learned logit per query head added to the softmax's denominator. Counted
    # as parameters; ignored in costing (one extra exp and add per row of the softmax).
    attention_sinks: bool = False

    def __post_init__(self) -> None:
        if self.kv_heads <= 0 or self.heads % self.kv_heads:
            raise FieldError("kv_heads", f"must divide heads ({self.heads}), got {self.kv_heads}")
        if self.sliding_window_layers and not self.sliding_window:
            raise FieldError("sliding_window", "must be a positive number of tokens when sliding_window_layers "
                             "lists layers")
        if self.sliding_window and not self.sliding_window_layers:
            raise FieldError("sliding_window_layers", f"must list the layers that use the {self.sliding_window}-"
                             "token window (1-based)")
        repeated = sorted({i for i in self.sliding_window_layers if self.sliding_window_layers.count(i) > 1})
        if repeated:
            raise FieldError("sliding_window_layers", f"lists layers more than once: {repeated}")


@dataclass(frozen=True)
class Mla:
    """Multi-head latent attention: a compressed KV latent of kv_lora_rank plus a shared RoPE key."""

    heads: int = ranged(1, 4096, HEADS)
    q_lora_rank: int = ranged(0, 65536, WIDTH)  # 0: full-rank query projection
    kv_lora_rank: int = ranged(1, 65536, WIDTH)
    qk_nope_head_dim: int = ranged(0, 4096, WIDTH)
    qk_rope_head_dim: int = ranged(0, 4096, WIDTH)
    v_head_dim: int = ranged(1, 4096, WIDTH)
    output_gate: bool = False

    @property
    def latent_width(self) -> int:
        """Values cached per token per layer (576 for DeepSeek-style MLA)."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class Kda:
    """Kimi Delta Attention: a fixed-size K x V fp32 state per head, short convolutions on q, k, v."""

    heads: int = ranged(1, 4096, HEADS)
    head_dim: int = ranged(1, 4096, WIDTH)
    conv_kernel: int = ranged(1, 1024, "assumption: KDA's short convolutions are 4 taps wide")
    full_rank_gate: bool = False  # True: the decay gate projects hidden -> heads*K directly

    @property
    def state_bytes_per_head(self) -> int:
        """fp32 recurrent state, K x V per head, as in FLA's KDA kernels ([S28], hwmodels/specs/SOURCES.md)."""
        return self.head_dim * self.head_dim * 4


@dataclass(frozen=True)
class Moe:
    """Routed experts (optionally in a latent width), shared experts, and leading dense layers."""

    experts: int = ranged(1, 65536, EXPERTS)
    top_k: int = ranged(1, 65536, EXPERTS)
    shared_experts: int = ranged(0, 65536, EXPERTS)
    expert_intermediate_size: int = ranged(1, 10**7, SIZE)
    dense_layers: int = ranged(0, 1000, LAYERS)  # the first layers use a dense MLP instead (first_k_dense_replace)
    # 0: experts work in the hidden width; else a latent (Kimi K3 "latent MoE")
    latent_size: int = ranged(0, 10**7, SIZE, 0)

    def __post_init__(self) -> None:
        if not 0 < self.top_k <= self.experts:
            raise FieldError("top_k", f"must be in 1..experts ({self.experts}), got {self.top_k}")


@dataclass(frozen=True)
class ModelSpec:
    """One model's architecture, its checkpoint precision per part, and its published size."""

    name: str
    description: str
    provisional: bool  # True: found only in third-party copies, not verified against the vendor
    hidden_size: int = ranged(1, 10**7, SIZE)
    layers: int = ranged(1, 1000, LAYERS)
    vocab_size: int = ranged(1, 10**8, "assumption: published vocabularies have at most ~256k tokens")
    tie_word_embeddings: bool
    published_params: float = ranged(0, 1e16, "assumption: the largest published models have ~2e12 parameters")
    weights: Mapping[Part, Dtype]
    kv_cache: Dtype
    # dense MLP width (all layers of a dense model; MoE models' dense_layers)
    intermediate_size: int = ranged(0, 10**7, SIZE, 0)
    gqa: Gqa | None = None
    mla: Mla | None = None
    kda: Kda | None = None
    moe: Moe | None = None
    mla_layers: tuple[int, ...] = ()  # 1-based layers that use MLA when the model mixes MLA and KDA
    attnres_block_size: int = ranged(0, 1000, LAYERS, 0)  # 0: plain residual; else AttnRes blocks of this many layers
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.gqa, self.mla)) != 1 and self.kda is None:
            raise FieldError("gqa", "a model needs exactly one of gqa or mla (plus kda for a hybrid)")
        if self.kda is not None and self.mla is None:
            raise FieldError("kda", "a KDA hybrid needs its mla section for the full-attention layers")
        if self.kda is not None and not self.mla_layers:
            raise FieldError("mla_layers", "a KDA hybrid must list its MLA layers")
        bad = [i for i in self.mla_layers if not 1 <= i <= self.layers]
        if bad:
            raise FieldError("mla_layers", f"layers must be in 1..{self.layers}, got {bad}")
        bad = [i for i in self.gqa.sliding_window_layers if not 1 <= i <= self.layers] if self.gqa else []
        if bad:
            raise FieldError("gqa.sliding_window_layers", f"layers must be in 1..{self.layers}, got {bad}")
        if self.moe is None and self.intermediate_size <= 0:
            raise FieldError("intermediate_size", "a dense model needs a positive intermediate_size")
        if self.moe is not None and self.moe.dense_layers and self.intermediate_size <= 0:
            raise FieldError("intermediate_size", "dense_layers need a positive intermediate_size")
        missing = [p.value for p in Part if p not in self.weights]
        if missing:
            raise FieldError("weights", "missing parts (use the dtype of a part the model lacks): "
                             + ", ".join(missing))

    def mixer(self, layer: int) -> Mixer:
        """The token mixer of 1-based `layer`."""
        if self.kda is not None:
            return Mixer.MLA if layer in self.mla_layers else Mixer.KDA
        return Mixer.MLA if self.mla is not None else Mixer.GQA

    def attention_window(self, layer: int) -> int:
        """Tokens of history the attention of 1-based `layer` reads at most; 0 for the whole context."""
        if self.mixer(layer) is Mixer.GQA and self.gqa is not None and layer in self.gqa.sliding_window_layers:
            return self.gqa.sliding_window
        return 0

    def is_moe_layer(self, layer: int) -> bool:
        return self.moe is not None and layer > self.moe.dense_layers

    def layer_counts(self) -> dict[str, int]:
        """How many layers of each mixer, and how many MoE and dense-MLP layers."""
        counts = {m.value: 0 for m in Mixer}
        for layer in range(1, self.layers + 1):
            counts[self.mixer(layer).value] += 1
        moe_layers = sum(self.is_moe_layer(i) for i in range(1, self.layers + 1))
        counts["moe"] = moe_layers
        counts["dense_mlp"] = self.layers - moe_layers
        return counts


def model_names() -> list[str]:
    """The catalog: every YAML file under `models/`."""
    return sorted(p.stem for p in MODEL_DIR.glob("*.yaml"))


@cache
def load_model(name_or_path: str | Path) -> ModelSpec:
    """A model by catalog name (`kimi-k3`) or from a YAML path."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml"):
        path = candidate
    else:
        path = MODEL_DIR / f"{str(name_or_path).lower()}.yaml"
        if str(name_or_path).lower() not in model_names():
            raise SpecError(str(name_or_path)[:80], "<name>", f"unknown model (valid: {', '.join(model_names())})")
    return load_record(ModelSpec, read_yaml(path), path)
