"""Measure NCCL collectives between the GPUs of one host and write `collectives_nccl.csv`.

    python -m validation.measure_collectives --out DIR          # DIR defaults to $OUT
    python -m validation.measure_collectives --list             # the planned cases, no GPU needed
    python -m validation.measure_collectives --backend gloo --max-bytes 65536 --out DIR   # CPU smoke run

One process per GPU (torch.multiprocessing.spawn, a file:// rendezvous), bf16 tensors of fresh
random values, every power of two from 4 KiB to 1 GiB, for all_reduce (size = the tensor each
rank holds), all_gather_into_tensor (size = the gathered output) and reduce_scatter_tensor
(size = the input). Each op and size is checked once against a float32 reference, then timed in
two launch modes: `eager` (back-to-back calls issued by the host between two CUDA events) and
`graph` (the same calls captured in one CUDA graph and replayed). Rank 0's times are reported;
the largest median over the ranks is recorded beside them. A plain peer copy GPU0 -> GPU1 gives
the raw link bandwidth (row `p2p_copy`), and `nvidia-smi topo -m` goes into `topology.txt`.

NVLink multicast stays off (the workplace's KINDS.md): NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 are forced in this process's
environment before anything starts, so every child process and nvidia-smi call inherits them.

This module holds the plan, the rows, the provenance and the table; the per-rank timing code that
runs on the GPUs is in `validation.collective_workers`. torch is imported inside functions only, so
`import validation.measure_collectives` works without it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from validation.measure import EAGER, GRAPH, output_folder, percentile, summarize, write_csv_atomic
from validation.measure_output import report_failures

CSV_NAME = "collectives_nccl.csv"
TOPOLOGY_NAME = "topology.txt"

# Never enable NVLink multicast on these machines (KINDS.md): forced before anything starts.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
ENV_COLUMNS = ("NCCL_NVLS_ENABLE", "NCCL_ALGO", "NCCL_PROTO")

OPS = ("all_reduce", "all_gather", "reduce_scatter")
DTYPE = "bfloat16"
ELEMENT_BYTES = 2
MIN_BYTES = 1 << 12  # 4 KiB
MAX_BYTES = 1 << 30  # 1 GiB
P2P_KERNEL = "p2p_copy"
P2P_BYTES = 1 << 30

# Timing policy. Below LARGE_BYTES: calls per sample chosen so one sample lasts about
# TARGET_SAMPLE_S, within [20, 200] eager calls or [10, 50] graph-captured calls; SAMPLES samples
# after WARM_SAMPLES untimed ones. From LARGE_BYTES up: LARGE_CALLS calls per sample, LARGE_SAMPLES.
TARGET_SAMPLE_S = 2e-3
EAGER_CALLS = (20, 200)
GRAPH_CALLS = (10, 50)
SAMPLES = 30
WARM_SAMPLES = 3
LARGE_BYTES = 64 << 20
LARGE_CALLS = 5
LARGE_SAMPLES = 20
LARGE_WARM_SAMPLES = 2
P2P_CALLS = 5
BUDGET_S = 270.0  # stop starting new cases after this long (the brief asks for ~4 minutes)
DEADLINE_S = 330.0  # the workers are terminated after this long; their finished cases are kept

COLUMNS = (
    "kernel",
    "size_bytes",
    "world_size",
    "dtype",
    "launch_mode",
    "time_s_median",
    "time_s_p10",
    "time_s_p90",
    "time_s_median_max_rank",
    "repeats",
    "ops_per_sample",
    "algbw_bytes_per_s",
    "busbw_bytes_per_s",
    "gpu_name",
    "driver",
    "torch",
    "triton",
    "cuda",
    "nccl",
    "date",
    *ENV_COLUMNS,
)


def sizes(min_bytes: int = MIN_BYTES, max_bytes: int = MAX_BYTES) -> list[int]:
    """Every power of two from min_bytes to max_bytes inclusive (both rounded to powers of two)."""
    lo, hi = (max(1, int(x)).bit_length() - 1 for x in (min_bytes, max_bytes))
    return [1 << k for k in range(lo, hi + 1)]


def busbw_factor(op: str, world_size: int) -> float:
    """nccl-tests' bus-bandwidth factor: all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n."""
    n = world_size
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    if op == P2P_KERNEL:
        return 1.0
    raise ValueError(f"unknown op {op!r}")


def plan(size_bytes: int, t_call_s: float, mode: str) -> tuple[int, int, int]:
    """(calls per sample, timed samples, warm-up samples) of one case, from a per-call estimate."""
    if size_bytes >= LARGE_BYTES:
        return LARGE_CALLS, LARGE_SAMPLES, LARGE_WARM_SAMPLES
    lo, hi = EAGER_CALLS if mode == EAGER else GRAPH_CALLS
    calls = min(hi, max(lo, math.ceil(TARGET_SAMPLE_S / max(t_call_s, 1e-9))))
    return calls, SAMPLES, WARM_SAMPLES


def kernel_name(backend: str, op: str) -> str:
    return f"{backend}_{op}"


def force_safe_env(environ: dict | None = None) -> list[str]:
    """Set the multicast-off variables; returns the names that were missing or different."""
    environ = os.environ if environ is None else environ
    changed = [k for k, v in SAFE_ENV.items() if environ.get(k) != v]
    for k, v in SAFE_ENV.items():
        environ[k] = v
    return changed


def _now_utc() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------------------- rows and tables


def build_rows(rank_results: Sequence[Sequence[dict]], world_size: int, backend: str, prov: dict) -> list[dict]:
    """One CSV row per timed (op, size, mode) of rank 0, with the largest median over the ranks."""
    by_key: list[dict[tuple, dict]] = [
        {(r["op"], r["size_bytes"], r["mode"]): r for r in res if r.get("times_s")} for res in rank_results
    ]
    rows = []
    for key, rec in by_key[0].items():
        op, size, mode = key
        stats = summarize(rec["times_s"])
        medians = [percentile(d[key]["times_s"], 50) for d in by_key if key in d]
        t = stats["time_s_median"]
        algbw = size / t
        rows.append(
            {
                "kernel": kernel_name(backend, op),
                "size_bytes": size,
                "world_size": world_size,
                "dtype": DTYPE,
                "launch_mode": mode,
                **stats,
                "time_s_median_max_rank": max(medians) if len(medians) == len(by_key) else None,
                "ops_per_sample": rec["ops_per_sample"],
                "algbw_bytes_per_s": algbw,
                "busbw_bytes_per_s": algbw * busbw_factor(op, world_size),
                **prov,
                "date": rec["date"],
            }
        )
    return rows


def format_table(rows: Sequence[dict], kernel: str) -> str:
    """size, eager and graph medians (us) and their bus bandwidths (GB/s) of one kernel."""
    cell = {(int(r["size_bytes"]), r["launch_mode"]): r for r in rows if r["kernel"] == kernel}
    lines = [
        f"== {kernel}",
        f"{'size':>9} {'eager_us':>10} {'graph_us':>10} {'busbw_eager_GB/s':>17} {'busbw_graph_GB/s':>17}",
    ]
    for size in sorted({s for s, _ in cell}):
        vals = []
        for fmt_key, scale in (("time_s_median", 1e6), ("busbw_bytes_per_s", 1e-9)):
            for mode in (EAGER, GRAPH):
                r = cell.get((size, mode))
                vals.append(float(r[fmt_key]) * scale if r else float("nan"))
        lines.append(f"{_size_text(size):>9} {vals[0]:10.2f} {vals[1]:10.2f} {vals[2]:17.2f} {vals[3]:17.2f}")
    return "\n".join(lines)


def _size_text(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


# ------------------------------------------------------------------------- the parent's own work


def _cmd_text(argv: Sequence[str]) -> str:
    try:
        res = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return f"$ {' '.join(argv)}\n(failed: {e})\n"
    return f"$ {' '.join(argv)}  (exit {res.returncode})\n{res.stdout}{res.stderr}"


SMI_CLOCKS = (
    "nvidia-smi",
    "--query-gpu=index,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw",
    "--format=csv",
)


def topology_text() -> str:
    """nvidia-smi's link matrix, the NVLink status and the peer-to-peer capability matrices."""
    return "\n".join(
        _cmd_text(c)
        for c in (
            ("nvidia-smi", "topo", "-m"),
            ("nvidia-smi", "nvlink", "--status"),
            ("nvidia-smi", "topo", "-p2p", "n"),
        )
    )


def provenance(backend: str) -> dict[str, str]:
    """Columns shared by every row: GPU, driver, software versions and the NCCL environment."""
    import torch

    prov = {"torch": torch.__version__, "cuda": torch.version.cuda or "none"}
    try:
        import triton

        prov["triton"] = triton.__version__
    except ImportError:
        prov["triton"] = "none"
    try:
        prov["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
    except Exception:
        prov["nccl"] = "none"
    if torch.cuda.is_available():
        prov["gpu_name"] = torch.cuda.get_device_name(0)
    else:
        prov["gpu_name"] = "cpu"
    smi = _cmd_text(("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")).splitlines()
    prov["driver"] = smi[1].strip() if len(smi) > 1 and "exit 0" in smi[0] else "none"
    for k in ENV_COLUMNS:
        prov[k] = os.environ.get(k, "")
    return prov


def p2p_row(times: Sequence[float], prov: dict) -> dict:
    stats = summarize(times)
    bw = P2P_BYTES / stats["time_s_median"]
    return {
        "kernel": P2P_KERNEL,
        "size_bytes": P2P_BYTES,
        "world_size": 2,
        "dtype": DTYPE,
        "launch_mode": EAGER,
        **stats,
        "time_s_median_max_rank": None,
        "ops_per_sample": P2P_CALLS,
        "algbw_bytes_per_s": bw,
        "busbw_bytes_per_s": bw,
        **prov,
        "date": _now_utc(),
    }


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m validation.measure_collectives", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None, help="output folder (default: $OUT)")
    p.add_argument("--op", action="append", choices=OPS, help="repeatable; default: all three")
    p.add_argument("--min-bytes", type=int, default=MIN_BYTES)
    p.add_argument("--max-bytes", type=int, default=MAX_BYTES)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl", help="gloo: CPU smoke run, eager only")
    p.add_argument("--budget-s", type=float, default=BUDGET_S, help="start no new case after this many seconds")
    p.add_argument("--deadline-s", type=float, default=DEADLINE_S, help="terminate the workers after this long")
    p.add_argument("--no-p2p", action="store_true", help="skip the peer copy")
    p.add_argument("--list", action="store_true", help="print the planned cases; no GPU")
    return p


def run_ranks(worker, cfg: dict, world_size: int, deadline_s: float, tmp: str, what: str
              ) -> tuple[list[list[dict]], list[str]]:
    """Spawn one process per rank, stop them past `deadline_s`, and read each rank's rows from `tmp`/rank<r>.json."""
    import torch.multiprocessing as mp

    failures: list[str] = []
    t0 = time.monotonic()
    try:
        ctx = mp.spawn(worker, args=(cfg,), nprocs=world_size, join=False)
        while not ctx.join(timeout=5):
            if time.monotonic() - t0 > deadline_s:
                for proc in ctx.processes:  # only the workers this call started, by their handles
                    if proc.is_alive():
                        proc.terminate()
                failures.append(f"worker processes: still running after {deadline_s:.0f} s, terminated")
                break
    except Exception as e:
        traceback.print_exc()
        failures.append(f"worker processes: {type(e).__name__}: {e}")
    print(f"{what} took {time.monotonic() - t0:.1f} s", flush=True)
    results = []
    for r in range(world_size):
        path = Path(tmp) / f"rank{r}.json"
        results.append(json.loads(path.read_text()) if path.exists() else [])
    return results, failures


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    ops = tuple(args.op or OPS)
    planned = sizes(args.min_bytes, args.max_bytes)
    if args.list:
        for op in ops:
            for s in planned:
                print(kernel_name(args.backend, op), s, "modes:", EAGER, GRAPH if args.backend == "nccl" else "")
        return 0
    changed = force_safe_env()
    if changed:
        print(f"measure_collectives: set {', '.join(f'{k}={SAFE_ENV[k]}' for k in changed)}", flush=True)
    out = output_folder(args.out, "measure_collectives")
    if out is None:
        return 2
    try:
        import torch
    except ImportError:
        print("measure_collectives: torch is not installed", file=sys.stderr)
        return 1
    cuda = args.backend == "nccl"
    if cuda and torch.cuda.device_count() < args.world_size:
        print(f"measure_collectives: {torch.cuda.device_count()} CUDA GPUs, need {args.world_size}", file=sys.stderr)
        return 1
    # imported here, not at the top: the workers import this module's plan and constants
    from validation.collective_workers import _worker, p2p_copy

    topo = topology_text() if cuda else "(gloo run: no topology)\n"
    if cuda:
        print(_cmd_text(SMI_CLOCKS), flush=True)
    (out / TOPOLOGY_NAME).write_text(topo)
    print(topo, flush=True)
    print("env:", {k: os.environ.get(k, "") for k in (*SAFE_ENV, *ENV_COLUMNS, "NCCL_DEBUG")}, flush=True)

    failures: list[str] = []
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="collectives.") as tmp:
        cfg = {
            "world_size": args.world_size,
            "backend": args.backend,
            "init_method": "file://" + str(Path(tmp) / "rendezvous"),
            "tmp": tmp,
            "ops": ops,
            "sizes": planned,
            "budget_s": args.budget_s,
        }
        results, spawn_failures = run_ranks(_worker, cfg, args.world_size, args.deadline_s, tmp, "collectives")
        failures += spawn_failures
    failures += [f"{r['op']} {r['size_bytes']} {r['mode']}: {r['error']}" for r in results[0] if r.get("error")]
    prov = provenance(args.backend)
    print("provenance:", prov, flush=True)
    rows = build_rows(results, args.world_size, args.backend, prov)
    if cuda and not args.no_p2p:
        try:
            print(f"peer access 0->1: {torch.cuda.can_device_access_peer(0, 1)}", flush=True)
            times = p2p_copy(0, 1)
            rows.append(p2p_row(times, prov))
            back = p2p_copy(1, 0)
            print(
                f"p2p_copy 1 GiB: GPU0->GPU1 {P2P_BYTES / percentile(times, 50) / 1e9:.1f} GB/s, "
                f"GPU1->GPU0 {P2P_BYTES / percentile(back, 50) / 1e9:.1f} GB/s (medians, 10^9 B/s)",
                flush=True,
            )
        except Exception as e:
            traceback.print_exc()
            failures.append(f"p2p_copy: {type(e).__name__}: {e}")
    if cuda:
        print(_cmd_text(SMI_CLOCKS), flush=True)
    path = out / CSV_NAME
    write_csv_atomic(path, COLUMNS, rows)
    print(f"wrote {path} ({len(rows)} rows)", flush=True)
    for op in ops[1:]:
        print(format_table(rows, kernel_name(args.backend, op)))
    print(format_table(rows, kernel_name(args.backend, ops[0])))
    return report_failures("measure_collectives", failures)


if __name__ == "__main__":
    sys.exit(main())
