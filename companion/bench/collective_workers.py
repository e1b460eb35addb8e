"""The per-rank timing code of the `collectives` and `quickreduce` commands, which runs on the GPUs.

torch is imported inside functions only.
"""

from __future__ import annotations

import datetime
import json
import os
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from companion.bench.collective_plan import P2P_CALLS, SAFE_ENV, WARM_SAMPLES, now_utc, plan
from hwmodels.output_files import write_text_atomic
from validation.collective_sweep import ELEMENT_BYTES, P2P_BYTES, size_text
from validation.measure_output import percentile
from validation.suites import EAGER, GRAPH

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
P2P_SAMPLES = 20
PG_TIMEOUT_S = 120


def _write_json_atomic(path: Path, obj: object) -> None:
    write_text_atomic(path, json.dumps(obj))


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
        rec["date"] = now_utc()
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
                                f"{op:14} {size_text(size):>9} {r['mode']:5}: {t * 1e6:10.2f} us "
                                f"({r['ops_per_sample']} calls x {len(r['times_s'])} samples, "
                                f"check rel err {r['check_rel_err']:.1e})",
                                flush=True,
                            )
                        else:
                            print(f"{op:14} {size_text(size):>9} {r['mode']:5}: FAILED {r.get('error')}", flush=True)
        # The first case again, for the log only: how far apart two timings of the same case are.
        op, size = cfg["ops"][0], cfg["sizes"][0]
        case = _Case(op, size, rank, ws, device, 7)
        for r in _measure_case(case, timer, align, device, modes):
            if rank == 0 and r.get("times_s"):
                t = percentile(r["times_s"], 50)
                print(f"repeat {op} {size_text(size)} {r['mode']}: {t * 1e6:.2f} us (not in the CSV)", flush=True)
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
