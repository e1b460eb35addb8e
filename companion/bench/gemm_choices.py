"""`gemm-choices`: which kernels cuBLAS runs for each GEMM shape (its heuristic's choice), read off the profiler.

    python -m companion.bench gemm-choices --out DIR      # writes DIR/gemm_choices.csv

The GEMM model needs the tile and split that the library picks, not a time: this records, for a grid of shapes (the
catalog's dense projections, `validation.heldout._gemm_shapes`, at log-spaced token counts), the kernels one call
launches, with their grid, block, registers and shared memory, as PyTorch's profiler (Kineto/CUPTI) sees them. The
calls are those of the gemm suite (`torch.matmul` in bf16, `torch._scaled_mm` in fp8 with per-tensor scales and bf16
output), one call per shape after one warm-up call. No time is recorded.
"""

from __future__ import annotations

import argparse
from pathlib import Path

M_VALUES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 8192,
            16384)
BATCH = 100  # shapes per profiler session
COLUMNS = ("dtype", "m", "n", "k", "kernels", "grids", "blocks", "registers", "shared_bytes", "gpu_name", "torch",
           "cuda", "date")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: $OUT)")
    parser.add_argument("--every", type=int, default=3, help="take every Nth (n, k) of the catalog (default 3)")


def shapes(every: int) -> list[tuple[str, int, int, int]]:
    """(dtype, m, n, k) of the grid: every `every`-th (n, k) of the catalog at every M_VALUES, in both dtypes, and
    the held-out draws' own shapes."""
    from validation import heldout
    from validation.suites import BF16, FP8

    pairs = sorted({(n, k) for _, n, k, _ in heldout._gemm_shapes()})[::every]
    # fp8 scaled-mm takes n and k in multiples of 16 only
    grid = {(dtype, m, n, k) for n, k in pairs for m in M_VALUES for dtype in (BF16, FP8)
            if dtype == BF16 or (n % 16 == 0 and k % 16 == 0)}
    for draw in (1, 2, 3):
        grid |= {(c.dtype, c.m, c.n, c.k) for c in heldout.cases("gemm", draw=draw)}
    return sorted(grid, key=lambda s: (s[0], s[2], s[3], s[1]))


def run(args: argparse.Namespace) -> int:
    from companion.bench.output import start_timing, trace_events
    from companion.bench.suites.gemm import _gemm_inputs, _gemm_op
    from companion.bench.timing import provenance
    from validation.measure_output import write_csv_atomic
    from validation.suites import FP8
    from validation.suites.gemm import GemmCase

    started = start_timing(args.out, "gemm-choices")
    if isinstance(started, int):
        return started
    folder, env = started
    import torch
    from torch.profiler import ProfilerActivity, profile

    rows = []
    grid = shapes(args.every)
    print(f"{len(grid)} shapes", flush=True)
    for start in range(0, len(grid), BATCH):
        batch = grid[start:start + BATCH]
        cases = [GemmCase("torch_scaled_mm" if dtype == FP8 else "torch_matmul", dtype, m, n, k, "eager", 1)
                 for dtype, m, n, k in batch]
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for i, case in enumerate(cases):
                a, w = _gemm_inputs(case)
                op = _gemm_op(case)
                try:
                    op(a, w)  # warm-up, outside the shape's range: the heuristic's choice is cached per shape
                    torch.cuda.synchronize()
                except RuntimeError as e:  # a shape the library refuses: recorded with no kernels
                    print(f"{case.dtype} {case.m}x{case.n}x{case.k}: {e}", flush=True)
                    continue
                with torch.profiler.record_function(f"shape {i}"):
                    op(a, w)
                torch.cuda.synchronize()
                del a, w
        events = trace_events(prof)
        ranges = sorted((e["ts"], e["ts"] + e["dur"], int(e["name"].split()[1])) for e in events
                         if e.get("cat") == "user_annotation" and e.get("name", "").startswith("shape "))
        launches = {e["args"]["correlation"]: e["ts"] for e in events
                    if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
        kernels: dict[int, list[dict]] = {}
        for e in sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"]):
            ts = launches.get(e["args"].get("correlation"))
            owner = next((i for lo, hi, i in ranges if ts is not None and lo <= ts <= hi), None)
            if owner is not None:
                kernels.setdefault(owner, []).append(e)
        for i, case in enumerate(cases):
            found = kernels.get(i, [])
            rows.append({"dtype": case.dtype, "m": case.m, "n": case.n, "k": case.k,
                         "kernels": ";".join(e["name"] for e in found),
                         "grids": ";".join("x".join(str(g) for g in e["args"].get("grid", [])) for e in found),
                         "blocks": ";".join("x".join(str(b) for b in e["args"].get("block", [])) for e in found),
                         "registers": ";".join(str(e["args"].get("registers per thread", "")) for e in found),
                         "shared_bytes": ";".join(str(e["args"].get("shared memory", "")) for e in found),
                         **{k: v for k, v in provenance(env).items() if k in COLUMNS}})
        print(f"{start + len(batch)} of {len(grid)}", flush=True)
        torch.cuda.empty_cache()
    write_csv_atomic(folder / "gemm_choices.csv", COLUMNS, rows)
    return 0
