"""`kernel-split`: each kernel's own duration inside one MLA decode call (attention and merge), from the profiler.

    python -m companion.bench kernel-split --out DIR      # writes DIR/mla_kernel_split.csv

The MLA decode suite times a whole call, split-KV attention and its merge together; a design change (the split
count) moves both. This records, for the split-count pairs the suite measured at 1,024 and 8,192 tokens, the
duration of every kernel one call launches (CUPTI's kernel records through PyTorch's profiler, median of 20 calls,
each after the queue drained), so that the model's error can be placed in one kernel or the other. Diagnostic: no
constant is set from it.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

CASES = tuple((seqs, context, splits) for seqs in (1, 8, 32, 128) for context in (1024, 8192) for splits in (1, 16))
HEADS = 12  # the suite's query heads per GPU
CALLS = 20
COLUMNS = ("seqs", "context", "splits", "kernel", "calls", "duration_s_median", "gpu_name", "torch", "triton", "date")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: $OUT)")


def run(args: argparse.Namespace) -> int:
    from companion.bench.output import start_timing, trace_events
    from companion.bench.timing import provenance
    from validation.measure_output import write_csv_atomic

    started = start_timing(args.out, "kernel-split")
    if isinstance(started, int):
        return started
    folder, env = started
    import torch
    from torch.profiler import ProfilerActivity, profile

    from companion.kernels import mla_decode as mla

    rows = []
    for seqs, context, splits in CASES:
        q = torch.randn(seqs, HEADS, mla.KV_LORA + 64, device="cuda", dtype=torch.bfloat16)
        cache = torch.randn(seqs, context, mla.KV_LORA + 64, device="cuda", dtype=torch.bfloat16)
        lengths = torch.full((seqs,), context, device="cuda", dtype=torch.int32)
        for _ in range(3):
            mla.mla_decode(q, cache, lengths, num_splits=splits)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(CALLS):
                mla.mla_decode(q, cache, lengths, num_splits=splits)
                torch.cuda.synchronize()
        events = [e for e in trace_events(prof) if e.get("cat") == "kernel"]
        by_name: dict[str, list[float]] = {}
        for e in events:
            by_name.setdefault(e["name"], []).append(e["dur"] * 1e-6)
        for name, durations in by_name.items():
            rows.append({"seqs": seqs, "context": context, "splits": splits, "kernel": name, "calls": len(durations),
                         "duration_s_median": statistics.median(durations),
                         **{c: v for c, v in provenance(env).items() if c in COLUMNS}})
            print(f"seqs={seqs} context={context} splits={splits} {name}: "
                  f"{statistics.median(durations) * 1e6:.2f} us x{len(durations)}", flush=True)
        del q, cache
    write_csv_atomic(folder / "mla_kernel_split.csv", COLUMNS, rows)
    return 0
