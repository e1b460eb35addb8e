"""`quickreduce`: measure the quantized two-shot all-reduce (`companion.kernels.allreduce`) beside NCCL.

    python -m companion.bench quickreduce --out DIR   # DIR defaults to $OUT
    python -m companion.bench quickreduce --list      # the planned cases, no GPU needed

Writes `collectives_quickreduce.csv`. One process per GPU of one host, as the `collectives` command (whose plan,
rows, provenance and per-rank timing code this reuses), bf16 tensors of fresh random values, every power of two
from 4 KiB to 1 GiB. The kernels cast bf16 to fp16 before encoding (vLLM's default) and write bf16. For each size:
NCCL's all_reduce, then the all-reduce through every codec, each checked once on fresh inputs before timing
(codecs: every value within `allreduce.error_bound` of the NCCL fp32 sum; NCCL: rtol 1e-2), then timed in `graph`
mode only: `ops_per_sample` calls captured in one CUDA graph, replayed behind a sleep kernel, CUDA events, median
of the samples. The quantized path works out of place (out != x), so repeated calls compute the same sum.

Before any cross-rank call every worker compiles and checks each codec on its own GPU with N ranks emulated
on local buffers, so that no rank spins on flags while its peer compiles. NVLink multicast stays off
(`collective_plan.SAFE_ENV` is forced here and checked in every worker); no multimem op is used.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from companion.bench.collective_plan import SAFE_ENV, force_safe_env
from companion.bench.collective_workers import (
    PG_TIMEOUT_S,
    _agree_max,
    _Case,
    _measure_case,
    _Timer,
    _warm_clocks,
    _write_json_atomic,
)
from companion.bench.collectives import SMI_CLOCKS, _cmd_text, provenance, run_ranks
from companion.bench.output import output_folder, report_failures
from validation.collective_sweep import (
    COLUMNS,
    ELEMENT_BYTES,
    MAX_BYTES,
    MIN_BYTES,
    QUICKREDUCE_CSV,
    build_rows,
    size_text,
    sizes,
)
from validation.measure_output import percentile, write_csv_atomic
from validation.suites import GRAPH
from workloads.codecs import Codec

CODECS = tuple(c.value for c in Codec)  # the kernels' codecs too (the kernel module imports triton)
NCCL = "nccl"
MAX_PROGRAMS = 1024
NUM_WARPS = 4
SELF_CHECK_VALUES = 9 * Codec.FP.tile_values  # the local compile-and-check input (a multiple of 16)
BUDGET_S = 200.0  # start no new size after this long (a run of about 4 minutes in all)
DEADLINE_S = 280.0  # the workers are terminated after this long; their finished cases are kept


def backend_name(codec: str) -> str:
    return NCCL if codec == NCCL else f"quickreduce_{codec}"


def wire_bytes(size_bytes: int, codec: str, world: int) -> int:
    """Bytes one rank sends over the links per call: (N-1)/N of the tiles in each of the two shots."""
    return 2 * (world - 1) * Codec.parse(codec).wire_bytes(size_bytes // ELEMENT_BYTES) // world


class _QRCase:
    """Buffers, call and check of one all-reduce through a codec, duck-typed as `collective_workers._Case`."""

    op = "all_reduce"

    def __init__(self, comm, codec: str, size_bytes: int, rank: int, world: int, device, seed: int):
        import torch

        self.torch, self.comm, self.codec, self.world = torch, comm, codec, world
        self.n = size_bytes // ELEMENT_BYTES
        gen = torch.Generator(device=device)
        gen.manual_seed(seed + rank)
        self.inp = torch.randn(self.n, generator=gen, device=device, dtype=torch.bfloat16)
        self.out = torch.empty_like(self.inp)
        self._check = None

    def call(self) -> None:
        self.comm(self.inp, self.codec, self.out)

    def load_check_inputs(self) -> None:
        self.out.fill_(float("nan"))

    def reset_for_timing(self) -> None:
        """Nothing: the input is never overwritten."""

    def verify(self, n_calls: int) -> tuple[bool, float]:
        """(every value within the codec's bound of NCCL's fp32 sum and no wait timed out, relative error)."""
        import torch.distributed as dist

        from companion.kernels import allreduce as ar

        torch = self.torch
        if self._check is None:
            ref, abs_sum, absmax = self.inp.float(), self.inp.float().abs(), ar.block_absmax(self.inp).float()
            for t in (ref, abs_sum, absmax):
                dist.all_reduce(t)  # NCCL, fp32
            ref = ref.double()
            bound = ar.error_bound(abs_sum.double(), absmax.double(), ref, self.codec, torch.bfloat16, self.world)
            self._check = ref, bound + 2.0**-22 * ref.abs()  # + NCCL's fp32 rounding of the sum
        ref, bound = self._check
        err = (self.out.double() - ref).abs()
        ok = bool(torch.isfinite(self.out).all()) and bool((err <= bound).all())
        ok = ok and int(self.comm.state.err.item()) == 0
        return ok, float(err.norm() / ref.norm())


def _self_check(codec: str, world: int, device, cfg: dict) -> str | None:
    """Compile the codec's kernels and run them on N emulated ranks on this GPU; an error line, or None."""
    import torch

    from companion.kernels import allreduce as ar

    gen = torch.Generator(device=device)
    gen.manual_seed(99)
    xs = [torch.randn(SELF_CHECK_VALUES, generator=gen, device=device, dtype=torch.bfloat16) for _ in range(world)]
    em = ar.Emulation(world, SELF_CHECK_VALUES, device, cfg["max_programs"], cfg["num_warps"])
    outs = em.run(xs, codec)
    ref = ar.all_reduce_ref(xs)
    abs_sum = torch.stack([x.double().abs().cpu() for x in xs]).sum(0)
    absmax = torch.stack([ar.block_absmax(x).cpu() for x in xs]).sum(0)
    bound = ar.error_bound(abs_sum, absmax, ref, codec, torch.bfloat16, world)
    for r, out in enumerate(outs):
        if not bool(((out.cpu().double() - ref).abs() <= bound).all()) or int(em.states[r].err.item()):
            return f"{codec}: local {world}-rank emulation fails its bound on rank {r}"
    return None


def _worker(rank: int, cfg: dict) -> None:
    """One rank: compile and self-check, then per size NCCL and every codec; records to cfg['tmp']/rank<r>.json."""
    import datetime

    import torch
    import torch.distributed as dist

    from companion.kernels import allreduce as ar

    for k, v in SAFE_ENV.items():
        if os.environ.get(k) != v:
            raise RuntimeError(f"{k} must be {v} in every process (multicast stays off)")
    ws = cfg["world_size"]
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=cfg["init_method"], rank=rank, world_size=ws, device_id=device,
                            timeout=datetime.timedelta(seconds=PG_TIMEOUT_S))
    out_path = Path(cfg["tmp"]) / f"rank{rank}.json"
    records: list[dict] = []
    _write_json_atomic(out_path, records)
    try:
        t0 = time.monotonic()
        errors = [e for e in (_self_check(c, ws, device, cfg) for c in cfg["codecs"]) if e]
        if rank == 0:
            print(f"compiled and self-checked {len(cfg['codecs'])} codecs in {time.monotonic() - t0:.1f} s", flush=True)
        if _agree_max(1.0 if errors else 0.0, device) > 0:
            records.append({"op": "self_check", "size_bytes": 0, "mode": "-", "error": "; ".join(errors) or "peer"})
            _write_json_atomic(out_path, records)
            return
        comm = ar.SymmetricAllReduce(dist.group.WORLD, max(cfg["sizes"]) // ELEMENT_BYTES, device,
                                     cfg["max_programs"], cfg["num_warps"])
        if rank == 0:
            print(f"symmetric buffer {comm.buf.numel() / 2**30:.2f} GiB, signal pad {comm.handle.signal_pad_size} B, "
                  f"up to {comm.g_cap} programs", flush=True)
        timer = _Timer(True)
        align_t = torch.ones(1, device=device)

        def align() -> None:
            dist.all_reduce(align_t, op=dist.ReduceOp.MAX)

        _warm_clocks(device)
        t0 = time.monotonic()
        for i_size, size in enumerate(cfg["sizes"]):
            if _agree_max(1.0 if time.monotonic() - t0 > cfg["budget_s"] else 0.0, device) > 0:
                if rank == 0:
                    print(f"budget of {cfg['budget_s']:.0f} s spent: stopping before {size_text(size)}", flush=True)
                break
            for i_b, backend in enumerate(cfg["backends"]):
                seed = 1_000_003 * (i_b + 1) + 1009 * i_size
                case = None
                try:
                    if backend == NCCL:
                        case = _Case("all_reduce", size, rank, ws, device, seed)
                    else:
                        case = _QRCase(comm, backend, size, rank, ws, device, seed)
                    recs = _measure_case(case, timer, align, device, (GRAPH,))
                except Exception as e:  # symmetric failures (e.g. a capture) must not stop the rest
                    traceback.print_exc()
                    recs = [{"op": "all_reduce", "size_bytes": size, "mode": "?", "error": f"{type(e).__name__}: {e}"}]
                finally:
                    case = None
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
                for r in recs:
                    r["backend"] = backend
                records += recs
                _write_json_atomic(out_path, records)
                if rank == 0:
                    for r in recs:
                        _print_record(r, ws)
    finally:
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()


def _print_record(r: dict, world: int) -> None:
    name = f"{r['backend']:6} {size_text(r['size_bytes']):>9}"
    if not r.get("times_s"):
        print(f"{name}: FAILED {r.get('error')}", flush=True)
        return
    t = percentile(r["times_s"], 50)
    wire = ""
    if r["backend"] != NCCL:
        wire = f", wire {wire_bytes(r['size_bytes'], r['backend'], world) / t / 1e9:6.1f} GB/s"
    print(f"{name}: {t * 1e6:10.2f} us, algbw {r['size_bytes'] / t / 1e9:6.1f} GB/s{wire} "
          f"({r['ops_per_sample']} calls x {len(r['times_s'])}, check rel err {r['check_rel_err']:.1e}, "
          f"graph check {r.get('graph_check_rel_err', float('nan')):.1e})", flush=True)


def phase_times(codecs: Sequence[str], numel: int, cfg: dict, samples: int = 5) -> str:
    """Each kernel's median time with 2 ranks emulated on GPU 0 (local buffers, no link): the SM and HBM share."""
    import torch

    from companion.kernels import allreduce as ar

    device = torch.device("cuda", 0)
    gen = torch.Generator(device=device)
    gen.manual_seed(7)
    xs = [torch.randn(numel, generator=gen, device=device, dtype=torch.bfloat16) for _ in range(2)]
    outs = [torch.empty_like(x) for x in xs]
    em = ar.Emulation(2, numel, device, cfg["max_programs"], cfg["num_warps"])
    lay, w = ar.Layout.plan(numel, 2, cfg["max_programs"]), cfg["num_warps"]
    steps = (
        ("scatter", lambda r, c: ar.scatter(xs[r], r, em.peers, em.states[r], c, lay, num_warps=w)),
        ("reduce", lambda r, c: ar.reduce(r, em.peers, em.states[r], c, lay, num_warps=w)),
        ("gather", lambda r, c: ar.gather(outs[r], r, em.peers, em.states[r], c, lay, num_warps=w)),
    )
    lines = [f"per-kernel time, 2 ranks emulated on one GPU, {size_text(2 * numel)} bf16, {lay.programs} programs "
             f"(us, median of {samples}; each rank's launch timed alone)",
             f"{'codec':6} {'scatter':>9} {'reduce':>9} {'gather':>9} {'sum':>9}"]
    for codec in codecs:
        em.run(xs, codec, outs)  # compile and warm up
        times: dict[str, list[float]] = {name: [] for name, _ in steps}
        for _ in range(samples):
            for name, launch in steps:
                for r in range(2):
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    launch(r, codec)
                    end.record()
                    end.synchronize()
                    times[name].append(start.elapsed_time(end) * 1e3)
        med = [percentile(times[name], 50) for name, _ in steps]
        lines.append(f"{codec:6} " + " ".join(f"{m:9.1f}" for m in med) + f" {sum(med):9.1f}")
    return "\n".join(lines)


def _graph_kernel_times(em, xs, outs, lay, codec: str) -> tuple[float, float, float]:
    """Scatter, reduce and gather µs per graph node of one codec (`graph_phase_times`)."""
    from companion.bench.timing import bench, capture_graph
    from companion.kernels import allreduce as ar
    from validation.measure_output import summarize

    def scatter() -> None:
        for r in range(2):
            ar.scatter(xs[r], r, em.peers, em.states[r], codec, lay)

    def reduce() -> None:
        for r in range(2):
            ar.reduce(r, em.peers, em.states[r], codec, lay)

    def gather() -> None:
        for r in range(2):
            ar.gather(outs[r], r, em.peers, em.states[r], codec, lay)

    spans = []
    for body in ((scatter,), (scatter, reduce), (scatter, reduce, gather)):
        graph = capture_graph(lambda body=body: [f() for f in body])
        spans.append(summarize(bench(graph.replay, 1, hide_host_gaps=True))["time_s_median"] * 1e6)
        del graph
    return spans[0] / 2, (spans[1] - spans[0]) / 2, (spans[2] - spans[1]) / 2


def graph_phase_times(codecs: Sequence[str], sizes_mib: Sequence[int], max_programs: int = 1024) -> str:
    """Each kernel's time per graph node with 2 ranks emulated on GPU 0 (local buffers, no link), the host hidden:
    graphs of both ranks' scatter, of scatter and reduce, and of all three, replayed; a kernel's time is the
    difference over the two ranks. Shorter launches than `phase_times` can time (it times each eagerly)."""
    import torch

    from companion.kernels import allreduce as ar

    device = torch.device("cuda", 0)
    lines = [f"per-kernel time per graph node (us), 2 ranks emulated on one GPU, {max_programs} programs at most, "
             "4 warps", f"{'size':>8} {'programs':>8} | " + " | ".join(f"{c:>5} scatter reduce gather"
                                                                      for c in codecs)]
    for mib in sizes_mib:
        numel = (mib << 20) // 2
        xs = [torch.randn(numel, device=device, dtype=torch.bfloat16) for _ in range(2)]
        outs = [torch.empty_like(x) for x in xs]
        em = ar.Emulation(2, numel, device, max_programs, 4)
        lay = ar.Layout.plan(numel, 2, max_programs)
        cells = []
        for codec in codecs:
            em.run(xs, codec, outs)  # compile, warm up
            torch.cuda.synchronize()
            each = _graph_kernel_times(em, xs, outs, lay, codec)
            cells.append(f"{codec:>5} " + " ".join(f"{t:7.2f}" for t in each))
        lines.append(f"{mib:>4} MiB {lay.programs:>8} | " + " | ".join(cells))
    return "\n".join(lines)


def summary(rows: Sequence[dict]) -> str:
    """Per size: NCCL's graph time and each codec's, with its speedup; then each codec's crossover and top lead."""
    t = {(r["kernel"], int(r["size_bytes"])): float(r["time_s_median"]) for r in rows}
    nccl = f"{backend_name(NCCL)}_all_reduce"
    codecs = [c for c in CODECS if any(k == f"{backend_name(c)}_all_reduce" for k, _ in t)]
    all_sizes = sorted({s for _, s in t})
    lines = [f"{'size':>9} {'nccl_us':>9} " + " ".join(f"{c + '_us (x)':>17}" for c in codecs)]
    for s in all_sizes:
        base = t.get((nccl, s))
        cells = []
        for c in codecs:
            v = t.get((f"{backend_name(c)}_all_reduce", s))
            cells.append(f"{v * 1e6:9.1f} ({base / v:5.2f})" if v and base else f"{'-':>17}")
        lines.append(f"{size_text(s):>9} {base * 1e6 if base else float('nan'):9.1f} " + " ".join(cells))
    for c in codecs:
        k = f"{backend_name(c)}_all_reduce"
        both = [s for s in all_sizes if (k, s) in t and (nccl, s) in t]
        if not both:
            continue
        wins = [t[(k, s)] < t[(nccl, s)] for s in both]
        cross = next((s for i, s in enumerate(both) if all(wins[i:])), None)
        top = both[-1]
        lines.append(f"{c}: faster than NCCL from {size_text(cross) if cross else 'no size'} on "
                     f"(first win: {size_text(both[wins.index(True)]) if any(wins) else 'none'}); at "
                     f"{size_text(top)}: {t[(nccl, top)] / t[(k, top)]:.2f}x NCCL, algbw "
                     f"{top / t[(k, top)] / 1e9:.0f} GB/s, wire {wire_bytes(top, c, 2) / t[(k, top)] / 1e9:.0f} GB/s")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=None, help="output folder (default: $OUT)")
    p.add_argument("--codec", action="append", choices=CODECS, help="repeatable; default: all six")
    p.add_argument("--no-nccl", action="store_true", help="skip the NCCL rows")
    p.add_argument("--size", action="append", type=int, help="bytes, repeatable; default: every power of two")
    p.add_argument("--min-bytes", type=int, default=MIN_BYTES)
    p.add_argument("--max-bytes", type=int, default=MAX_BYTES)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--max-programs", type=int, default=MAX_PROGRAMS, help="programs per kernel at most")
    p.add_argument("--num-warps", type=int, default=NUM_WARPS)
    p.add_argument("--budget-s", type=float, default=BUDGET_S, help="start no new size after this many seconds")
    p.add_argument("--deadline-s", type=float, default=DEADLINE_S, help="terminate the workers after this long")
    p.add_argument("--phase-times", type=int, default=0, metavar="BYTES",
                   help="afterwards, time each kernel alone on GPU 0 at this size, 2 ranks emulated locally")
    p.add_argument("--list", action="store_true", help="print the planned cases; no GPU")


def run(args: argparse.Namespace) -> int:
    codecs = tuple(args.codec or CODECS)
    backends = codecs if args.no_nccl else (NCCL, *codecs)
    planned = sorted(set(args.size)) if args.size else sizes(args.min_bytes, args.max_bytes)
    if args.list:
        for s in planned:
            for b in backends:
                print(f"{backend_name(b)}_all_reduce", s, "mode:", GRAPH)
        return 0
    changed = force_safe_env()
    if changed:
        print(f"bench quickreduce: set {', '.join(f'{k}={SAFE_ENV[k]}' for k in changed)}", flush=True)
    out = output_folder(args.out, "bench quickreduce")
    if out is None:
        return 2
    import torch

    if torch.cuda.device_count() < args.world_size:
        print(f"bench quickreduce: {torch.cuda.device_count()} GPUs, need {args.world_size}", file=sys.stderr)
        return 1
    print(_cmd_text(SMI_CLOCKS), flush=True)
    print("env:", {k: os.environ.get(k, "") for k in (*SAFE_ENV, "NCCL_ALGO", "NCCL_PROTO")}, flush=True)
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="quickreduce.") as tmp:
        cfg = {"world_size": args.world_size, "init_method": "file://" + str(Path(tmp) / "rendezvous"), "tmp": tmp,
               "codecs": codecs, "backends": backends, "sizes": planned, "budget_s": args.budget_s,
               "max_programs": args.max_programs, "num_warps": args.num_warps}
        results, spawn_failures = run_ranks(_worker, cfg, args.world_size, args.deadline_s, tmp, "all-reduces")
        failures += spawn_failures
    failures += [f"{r['backend'] if 'backend' in r else r['op']} {r['size_bytes']} {r['mode']}: {r['error']}"
                 for r in results[0] if r.get("error")]
    prov = provenance(NCCL)
    print("provenance:", prov, flush=True)
    rows = []
    for b in backends:
        mine = [[r for r in res if r.get("backend") == b] for res in results]
        rows += build_rows(mine, args.world_size, backend_name(b), prov)
    print(_cmd_text(SMI_CLOCKS), flush=True)
    path = out / QUICKREDUCE_CSV
    write_csv_atomic(path, COLUMNS, rows)
    print(f"wrote {path} ({len(rows)} rows)", flush=True)
    print(summary(rows), flush=True)
    if args.phase_times:
        try:
            print(phase_times(codecs, args.phase_times // ELEMENT_BYTES, cfg), flush=True)
        except Exception as e:
            traceback.print_exc()
            failures.append(f"phase times: {type(e).__name__}: {e}")
    return report_failures("bench quickreduce", failures)

