"""MLA decode suite: the Triton split-KV kernel (`companion.kernels.mla_decode`) timed in CUDA graphs.

Shapes are Kimi K3's MLA at TP8 (12 query heads per GPU, kv_lora 512 + rope 64, bf16 q and cache),
one new token per sequence over a uniform history. Decode runs from CUDA graphs in serving engines,
so every case replays a graph of `ops_per_sample` decode calls, each on its own rotated input set
until the sets together exceed twice the L2.

Counts, exact and fixed before timing:

- flop = 2 * heads * context * (576 + 512) per sequence: the scores over the 576-wide latent row and
  the output over its first 512 values, for the real heads only (padding rows are not useful work);
- bytes = what the launches of the chosen method must move, each tensor once: q read; with padding,
  the padded q written by the copy and read back by the kernel; every cache row read once; with
  splits, the fp32 partial outputs and log-sum-exps written and read back by the merge; the output
  written (padded heads included). Every split holds rows (context >= num_splits * block_n), so
  every partial is written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from validation import comparison
from validation.suites import BF16, GRAPH
from workloads.attention_kernels import MlaDecode

SUITE = "mla_decode"
SHAPE_COLUMNS = ("seqs", "context", "heads", "num_splits", "pad_heads_to", "block_n", "num_warps")
METHOD_COLUMNS = ("n_input_sets",)

KERNEL = "triton_mla_decode"
GROUP = "mla decode"
HEADS = 12  # Kimi K3 MLA query heads per GPU at TP8 (96 / 8, the Kimi K3 study)
KV_LORA = 512  # latent width, also the value width per head
ROPE_DIM = 64
WIDTH = KV_LORA + ROPE_DIM
PAD_HEADS_TO = 16  # the padded path: whole 16-head blocks (mechanism 5 of the Kimi K3 study)
HEADS_PER_WORKGROUP = 16  # BLOCK_H of the kernel
# Launch configuration of the kernel module (its BLOCK_N and NUM_WARPS; a test keeps them equal).
BLOCK_N = 32
NUM_WARPS = 4
ELEMENT_BYTES = 2  # bf16 q, cache and output
FP32_BYTES = 4

SEQS = (1, 8, 32, 64, 128)
CONTEXTS = (1024, 8192, 32768, 131072)
LONGEST_CONTEXT_MAX_SEQS = 32  # 131072 tokens only up to 32 sequences (4.8 GB of cache)
SPLITS = (1, 16)  # every shape: the one-workgroup-per-request path and the 16-partition path
SPLIT_SWEEP = ((1, 32768, 4), (8, 32768, 4), (32, 32768, 4))  # (seqs, context, splits): 1 / 4 / 16 at 32K
# Mechanism 5 of the Kimi K3 study is measured at concurrency 1 on 1K and 32K histories, old path against new.
PADDED = ((1, 1024, 1), (1, 1024, 16), (1, 32768, 1), (1, 32768, 16), (32, 32768, 16))
MIN_OPS_PER_GRAPH = 4
# Assumption: at least the L2 PyTorch reports on one NVIDIA H200 (cloud VM) (60 MB), so the planned
# graph length holds every rotated set; run() refuses a case whose GPU reports more.
PLAN_L2_BYTES = 64 * 2**20
L2_ROTATION_FACTOR = 2


def rotation_sets(set_bytes: int, l2_bytes: int) -> int:
    """Input sets that together exceed L2_ROTATION_FACTOR L2s (one if a set alone does)."""
    return L2_ROTATION_FACTOR * l2_bytes // set_bytes + 1


@dataclass(frozen=True)
class MlaDecodeCase:
    """One decode call per sequence over `context` cached rows, replayed ops_per_sample times per graph."""

    seqs: int
    context: int
    num_splits: int
    pad_heads_to: int
    heads: int = HEADS
    block_n: int = BLOCK_N
    num_warps: int = NUM_WARPS
    kernel: str = KERNEL
    dtype: str = BF16
    launch_mode: str = GRAPH
    host_gaps: str = "hidden"

    @property
    def suite(self) -> str:
        return SUITE

    @property
    def padded_heads(self) -> int:
        return max(self.heads, self.pad_heads_to)

    @property
    def ops_per_sample(self) -> int:
        return max(MIN_OPS_PER_GRAPH, rotation_sets(self.input_set_bytes(), PLAN_L2_BYTES))

    def input_set_bytes(self) -> int:
        """Bytes of one (q, cache) set: what one call reads from HBM before any padding."""
        return self.seqs * (self.heads + self.context) * WIDTH * ELEMENT_BYTES

    def flop(self) -> int:
        return self.seqs * 2 * self.heads * self.context * (WIDTH + KV_LORA)

    def bytes(self) -> int:
        s, hp = self.seqs, self.padded_heads
        moved = self.input_set_bytes() + s * hp * KV_LORA * ELEMENT_BYTES  # q, cache, output
        if hp > self.heads:
            moved += 2 * s * hp * WIDTH * ELEMENT_BYTES  # padded q: written by the copy, read by the kernel
        if self.num_splits > 1:
            moved += 2 * s * self.num_splits * hp * (KV_LORA + 1) * FP32_BYTES  # partials + LSE, out and in
        return moved

    def shape(self) -> dict[str, object]:
        return {
            "seqs": self.seqs, "context": self.context, "heads": self.heads, "num_splits": self.num_splits,
            "pad_heads_to": self.pad_heads_to, "block_n": self.block_n, "num_warps": self.num_warps,
        }


def cases() -> list[MlaDecodeCase]:
    """44 cases; those sharing (seqs, context) are adjacent, so they share one rotation of inputs."""
    extra = [(s, t, n, 0) for s, t, n in SPLIT_SWEEP] + [(s, t, n, PAD_HEADS_TO) for s, t, n in PADDED]
    out = []
    for seqs in SEQS:
        for context in CONTEXTS:
            if context == CONTEXTS[-1] and seqs > LONGEST_CONTEXT_MAX_SEQS:
                continue
            configs = [(n, 0) for n in SPLITS] + [(n, p) for s, t, n, p in extra if (s, t) == (seqs, context)]
            out += [MlaDecodeCase(seqs, context, n, p) for n, p in sorted(configs, key=lambda c: (c[1], c[0]))]
    for case in out:
        if case.context < case.num_splits * case.block_n:
            raise ValueError(f"{case}: a split would be empty, and bytes() counts every partial")
    return out


# The split grid: the split-KV knob (1 -> 4 -> 16 partitions) at shapes no planned row has, drawn once with a fixed
# seed over the catalog's MLA decode (heads a GPU: Kimi K3 at TP8, DeepSeek-V3 at TP8 and TP4; 1-128 sequences over
# 1K-128K tokens, the cache at most SPLIT_GRID_MAX_TOKENS rows). Its predictions were written before it ran
# (validation/NOTES.md, 2026-12-06); its pairs join the design-change table.
SPLIT_GRID_SEED = 20261206
SPLIT_GRID_SHAPES = 16
SPLIT_GRID_SPLITS = (1, 4, 16)
SPLIT_GRID_HEADS = (12, 16, 32)
SPLIT_GRID_MAX_TOKENS = 4 * 2**20  # 4.8 GB of bf16 cache, as the planned 32 x 128K row


def splits_cases() -> list[MlaDecodeCase]:
    """The split grid's cases: each drawn shape at every split count of SPLIT_GRID_SPLITS, adjacent."""
    rng = np.random.default_rng(SPLIT_GRID_SEED)
    planned = {(c.seqs, c.context, c.heads) for c in cases()}
    shapes: list[tuple[int, int, int]] = []
    while len(shapes) < SPLIT_GRID_SHAPES:
        heads = int(rng.choice(SPLIT_GRID_HEADS))
        context = round(math.exp(rng.uniform(math.log(1024), math.log(131072))))
        seqs = round(math.exp(rng.uniform(0.0, math.log(128))))
        shape = (seqs, context, heads)
        if seqs * context <= SPLIT_GRID_MAX_TOKENS and shape not in planned and shape not in shapes:
            shapes.append(shape)
    return [MlaDecodeCase(seqs, context, n, 0, heads=heads) for seqs, context, heads in shapes
            for n in SPLIT_GRID_SPLITS]


def compare(row: dict[str, str], gpu_name: str) -> comparison.Comparison:
    """The row against `MlaDecode` with the Triton kernel's tiles (16-head blocks, block_n rows, num_warps*32), as
    `infersim kernel mla-decode` times it: from the compiled code (`compiled.companion`)."""
    dtype = comparison.TORCH_DTYPES[str(row["dtype"])]
    kernel = MlaDecode(
        seqs=int(row["seqs"]), context=int(row["context"]), heads=int(row["heads"]), kv_lora=KV_LORA,
        rope_dim=ROPE_DIM, num_splits=int(row["num_splits"]), pad_heads_to=int(row["pad_heads_to"]),
        kv_dtype=dtype, q_dtype=dtype, heads_per_workgroup=HEADS_PER_WORKGROUP,
        threads=int(row["num_warps"]) * 32, block_n=int(row["block_n"]),
    )
    pad = int(row["pad_heads_to"])
    label = (f"mla_decode seqs={row['seqs']} context={row['context']} splits={row['num_splits']}"
             + (f" pad{pad}" if pad > int(row["heads"]) else "")
             + (f" heads={row['heads']}" if int(row["heads"]) != HEADS else ""))
    return comparison.compare(row, kernel, gpu_name, label, GROUP)
