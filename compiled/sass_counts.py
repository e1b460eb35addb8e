"""The compiled instruction counts of the companion kernels: what a workgroup issues, per launch.

The roofline's issue term (`hwmodels.roofline`) needs the warp instructions a workgroup issues. They are
counted, not fitted, from the kernel's compiled code on the GPU (`compiled.kernel_code`: the shipped sm_90 table,
or code compiled here at the configuration asked for; `compiled.sass_code` and `compiled.amdgcn_code` say how
it is counted). This module gives a kernel's prologue and loop body per thread, its warps, its registers and
its simulated cycles (`cycles_of`).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from compiled.kernel_code import can_compile, kernel_code, why_not

COLUMNS = ("kernel", "config", "num_warps", "registers", "shared_bytes", "prologue_instructions",
           "loop_instructions", "triton")

DATA_DIR = Path(__file__).parent / "data"


def _code(gpu_name: str, kernel: str, config: str) -> dict:
    code = kernel_code(gpu_name, kernel, config)
    if code is None:
        raise ValueError(f"no compiled code of {kernel} {config!r} for {gpu_name}: "
                         f"{why_not(gpu_name, kernel, config)}")
    return code


def has_counts(gpu_name: str, kernel: str | None = None, config: str | None = None) -> bool:
    """Whether the GPU's compiled code can be had (and, given a kernel and configuration, that one's)."""
    if not can_compile(gpu_name):
        return False
    return kernel is None or kernel_code(gpu_name, kernel, config) is not None


def warps_of(gpu_name: str, kernel: str, config: str) -> int:
    """The warps (waves on AMD) of one workgroup of a compiled kernel."""
    return _code(gpu_name, kernel, config)["num_warps"]


def compiled(gpu_name: str, kernel: str, config: str, iterations: int = 0) -> tuple[float, int]:
    """(warp instructions of one workgroup running `iterations` loop iterations, registers per thread)."""
    row = _code(gpu_name, kernel, config)
    if iterations and not row["loop_instructions"]:
        raise ValueError(f"{kernel} {config!r} has no loop, but {iterations} iterations were asked for")
    per_thread = row["prologue_instructions"] + iterations * row["loop_instructions"]
    return per_thread * row["num_warps"], row["registers"]


def per_thread(gpu_name: str, kernel: str, config: str) -> tuple[int, int]:
    """(instructions outside the loop, instructions per loop iteration) of one thread, as counted."""
    row = _code(gpu_name, kernel, config)
    return row["prologue_instructions"], row["loop_instructions"]


# The memory classes a software pipeline prices itself (the program's Little's law), not the warp's stalls.
PIPELINED_CLASSES = ("global_load", "async_copy")


def per_thread_timed(gpu_name: str, kernel: str, config: str) -> tuple[int, int, float, float, float, float]:
    """(instructions outside the loop, per trip; cycles outside, per trip with every wait; the same without the
    global-load waits) of one warp, from the instruction counts and the SASS timeline (compiled.sass_timing)."""
    from compiled.sass_timing import warp_cycles

    outside, per_trip = per_thread(gpu_name, kernel, config)
    with_loads = warp_cycles(gpu_name, kernel, config, table=gpu_name)
    without_loads = warp_cycles(gpu_name, kernel, config, table=gpu_name, without=PIPELINED_CLASSES)
    return outside, per_trip, *with_loads, *without_loads


SIMULATED_WARPS = (1, 2, 4, 8, 16)  # warps per scheduler simulated; the cost model interpolates between them


@cache
def cycles_of(gpu_name: str, kernel: str, config: str) -> tuple:
    """`Compiled.cycles` of one launch: the cycles outside the loop and per trip of one warp without its global-load
    waits; the global-load round trips it waits for in series, outside the loop and per trip (the exposed
    global-load cycles over the GPU's DRAM latency in cycles); the trip's cycles (the whole kernel's, if it
    has no loop) with SIMULATED_WARPS warps sharing a scheduler, simulated on its instruction stream, as
    (warps, cycles) pairs; and, for a kernel with a loop, the cycles outside it simulated the same way (the
    warps' set-up together: their shared-memory traffic contends as their trips' does); last, the round trips
    outside the loop and per trip again with the loads hitting L2 (the exposed cycles at L2's latency over it: a
    kernel whose input the launch before left in L2 hides more of each wait behind its other work); last, the
    code's other facts (`code_facts`). The warps of one workgroup (the compiled kernel's `num_warps`) wait for each
    other at every BAR.SYNC."""
    from compiled.sass_timing import shared_trip_cycles
    from hwmodels.occupancy import occupancy
    from hwmodels.spec import load_gpu

    gpu = load_gpu(gpu_name)
    dram_cycles = gpu.dram_latency_s * gpu.boost_clock_hz
    from compiled.sass_timing import warp_cycles

    _, per_trip, outside_all, trip_all, outside, trip = per_thread_timed(gpu_name, kernel, config)
    outside_l2, trip_l2 = warp_cycles(gpu_name, kernel, config, table=gpu_name, loads_from_l2=True)
    l2_cycles = gpu.l2_latency_s * gpu.boost_clock_hz
    part = 1 if per_trip else 0
    row = _code(gpu_name, kernel, config)
    workgroup = row["num_warps"]
    # warps a scheduler can hold at most (registers, shared memory, warp slots): the counts beyond the first
    # simulated one that reaches it are never read
    fits = occupancy(gpu, lds_bytes=row["shared_bytes"], threads=gpu.wave_size * workgroup, vgprs=row["registers"])
    most = fits.waves_per_cu / gpu.simds_per_cu
    counts = [n for n in SIMULATED_WARPS if n < most] + [next((n for n in SIMULATED_WARPS if n >= most),
                                                              SIMULATED_WARPS[-1])]
    simulated = [(n, shared_trip_cycles(gpu, kernel, config, n, table=gpu_name, without=PIPELINED_CLASSES,
                                        workgroup_warps=workgroup))
                 for n in dict.fromkeys(counts)]
    by_warps = tuple((n, cycles[part]) for n, cycles in simulated)
    setup_by_warps = tuple((n, cycles[0]) for n, cycles in simulated) if per_trip else ()
    return (outside, trip, (outside_all - outside) / dram_cycles, (trip_all - trip) / dram_cycles, by_warps,
            setup_by_warps, ((outside_l2 - outside) / l2_cycles, (trip_l2 - trip) / l2_cycles),
            code_facts(gpu_name, kernel, config))


def code_facts(gpu_name: str, kernel: str, config: str) -> dict:
    """What the timeline says beyond cycles: {"load_lead": (first, last)}, one loop trip's static cycles from its
    first and its last global load to the first wait on them (the mean over the loop's copies; (0, 0) without a
    loop or its loads), and {"matrix": ...}, whether the kernel issues matrix instructions."""
    from compiled.sass_timing import timeline

    row = timeline(kernel, config, gpu_name)
    copies = row.get("loop_copies") or ([row["loop"]] if row.get("loop") else [])
    leads = [c.get("load_lead", (0, 0)) for c in copies] or [(0, 0)]
    return {"load_lead": tuple(sum(lead[i] for lead in leads) / len(leads) for i in (0, 1)),
            "matrix": bool(row.get("matrix", False))}
