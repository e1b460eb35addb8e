"""The recorded SASS instruction counts of the companion kernels: what a workgroup issues, per launch.

The roofline's issue term (`hwmodels.roofline`) needs the warp instructions a workgroup issues. They are
counted, not fitted: the companion's bench compiles each kernel of `validation/companion/kernels/` for sm_90
and counts its main path (`validation.companion.bench.sass` says how), into
`compiled/data/<gpu>.csv`. This module reads that table: a kernel's prologue and loop body per
thread, its warps and its registers.
"""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path

COLUMNS = ("kernel", "config", "num_warps", "registers", "shared_bytes", "prologue_instructions",
           "loop_instructions", "triton")

DATA_DIR = Path(__file__).parent / "data"


@cache
def _table(gpu_name: str) -> dict[tuple[str, str], dict[str, str]]:
    with open(DATA_DIR / f"{gpu_name}.csv", newline="") as f:
        return {(r["kernel"], r["config"]): r for r in csv.DictReader(f)}


@cache
def _counted(gpu_name: str) -> bool:
    """Whether a table of the GPU's compiled code ships (looked up once a process: the engine asks per kernel)."""
    return (DATA_DIR / f"{gpu_name}.csv").is_file()


def has_counts(gpu_name: str, kernel: str | None = None, config: str | None = None) -> bool:
    """Whether the GPU's compiled code was counted (and, given a kernel and configuration, that one)."""
    if not _counted(gpu_name):
        return False
    return kernel is None or (kernel, config) in _table(gpu_name)


def warps_of(gpu_name: str, kernel: str, config: str) -> int:
    """The warps of one workgroup of a compiled kernel."""
    return int(_table(gpu_name)[(kernel, config)]["num_warps"])


def compiled(gpu_name: str, kernel: str, config: str, iterations: int = 0) -> tuple[float, int]:
    """(warp instructions of one workgroup running `iterations` loop iterations, registers per thread)."""
    try:
        row = _table(gpu_name)[(kernel, config)]
    except KeyError:
        raise ValueError(f"no SASS count of {kernel} {config!r} for {gpu_name} "
                         "(count it: python -m validation.companion.bench sass-counts)") from None
    if iterations and not int(row["loop_instructions"]):
        raise ValueError(f"{kernel} {config!r} has no loop, but {iterations} iterations were asked for")
    per_thread = int(row["prologue_instructions"]) + iterations * int(row["loop_instructions"])
    return per_thread * int(row["num_warps"]), int(row["registers"])


def per_thread(gpu_name: str, kernel: str, config: str) -> tuple[int, int]:
    """(instructions outside the loop, instructions per loop iteration) of one thread, as counted."""
    row = _table(gpu_name).get((kernel, config))
    if row is None:
        raise ValueError(f"no SASS count of {kernel} {config!r} for {gpu_name} "
                         "(count it: python -m validation.companion.bench sass-counts)")
    return int(row["prologue_instructions"]), int(row["loop_instructions"])


# The memory classes a software pipeline prices itself (the program's Little's law), not the warp's stalls.
PIPELINED_CLASSES = ("global_load", "async_copy")


def per_thread_timed(gpu_name: str, kernel: str, config: str) -> tuple[int, int, float, float, float, float]:
    """(instructions outside the loop, per trip; cycles outside, per trip with every wait; the same without the
    global-load waits) of one warp, from the instruction counts and the SASS timeline (compiled.sass_timing)."""
    from compiled.sass_timing import warp_cycles

    outside, per_trip = per_thread(gpu_name, kernel, config)
    with_loads = warp_cycles(gpu_name, kernel, config)
    without_loads = warp_cycles(gpu_name, kernel, config, without=PIPELINED_CLASSES)
    return outside, per_trip, *with_loads, *without_loads


SIMULATED_WARPS = (1, 2, 4, 8, 16)  # warps per scheduler simulated; the cost model interpolates between them


@cache
def cycles_of(gpu_name: str, kernel: str, config: str) -> tuple:
    """`Compiled.cycles` of one launch: the cycles outside the loop and per trip of one warp without its global-load
    waits; the global-load round trips it waits for in series, outside the loop and per trip (the exposed
    global-load cycles over the GPU's DRAM latency in cycles); the trip's cycles (the whole kernel's, if it
    has no loop) with SIMULATED_WARPS warps sharing a scheduler, simulated on its instruction stream, as
    (warps, cycles) pairs; and, for a kernel with a loop, the cycles outside it simulated the same way (the
    warps' set-up together: their shared-memory traffic contends as their trips' does). The warps of one
    workgroup (the compiled kernel's `num_warps`) wait for each other at every BAR.SYNC."""
    from compiled.sass_timing import shared_trip_cycles
    from hwmodels.occupancy import occupancy
    from hwmodels.spec import load_gpu

    gpu = load_gpu(gpu_name)
    dram_cycles = gpu.dram_latency_s * gpu.boost_clock_hz
    _, per_trip, outside_all, trip_all, outside, trip = per_thread_timed(gpu_name, kernel, config)
    part = 1 if per_trip else 0
    row = _table(gpu_name)[(kernel, config)]
    workgroup = int(row["num_warps"])
    # warps a scheduler can hold at most (registers, shared memory, warp slots): the counts beyond the first
    # simulated one that reaches it are never read
    fits = occupancy(gpu, lds_bytes=int(row["shared_bytes"]), threads=32 * workgroup, vgprs=int(row["registers"]))
    most = fits.waves_per_cu / gpu.simds_per_cu
    counts = [n for n in SIMULATED_WARPS if n < most] + [next((n for n in SIMULATED_WARPS if n >= most),
                                                              SIMULATED_WARPS[-1])]
    simulated = [(n, shared_trip_cycles(gpu, kernel, config, n, without=PIPELINED_CLASSES, workgroup_warps=workgroup))
                 for n in dict.fromkeys(counts)]
    by_warps = tuple((n, cycles[part]) for n, cycles in simulated)
    setup_by_warps = tuple((n, cycles[0]) for n, cycles in simulated) if per_trip else ()
    return (outside, trip, (outside_all - outside) / dram_cycles, (trip_all - trip) / dram_cycles, by_warps,
            setup_by_warps)
