"""Published fused-MoE kernel times on the MI355X (`published/aiter_moe.csv`) against the product's expert GEMMs.

AITER, the kernel library SGLang and vLLM run on AMD GPUs, ships the timings its tuner measured for the fused MoE
kernels of each model it tunes for (`aiter/configs/model_configs/*_tuned_fmoe.csv`): per token count, the stage-1
(gate and up projections with the activation) and stage-2 (down projection with the routing weights) kernel times,
or one time for a single-stage kernel. The table transcribes the MI355X rows (256 CUs) of two of them: DeepSeek-R1's
FP8 block-scaled experts at TP8 and TP4 (expert width 256 and 512, the shared expert fused as the 257th, so every
token picks 9) and Kimi K3's MXFP4 experts at TP8 (896 experts in a 3,584-wide latent, width 384, top 16). Test data
only: nothing is fitted to it.

Each row is priced as the engine prices a MoE layer's expert GEMMs (`workloads.layers`): the experts the routings
hit in expectation under uniform routing (the fused shared expert hit by every token), an even share of the routings
each, the GPU's MoE tiles for that many rows an expert, the gate/up `MoeGemm` then the down `MoeGemm` (with, from
`AITER_REDUCE_MIN_TOKENS` tokens, the read-back of each token's expert rows that AITER's stage 2 reduces), each
launch's own execution without its launch cost (the tuner reads kernel durations from PyTorch's profiler,
`aiter/test_common.py: perftest`, averaged over 101 runs on rotated inputs). The activation between them is fused
into stage 1 there and is left out here.
"""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

TABLE = Path(__file__).parent / "published" / "aiter_moe.csv"
# DeepSeek's shared expert fused into the routed ones (experts = routed + 1, top_k = routed top-k + 1)
FUSED_SHARED = {"deepseek-r1": 1, "kimi-k3": 0}
DECODE_MAX_TOKENS = 1024  # the decode batches the serving rows run (concurrency 4 to 64 a GPU, up to MTP drafts)


@dataclass(frozen=True)
class MoeRow:
    """One published row beside its prediction."""

    model: str
    gpu: str
    tokens: int
    inter_dim: int
    measured_s: float
    predicted_s: float
    stage1_measured_s: float
    stage2_measured_s: float  # 0: one single-stage kernel
    stage1_predicted_s: float
    stage2_predicted_s: float

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0

    @property
    def label(self) -> str:
        return f"{self.model} {self.gpu} width {self.inter_dim}, {self.tokens} tokens"


def _kernels(row: dict[str, str]):
    from hwmodels.dtypes import Dtype
    from hwmodels.spec import load_gpu
    from workloads.kernels import Elementwise, MoeGemm
    from workloads.layers import AITER_REDUCE_MIN_TOKENS, active_experts
    from workloads.tiles import moe_gemm_tiles

    gpu = load_gpu(row["gpu"])
    tokens, experts, top_k = int(row["tokens"]), int(row["experts"]), int(row["top_k"])
    dim, inter = int(row["model_dim"]), int(row["inter_dim"])
    shared = FUSED_SHARED[row["model"]]
    routed, routed_k = experts - shared, top_k - shared
    active = max(1, round(active_experts(routed, tokens * routed_k) + shared))
    per_expert = math.ceil(tokens * top_k / active)
    dtype = Dtype(row["weight_dtype"])
    tile = moe_gemm_tiles(gpu, tokens_per_expert=per_expert, dtype=dtype).fields
    up = MoeGemm(experts=active, tokens_per_expert=per_expert, n=2 * inter, k=dim, dtype=dtype, **tile)
    down = [MoeGemm(experts=active, tokens_per_expert=per_expert, n=dim, k=inter, dtype=dtype, **tile)]
    if tokens >= AITER_REDUCE_MIN_TOKENS:  # the engine's `moe.combine` on AMD (workloads.layers._moe_combine)
        down.append(Elementwise(elements=tokens * dim, inputs=top_k, ops_per_element=2 * top_k))
    return gpu, up, down


def compare() -> list[MoeRow]:
    """Every row of the table against the product's two expert GEMMs at its shape."""
    from compiled.launch_time import launch_times
    from hwmodels.calibration import load_calibration
    from hwmodels.roofline import LaunchMode

    out = []
    with TABLE.open(newline="") as f:
        for row in csv.DictReader(f):
            gpu, up, down = _kernels(row)
            calib = load_calibration(gpu.name)
            t_up, t_down = (sum(t.time_s - t.launch_s for k in kernels
                                for t in launch_times(k, gpu, calib, LaunchMode.QUEUED))
                            for kernels in ((up,), down))
            out.append(MoeRow(row["model"], row["gpu"], int(row["tokens"]), int(row["inter_dim"]),
                              float(row["total_us"]) * 1e-6, t_up + t_down, float(row["stage1_us"]) * 1e-6,
                              float(row["stage2_us"]) * 1e-6, t_up, t_down))
    return out


def summary(rows: list[MoeRow]) -> list[dict[str, object]]:
    """Per model and expert width: rows, and the median |error| and signed median over all tokens and over the
    decode batches (at most DECODE_MAX_TOKENS tokens)."""
    groups: dict[tuple[str, str, int], list[MoeRow]] = {}
    for r in rows:
        groups.setdefault((r.model, r.gpu, r.inter_dim), []).append(r)
    out = []
    for (model, gpu, inter), members in sorted(groups.items()):
        decode = [r for r in members if r.tokens <= DECODE_MAX_TOKENS]
        out.append({"model": model, "gpu": gpu, "expert_width": inter, "rows": len(members),
                    "median_abs_pct": 100 * statistics.median(abs(r.error) for r in members),
                    "median_signed_pct": 100 * statistics.median(r.error for r in members),
                    "decode_rows": len(decode),
                    "decode_median_abs_pct": 100 * statistics.median(abs(r.error) for r in decode) if decode else None})
    return out
