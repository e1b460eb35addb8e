"""One warp's dependent issue time of the companion kernels, from their SASS control codes.

A kernel that runs one warp per scheduler (MLA decode, KDA recurrences, QuickReduce codecs) is bound by how
long one warp takes to issue its instruction stream in order, waiting on its dependencies. The companion's
bench (`companion.bench.sass`, `warp_timeline`) reads each instruction's control code (stall
count, barriers set and waited on) and writes, per kernel and configuration, the static timeline of the main
path into `compiled/data/<gpu>_timing.json`: for the prologue and one loop trip, the stall
cycles and every wait on a variable-latency producer as [class, distance, at] (the producer's latency class,
the static cycles from its issue to the waiting instruction's, and the waiting instruction's static cycle in
its section). This module evaluates those timelines with a GPU's latencies; no torch or triton.
`shared_trip_cycles` simulates several warps sharing one scheduler from each section's instruction stream.

A wait exposes max(0, latency[class] - distance - delay), where delay is what the waits between producer and
consumer already exposed (one warp issues in order, so a stall for one load also hides the latency of the
loads in flight with it). A loop trip is evaluated in steady state: waits on a producer of an earlier trip
count the earlier trips' delays as the trip's own (iterated to a fixed point).

Latency of each class (`latencies`), in cycles of `boost_clock_hz`:
- `global_load`, `async_copy`: `dram_latency_s` (an L2 miss; loads that hit L2 expose less, flag polls of a
  peer's memory more).
- `atomic`, `fence`: `l2_latency_s` (global atomics and fences complete at L2; system-scope ones may take
  longer).
- `ldsm` (ldmatrix) and `shared_128` (a 128-bit shared load): `ldsm_latency_cycles`, `lds_128_latency_cycles`
  (the shared-load probe's chains; `lds_latency_cycles` where a GPU has none).
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

import hashlib
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path

from compiled.disk_cache import kept_on_disk
from hwmodels.spec import GPU, load_gpu

WAVEFRONT_BYTES = 128  # one shared-memory wavefront: 32 banks of 4 bytes (`compiled.sass_lanes`)
NO_BARRIER = 7  # `compiled.sass_code.NO_BARRIER`: an instruction that sets no barrier

DATA_DIR = Path(__file__).parent / "data"
# Steady state of a loop trip: passes, each using the previous pass's delays for the earlier trips.
_MAX_PASSES = 20


def latencies(gpu: GPU) -> dict[str, float]:
    """Cycles of each latency class on `gpu` (the module docstring says which field gives which)."""
    dram = gpu.dram_latency_s * gpu.boost_clock_hz
    l2 = gpu.l2_latency_s * gpu.boost_clock_hz
    return {"global_load": dram, "async_copy": dram, "atomic": l2, "fence": l2, "global_store": l2,
            "shared": gpu.lds_latency_cycles, "constant": gpu.lds_latency_cycles, "local": gpu.lds_latency_cycles,
            "fence_cta": gpu.lds_latency_cycles, "ldsm": gpu.ldsm_latency_cycles or gpu.lds_latency_cycles,
            "shared_128": gpu.lds_128_latency_cycles or gpu.lds_latency_cycles,
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


def timeline(kernel: str, config: str, table: str = "h200") -> dict:
    """The timeline of one kernel configuration as compiled for GPU `table` ({"prologue", "loop"[,
    "loop_copies"][, "units"]}: `compiled.kernel_code`)."""
    from compiled.kernel_code import kernel_code

    code = kernel_code(table, kernel, config)
    if code is None:
        raise ValueError(f"no compiled code of {kernel} {config!r} for {table}")
    return code["timeline"]


def warp_cycles(gpu: GPU | str, kernel: str, config: str, table: str = "h200",
                without: tuple[str, ...] = (), loads_from_l2: bool = False) -> tuple[float, float]:
    """(prologue cycles, cycles per loop trip; 0 without a loop) of one warp issuing the kernel alone.

    The SASS is the one compiled for `table` (sm_90 for h200); the latencies are `gpu`'s. A loop unrolled in
    several copies gives the mean trip over the copies. Classes named in `without` cost nothing (their
    latency is priced elsewhere, e.g. global loads by a pipeline's Little's law). With `loads_from_l2` the global
    loads and copies wait L2's latency (a kernel whose input the launch before left in L2).
    """
    spec = load_gpu(gpu) if isinstance(gpu, str) else gpu
    latency, row = latencies(spec), timeline(kernel, config, table)
    if loads_from_l2:
        latency = {**latency, "global_load": latency["atomic"], "async_copy": latency["atomic"]}  # L2's latency
    latency = {cls: (0.0 if cls in without else value) for cls, value in latency.items()}
    prologue = section_cycles(row["prologue"], latency)
    copies = row.get("loop_copies") or ([row["loop"]] if row["loop"] else [])
    loop = sum(section_cycles(c, latency, loop=True) for c in copies) / len(copies) if copies else 0.0
    return prologue, loop


# --- Several warps sharing one scheduler ---------------------------------------------------------------------

# Trips of a loop simulated per warp; the last is reported (the first inherits the prologue's barriers).
_TRIPS = 2
# A kernel without a loop: runs of its whole code by each warp, back to back (the workgroups that follow each
# other in a resident slot), their starts staggered; the runs after the first are averaged.
_RUNS = 4


def shared_trip_cycles(gpu: GPU | str, kernel: str, config: str, warps_per_scheduler: float, table: str = "h200",
                       without: tuple[str, ...] = (), shared_pipe: bool = True,
                       workgroup_warps: int = 0) -> tuple[float, float]:
    """(prologue cycles, cycles per loop trip; 0 without a loop) of `warps_per_scheduler` warps running the
    kernel's code on each warp scheduler of one SM, each scheduler issuing at most one instruction per cycle.

    A cycle-by-cycle (event-driven) simulation of the sections' instruction streams (`stream` in the timing
    table): each warp issues its stream in order; an instruction may issue once its warp's previous
    instruction's stall has elapsed and every barrier it waits on is ready (a barrier's producers' issue cycle
    plus their class's latency, `latencies`, classes in `without` at 0; `DEPBAR.LE` waits on the oldest but n).
    An instruction of a math pipe narrower than a warp (`pipe_cycles`: the integer and logic units at half rate,
    conversions and transcendentals at a quarter of that, shuffles) also waits until the pipe is free: the
    warps of a scheduler share its pipes, so code full of conversions runs slower than its issue count; and a
    conversion or transcendental holds the scheduler's issue for `issue_cycles` (2.68 measured on the H200,
    not one). Among the warps that may issue, the scheduler picks the one that issued least recently (loose round robin,
    LRR, not greedy-then-oldest). A fractional count of warps is rounded up (a scheduler with 2.5 warps on
    average is taken to hold 3). All warps start together and issue the main path as `warp_timeline` has it:
    the prologue up to the loop, `_TRIPS` (2) trips of the loop, the rest of the prologue (so barrier state
    crosses both ways). A part ends when the last warp has issued its last instruction and that one's stall
    elapsed; a part's cycles are its end less the end of the part before. The prologue's are the sum over its
    parts; the loop's are those of its last trip: the time for all warps to complete one trip each, in (near)
    steady state. A loop unrolled in several copies gives the mean over the copies, as `warp_cycles`. A kernel
    without a loop (one tile a workgroup) is run `_RUNS` times back to back by each warp, the warps' starts
    staggered over one run (`_repeated_run_cycles`): the workgroups resident on a CU did not start together.
    With `workgroup_warps` (the kernel's warps a workgroup) and a loop, the warps form workgroups of that many,
    spread over the schedulers as the hardware spreads them, and a BAR.SYNC holds each warp until its
    workgroup's last warp has arrived; without, or in a kernel without a loop (whose staggered runs stand for
    different workgroups), BAR.SYNC costs nothing, as in `warp_cycles`.
    The SM's schedulers (`simds_per_cu`) each run that many warps and share one shared-memory pipe (with
    `shared_pipe`; `issue_streams`): a shared access takes as many of its cycles as its wavefronts, bank
    conflicts included (the timing table's "shared", `compiled.sass_lanes`), its result
    comes later by its extra wavefronts and by the backlog it queued behind, and a warp whose access finds
    more than `SHARED_QUEUE_CYCLES` of backlog waits to issue it. Without `shared_pipe` the schedulers are
    independent and one is simulated. With one warp and no shared pipe this is `warp_cycles` up to the steady
    state of loop-carried waits (`warp_cycles` iterates it to a fixed point, here two trips) and the waits
    after a loop on its producers (static distances there).
    """
    if warps_per_scheduler <= 0:
        raise ValueError(f"warps_per_scheduler must be positive, not {warps_per_scheduler}")
    spec = load_gpu(gpu) if isinstance(gpu, str) else gpu
    latency = latencies(spec)
    latency = tuple(sorted((cls, 0.0 if cls in without else value) for cls, value in latency.items()))
    return _shared_trip_cycles(table, kernel, config, math.ceil(warps_per_scheduler), latency,
                               tuple(sorted(pipe_cycles(spec).items())), tuple(sorted(issue_cycles(spec).items())),
                               *((wavefront_cycles(spec), spec.simds_per_cu, workgroup_warps) if shared_pipe else ()))


def wavefront_cycles(gpu: GPU) -> float:
    """Cycles the SM's shared-memory pipe takes per 128-byte wavefront: it moves `lds_bytes_per_clock_per_cu`
    (on the H200 the smem probe's 118 B a clock, Triton's layout conversion; 128 is the banked peak)."""
    return WAVEFRONT_BYTES / gpu.lds_bytes_per_clock_per_cu


# Warp instructions per clock per SM of the pipes the probes did not measure (assumptions, `pipe_cycles`):
# conversions and bit counts at the transcendental unit's rate, and shuffles at 32 lanes a clock, one warp
# instruction per SM per clock, as NVIDIA's CUDA C++ Programming Guide lists them for compute capability 9.0
# (arithmetic instruction throughput: "all other type conversions" 16 results, warp shuffle 32).
SHUFFLE_LANES_PER_CU = 32


def pipe_cycles(gpu: GPU) -> dict[str, float]:
    """Cycles one warp instruction holds its pipe on one scheduler (`compiled.sass_code.pipe_of`):
    the wave over the pipe's lanes per scheduler, from the GPU's probed lane rates, in whole cycles."""
    lanes = {"F": gpu.fp32_lanes_per_cu, "I": gpu.int32_lanes_per_cu, "A": gpu.bit_lanes_per_cu,
             "X": gpu.sfu_lanes_per_cu, "M": gpu.sfu_lanes_per_cu, "S": SHUFFLE_LANES_PER_CU}
    return {pipe: max(1.0, round(gpu.wave_size / (n / gpu.simds_per_cu))) for pipe, n in lanes.items()}


def issue_cycles(gpu: GPU) -> dict[str, float]:
    """Cycles an instruction of each pipe holds its scheduler's issue, where more than one: conversions and
    transcendentals (`GPU.xu_issue_cycles`), shuffles (`GPU.shfl_issue_cycles`) and integer multiply-adds
    (`GPU.imad_issue_cycles`), measured by the issue probe's `frnd_mix`, `shfl_mix` and `imad_mix` on the H200."""
    held = {"X": gpu.xu_issue_cycles, "M": gpu.xu_issue_cycles, "S": gpu.shfl_issue_cycles,
            "I": gpu.imad_issue_cycles}
    return {pipe: cycles for pipe, cycles in held.items() if cycles is not None}


# The simulations are kept on disk between processes (`compiled.disk_cache`), keyed by this module's source,
# the timing table and the shared queue's depth besides their arguments.


@cache
def _module_digest() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def _timeline_digest(table: str, kernel: str, config: str) -> str:
    return hashlib.sha256(json.dumps(timeline(kernel, config, table), sort_keys=True).encode()).hexdigest()


def _depends_on(table: str, kernel: str, config: str, *_) -> tuple:
    return _module_digest(), _timeline_digest(table, kernel, config), SHARED_QUEUE_CYCLES


@kept_on_disk("sass_timing", _depends_on)
def _shared_trip_cycles(table: str, kernel: str, config: str, warps: int, latency: tuple[tuple[str, float], ...],
                        occupancy: tuple[tuple[str, float], ...] = (),
                        issue: tuple[tuple[str, float], ...] = (),
                        wavefront: float = 0.0, schedulers: int = 1, workgroup: int = 0) -> tuple[float, float]:
    row, lat = timeline(kernel, config, table), dict(latency)
    units = None
    if row.get("units"):  # AMD code: each instruction's pipe character names its unit and cycles
        units = {char: unit for char, (unit, _) in row["units"].items()}
        occupancy, issue = tuple((char, float(cycles)) for char, (_, cycles) in row["units"].items()), ()
    prologue = row["prologue"].get("stream", [])
    prologue_pipes = row["prologue"].get("pipes", "")
    prologue_shared = row["prologue"].get("shared", [])
    if not prologue and row["prologue"].get("stall_cycles"):
        raise ValueError(f"the timing table {table}_timing.json has no instruction streams "
                         "(rewrite it: python -m companion.bench sass-counts)")
    copies = row.get("loop_copies") or ([row["loop"]] if row["loop"] else [])
    if not copies:
        # (its warps' staggered runs stand for different workgroups: their barriers are not simulated)
        return _repeated_run_cycles(prologue, prologue_pipes, warps, lat, dict(occupancy), dict(issue),
                                    prologue_shared, wavefront, schedulers, units), 0.0
    # The main path as one warp issues it: the prologue up to each copy of the loop, the copy `_TRIPS` times,
    # the rest of the prologue (so the waits after a loop find its producers, as `warp_timeline` has them).
    parts, pipes, shared, kinds, done = [], [], [], [], 0

    def cut(start: int, end: int | None) -> list:  # the prologue's shared accesses in [start, end), re-indexed
        return [[i - start, n] for i, n in prologue_shared if i >= start and (end is None or i < end)]

    for copy in copies:
        parts += [prologue[done:copy["entry"]], *[copy["stream"]] * _TRIPS]
        pipes += [prologue_pipes[done:copy["entry"]], *[copy.get("pipes", "")] * _TRIPS]
        shared += [cut(done, copy["entry"]), *[copy.get("shared", [])] * _TRIPS]
        kinds += ["prologue", *[len(kinds)] * _TRIPS]  # a copy's trips, tagged by where they start
        done = copy["entry"]
    parts.append(prologue[done:])
    pipes.append(prologue_pipes[done:])
    shared.append(cut(done, None))
    kinds.append("prologue")
    known = all(len(p) == len(q) for p, q in zip(pipes, parts, strict=True))
    ends = issue_streams(parts, warps, lat, pipes if known else None, dict(occupancy), dict(issue),
                         shared=shared, wavefront_cycles=wavefront, schedulers=schedulers, workgroup=workgroup,
                         units=units)
    spans = [end - start for start, end in zip([0.0, *ends], ends, strict=False)]
    prologue_cycles = sum(span for span, kind in zip(spans, kinds, strict=True) if kind == "prologue")
    # a copy's trip: its `_TRIPS` trips over all warps, averaged (warps that run ahead into the next trip while
    # others finish this one count in either way)
    per_copy: dict[int, float] = {}
    for span, kind in zip(spans, kinds, strict=True):
        if kind != "prologue":
            per_copy[kind] = per_copy.get(kind, 0.0) + span / _TRIPS
    return prologue_cycles, (sum(per_copy.values()) / len(per_copy) if per_copy else 0.0)


def _repeated_run_cycles(stream: list, pipes: str, warps: int, latency: Mapping[str, float],
                         occupancy: Mapping[str, float], issue: Mapping[str, float], shared: list | None = None,
                         wavefront: float = 0.0, schedulers: int = 1,
                         units: Mapping[str, str] | None = None) -> float:
    """Cycles per run of a kernel without a loop when each of `warps` warps runs it `_RUNS` times back to back,
    the warps' first runs staggered evenly over one warp's run alone (the workgroups resident on a CU started
    at different times: their conversions and their integer work interleave instead of contending in step);
    the mean span of the runs after the first."""
    known = len(pipes) == len(stream)
    shared = shared or []
    alone = issue_streams([stream], 1, latency, [pipes] if known else None, occupancy, issue,
                          shared=[shared], wavefront_cycles=wavefront, units=units)[0]
    starts = [alone * w / warps for w in range(warps)]
    ends = issue_streams([stream] * _RUNS, warps, latency, [pipes] * _RUNS if known else None, occupancy, issue,
                         starts, shared=[shared] * _RUNS, wavefront_cycles=wavefront, schedulers=schedulers,
                         units=units)
    return (ends[-1] - ends[0]) / (_RUNS - 1)


# Backlog of the SM's shared-memory pipe, in cycles, up to which a warp still issues its shared access into the
# MIO queue (beyond it the warp waits: the MIO throttle). NVIDIA does not publish the queue's depth: 32 cycles
# (32 wavefronts: eight 128-bit or LDSM.x4 accesses queued across the SM) is an assumption; see
# validation/NOTES.md for what 0 and 64 change. The queue probe (`python -m companion.bench probes
# --only queue`, `shared_queue_stores` in `validation.probes`) is written to measure it and not yet recorded.
SHARED_QUEUE_CYCLES = 32.0


def issue_streams(parts: list[list], warps: int, latency: Mapping[str, float], pipes: list[str] | None = None,
                  occupancy: Mapping[str, float] | None = None, issue: Mapping[str, float] | None = None,
                  starts: Sequence[float] | None = None, shared: list[list] | None = None,
                  wavefront_cycles: float = 0.0, schedulers: int = 1, workgroup: int = 0,
                  units: Mapping[str, str] | None = None) -> list[float]:
    """`warps` warps on each of `schedulers` schedulers of one SM issuing the instruction streams `parts` one
    after the other (`shared_trip_cycles` says how); per part, the cycle at which the last warp has finished it
    (issued its last instruction and that instruction's stall elapsed; the end of the part before for an empty
    part). Each scheduler issues at most one instruction a cycle from its own warps. With `pipes` (per part, one
    character per instruction: `compiled.sass_code.pipe_of`) an instruction also waits for its
    pipe, which each issue holds for `occupancy[pipe]` cycles (a scheduler's warps share it), and holds the
    scheduler for `issue[pipe]` cycles (one where not given) before it issues the next. `starts`: the cycle each
    of a scheduler's warps may issue its first instruction (all at 0 when not given; the same on every
    scheduler). With `shared` (per part, the section's [index, wavefronts] pairs: `warp_timeline`) and
    `wavefront_cycles` (cycles the SM's shared-memory pipe takes per wavefront), an instruction that uses the
    pipe waits until the pipe, which all schedulers share, is free and holds it for its wavefronts (a busy
    pipe stalls the warp: the MIO throttle), and its result comes its class's latency after issue plus its
    extra wavefronts (a conflicted load returns later). With `workgroup`, warps w // workgroup form one
    workgroup, and a warp that issues a BAR.SYNC is held until its workgroup's last warp has issued it.

    An instruction is [stall, wait_mask, write_barrier, class[, read_barrier[, special]]] (`_compact` of
    `companion.bench.sass`)."""
    if starts is not None and len(starts) != warps:
        raise ValueError(f"{len(starts)} starts for {warps} warps a scheduler")
    stream = [ins for part in parts for ins in part]
    pipe_of = "".join(pipes) if pipes else "-" * len(stream)
    hold = [(occupancy or {}).get(p, 1.0) for p in pipe_of]
    unit_of = [(units or {}).get(p, p) for p in pipe_of]
    busy = [(issue or {}).get(p, 1.0) for p in pipe_of]
    fronts = [0.0] * len(stream)
    offset = 0
    for p, part in enumerate(parts):
        for index, count in (shared[p] if shared else ()):
            fronts[offset + index] = count
        offset += len(part)
    if not wavefront_cycles:
        fronts = [0.0] * len(stream)
    bounds = list(itertools.accumulate(len(part) for part in parts))
    read_latency = latency.get("operand_read", 0.0)
    # Per instruction, what the loop below needs: stall, waited barriers, (barrier, latency) set, special.
    decoded = []
    for i, ins in enumerate(stream):
        stall, mask, write, cls = ins[:4]
        read = ins[4] if len(ins) > 4 else NO_BARRIER
        special = ins[5] if len(ins) > 5 else None
        sets = []
        if write != NO_BARRIER:
            extra = max(0.0, fronts[i] - 1.0) * wavefront_cycles
            sets.append((write, latency.get(cls, latency.get("other", 0.0)) + extra))
        if read != NO_BARRIER:
            sets.append((read, read_latency))
        if special and special[0] == "gmma":
            sets.append((6, latency.get("mma", 0.0)))
        retire = None
        if special and special[0] == "depbar":
            retire = (6 if special[1] == "gsb0" else special[1], special[2])
        decoded.append((stall, tuple(k for k in range(6) if mask >> k & 1), tuple(sets), retire))
    barrier_at = [bool(len(ins) > 5 and ins[5] and ins[5][0] == "bar") for ins in stream]
    n = len(decoded)
    total = warps * schedulers  # warp w runs on scheduler w % schedulers
    pos = [0] * total  # next instruction of each warp
    ready = [0.0] * total  # earliest cycle its next instruction may issue
    pending = [[[] for _ in range(7)] for _ in range(total)]  # per barrier (6 = gsb0), completion cycles
    ends = [[0.0] * len(parts) for _ in range(total)]
    order = [list(range(s, total, schedulers)) for s in range(schedulers)]  # least recently issued first
    active = [[w for w in order[s] if n] for s in range(schedulers)]
    clock = [0.0] * schedulers  # the cycle each scheduler may issue next
    free: list[dict[str, float]] = [{} for _ in range(schedulers)]  # per scheduler and pipe: when it is free
    shared_free = 0.0  # the cycle the SM's shared-memory pipe takes its next wavefront
    # BAR.SYNC within a workgroup of `workgroup` warps (warps w // workgroup together; 0: barriers are free):
    # a warp that arrives waits until its workgroup's last warp has arrived
    group_of = [w // workgroup if workgroup else w for w in range(total)]
    arrived: dict[int, list[int]] = {}
    held = [False] * total

    def wait(w: int, earliest: float) -> float:
        """The cycle warp w's next instruction may issue, retiring the barriers it waits on."""
        _, barriers, _, retire = decoded[pos[w]]
        for k in barriers:
            if pending[w][k]:
                earliest = max(earliest, *pending[w][k])
                pending[w][k] = []
        if retire:
            k, keep = retire
            cut = max(0, len(pending[w][k]) - keep)
            if cut:
                earliest = max(earliest, *pending[w][k][:cut])
                del pending[w][k][:cut]
        return earliest

    for s in range(schedulers):
        for w in active[s]:
            ready[w] = wait(w, starts[w // schedulers] if starts else 0.0)

    queue = SHARED_QUEUE_CYCLES
    part_of_end = {bound - 1: p for p, bound in enumerate(bounds)}  # the last instruction of each part
    group_size = [group_of.count(g) for g in group_of]
    runnable = [len(active[s]) for s in range(schedulers)]  # active warps not held at a barrier

    def pipe_free(s: int, i: int) -> float:
        at = free[s].get(unit_of[i], 0.0) if hold[i] > 1 else 0.0
        return max(at, shared_free - queue) if fronts[i] else at

    live = [s for s in range(schedulers) if active[s]]
    while live:
        s = min((o for o in live if runnable[o]), key=clock.__getitem__, default=None)  # the first to issue
        if s is None:
            raise RuntimeError("every warp is held at a barrier its workgroup cannot reach")
        t = clock[s]
        pick, soonest = None, math.inf
        for w in order[s]:
            if held[w]:
                continue
            at = ready[w]
            if at <= t:
                i = pos[w]
                if hold[i] > 1 or fronts[i]:
                    at = max(at, pipe_free(s, i))
                if at <= t:
                    pick = w
                    break
            soonest = min(soonest, at)
        if pick is None:
            clock[s] = max(t, soonest)
            continue
        i = pos[pick]
        if hold[i] > 1:
            free[s][unit_of[i]] = t + hold[i]
        queued = 0.0
        if fronts[i]:
            queued = max(0.0, shared_free - t)
            shared_free = t + queued + fronts[i] * wavefront_cycles
        stall, _, sets, _ = decoded[i]
        for k, lat in sets:
            pending[pick][k].append(t + queued + lat)
        pos[pick] += 1
        order[s].remove(pick)
        if i in part_of_end:
            ends[pick][part_of_end[i]] = t + stall
        if workgroup and barrier_at[i]:
            group = arrived.setdefault(group_of[pick], [])
            group.append(pick)
            if len(group) < group_size[pick]:
                held[pick] = True
                runnable[s] -= 1
            else:  # the last to arrive releases the workgroup
                for w in group:
                    if held[w]:
                        held[w] = False
                        runnable[w % schedulers] += 1
                        if pos[w] < n:
                            ready[w] = max(ready[w], t + stall)
                arrived[group_of[pick]] = []
        if pos[pick] < n:
            order[s].append(pick)
            ready[pick] = wait(pick, max(ready[pick], t + stall) if held[pick] else t + stall)
        else:
            active[s].remove(pick)
            if not held[pick]:
                runnable[s] -= 1
            if not active[s]:
                live.remove(s)
        clock[s] = t + busy[i]
    for w in range(total):  # an empty part ends where the one before it did
        for p in range(1, len(parts)):
            if bounds[p] == bounds[p - 1]:
                ends[w][p] = ends[w][p - 1]
    return [max(ends[w][p] for w in range(total)) for p in range(len(parts))]
