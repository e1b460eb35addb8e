"""One warp's dependent issue time of the companion kernels, from their SASS control codes.

A kernel that runs one warp per scheduler (MLA decode, KDA recurrences, QuickReduce codecs) is bound by how
long one warp takes to issue its instruction stream in order, waiting on its dependencies. The companion's
bench (`validation.companion.bench.sass`, `warp_timeline`) reads each instruction's control code (stall
count, barriers set and waited on) and writes, per kernel and configuration, the static timeline of the main
path into `validation/data/sass_counts/<gpu>_timing.json`: for the prologue and one loop trip, the stall
cycles and every wait on a variable-latency producer as [class, distance, at] (the producer's latency class,
the static cycles from its issue to the waiting instruction's, and the waiting instruction's static cycle in
its section). This module evaluates those timelines with a GPU's latencies; no torch or triton.

A wait exposes max(0, latency[class] - distance - delay), where delay is what the waits between producer and
consumer already exposed (one warp issues in order, so a stall for one load also hides the latency of the
loads in flight with it). A loop trip is evaluated in steady state: waits on a producer of an earlier trip
count the earlier trips' delays as the trip's own (iterated to a fixed point).

Latency of each class (`latencies`), in cycles of `boost_clock_hz`:
- `global_load`, `async_copy`: `dram_latency_s` (an L2 miss; loads that hit L2 expose less, flag polls of a
  peer's memory more).
- `atomic`, `fence`: `l2_latency_s` (global atomics and fences complete at L2; system-scope ones may take
  longer).
- `shared`, `constant`, `local`, `fence_cta`: `lds_latency_cycles` (a constant-cache or L1 hit is taken as a
  shared load; a fence within the CTA waits for the SM's memory pipeline, about one shared access).
- `sfu`: `sfu_latency_cycles`; `convert` (F2I, I2F, FRND, FCHK, POPC, ...) and `special` (S2R, S2UR, CS2R):
  also `sfu_latency_cycles`, assumed: they go through the same variable-latency path.
- `shuffle` (SHFL, REDUX): `shuffle_latency_cycles`; `mma`: `mma_latency_cycles`.
- `operand_read` (a wait for a store's or load's source registers to be read out) and `other`:
  `alu_latency_cycles`, a lower bound.
- `barrier` (BAR.SYNC): 0: one warp's view, the other warps are taken to arrive in time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path

from hwmodels.spec import GPU, load_gpu

DATA_DIR = Path(__file__).parent / "data" / "sass_counts"
# Steady state of a loop trip: passes, each using the previous pass's delays for the earlier trips.
_MAX_PASSES = 20


def latencies(gpu: GPU) -> dict[str, float]:
    """Cycles of each latency class on `gpu` (the module docstring says which field gives which)."""
    dram = gpu.dram_latency_s * gpu.boost_clock_hz
    l2 = gpu.l2_latency_s * gpu.boost_clock_hz
    return {"global_load": dram, "async_copy": dram, "atomic": l2, "fence": l2,
            "shared": gpu.lds_latency_cycles, "constant": gpu.lds_latency_cycles, "local": gpu.lds_latency_cycles,
            "fence_cta": gpu.lds_latency_cycles,
            "sfu": gpu.sfu_latency_cycles, "convert": gpu.sfu_latency_cycles, "special": gpu.sfu_latency_cycles,
            "shuffle": gpu.shuffle_latency_cycles, "mma": gpu.mma_latency_cycles,
            "operand_read": gpu.alu_latency_cycles, "other": gpu.alu_latency_cycles, "barrier": 0.0}


def section_cycles(section: Mapping, latency: Mapping[str, float], loop: bool = False) -> float:
    """Cycles one warp takes to issue a section ({"stall_cycles", "waits"}): its stalls and exposed waits.

    With `loop`, the section is one trip of a loop of period stall_cycles, and a producer before the trip
    (at - distance < 0) lies in earlier trips, whose delays are taken equal to this trip's (steady state).
    """
    period = section.get("stall_cycles", 0)
    waits = sorted(section.get("waits", ()), key=lambda w: w[2])
    previous: list[tuple[float, float]] = []
    for _ in range(_MAX_PASSES if loop else 1):
        delays: list[tuple[float, float]] = []
        for cls, distance, at in waits:
            start = at - distance
            between = sum(d for q, d in delays if start < q <= at)
            if loop and start < 0 and period > 0:
                trips = int(-start // period) + 1
                between += sum(d for q, d in previous for j in range(1, trips + 1) if start < q - j * period)
            exposed = latency[cls] - distance - between
            if exposed > 0:
                delays.append((at, exposed))
        if delays == previous:
            break
        previous = delays
    return period + sum(d for _, d in previous)


@cache
def _timings(table: str) -> dict[tuple[str, str], dict]:
    with open(DATA_DIR / f"{table}_timing.json") as f:
        return {(row["kernel"], row["config"]): row for row in json.load(f)["rows"]}


def timeline(kernel: str, config: str, table: str = "h200") -> dict:
    """The recorded timeline of one kernel configuration ({"prologue", "loop"[, "loop_copies"]})."""
    try:
        return _timings(table)[(kernel, config)]
    except KeyError:
        raise ValueError(f"no SASS timeline of {kernel} {config!r} in {table}_timing.json "
                         "(write it: python -m validation.companion.bench sass-counts)") from None


def warp_cycles(gpu: GPU | str, kernel: str, config: str, table: str = "h200",
                without: tuple[str, ...] = ()) -> tuple[float, float]:
    """(prologue cycles, cycles per loop trip; 0 without a loop) of one warp issuing the kernel alone.

    The SASS is the one compiled for `table` (sm_90 for h200); the latencies are `gpu`'s. A loop unrolled in
    several copies gives the mean trip over the copies. Classes named in `without` cost nothing (their
    latency is priced elsewhere, e.g. global loads by a pipeline's Little's law).
    """
    spec = load_gpu(gpu) if isinstance(gpu, str) else gpu
    latency, row = latencies(spec), timeline(kernel, config, table)
    latency = {cls: (0.0 if cls in without else value) for cls, value in latency.items()}
    prologue = section_cycles(row["prologue"], latency)
    copies = row.get("loop_copies") or ([row["loop"]] if row["loop"] else [])
    loop = sum(section_cycles(c, latency, loop=True) for c in copies) / len(copies) if copies else 0.0
    return prologue, loop
