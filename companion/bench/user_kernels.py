"""`user-kernels`: time the example user kernels (`validation.user_kernels.CASES`) on one CUDA GPU, graph-launched.

    python -m companion.bench user-kernels --out DIR      # writes DIR/user_kernels.csv

Each case is launched as `infersim kernel --triton` describes it (the same grid and `--arg` strings): tensors of
those shapes, floats random normal, integer tensors filled with their value. Its output is checked against float64
on the same fresh random inputs before it is timed. Timing: a CUDA graph of several launches, rotating over enough
copies of the tensors that they span twice the L2 (so every launch reads from HBM), warmed up, then CUDA-event
samples after a sleep kernel hides the host; the median per launch.
"""

from __future__ import annotations

import argparse
import math
import traceback
from pathlib import Path

from validation.user_kernels import CASES, COLUMNS, CSV_NAME, KERNELS_FILE, Case

# Relative error ||out - ref|| / ||ref|| allowed against float64, per kernel: fp32 elementwise and fp32 sums of
# fp16 values round at 2^-24 per step; bf16 matmul outputs at 2^-8; fp16 softmax outputs at 2^-11.
REL_ERR_MAX = {"scale_add": 1e-6, "row_sums": 1e-5, "matmul": 1e-2, "softmax": 1e-3}
MIN_LAUNCHES = 20  # launches per graph at least
MAX_COPIES = 64  # tensor copies rotated at most
MAX_BYTES = 40 * 2**30  # device memory the copies may take


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: $OUT)")


def _tensors(case: Case, torch) -> dict[str, object]:
    from compiled.triton_args import TensorArg, parse_args

    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "i32": torch.int32,
              "i64": torch.int64}
    out = {}
    for name, value in parse_args(case.args).items():
        if isinstance(value, TensorArg):
            dtype = dtypes[value.dtype]
            out[name] = (torch.randn(value.shape, device="cuda", dtype=dtype) if dtype.is_floating_point
                         else torch.full(value.shape, value.fill, device="cuda", dtype=dtype))
        else:
            out[name] = value
    return out


def _reference(kernel: str, t: dict, torch):
    """(the output tensor, its float64 reference)."""
    if kernel == "scale_add":
        return t["out"], t["alpha"] * t["x"].double() + t["y"].double()
    if kernel == "matmul":
        return t["c"], t["a"].double() @ t["b"].double()
    x = t["x"].double()[:, :t["cols"]]
    if kernel == "row_sums":
        return t["out"], x.sum(dim=1)
    return t["out"], torch.softmax(x, dim=1)


def _time(case: Case, fn, env: dict, torch) -> dict:
    from companion.bench.timing import bench, capture_graph, provenance
    from validation.measure_output import summarize

    first = _tensors(case, torch)
    launch = fn[case.grid]
    launch(**first, num_warps=case.num_warps, num_stages=case.num_stages)
    torch.cuda.synchronize()
    got, want = _reference(case.kernel, first, torch)
    rel_err = float((got.double() - want).norm() / want.norm())
    if not rel_err <= REL_ERR_MAX[case.kernel]:
        raise RuntimeError(f"relative error {rel_err:.2e} over {REL_ERR_MAX[case.kernel]:.0e}")
    footprint = sum(v.numel() * v.element_size() for v in first.values() if hasattr(v, "numel"))
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    copies = max(1, min(MAX_COPIES, math.ceil(2 * l2 / footprint), MAX_BYTES // footprint))
    sets = [first] + [_tensors(case, torch) for _ in range(copies - 1)]
    launches = copies * math.ceil(MIN_LAUNCHES / copies)

    def body():
        for i in range(launches):
            launch(**sets[i % copies], num_warps=case.num_warps, num_stages=case.num_stages)

    graph = capture_graph(body)
    times = bench(graph.replay, launches, hide_host_gaps=True)
    return {"kernel": case.kernel, "grid": case.grid_text, "args": " ".join(case.args), "num_warps": case.num_warps,
            "num_stages": case.num_stages, "launch_mode": "graph", **summarize(times),
            "launches_per_sample": launches, "rel_err": rel_err, **provenance(env)}


def run(args: argparse.Namespace) -> int:
    from companion.bench.output import report_failures, start_timing
    from compiled.companion_sources import load_source
    from validation.measure_output import write_csv_atomic

    started = start_timing(args.out, "user-kernels")
    if isinstance(started, int):
        return started
    folder, env = started
    import torch

    module = load_source(KERNELS_FILE, "_infersim_example_kernels")
    rows, failures = [], []
    for case in CASES:
        try:
            rows.append(_time(case, getattr(module, case.kernel), env, torch))
            print(f"{case.kernel} {case.grid_text} {' '.join(case.args)}: "
                  f"{rows[-1]['time_s_median'] * 1e6:.1f} us", flush=True)
        except Exception as e:
            traceback.print_exc()
            failures.append(f"{case.kernel} {case.grid_text} {' '.join(case.args)}: {e}")
        torch.cuda.empty_cache()
    write_csv_atomic(folder / CSV_NAME, COLUMNS, rows)
    return report_failures("user-kernels", failures)
