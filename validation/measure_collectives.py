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

torch is imported inside functions only, so `import validation.measure_collectives` works without it.
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

from validation.measure import EAGER, GRAPH, percentile, summarize, write_csv_atomic

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
ESTIMATE_CALLS = 5
GRAPH_WARMUP_CALLS = 3  # eager calls on a side stream before capture (PyTorch's recipe)
# Graph samples queue a sleep kernel first so the host has issued the replay before the GPU gets
# there (host gaps hidden): 200k cycles is ~100 us at 1.98 GHz, ~0.6 ms at the idle clock.
SLEEP_CYCLES = 200_000
# all_reduce runs in place: after k calls both ranks hold 2^(k-1) x the first sum. The timing
# buffer is the (random) check input scaled by 2^-100, restored before each sample, so the at most
# 200 doublings of one sample stay finite; scaling by a power of two leaves the mantissas random.
ALLREDUCE_TIMING_SCALE_EXP = -100
REL_TOL = 1e-2
P2P_CALLS = 5
P2P_SAMPLES = 20
BUDGET_S = 270.0  # stop starting new cases after this long (the brief asks for ~4 minutes)
DEADLINE_S = 330.0  # the workers are terminated after this long; their finished cases are kept
PG_TIMEOUT_S = 120

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


def _write_json_atomic(path: Path, obj: object) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


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


# ----------------------------------------------------------------------------------- the workers


class _Case:
    """Buffers, the call and the check of one (op, size) on one rank."""

    def __init__(self, op: str, size_bytes: int, rank: int, world_size: int, device, seed: int):
        import torch

        self.torch = torch
        self.op, self.rank, self.ws, self.dev = op, rank, world_size, device
        self.n = size_bytes // ELEMENT_BYTES
        if self.n % world_size:
            raise ValueError(f"{size_bytes} B is not divisible into {world_size} bf16 chunks")
        self.m = self.n // world_size
        self.seeds = [seed + q for q in range(world_size)]
        own = self.m if op == "all_gather" else self.n
        self.check_in = self._randn(own, self.seeds[rank])
        self._ref = None
        if op == "all_reduce":
            self.inp = self.check_in.clone()
            self.out = self.inp
            self.pristine = self.check_in * 2.0**ALLREDUCE_TIMING_SCALE_EXP
        elif op == "all_gather":
            self.inp = self.check_in
            self.out = torch.empty(self.n, device=device, dtype=torch.bfloat16)
        elif op == "reduce_scatter":
            self.inp = self.check_in
            self.out = torch.empty(self.m, device=device, dtype=torch.bfloat16)
        else:
            raise ValueError(f"unknown op {op!r}")

    def _randn(self, n: int, seed: int):
        g = self.torch.Generator(device=self.dev)
        g.manual_seed(seed)
        return self.torch.randn(n, generator=g, device=self.dev, dtype=self.torch.bfloat16)

    def call(self) -> None:
        import torch.distributed as dist

        if self.op == "all_reduce":
            dist.all_reduce(self.inp)
        elif self.op == "all_gather":
            dist.all_gather_into_tensor(self.out, self.inp)
        else:
            dist.reduce_scatter_tensor(self.out, self.inp)

    def load_check_inputs(self) -> None:
        """Put the check inputs in place and poison a separate output with NaN."""
        if self.op == "all_reduce":
            self.inp.copy_(self.check_in)
        else:
            self.out.fill_(float("nan"))

    def reset_for_timing(self) -> None:
        if self.op == "all_reduce":
            self.inp.copy_(self.pristine)

    def ref(self):
        """Expected output: float32 sums of every rank's input (regenerated from its seed), or the bf16 gather."""
        if self._ref is None:
            torch = self.torch
            if self.op == "all_gather":
                self._ref = torch.cat([self._randn(self.m, s) for s in self.seeds])
            else:
                ref = torch.zeros(self.m if self.op == "reduce_scatter" else self.n, device=self.dev)
                for s in self.seeds:
                    x = self._randn(self.n, s)
                    if self.op == "reduce_scatter":
                        x = x[self.rank * self.m : (self.rank + 1) * self.m]
                    ref += x.float()
                    del x
                self._ref = ref
        return self._ref

    def verify(self, n_calls: int) -> tuple[bool, float]:
        """Output after n_calls calls from the check inputs against the reference: (ok, rel. error)."""
        torch = self.torch
        ref = self.ref()
        if self.op == "all_gather":
            ok = bool(torch.equal(self.out, ref))
            err = float((self.out.float() - ref.float()).norm() / ref.float().norm())
            return ok, err
        got = self.out.float()
        if self.op == "all_reduce" and n_calls > 1:
            got /= 2.0 ** (n_calls - 1)  # in place sums: 2^(k-1) x the first, exactly (powers of two)
        ok = bool(torch.isfinite(got).all()) and bool(torch.allclose(got, ref, rtol=REL_TOL, atol=1e-12))
        err = float((got - ref).norm() / ref.norm())
        return ok, err


class _Timer:
    """Per-sample seconds: CUDA events on the current stream, or the host clock on the CPU."""

    def __init__(self, cuda: bool):
        import torch

        self.torch, self.cuda = torch, cuda

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def run(self, body, reset, align, n_warm: int, n_samples: int, hide_host: bool) -> list[float]:
        import torch.distributed as dist

        torch = self.torch
        times = []
        for i in range(n_warm + n_samples):
            reset()
            dist.barrier()
            self.sync()
            if self.cuda:
                if hide_host:
                    torch.cuda._sleep(SLEEP_CYCLES)
                align()  # a tiny all-reduce: both GPUs leave it together, then the events start
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                body()
                end.record()
                end.synchronize()
                t = start.elapsed_time(end) * 1e-3  # elapsed_time is in ms
            else:
                align()
                t0 = time.perf_counter()
                body()
                t = time.perf_counter() - t0
            if i >= n_warm:
                times.append(t)
        return times


def _agree_max(value: float, device) -> float:
    """The largest value over the ranks (so every rank plans the same number of calls)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _capture(body, cuda_graph_mode: str):
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(GRAPH_WARMUP_CALLS):
            body(1)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode=cuda_graph_mode):
        body(None)
    torch.cuda.synchronize()
    return graph


def _measure_case(case: _Case, timer: _Timer, align, device, modes: Sequence[str]) -> list[dict]:
    """Check the op once, then time it in each mode; returns one record per mode (or an error record)."""
    size = case.n * ELEMENT_BYTES
    records = []
    base = {"op": case.op, "size_bytes": size}
    case.load_check_inputs()
    case.call()
    timer.sync()
    ok, err = case.verify(1)
    if _agree_max(0.0 if ok else 1.0, device) > 0:
        return [{**base, "mode": EAGER, "error": f"check failed on some rank (here ok={ok}, rel err {err:.3e})"}]

    def many(k: int) -> None:
        for _ in range(k):
            case.call()

    # per-call estimate, the same on every rank
    est = timer.run(lambda: many(ESTIMATE_CALLS), case.reset_for_timing, align, 1, 2, hide_host=False)
    t_est = _agree_max(min(est) / ESTIMATE_CALLS, device)

    for mode in modes:
        calls, n_samples, n_warm = plan(size, t_est, mode)
        rec = {**base, "mode": mode, "ops_per_sample": calls, "check_rel_err": err, "t_est_s": t_est}
        if mode == EAGER:
            times = timer.run(lambda c=calls: many(c), case.reset_for_timing, align, n_warm, n_samples, False)
        else:
            graph = _capture(lambda k, c=calls: many(c if k is None else k), "thread_local")
            try:
                case.load_check_inputs()  # the graph must compute the op too
                graph.replay()
                timer.sync()
                g_ok, g_err = case.verify(calls)
                if _agree_max(0.0 if g_ok else 1.0, device) > 0:
                    records.append({**rec, "error": f"graph replay check failed (here ok={g_ok}, {g_err:.3e})"})
                    continue
                rec["graph_check_rel_err"] = g_err
                times = timer.run(graph.replay, case.reset_for_timing, align, n_warm, n_samples, True)
            finally:
                del graph
                timer.sync()
        rec["times_s"] = [t / calls for t in times]
        rec["date"] = _now_utc()
        records.append(rec)
    return records


def _worker(rank: int, cfg: dict) -> None:
    """One rank: init the process group, run every case, write its records to cfg['tmp']/rank<r>.json."""
    import warnings

    import torch
    import torch.distributed as dist

    warnings.filterwarnings("ignore", category=FutureWarning)  # newer torch renames the *_tensor ops
    for k, v in SAFE_ENV.items():
        if os.environ.get(k) != v:
            raise RuntimeError(f"{k} must be {v} in every process (multicast stays off)")
    ws, backend = cfg["world_size"], cfg["backend"]
    cuda = backend == "nccl"
    kwargs = {"timeout": datetime.timedelta(seconds=PG_TIMEOUT_S)}
    if cuda:
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        kwargs["device_id"] = device
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, init_method=cfg["init_method"], rank=rank, world_size=ws, **kwargs)
    out_path = Path(cfg["tmp"]) / f"rank{rank}.json"
    records: list[dict] = []
    _write_json_atomic(out_path, records)
    timer = _Timer(cuda)
    align_t = torch.ones(1, device=device)

    def align() -> None:
        dist.all_reduce(align_t, op=dist.ReduceOp.MAX)  # MAX: the value stays 1 however often it runs

    modes = (EAGER, GRAPH) if cuda else (EAGER,)
    if cuda:
        _warm_clocks(device)
    t0 = time.monotonic()
    try:
        for i_op, op in enumerate(cfg["ops"]):
            for i_size, size in enumerate(cfg["sizes"]):
                over = time.monotonic() - t0 > cfg["budget_s"]
                if _agree_max(1.0 if over else 0.0, device) > 0:
                    if rank == 0:
                        print(f"budget of {cfg['budget_s']:.0f} s spent: skipping {op} from {size} B", flush=True)
                    break
                seed = 1_000_003 * (i_op + 1) + 1009 * i_size
                try:
                    case = _Case(op, size, rank, ws, device, seed)
                    recs = _measure_case(case, timer, align, device, modes)
                except Exception as e:  # symmetric failures (e.g. a capture) must not stop the rest
                    traceback.print_exc()
                    recs = [{"op": op, "size_bytes": size, "mode": "?", "error": f"{type(e).__name__}: {e}"}]
                finally:
                    case = None
                    if cuda:
                        torch.cuda.synchronize()
                        torch.cuda.empty_cache()
                records += recs
                _write_json_atomic(out_path, records)
                if rank == 0:
                    for r in recs:
                        if r.get("times_s"):
                            t = percentile(r["times_s"], 50)
                            print(
                                f"{op:14} {_size_text(size):>9} {r['mode']:5}: {t * 1e6:10.2f} us "
                                f"({r['ops_per_sample']} calls x {len(r['times_s'])} samples, "
                                f"check rel err {r['check_rel_err']:.1e})",
                                flush=True,
                            )
                        else:
                            print(f"{op:14} {_size_text(size):>9} {r['mode']:5}: FAILED {r.get('error')}", flush=True)
        # The first case again, for the log only: how far apart two timings of the same case are.
        op, size = cfg["ops"][0], cfg["sizes"][0]
        case = _Case(op, size, rank, ws, device, 7)
        for r in _measure_case(case, timer, align, device, modes):
            if rank == 0 and r.get("times_s"):
                t = percentile(r["times_s"], 50)
                print(f"repeat {op} {_size_text(size)} {r['mode']}: {t * 1e6:.2f} us (not in the CSV)", flush=True)
        case = None
    finally:
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()


def _warm_clocks(device, seconds: float = 0.3) -> None:
    """bf16 matmuls for about `seconds`, so the first case does not start at the idle SM clock."""
    import torch

    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize(device)


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


def p2p_copy(src_dev: int, dst_dev: int, size_bytes: int = P2P_BYTES) -> list[float]:
    """Seconds per `dst.copy_(src)` of size_bytes, src on src_dev and dst on dst_dev, checked exact once."""
    import torch

    n = size_bytes // ELEMENT_BYTES
    src = torch.randn(n, device=f"cuda:{src_dev}", dtype=torch.bfloat16)
    dst = torch.full((n,), float("nan"), device=f"cuda:{dst_dev}", dtype=torch.bfloat16)
    dst.copy_(src)
    for d in (src_dev, dst_dev):
        torch.cuda.synchronize(d)
    if not torch.equal(dst.to(f"cuda:{src_dev}"), src):
        raise RuntimeError(f"peer copy {src_dev} -> {dst_dev} is not exact")
    stream = torch.cuda.current_stream(src_dev)  # torch issues a cross-device copy on the source's stream
    times = []
    with torch.cuda.device(src_dev):
        for i in range(WARM_SAMPLES + P2P_SAMPLES):
            for d in (src_dev, dst_dev):
                torch.cuda.synchronize(d)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(stream)
            for _ in range(P2P_CALLS):
                dst.copy_(src)
            end.record(stream)
            end.synchronize()
            if i >= WARM_SAMPLES:
                times.append(start.elapsed_time(end) * 1e-3 / P2P_CALLS)
    for d in (src_dev, dst_dev):
        torch.cuda.synchronize(d)
    return times


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
    out = args.out if args.out is not None else (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    if out is None:
        print("measure_collectives: no output folder: pass --out DIR or set $OUT", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        print("measure_collectives: torch is not installed", file=sys.stderr)
        return 1
    cuda = args.backend == "nccl"
    if cuda and torch.cuda.device_count() < args.world_size:
        print(f"measure_collectives: {torch.cuda.device_count()} CUDA GPUs, need {args.world_size}", file=sys.stderr)
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
        t0 = time.monotonic()
        try:
            ctx = mp.spawn(_worker, args=(cfg,), nprocs=args.world_size, join=False)
            while not ctx.join(timeout=5):
                if time.monotonic() - t0 > args.deadline_s:
                    for proc in ctx.processes:  # only the workers this call started, by their handles
                        if proc.is_alive():
                            proc.terminate()
                    failures.append(f"worker processes: still running after {args.deadline_s:.0f} s, terminated")
                    break
        except Exception as e:
            traceback.print_exc()
            failures.append(f"worker processes: {type(e).__name__}: {e}")
        print(f"collectives took {time.monotonic() - t0:.1f} s", flush=True)
        results = []
        for r in range(args.world_size):
            path = Path(tmp) / f"rank{r}.json"
            results.append(json.loads(path.read_text()) if path.exists() else [])
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
    if failures:
        print(f"measure_collectives: {len(failures)} failure(s):", file=sys.stderr)
        for f in failures:
            print("  " + f, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
