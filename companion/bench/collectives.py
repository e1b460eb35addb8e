"""`collectives`: measure NCCL collectives between the GPUs of one host and write `collectives_nccl.csv`.

    python -m companion.bench collectives --out DIR      # DIR defaults to $OUT
    python -m companion.bench collectives --list         # the planned cases, no GPU needed
    python -m companion.bench collectives --backend gloo --max-bytes 65536 --out DIR   # CPU smoke run

One process per GPU (torch.multiprocessing.spawn, a file:// rendezvous), bf16 tensors of fresh random values,
the sizes, ops and columns of `validation.collective_sweep`. Each op and size is checked once against a float32
reference, then timed in two launch modes: `eager` (back-to-back calls issued by the host between two CUDA
events) and `graph` (the same calls captured in one CUDA graph and replayed). A plain peer copy GPU0 -> GPU1
gives the raw link bandwidth (row `p2p_copy`), and `nvidia-smi topo -m` goes into `topology.txt`. NVLink
multicast stays off (`companion.bench.collective_plan`).

This module is the parent: topology, provenance, the spawned ranks and the table. The per-rank timing code
that runs on the GPUs is in `companion.bench.collective_workers`. torch is imported inside
functions only, so this module imports without it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from companion.bench.collective_plan import (
    BUDGET_S,
    DEADLINE_S,
    P2P_CALLS,
    SAFE_ENV,
    force_safe_env,
    now_utc,
)
from companion.bench.collective_workers import _worker, p2p_copy
from companion.bench.output import output_folder, report_failures
from validation.collective_sweep import (
    COLUMNS,
    DTYPE,
    ENV_COLUMNS,
    MAX_BYTES,
    MIN_BYTES,
    NCCL_CSV,
    OPS,
    P2P_BYTES,
    P2P_KERNEL,
    TOPOLOGY_NAME,
    build_rows,
    kernel_name,
    size_text,
    sizes,
)
from validation.measure_output import percentile, summarize, write_csv_atomic
from validation.suites import EAGER, GRAPH


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
        lines.append(f"{size_text(size):>9} {vals[0]:10.2f} {vals[1]:10.2f} {vals[2]:17.2f} {vals[3]:17.2f}")
    return "\n".join(lines)


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
        "date": now_utc(),
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
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


def run(args: argparse.Namespace) -> int:
    ops = tuple(args.op or OPS)
    planned = sizes(args.min_bytes, args.max_bytes)
    if args.list:
        for op in ops:
            for s in planned:
                print(kernel_name(args.backend, op), s, "modes:", EAGER, GRAPH if args.backend == "nccl" else "")
        return 0
    changed = force_safe_env()
    if changed:
        print(f"bench collectives: set {', '.join(f'{k}={SAFE_ENV[k]}' for k in changed)}", flush=True)
    out = output_folder(args.out, "bench collectives")
    if out is None:
        return 2
    try:
        import torch
    except ImportError:
        print("bench collectives: torch is not installed", file=sys.stderr)
        return 1
    cuda = args.backend == "nccl"
    if cuda and torch.cuda.device_count() < args.world_size:
        print(f"bench collectives: {torch.cuda.device_count()} CUDA GPUs, need {args.world_size}", file=sys.stderr)
        return 1
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
    path = out / NCCL_CSV
    write_csv_atomic(path, COLUMNS, rows)
    print(f"wrote {path} ({len(rows)} rows)", flush=True)
    for op in ops[1:]:
        print(format_table(rows, kernel_name(args.backend, op)))
    print(format_table(rows, kernel_name(args.backend, ops[0])))
    return report_failures("bench collectives", failures)

