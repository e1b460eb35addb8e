"""How the bench times a kernel on a CUDA GPU: warm-up, CUDA-event samples, graphs, clocks and provenance.

Imports torch and triton at module level; the `suites` command imports it only after it has found a CUDA GPU.
"""

from __future__ import annotations

import datetime
import math
import subprocess
import time
from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

import torch
import triton

from validation.suites import BF16, FP8

# Timing policy: warm up, repeat, take the median; >= 5 samples only for long cases.
WARMUP_S = 25e-3
MIN_WARMUP_SAMPLES = 10
MIN_REPEATS = 20
MAX_REPEATS = 200
TIMED_BUDGET_S = 0.3  # aim for this much timed GPU time per case
LONG_SAMPLE_S = 50e-3
LONG_MIN_REPEATS = 5
LONG_TIMED_BUDGET_S = 1.0
# A sleep kernel queued ahead of each sample lets the host enqueue the sample before the GPU
# reaches it: 200k cycles is ~100 us at the 1.98 GHz SM clock of one NVIDIA H200 (cloud VM),
# longer than the host needs to issue one event pair and one sample of a graph or a single op.
SLEEP_CYCLES = 200_000
# bf16 matmuls before the first suite, so SM clocks have left idle (nvidia-smi read 345 MHz idle).
CLOCK_WARM_S = 0.5

# Correctness bounds: ||out - ref|| / ||ref|| against float64 on a sub-block.
REL_ERR_MAX = {BF16: 1e-2, FP8: 6e-2}
GRAPH_WARMUP_CALLS = 3
DEVICE = "cuda"
# Host-bound samples (eager launches, host gaps included) are taken in rounds this far apart (`spaced_bench`).
HOST_ROUNDS = 12
HOST_ROUND_GAP_S = 10.0
Key = TypeVar("Key", bound=Hashable)


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


def spaced_bench(samples: Mapping[Key, tuple[Callable[[], object], int]], rounds: int = HOST_ROUNDS,
                 gap_s: float = HOST_ROUND_GAP_S) -> dict[Key, list[float]]:
    """Per-op seconds of host-bound samples ({name: (sample, ops per sample)}, host gaps included), `bench`ed in
    `rounds` rounds `gap_s` apart, every sample in every round.

    On the cloud VMs the host's cost of an eager launch has two values in time: spells of tens of seconds at about
    1.45 times the usual cost, in any process on any vCPU (validation/NOTES.md, "Eager launch costs"). One block of
    samples lies inside a spell or outside it; samples spread over minutes hold each value in proportion to its
    time, and their median is the usual cost while spells take less than half the time."""
    times: dict[Key, list[float]] = {name: [] for name in samples}
    for r in range(rounds):
        if r:
            time.sleep(gap_s)
        for name, (sample, ops) in samples.items():
            times[name] += bench(sample, ops, hide_host_gaps=False)
    return times


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


def bench_graph(body: Callable[[], object], ops_per_sample: int) -> list[float]:
    """Per-op seconds of `body` captured in one CUDA graph and replayed, the host hidden; the graph is released."""
    graph = capture_graph(body)
    try:
        return bench(graph.replay, ops_per_sample, hide_host_gaps=True)
    finally:
        del graph
        torch.cuda.synchronize()


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


PROVENANCE_KEYS = ("sm_count", "gpu_name", "driver", "torch", "triton", "cuda")


def provenance(env: dict) -> dict[str, object]:
    """The provenance columns of a row timed now, from `environment()`."""
    return {**{k: env[k] for k in PROVENANCE_KEYS}, "date": _now_utc()}
