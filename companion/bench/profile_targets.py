"""Kernels to read with a hardware-counter profiler: one launch of each inside a profiler range.

    ncu --profile-from-start off --clock-control none --set full -o REPORT \\
        python3 -m companion.bench.profile_targets kda 704
    ncu ... python3 -m companion.bench.profile_targets quickreduce int8 256

`kda TOKENS`: the KDA prefill (the intra-chunk kernel, then the scan) of one sequence, 12 heads, K = V = 128, on
the suite's random inputs (`suites.kda`); at 704 tokens the intra kernel has 132 workgroups, one per SM.
`quickreduce CODEC MIB`: one two-rank all-reduce of MIB MiB of bf16 with both ranks emulated on this GPU (local
buffers, no link), 1024 programs of 4 warps as the sweep launches it; its six kernels (scatter, reduce and
gather of each rank).
`kda-verify SEQS BLOCK_V`: one KDA verify (`suites.kda`: 4 positions, 12 heads, K = V = 128, the states of every
position stored) of SEQS sequences with value tiles of BLOCK_V columns.
`grouped GROUPS N K`: one `torch._grouped_mm` of GROUPS one-row groups of N columns, each with its own [N, K]
weights (the grouped probe's `distinct1t`: 1023 128 K; `wide1t`: 43 3072 K).
`moe EXPERTS TOKENS TOP_K N K ROUTING`: one Triton fused-MoE grouped GEMM (`suites.moe`: bf16, the engine's tiles
for the mean rows of an active expert, 4 warps, 3 stages) of TOKENS tokens routed to TOP_K of EXPERTS experts
(`balanced` or `skewed`), each expert's weight [N, K] (DeepSeek-V3's down projection at TP8: 256 4096 8 7168 256
balanced).
`mla SEQS CONTEXT SPLITS`: one split-KV MLA decode (`suites.mla_decode`: 12 heads, unpadded, 576-wide cache rows
of bf16, uniform lengths) of SEQS sequences of CONTEXT tokens in SPLITS splits, and its merge when split.

Each target runs twice outside the range (compile, warm up), then once between `cudaProfilerStart` and
`cudaProfilerStop`, so that a profiler started with its range off records one launch of each kernel. A
diagnostic for `validation/NOTES.md`: nothing here sets a model constant.

    python -m companion.bench.profile_targets summary SOURCE.csv.gz

prints, per kernel of a report's source page (`ncu -i REPORT --page source --csv --print-source sass`, gzipped),
its instructions grouped by how many times each executed (a kernel's straight-line code against its loop body):
the share of the warp-state samples, the shared-memory wavefronts against the ideal count without bank
conflicts, and the leading stall reasons. Needs no GPU.
"""

from __future__ import annotations

import collections
import csv
import gzip
import sys
from collections.abc import Callable, Sequence

HELP = __doc__


def _number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def source_pages(path: str) -> dict[str, list[dict[str, str]]]:
    """Per kernel name, the rows (one per SASS instruction) of a gzipped CSV source page of ncu."""
    pages: dict[str, list[dict[str, str]]] = {}
    header: list[str] = []
    rows: list[dict[str, str]] = []
    with gzip.open(path, "rt", newline="") as f:
        for line in csv.reader(f):
            if not line:
                continue
            if line[0] == "Kernel Name":
                rows = pages.setdefault(line[1], [])
            elif line[0] == "Address":
                header = line
            else:
                rows.append(dict(zip(header, line, strict=False)))
    return pages


def summary(path: str, groups: int = 4) -> str:
    """The text `summary SOURCE.csv.gz` prints (see the module docstring)."""
    samples, waves = "Warp Stall Sampling (All Samples)", "L1 Wavefronts Shared"
    lines = []
    for kernel, rows in source_pages(path).items():
        by_count: dict[float, collections.Counter] = collections.defaultdict(collections.Counter)
        for row in rows:
            group = by_count[_number(row["Instructions Executed"])]
            group["instructions"] += 1
            group["samples"] += _number(row[samples])
            group["wavefronts"] += _number(row[waves])
            group["ideal"] += _number(row[f"{waves} Ideal"])
            for key, value in row.items():
                if key.startswith("stall_") and "(Not Issued)" not in key:
                    group[key[len("stall_"):]] += _number(value)
        total = sum(g["samples"] for g in by_count.values()) or 1.0
        lines.append(f"{kernel}: {len(rows)} instructions, {total:.0f} samples")
        for executed, g in sorted(by_count.items(), key=lambda item: -item[1]["samples"])[:groups]:
            fixed = {"instructions", "samples", "wavefronts", "ideal"}
            stalls = sorted(((k, v) for k, v in g.items() if k not in fixed), key=lambda item: -item[1])[:5]
            lines.append(f"  executed {executed:>9.0f}x: {g['instructions']:5d} instructions, "
                         f"{100 * g['samples'] / total:5.1f} % of samples, shared wavefronts {g['wavefronts']:10.0f} "
                         f"(ideal {g['ideal']:10.0f}); stalls: "
                         + ", ".join(f"{k} {100 * v / max(g['samples'], 1):.0f} %" for k, v in stalls))
    return "\n".join(lines)


def _kda(tokens: int) -> Callable[[], object]:
    from companion.bench.suites.kda import _launcher, _make_set
    from validation.suites.kda import PREFILL, PREFILL_BLOCK_V, PREFILL_WARPS, KdaCase

    case = KdaCase(PREFILL, 1, tokens, PREFILL_BLOCK_V, PREFILL_WARPS)
    inputs, launch = _make_set(case), _launcher(case)
    return lambda: launch(inputs)


def _kda_verify(seqs: int, block_v: int) -> Callable[[], object]:
    from companion.bench.suites.kda import _launcher, _make_set
    from validation.suites.kda import RECURRENT_WARPS, VERIFY, VERIFY_POSITIONS, KdaCase

    case = KdaCase(VERIFY, seqs, VERIFY_POSITIONS, block_v, RECURRENT_WARPS, store_states=True)
    inputs, launch = _make_set(case), _launcher(case)
    return lambda: launch(inputs)


def _quickreduce(codec: str, mib: int) -> Callable[[], object]:
    import torch

    from companion.bench.quickreduce import MAX_PROGRAMS, NUM_WARPS
    from companion.kernels import allreduce as ar

    numel = (mib << 20) // 2
    xs = [torch.randn(numel, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    outs = [torch.empty_like(x) for x in xs]
    em = ar.Emulation(2, numel, torch.device("cuda", 0), MAX_PROGRAMS, NUM_WARPS)
    return lambda: em.run(xs, codec, outs)


def _mla(seqs: int, context: int, splits: int) -> Callable[[], object]:
    import functools

    from companion.bench.suites.mla_decode import _inputs
    from companion.kernels.mla_decode import mla_decode
    from validation.suites.mla_decode import MlaDecodeCase

    case = MlaDecodeCase(seqs, context, splits, pad_heads_to=0)
    q, cache, lengths = _inputs(case, "cuda")
    launch = functools.partial(mla_decode, num_splits=splits, pad_heads_to=0, block_n=case.block_n,
                               num_warps=case.num_warps)
    return lambda: launch(q, cache, lengths)


def _moe(experts: int, tokens: int, top_k: int, n: int, k: int, routing: str) -> Callable[[], object]:
    import torch

    from companion.bench.suites.moe import _inputs, _triton_op
    from validation.suites.moe import EAGER, TRITON, MoeCase

    case = MoeCase(TRITON, "profile", "gemm", experts, tokens, top_k, n, k, routing, EAGER, 1)
    w = (torch.randn(experts, n, k, device="cuda") / k**0.5).to(torch.bfloat16)
    return _triton_op(case, w, [_inputs(case, 0)])[0]


def _grouped(groups: int, n: int, k: int) -> Callable[[], object]:
    """`torch._grouped_mm` of `groups` one-row groups of `n` columns, each group's weights its own [n, k] block read
    transposed (the grouped probe's `distinct1t` at 1,023 x 128 and `wide1t` at 43 x 3,072)."""
    import torch

    gen = torch.Generator(device="cuda").manual_seed(2027)
    a = torch.randn(groups, k, device="cuda", generator=gen).to(torch.bfloat16) + 0.5
    w = (torch.randn(groups, n, k, device="cuda", generator=gen) / k**0.5).to(torch.bfloat16).transpose(-2, -1)
    offs = torch.arange(1, groups + 1, device="cuda", dtype=torch.int32)
    return lambda: torch._grouped_mm(a, w, offs=offs)


def main(argv: Sequence[str]) -> int:
    if argv[:1] == ["summary"] and len(argv) == 2:
        print(summary(argv[1]))
        return 0
    targets = {"kda": lambda a: _kda(int(a[0])), "kda-verify": lambda a: _kda_verify(int(a[0]), int(a[1])),
               "quickreduce": lambda a: _quickreduce(a[0], int(a[1])),
               "mla": lambda a: _mla(int(a[0]), int(a[1]), int(a[2])),
               "moe": lambda a: _moe(*map(int, a[:5]), a[5]),
               "grouped": lambda a: _grouped(int(a[0]), int(a[1]), int(a[2]))}
    if not argv or argv[0] not in targets:
        print(f"usage: {HELP}\n  targets: {', '.join(targets)}", file=sys.stderr)
        return 2
    import torch

    once = targets[argv[0]](argv[1:])
    for _ in range(2):
        once()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    once()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
