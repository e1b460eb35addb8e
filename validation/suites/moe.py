"""Suite `moe`: grouped expert GEMMs at the catalog's expert shapes, as a Triton fused-MoE kernel and as PyTorch's
CUTLASS grouped GEMM, from one token to 4,096, with balanced and skewed routing.

Kernels: `triton_fused_moe` is `companion.kernels.moe.grouped_gemm`, vLLM's fused-MoE kernel (rows gathered
from the tokens, each expert's rows padded to BLOCK_M, the grid sized for the worst padding), at the tiles the
engine assumes for it (`workloads.tiles.moe_gemm_tiles` on the GPU, by the mean rows of an active expert);
`torch_grouped_mm` is `torch._grouped_mm` (CUTLASS grouped GEMM on Hopper) on the same rows already sorted by
expert. Only the GEMM is timed: the routing's sort (`moe_align_block_size`) and the gather are not.

Shapes: (experts, n, k, top_k) of one GPU at TP8, the first GEMM (gate and up, n = 2 x intermediate / 8) and the
second (down, k = intermediate / 8): DeepSeek-V3 (256 experts top-8, hidden 7168, expert intermediate 2048),
Qwen3-235B-A22B (128 top-8, 4096, 1536) and Mixtral-8x7B (8 top-2, 4096, 14336). Tokens 1 to 4,096; routing
`balanced` (token t's j-th choice is expert (t * top_k + j + offset) mod E: every expert gets the same rows
within one) or `skewed` (each token draws its top_k distinct experts with probability proportional to 1 / rank,
seeded: a Zipf router, a few hot experts). Up to 256 tokens is decode, timed in CUDA-graph mode with one
launch per input set; larger is prefill, eager, host gaps hidden.

Counts, per launch, routed rows R = tokens x top_k and A experts receiving at least one row:
flop = 2 R n k; bytes = (tokens k + A n k + R n) x 2 (tokens read once, each active expert's weight read once,
the routed rows written once; bf16).

Input sets (tokens, routing, output) rotate; the routing of each set is drawn apart (`offset` = the set's index
x top_k for balanced, its own seed for skewed), so the weights consecutive launches read differ where the
experts allow.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from hwmodels.dtypes import Dtype
from hwmodels.spec import load_gpu
from validation.comparison import Comparison
from validation.comparison import compare as compare_launches
from validation.suites import BF16, EAGER, ELEMENT_BYTES, GRAPH
from workloads.kernels import GroupedMm, MoeGemm, worst_case_row_tiles
from workloads.tiles import moe_gemm_tiles

SUITE = "moe"
SHAPE_COLUMNS = ("model", "gemm", "experts", "tokens", "top_k", "n", "k", "routing", "block_m", "block_n", "block_k")
METHOD_COLUMNS = ("n_input_sets", "num_warps", "num_stages", "active_experts", "max_rows", "rows_by_expert")

TRITON, VENDOR = "triton_fused_moe", "torch_grouped_mm"
BALANCED, SKEWED = "balanced", "skewed"
# (model, gemm, experts, n, k, top_k) at TP8; the configs of hwmodels/specs/SOURCES.md's model entries
SHAPES = (
    ("deepseek-v3", "up", 256, 512, 7168, 8),
    ("deepseek-v3", "down", 256, 7168, 256, 8),
    ("qwen3-235b-a22b", "up", 128, 384, 4096, 8),
    ("qwen3-235b-a22b", "down", 128, 4096, 192, 8),
    ("mixtral-8x7b", "up", 8, 3584, 4096, 2),
    ("mixtral-8x7b", "down", 8, 4096, 1792, 2),
)
TOKENS = (1, 8, 64, 512, 4096)
SKEWED_TOKENS = (64, 512, 4096)
DECODE_MAX_TOKENS = 256
GRAPH_OPS = 8  # launches, each on its own input set, per graph replay
EAGER_SETS = 4
ZIPF_SEED = 2026
PLAN_GPU = "h200"  # the tiles are the engine's for this GPU


def routing(routing_kind: str, tokens: int, experts: int, top_k: int, offset: int) -> list[list[int]]:
    """Each token's top_k distinct experts: balanced (round robin from `offset`) or skewed (Zipf, seeded)."""
    if routing_kind == BALANCED:
        return [[(t * top_k + j + offset) % experts for j in range(top_k)] for t in range(tokens)]
    rng = random.Random(ZIPF_SEED + offset)
    weights = [1.0 / (rank + 1) for rank in range(experts)]
    out = []
    for _ in range(tokens):
        chosen: list[int] = []
        while len(chosen) < top_k:
            e = rng.choices(range(experts), weights)[0]
            if e not in chosen:
                chosen.append(e)
        out.append(chosen)
    return out


def rows_by_expert(choices: list[list[int]], experts: int) -> tuple[int, ...]:
    counts = [0] * experts
    for token in choices:
        for e in token:
            counts[e] += 1
    return tuple(counts)


@dataclass(frozen=True)
class MoeCase:
    """One timed grouped GEMM; the counts are those of input set 0's routing."""

    kernel: str
    model: str
    gemm: str
    experts: int
    tokens: int
    top_k: int
    n: int
    k: int
    routing: str
    launch_mode: str
    ops_per_sample: int
    dtype: str = BF16
    host_gaps: str = "hidden"

    @property
    def suite(self) -> str:
        return SUITE

    def counts(self, offset: int = 0) -> tuple[int, ...]:
        return rows_by_expert(routing(self.routing, self.tokens, self.experts, self.top_k, offset), self.experts)

    def tiles(self) -> dict[str, int]:
        """The engine's tiles for the mean rows of an active expert (`workloads.tiles.moe_gemm_tiles`)."""
        counts = [c for c in self.counts() if c]
        per_expert = -(-sum(counts) // len(counts))
        return moe_gemm_tiles(load_gpu(PLAN_GPU), tokens_per_expert=per_expert, dtype=Dtype.BF16).fields

    def flop(self) -> int:
        return 2 * self.tokens * self.top_k * self.n * self.k

    def bytes(self) -> int:
        active = sum(1 for c in self.counts() if c)
        values = self.tokens * self.k + active * self.n * self.k + self.tokens * self.top_k * self.n
        return values * ELEMENT_BYTES[self.dtype]

    def shape(self) -> dict[str, object]:
        t = self.tiles()
        return {"model": self.model, "gemm": self.gemm, "experts": self.experts, "tokens": self.tokens,
                "top_k": self.top_k, "n": self.n, "k": self.k, "routing": self.routing,
                "block_m": t["tile_m"], "block_n": t["tile_n"], "block_k": t["tile_k"]}


def cases() -> list[MoeCase]:
    out = []
    for (model, gemm, experts, n, k, top_k), kernel in itertools.product(SHAPES, (TRITON, VENDOR)):
        for kind, tokens_list in ((BALANCED, TOKENS), (SKEWED, SKEWED_TOKENS)):
            for tokens in tokens_list:
                graph = tokens <= DECODE_MAX_TOKENS
                out.append(MoeCase(kernel, model, gemm, experts, tokens, top_k, n, k, kind,
                                   GRAPH if graph else EAGER, GRAPH_OPS if graph else 1))
    return out


def compare(row: dict[str, str], gpu_name: str) -> Comparison:
    """`MoeGemm` over the row's routed rows by expert, at the Triton kernel's tiles; `torch_grouped_mm` as the
    product's `GroupedMm` (the library's own tiles, clusters, persistent walk and its two launches)."""
    n, k = int(row["n"]), int(row["k"])
    rows = tuple(int(c) for c in str(row["rows_by_expert"]).split())
    if row["kernel"] == TRITON:
        tiles = {"tile_m": int(row["block_m"]), "tile_n": int(row["block_n"]), "tile_k": int(row["block_k"]),
                 "stages": int(row["num_stages"]), "threads": 32 * int(row["num_warps"])}
        # the companion kernel's grid: sized for the worst padding, as vLLM's was before it capped small batches
        grid = worst_case_row_tiles(sum(rows), len(rows), tiles["tile_m"], capped=False)
        kernel = MoeGemm(experts=len(rows), tokens_per_expert=max(rows), n=n, k=k, dtype=Dtype.BF16,
                         rows_by_expert=rows, grid_row_tiles=grid, **tiles)
    else:
        kernel = GroupedMm(experts=len(rows), tokens_per_expert=max(rows), n=n, k=k, rows_by_expert=rows)
    regime = "decode" if row["launch_mode"] == GRAPH else "prefill"
    label = f"{row['kernel']} {row['model']} {row['gemm']} t={row['tokens']} {row['routing']}"
    backend = "triton" if row["kernel"] == TRITON else "torch grouped_mm"
    return compare_launches(row, kernel, gpu_name, label, f"moe {backend} {row['routing']} {regime}")
