"""Suite `norm`: residual add + RMSNorm, fused in one Triton kernel against the unfused pair (add, then norm).

Shapes: tokens {1 .. 16384} x hidden {7168 (Kimi K3, DeepSeek V3), 8192 (70B class)} x {fused, unfused},
bf16 storage. Up to 256 tokens is decode: timed in CUDA-graph mode, one graph replaying one launch (or
launch pair) per rotated input set, `ops_per_sample` = that count. Larger token counts are prefill:
eager, one op per sample, host gaps hidden.

Counts, per op (one fused launch or one add + norm pair), tokens t and hidden h:

- flop = 5·t·h: the add, the square, the sum of squares, the scale by 1/rms and by the weight
  (per-row mean, eps and square root not counted), the same in both paths.
- bytes, fused = 2·(4·t·h + h): x and residual read, normed and new residual written, weight read once.
- bytes, unfused = 2·(5·t·h + h): the add reads 2 and writes 1 value, the norm reads the sum back and
  writes 1; weight read once.

Input sets (x, residual and both outputs) rotate so that the inputs of consecutive launches exceed
2x the L2 (`env["l2_bytes"]`); one set when a single launch already reads more than that.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from validation.comparison import Comparison
from validation.comparison import compare as compare_launches
from validation.suites import BF16, EAGER, ELEMENT_BYTES, GRAPH
from workloads.kernels import AddRmsNorm

SUITE = "norm"
SHAPE_COLUMNS = ("tokens", "hidden")
METHOD_COLUMNS = ("n_input_sets", "num_warps")

FUSED = "triton_add_rmsnorm_fused"
UNFUSED = "triton_add_then_rmsnorm"
TOKENS = (1, 8, 64, 256, 1024, 4096, 16384)
HIDDEN = (7168, 8192)
DECODE_MAX_TOKENS = 256  # at most this many tokens: decode, timed in a graph
GRAPH_MIN_OPS = 20  # launches (or pairs) per graph at least, as the gemm suite captures
L2_ROTATION_FACTOR = 2  # rotated inputs exceed this many L2s (the gemm suite uses the same)
PLANNED_L2_BYTES = 60_000_000  # PyTorch's L2_cache_size on one NVIDIA H200 (NOTES.md); the run re-checks env
ROW_NUM_WARPS = 8  # norms.ROW_NUM_WARPS and norms.ADD_NUM_WARPS (a test checks they agree)


@dataclass(frozen=True)
class NormCase:
    """One timed add + RMSNorm configuration; an op is one fused launch or one add + norm pair."""

    kernel: str
    tokens: int
    hidden: int
    launch_mode: str
    ops_per_sample: int
    dtype: str = BF16
    host_gaps: str = "hidden"

    @property
    def suite(self) -> str:
        return SUITE

    @property
    def fused(self) -> bool:
        return self.kernel == FUSED

    def flop(self) -> int:
        return 5 * self.tokens * self.hidden

    def bytes(self) -> int:
        values = (4 if self.fused else 5) * self.tokens * self.hidden
        return (values + self.hidden) * ELEMENT_BYTES[self.dtype]

    def input_bytes(self) -> int:
        """x and residual of one launch, for sizing the rotation."""
        return 2 * self.tokens * self.hidden * ELEMENT_BYTES[self.dtype]

    def sets_needed(self, l2_bytes: int) -> int:
        """Input sets whose inputs together exceed L2_ROTATION_FACTOR L2s (1 if one set already does)."""
        target = L2_ROTATION_FACTOR * l2_bytes
        return 1 if self.input_bytes() > target else target // self.input_bytes() + 1

    def shape(self) -> dict[str, object]:
        return {"tokens": self.tokens, "hidden": self.hidden}


def cases() -> list[NormCase]:
    """Every (tokens, hidden, fused) point; decode ones hold one rotated set per launch in the graph."""
    out = []
    for hidden, tokens, kernel in itertools.product(HIDDEN, TOKENS, (FUSED, UNFUSED)):
        if tokens <= DECODE_MAX_TOKENS:
            probe = NormCase(kernel, tokens, hidden, GRAPH, 1)
            out.append(replace(probe, ops_per_sample=max(GRAPH_MIN_OPS, probe.sets_needed(PLANNED_L2_BYTES))))
        else:
            out.append(NormCase(kernel, tokens, hidden, EAGER, 1))
    return out


def compare(row: dict[str, str], gpu_name: str) -> Comparison:
    """AddRmsNorm with the kernels' 256 threads; unfused is its Elementwise add (4096 values a program) + RmsNorm."""
    fused = row["kernel"] == FUSED
    tokens, hidden = int(row["tokens"]), int(row["hidden"])
    threads = int(row.get("num_warps") or ROW_NUM_WARPS) * 32
    kernel = AddRmsNorm(tokens=tokens, hidden=hidden, fused=fused, dtype="bf16", threads=threads)
    regime = "decode" if row["launch_mode"] == GRAPH else "prefill"
    group = f"add-rmsnorm {'fused' if fused else 'unfused'} {regime}"
    return compare_launches(row, kernel, gpu_name, f"{row['kernel']} t={tokens} h={hidden}", group)
