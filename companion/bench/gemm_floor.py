"""`gemm-floor`: what a cuBLAS GEMM costs beyond its work: the time of GEMMs too small to do any, graph-launched.

    python -m companion.bench gemm-floor --out DIR      # writes DIR/gemm_floor.csv

A persistent warp-specialized GEMM kernel (cuBLAS's nvjet kernels on Hopper) sets up before its first tile: tensor-map
and barrier set-up, the pipeline's first loads, the epilogue's store and its completion. This probe times GEMMs whose
work is negligible (at most 256 x 512 outputs, k at most 1,024: under 0.1 us of bytes or FLOP on an H200) the way the
gemm suite times its decode rows (CUDA graphs of 20 calls, median per call), in bf16 and fp8, and records the
kernels each one launches (profiler names and their durations, one call), so the fixed cost of the library's kernel
and of its split-K reduction kernel can be read apart. `validation.gemm_floor` derives the constant from it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

# (m, n, k): negligible work, covering one and several k stages, one and several output tiles; the last two split
# over k in cuBLAS's choice (a reduction kernel follows)
SHAPES = ((1, 128, 128), (8, 128, 256), (1, 256, 512), (16, 256, 1024), (1, 512, 128), (32, 512, 512),
          (1, 96, 7168), (4, 128, 7168))
COLUMNS = ("dtype", "m", "n", "k", "launch_mode", "ops_per_sample", "time_s_median", "time_s_p10", "time_s_p90",
           "repeats", "kernels", "kernel_durations_s", "gpu_name", "torch", "cuda", "date")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: $OUT)")


def _kernels(torch, op, a, w) -> tuple[str, str]:
    """(the kernel names one call launches, their durations in seconds), ';'-joined, from the profiler."""
    from torch.profiler import ProfilerActivity, profile

    from companion.bench.output import trace_events

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        op(a, w)
        torch.cuda.synchronize()
    events = [e for e in trace_events(prof) if e.get("cat") == "kernel"]
    events.sort(key=lambda e: e["ts"])
    return ";".join(e["name"][:120] for e in events), ";".join(f"{e['dur'] * 1e-6:.3e}" for e in events)


def run(args: argparse.Namespace) -> int:
    from companion.bench.output import start_timing
    from companion.bench.suites.gemm import _gemm_inputs, _gemm_op, _time_gemm, check_gemm
    from companion.bench.timing import provenance
    from validation.measure_output import summarize, write_csv_atomic
    from validation.suites import BF16, FP8, GRAPH
    from validation.suites.gemm import GEMM_OPS_PER_GRAPH, GemmCase

    started = start_timing(args.out, "gemm-floor")
    if isinstance(started, int):
        return started
    folder, env = started
    import torch

    rows = []
    for dtype in (BF16, FP8):
        for m, n, k in SHAPES:
            case = GemmCase("torch_scaled_mm" if dtype == FP8 else "torch_matmul", dtype, m, n, k, GRAPH,
                            GEMM_OPS_PER_GRAPH)
            inputs = [_gemm_inputs(case) for _ in range(4)]
            op = _gemm_op(case)
            check_gemm(case, *inputs[0], op)
            names, durations = _kernels(torch, op, *inputs[0])
            times = _time_gemm(case, inputs, op)
            rows.append({"dtype": dtype, "m": m, "n": n, "k": k, "launch_mode": GRAPH,
                         "ops_per_sample": GEMM_OPS_PER_GRAPH, **summarize(times), "kernels": names,
                         "kernel_durations_s": durations,
                         **{c: v for c, v in provenance(env).items() if c in COLUMNS}})
            print(f"{dtype} {m}x{n}x{k}: {rows[-1]['time_s_median'] * 1e6:.2f} us  {names[:80]} {durations}",
                  flush=True)
    write_csv_atomic(folder / "gemm_floor.csv", COLUMNS, rows)
    return 0
