"""GPU side of `validation.measure`: timing, correctness checks and the three suites.

Imports torch and triton at module level; `validation.measure` imports this module only after it
has found a CUDA GPU.
"""

from __future__ import annotations

import datetime
import itertools
import math
import subprocess
import traceback
from collections.abc import Callable, Sequence

import torch
import triton
import triton.language as tl

from validation import suites as companion_suites
from validation.measure import (
    BF16,
    EAGER,
    FP8,
    Case,
    CopyCase,
    GemmCase,
    LaunchCase,
    case_row,
    summarize,
)

# Timing policy (METHOD.md: warm up, repeat, take the median; >= 5 samples only for long cases).
WARMUP_S = 25e-3
MIN_WARMUP_SAMPLES = 10
MIN_REPEATS = 20
MAX_REPEATS = 200
TIMED_BUDGET_S = 0.3  # aim for this much timed GPU time per case
LONG_SAMPLE_S = 50e-3
LONG_MIN_REPEATS = 5
LONG_TIMED_BUDGET_S = 1.0
# A sleep kernel queued ahead of each sample lets the host enqueue the sample before the GPU
# reaches it: 200k cycles is ~100 us at the 1.98 GHz SM clock read on this kind (KINDS.md),
# longer than the host needs to issue one event pair and one sample of a graph or a single op.
SLEEP_CYCLES = 200_000
# bf16 matmuls before the first suite, so SM clocks have left idle (KINDS.md read 345 MHz idle).
CLOCK_WARM_S = 0.5

# Correctness bounds: ||out - ref|| / ||ref|| against float64 on a sub-block (METHOD.md).
REL_ERR_MAX = {BF16: 1e-2, FP8: 6e-2}
CHECK_BLOCK = 64
FP8_SCALE_A = 0.75  # assumption: arbitrary non-unit per-tensor scales, so the scales are exercised
FP8_SCALE_B = 1.25
L2_ROTATION_FACTOR = 2  # rotated inputs of a GEMM case exceed this many L2s
GRAPH_WARMUP_CALLS = 3
DEVICE = "cuda"


class MeasurementError(RuntimeError):
    """A case computed a wrong result or could not be timed."""


def _nvidia_smi(query: str) -> str:
    try:
        res = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return res.stdout.strip().splitlines()[0].strip() if res.stdout.strip() else "unknown"


def smi_clocks() -> str:
    """SM and memory clocks, temperature and power, as nvidia-smi reads them now."""
    return _nvidia_smi("clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw")


def environment() -> dict[str, object]:
    """Provenance columns shared by every row, and the L2 size used to size input rotation."""
    props = torch.cuda.get_device_properties(0)
    return {
        "sm_count": props.multi_processor_count,
        "gpu_name": torch.cuda.get_device_name(0),
        "driver": _nvidia_smi("driver_version"),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda or "unknown",
        "l2_bytes": int(props.L2_cache_size),
        "capability": f"{props.major}.{props.minor}",
        "memory_bytes": int(props.total_memory),
    }


def _now_utc() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _time_samples(sample: Callable[[], object], n: int, hide_host_gaps: bool) -> list[float]:
    """Seconds of n samples, each bracketed by its own CUDA event pair."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for start, end in zip(starts, ends, strict=True):
        if hide_host_gaps:
            torch.cuda._sleep(SLEEP_CYCLES)
        start.record()
        sample()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e-3 for s, e in zip(starts, ends, strict=True)]  # elapsed_time is in ms


def bench(sample: Callable[[], object], ops_per_sample: int, hide_host_gaps: bool) -> list[float]:
    """Per-op seconds of repeated samples, after a warm-up of >= 10 samples or >= 25 ms."""
    sample()  # first call: compilation, handles, workspaces
    torch.cuda.synchronize()
    t_est = _time_samples(sample, 1, hide_host_gaps)[0]
    if t_est > LONG_SAMPLE_S:
        n_warm = 1
        repeats = max(LONG_MIN_REPEATS, min(MIN_REPEATS, math.ceil(LONG_TIMED_BUDGET_S / t_est)))
    else:
        n_warm = max(MIN_WARMUP_SAMPLES, math.ceil(WARMUP_S / max(t_est, 1e-7)))
        repeats = min(MAX_REPEATS, max(MIN_REPEATS, math.ceil(TIMED_BUDGET_S / max(t_est, 1e-7))))
    for _ in range(n_warm):
        sample()
    torch.cuda.synchronize()
    return [t / ops_per_sample for t in _time_samples(sample, repeats, hide_host_gaps)]


def capture_graph(body: Callable[[], object]) -> torch.cuda.CUDAGraph:
    """A CUDA graph of body, after warm-up calls on a side stream (PyTorch's documented recipe)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(GRAPH_WARMUP_CALLS):
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    torch.cuda.synchronize()
    return graph


def warm_clocks() -> None:
    """Run large bf16 matmuls for about CLOCK_WARM_S so the first timed case is not at idle clocks."""
    a = torch.randn(8192, 8192, device=DEVICE, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=DEVICE, dtype=torch.bfloat16)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    torch.matmul(a, b)
    end.record()
    torch.cuda.synchronize()
    n = max(1, math.ceil(CLOCK_WARM_S / (start.elapsed_time(end) * 1e-3)))
    for _ in range(min(n, 2000)):
        torch.matmul(a, b)
    torch.cuda.synchronize()


# ---------------------------------------------------------------------------------------- gemm


def _gemm_inputs(case: GemmCase) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh standard-normal A (m, k) and weight W (n, k), in the case's input dtype."""
    a = torch.randn(case.m, case.k, device=DEVICE, dtype=torch.bfloat16)
    w = torch.randn(case.n, case.k, device=DEVICE, dtype=torch.bfloat16)
    if case.dtype == FP8:
        a, w = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    return a, w


def _gemm_op(case: GemmCase) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """out = A @ W^T: cuBLAS bf16, or fp8 scaled-mm with fp32 scalar scales and bf16 output."""
    if case.dtype == BF16:
        return lambda a, w: torch.matmul(a, w.t())
    scale_a = torch.tensor(FP8_SCALE_A, device=DEVICE, dtype=torch.float32)
    scale_b = torch.tensor(FP8_SCALE_B, device=DEVICE, dtype=torch.float32)
    # w.t() of a row-major (n, k) tensor is the column-major (k, n) B that _scaled_mm requires.
    return lambda a, w: torch._scaled_mm(a, w.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def check_gemm(case: GemmCase, a: torch.Tensor, w: torch.Tensor, op: Callable) -> float:
    """Largest relative error of two corner sub-blocks against float64; raises if out of bounds."""
    out = op(a, w)
    torch.cuda.synchronize()
    if out.shape != (case.m, case.n) or out.dtype != torch.bfloat16:
        raise MeasurementError(f"{case}: output {tuple(out.shape)} {out.dtype}")
    if not bool(torch.isfinite(out).all()):
        raise MeasurementError(f"{case}: non-finite output")
    scale = FP8_SCALE_A * FP8_SCALE_B if case.dtype == FP8 else 1.0
    r, c = min(case.m, CHECK_BLOCK), min(case.n, CHECK_BLOCK)
    errs = []
    for rows, cols in ((slice(0, r), slice(0, c)), (slice(case.m - r, case.m), slice(case.n - c, case.n))):
        ref = (a[rows].float().double() @ w[cols].float().double().t()) * scale
        errs.append(_rel_err(out[rows, cols], ref))
    err = max(errs)
    if not err < REL_ERR_MAX[case.dtype]:
        raise MeasurementError(f"{case}: relative error {err:.3e} >= {REL_ERR_MAX[case.dtype]}")
    return err


def run_gemm(cases: Sequence[GemmCase], env: dict) -> tuple[list[dict], list[str]]:
    rows: list[dict] = []
    failures: list[str] = []
    groups = itertools.groupby(cases, key=lambda c: (c.kernel, c.dtype, c.m, c.n, c.k))
    for _, group in groups:
        group = list(group)
        first = group[0]
        try:
            n_sets = L2_ROTATION_FACTOR * env["l2_bytes"] // first.input_set_bytes() + 1
            inputs = [_gemm_inputs(first) for _ in range(n_sets)]
            op = _gemm_op(first)
            err = check_gemm(first, *inputs[0], op)
            print(
                f"gemm {first.kernel} {first.dtype} m={first.m} n={first.n} k={first.k}: "
                f"{n_sets} input sets, rel err {err:.2e}",
                flush=True,
            )
        except Exception as e:  # a failed shape must not stop the other shapes
            failures.append(f"{first}: {e}")
            traceback.print_exc()
            continue
        for case in group:
            try:
                times = _time_gemm(case, inputs, op)
            except Exception as e:
                failures.append(f"{case}: {e}")
                traceback.print_exc()
                continue
            rows.append({**case_row(case), **summarize(times), "n_input_sets": n_sets, **_provenance(env)})
        del inputs
    return rows, failures


def _time_gemm(case: GemmCase, inputs: list, op: Callable) -> list[float]:
    n_sets = len(inputs)
    if case.launch_mode == EAGER:
        order = itertools.cycle(range(n_sets))

        def sample() -> None:
            for _ in range(case.ops_per_sample):
                op(*inputs[next(order)])

        return bench(sample, case.ops_per_sample, case.host_gaps == "hidden")

    def body() -> None:
        for j in range(case.ops_per_sample):
            op(*inputs[j % n_sets])

    graph = capture_graph(body)
    try:
        return bench(graph.replay, case.ops_per_sample, hide_host_gaps=True)
    finally:
        del graph
        torch.cuda.synchronize()


# ------------------------------------------------------------------------------------ copy_grid


@triton.jit
def copy_persistent_kernel(src_ptr, dst_ptr, n_blocks, n_programs, BLOCK: tl.constexpr):
    """Each of the n_programs programs copies blocks pid, pid + G, pid + 2G, ... of BLOCK elements."""
    pid = tl.program_id(0)
    for block in range(pid, n_blocks, n_programs):
        offs = block * BLOCK + tl.arange(0, BLOCK)
        tl.store(dst_ptr + offs, tl.load(src_ptr + offs))


def _copy_launcher(case: CopyCase, src: torch.Tensor, dst: torch.Tensor) -> Callable[[], object]:
    """One launch of the case's copy: torch's own, or the persistent Triton kernel on its grid."""
    if case.grid is None:
        return lambda: dst.copy_(src)
    if src.numel() % case.block:
        raise MeasurementError(f"{case}: n_elems is not a multiple of block")
    n_blocks = src.numel() // case.block
    g, block, warps = case.grid, case.block, case.num_warps
    return lambda: copy_persistent_kernel[(g,)](src, dst, n_blocks, g, BLOCK=block, num_warps=warps)


def run_copy(cases: Sequence[CopyCase], env: dict) -> tuple[list[dict], list[str]]:
    rows: list[dict] = []
    failures: list[str] = []
    n = cases[0].n_elems
    if any(c.n_elems != n or c.dtype != cases[0].dtype for c in cases):
        raise MeasurementError("copy cases must share one buffer size and dtype")
    if n >= 2**31:
        raise MeasurementError("copy kernel indexes with int32: n_elems must be below 2**31")
    src = torch.randn(n, device=DEVICE, dtype=getattr(torch, cases[0].dtype))
    dst = torch.empty_like(src)
    for case in cases:
        try:
            launch = _copy_launcher(case, src, dst)
            dst.fill_(float("nan"))  # poison: every element must be written
            launch()
            torch.cuda.synchronize()
            if not torch.equal(dst, src):
                raise MeasurementError(f"{case}: copy is not exact")
            times = bench(launch, 1, hide_host_gaps=True)
        except Exception as e:
            failures.append(f"{case}: {e}")
            traceback.print_exc()
            continue
        rows.append({**case_row(case), **summarize(times), **_provenance(env)})
        rate_bytes_per_s = case.bytes() / rows[-1]["time_s_median"]
        print(f"copy {case.kernel} grid={case.grid}: {rate_bytes_per_s / 1e9:.0f} GB/s", flush=True)
    return rows, failures


# --------------------------------------------------------------------------------------- launch


@triton.jit
def empty_kernel(x_ptr):
    """Does nothing: its time is the launch cost alone."""
    pass


def _launch_body(case: LaunchCase, x: torch.Tensor) -> Callable[[], None]:
    """ops_per_sample back-to-back launches of the case's kernel, after checking it once."""
    if case.kernel == "triton_empty":

        def one() -> None:
            empty_kernel[(1,)](x)

    elif case.kernel == "torch_add_":
        before = x.clone()
        x.add_(1)
        torch.cuda.synchronize()
        if not torch.equal(x, before + 1):
            raise MeasurementError(f"{case}: add_ result wrong")

        def one() -> None:
            x.add_(1)

    else:
        raise MeasurementError(f"unknown launch kernel {case.kernel}")

    def body() -> None:
        for _ in range(case.ops_per_sample):
            one()

    return body


def run_launch(cases: Sequence[LaunchCase], env: dict) -> tuple[list[dict], list[str]]:
    rows: list[dict] = []
    failures: list[str] = []
    x = torch.randn(cases[0].numel, device=DEVICE, dtype=torch.float32)
    for case in cases:
        try:
            body = _launch_body(case, x)

            if case.launch_mode == EAGER:
                times = bench(body, case.ops_per_sample, hide_host_gaps=False)
            else:
                graph = capture_graph(body)
                times = bench(graph.replay, case.ops_per_sample, hide_host_gaps=True)
                del graph
            torch.cuda.synchronize()
        except Exception as e:
            failures.append(f"{case}: {e}")
            traceback.print_exc()
            continue
        rows.append({**case_row(case), **summarize(times), **_provenance(env)})
    return rows, failures


# ----------------------------------------------------------------------------------------- all

RUNNERS = {"gemm": run_gemm, "copy_grid": run_copy, "launch": run_launch}
PROVENANCE_KEYS = ("sm_count", "gpu_name", "driver", "torch", "triton", "cuda")


def _provenance(env: dict) -> dict[str, object]:
    return {**{k: env[k] for k in PROVENANCE_KEYS}, "date": _now_utc()}


def run_suite(suite: str, cases: Sequence[Case], env: dict) -> tuple[list[dict], list[str]]:
    """Rows of every case that passed its check and was timed, and a line per failed case."""
    try:
        if suite in RUNNERS:
            return RUNNERS[suite](cases, env)
        return companion_suites.load(suite).run(cases, env)
    except Exception as e:
        traceback.print_exc()
        return [], [f"suite aborted: {e}"]
