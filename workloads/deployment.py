"""A deployment: a model on a GPU with a parallel plan, precisions and the Kimi K3 study's kernel options."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from hwmodels.dtypes import Dtype
from hwmodels.roofline import LaunchMode
from hwmodels.spec import GPU
from hwmodels.specfile import FieldError, ranged
from workloads.attention_backends import MlaBackend, backends_for
from workloads.kernel_base import cdiv
from workloads.model import Mixer, ModelSpec, Part

AUTO_SPLITS = 0  # KernelOptions.mla_num_splits: the backend's heuristic picks ("auto" in a scenario)


SHARED_FUSION = ("auto", "fused", "separate")
FP8_GEMM_CONFIGS = ("tuned", "generic")
# AITER's generic gfx942 config of its Triton block-scaled FP8 GEMM (KernelOptions.fp8_gemm_configs)
AITER_GENERIC_FP8_TILES = {"tile_m": 128, "tile_n": 128, "tile_k": 128, "split_k": 1, "stages": 2, "threads": 256,
                           "aiter_triton": True}


@dataclass(frozen=True)
class KernelOptions:
    """The switches of the Kimi K3 study's mechanisms, by its numbers; defaults are the 'before' state of each."""

    # mechanism 5: pad query heads (0: no padding)
    mla_pad_heads_to: int = ranged(0, 4096, "the model's heads are at most 4,096 (workloads/model.py)", 0)
    # mechanism 5: split-KV partitions per request (1: one workgroup per request); AUTO_SPLITS (0, "auto" in a
    # scenario): the count the MLA decode backend's own heuristic picks for each step's batch
    mla_num_splits: int = ranged(0, 4096, "assumption: no split-KV past 4,096 partitions", 0)
    # the MLA decode backend whose heuristic "auto" splits follow: a `workloads.attention_backends.MlaBackend`
    # value, or "auto": the serving engine's default for the GPU (vLLM's where no engine is named)
    mla_backend: str = "auto"
    # mechanism 7: value columns per verify workgroup
    kda_verify_tile_cols: int = ranged(1, 4096, "KDA head_dim is at most 4,096 (workloads/model.py)", 32)
    kda_prefill_grouped_scan: bool = False  # mechanism 6: chunk summaries + ordered scan + parallel replay
    kda_decode_fused: bool = False  # mechanism 4: one kernel instead of 3 kernels + 2 output copies
    attnres_norm_fused: bool = False  # mechanism 4: AttnRes mixing and RMSNorm in one kernel
    dispatcher_copies: bool = True  # mechanism 4: one useless packing copy per KDA layer per step
    # Kimi K3 study: each of the 69 copies moves 1,792 bytes
    dispatcher_copy_bytes: int = ranged(0, 10**9, "assumption: a packing copy moves under 1 GB", 1792)
    # DeepSeek-style shared expert run inside the routed experts' fused MoE as one more expert every token picks
    # ("fused") or as GEMMs of its own ("separate"); "auto": the serving engine's default (simulator.simulate)
    moe_shared_fusion: str = "auto"
    moe_output_dedup: bool = False  # mechanism 3: each rank projects only its own output coordinates
    moe_row_only_weights: bool = False  # mechanism 3: load only the routed-output rows a rank uses
    # Block-scaled FP8 projections on CDNA3, which SGLang sends to AITER's Triton `gemm_a8w8_blockscale`
    # (sgl-project/sglang PR #13617): "tuned", the product's library tiles (AITER with configs for the model's
    # shapes: ROCm/aiter PR #2024, in v0.1.11 and later); "generic", the one config AITER v0.1.10 and earlier hold
    # for every gfx942 shape, 128 x 128 tiles 128 deep and no split-K (the AITER of SGLang's v0.5.9 ROCm images)
    fp8_gemm_configs: str = "tuned"
    launch: LaunchMode = LaunchMode.GRAPH  # decode steps replay captured graphs in vLLM and SGLang
    overlap_collectives: bool = False  # True: collectives run beside compute (a perfect-overlap bound)

    def __post_init__(self) -> None:
        if self.kda_verify_tile_cols < 1:
            raise FieldError("kda_verify_tile_cols", f"must be at least 1, got {self.kda_verify_tile_cols}")
        if self.mla_num_splits < 0:
            raise FieldError("mla_num_splits", f"must be auto or at least 1, got {self.mla_num_splits}")
        valid = ("auto", *(b.value for b in MlaBackend))
        if self.mla_backend not in valid:
            raise FieldError("mla_backend", f"{self.mla_backend!r} is not one of {', '.join(valid)}")
        if self.fp8_gemm_configs not in FP8_GEMM_CONFIGS:
            raise FieldError("fp8_gemm_configs",
                             f"{self.fp8_gemm_configs!r} is not one of {', '.join(FP8_GEMM_CONFIGS)}")
        if self.moe_shared_fusion not in SHARED_FUSION:
            raise FieldError("moe_shared_fusion",
                             f"{self.moe_shared_fusion!r} is not one of {', '.join(SHARED_FUSION)}")
        for name in ("mla_pad_heads_to", "dispatcher_copy_bytes"):
            if getattr(self, name) < 0:
                raise FieldError(name, f"must not be negative, got {getattr(self, name)}")


@dataclass(frozen=True)
class Deployment:
    """Where and how a model runs: GPU, tensor/decode-context/expert parallel sizes, precisions, options."""

    model: ModelSpec
    gpu: GPU
    tp: int = 1
    dcp: int = 1  # decode context parallel: MLA/GQA history positions sharded over dcp of the tp ranks
    ep: int = 1  # expert parallel: experts split over ep ranks (1: every expert split by tp)
    weights: Mapping[Part, Dtype] = field(default_factory=dict)  # overrides of the checkpoint's precisions
    kv_cache: Dtype | None = None  # override of the model's KV-cache dtype
    options: KernelOptions = field(default_factory=KernelOptions)

    def __post_init__(self) -> None:
        """Checks of the plan and the options against the model; errors carry the field they name."""
        for name in ("tp", "dcp", "ep"):
            if getattr(self, name) < 1:
                raise FieldError(name, f"{name} must be at least 1, got {getattr(self, name)}")
        m = self.model
        for mixer, heads in self.head_counts().items():
            if heads % self.tp:
                raise FieldError("tp", f"tp={self.tp} does not divide {m.name}'s {heads} {mixer.value} heads "
                                       f"(valid tp: {', '.join(str(d) for d in _divisors(heads))})")
        if self.tp % self.dcp:
            raise FieldError("dcp", f"dcp={self.dcp} must divide tp={self.tp} (DCP shards history over TP ranks)")
        if self.ep > 1 and (m.moe is None or m.moe.experts % self.ep or self.tp % self.ep):
            raise FieldError("ep", f"ep={self.ep} must divide tp={self.tp} and the model's experts")
        tile_cols = self.options.kda_verify_tile_cols
        if m.kda is not None and tile_cols > m.kda.head_dim:
            raise FieldError("kda_verify_tile_cols", f"{tile_cols} exceeds {m.name}'s KDA head_dim {m.kda.head_dim} "
                                                     f"(valid: 1..{m.kda.head_dim})")
        if self.options.fp8_gemm_configs == "generic":
            from workloads.tiles import ArchFamily, arch_family

            if arch_family(self.gpu) is not ArchFamily.CDNA3:
                raise FieldError("fp8_gemm_configs", f"generic is AITER's generic gfx942 config; {self.gpu.name} is "
                                                     f"not a CDNA3 GPU (valid there: tuned)")
        backend = self.options.mla_backend
        if m.mla is not None and backend != "auto" and not MlaBackend(backend).runs_on(self.gpu):
            valid = ", ".join(["auto", *(b.value for b in backends_for(self.gpu))])
            raise FieldError("mla_backend", f"{backend} does not run on {self.gpu.name} (valid: {valid})")
        object.__setattr__(self, "weights", MappingProxyType({**m.weights, **self.weights}))
        why = self.shared_fusion_problem() if self.options.moe_shared_fusion == "fused" else None
        if why:
            raise FieldError("moe_shared_fusion", f"fused: {m.name}'s shared experts cannot run inside its routed "
                             f"MoE kernel: {why} (valid: separate, auto)")

    def math_dtype(self, part: Part) -> Dtype:
        """The dtype a part's matmuls run in: its stored precision where the GPU has it, else bf16."""
        stored = self.weights[part]
        return stored if self.gpu.supports(stored) else Dtype.BF16

    def shared_fusion_problem(self) -> str | None:
        """Why the shared experts cannot run inside the routed experts' fused MoE kernel; None if they can."""
        moe = self.model.moe
        if moe is None or not moe.shared_experts:
            return "it has no shared experts"
        if moe.latent_size:
            return "the routed experts run in a latent space"
        if self.ep > 1:
            return "expert parallelism is on"
        if self.math_dtype(Part.SHARED_EXPERTS) != self.math_dtype(Part.ROUTED_EXPERTS):
            return "its shared and routed experts are quantized differently"
        inter = cdiv(moe.expert_intermediate_size, self.tp)
        shared_inter = cdiv(moe.shared_experts * moe.expert_intermediate_size, self.tp) // moe.shared_experts
        if shared_inter != inter:
            return f"a shared expert is {shared_inter} wide and a routed one {inter}"
        return None

    def head_counts(self) -> dict[Mixer, int]:
        """Query heads of each mixer the model uses."""
        counts = {}
        if self.model.gqa is not None:
            counts[Mixer.GQA] = self.model.gqa.heads
        if self.model.mla is not None:
            counts[Mixer.MLA] = self.model.mla.heads
        if self.model.kda is not None:
            counts[Mixer.KDA] = self.model.kda.heads
        return counts

    @property
    def kv_dtype(self) -> Dtype:
        return self.kv_cache or self.model.kv_cache


# SGLang fuses DeepSeek-V3/R1's shared expert into the routed experts' MoE kernel as a 257th expert every token picks
# (sglang/srt/models/deepseek_v2.py: determine_num_fused_shared_experts, for 256 routed experts and 1 shared on CUDA
# sm80+ and ROCm gfx942+, unless the routed and shared experts are quantized differently or DeepEP dispatches; under
# expert parallelism only on ROCm, which is not fused here); AITER's tuned tables for it are keyed by 257 experts,
# top 9 (validation/published/aiter_moe.csv). vLLM and TensorRT-LLM keep them apart (assumption: no default fusion
# read in their sources).
SHARED_FUSION_ENGINES = ("sglang",)
SHARED_FUSION_ROUTED_EXPERTS = 256


def default_shared_fusion(d: Deployment, engine: str) -> str:
    """`KernelOptions.moe_shared_fusion` of "auto": the serving engine's default for this deployment."""
    moe = d.model.moe
    shape = moe is not None and moe.experts == SHARED_FUSION_ROUTED_EXPERTS and moe.shared_experts == 1
    fuses = engine in SHARED_FUSION_ENGINES and shape and d.shared_fusion_problem() is None
    return "fused" if fuses else "separate"


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, min(n, 64) + 1) if n % d == 0]
