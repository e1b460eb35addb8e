"""A product kernel told what its compiled code shows: per launch, the warp instructions and registers of the
compiled kernel, its instructions outside and inside the loop, and the cycles its instruction stream takes (the SASS
timeline simulated per SM, `compiled.sass_timing`), in place of the kernel kind's analytic estimate of them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from hwmodels.program import Chain, Program
from hwmodels.work import Work
from workloads.kernel_base import KernelKind


@dataclass(frozen=True)
class Compiled(KernelKind):
    """A model's launches told what the companion kernel's compiled code shows (compiled/sass_counts.py)."""

    kind: ClassVar[str] = "compiled"

    kernel: KernelKind
    warp_instructions: tuple[float | None, ...]  # per launch: warp instructions of its busiest workgroup
    registers: tuple[int | None, ...]  # per launch: registers per thread; None keeps the model's figures
    # per launch: (instructions outside the loop, per loop iteration) of one thread, for the workgroup's
    # program (cycle-level model); None keeps the program's own estimate. Empty: none given.
    per_thread: tuple[tuple[int, int] | None, ...] = ()
    # per launch: `compiled.sass_counts.cycles_of` of its compiled kernel (one warp's cycles outside the loop
    # and per trip, the global-load round trips it waits for in series, the trip's cycles by warps per
    # scheduler); empty: none given
    cycles: tuple[tuple | None, ...] = ()
    # per launch: trips of the kernel's source loop that one trip of its compiled loop runs (LLVM's unrolling):
    # the program's trips shrink and its bytes per trip grow by that factor; empty: one each
    unroll: tuple[int, ...] = ()

    def launches(self) -> tuple[Work, ...]:
        works = self.kernel.launches()
        if not len(works) == len(self.warp_instructions) == len(self.registers):
            raise ValueError(f"{len(works)} launches, {len(self.warp_instructions)} instruction counts and "
                             f"{len(self.registers)} register counts")
        per_thread = self.per_thread or (None,) * len(works)
        cycles = self.cycles or (None,) * len(works)
        unroll = self.unroll or (1,) * len(works)
        out = []
        for w, i, r, counts, timed, u in zip(works, self.warp_instructions, self.registers, per_thread, cycles,
                                             unroll, strict=True):
            if u > 1 and w.program is not None:
                p = w.program
                w = replace(w, program=replace(p, trips=-(-p.trips // u), trip_load_bytes=p.trip_load_bytes * u,
                                               trip_store_bytes=p.trip_store_bytes * u))
            if r is not None:
                w = replace(w, warp_instructions_per_workgroup=i, registers_per_thread=r)
            if counts is not None and w.program is not None:
                outside, per_trip = counts
                # a kernel with no loop issues everything in its one trip
                program = (replace(w.program, trip_instructions=outside, setup_instructions=0) if not per_trip
                           else replace(w.program, trip_instructions=per_trip, setup_instructions=outside))
                if timed is not None:
                    program = _timed(program, outside, per_trip, timed)
                w = replace(w, program=program)
            out.append(w)
        return tuple(out)


# A compiled loop trip whose global bytes per thread are this close to a whole multiple (2 or more) of the source
# loop's is that many source trips unrolled (an assumption: a looser match would take a partly masked trip for one).
UNROLL_TOLERANCE = 0.1


def unroll_of(compiled_bytes: float, source_bytes: float) -> int:
    """Source trips one compiled trip runs, from the bytes a thread moves in each: the whole multiple (2 or more)
    their ratio is within `UNROLL_TOLERANCE` of, else 1."""
    if compiled_bytes <= 0 or source_bytes <= 0:
        return 1
    ratio = compiled_bytes / source_bytes
    factor = round(ratio)
    return factor if factor >= 2 and abs(ratio - factor) <= UNROLL_TOLERANCE * factor else 1


# A loop trip whose code waits for this share of a DRAM round trip or more on its own global loads is not
# pipelined (a trip fed a trip ahead waits for none: its loads landed while the previous trip computed); half is
# the midpoint between the two, an assumption.
UNPIPELINED_ROUND_TRIPS = 0.5


def _timed(program: Program, outside: int, per_trip: int, timed: tuple) -> Program:
    """The program with its compute read off the compiled code: a trip's cycles with 1, 2, ... warps sharing a
    scheduler, simulated on its instruction stream without its global loads, and the stalls outside the
    loop; plus the global-load round trips it waits for in series.

    A trip's own loads are the program's: waited for by Little's law on the memory curve (prefetch 0), or
    issued ahead by a pipeline (prefetch >= 1). Whether the compiled loop pipelines is read off its code: a
    trip that waits for at least `UNPIPELINED_ROUND_TRIPS` of a DRAM round trip on its global loads issued
    them in the trip itself (the compiler did not hoist them a trip ahead), so the program runs unpipelined
    whatever its kernel assumed. Round trips beyond the first that a trip of an unpipelined program waits for
    in series (a load whose address or issue waits on another) join its chain at the DRAM latency; those
    outside the loop join the setup. The same chains as the code exposes them when its loads hit L2 are kept for a
    program whose input is in L2 (`Program.l2_trip_chain`): at L2's shorter latency more of each wait hides behind
    its other work. The code also says how long a trip's loads fly before it waits for them
    (`Program.trip_load_lead_cycles`) and whether it issues matrix instructions (`Program.matrix_units`).
    """
    outside_cycles, _, outside_loads, trip_loads, by_warps, *rest = timed
    setup_by_warps = rest[0] if rest else ()
    facts = rest[2] if len(rest) > 2 else {}
    program = replace(program, trip_load_lead_cycles=tuple(facts.get("load_lead", (0.0, 0.0))),
                      matrix_units=facts.get("matrix", program.matrix_units))
    if per_trip and trip_loads >= UNPIPELINED_ROUND_TRIPS:
        program = replace(program, prefetch=0)

    def chains(outside_rounds: float, trip_rounds: float) -> tuple[Chain, Chain]:
        """(setup chain, trip chain) in round trips beyond the program's own loads."""
        setup_own = 1.0 if program.setup_load_bytes > 0 else 0.0  # Little's law pays the setup's load
        if per_trip:
            extra = 0.0 if program.prefetch >= 1 else max(0.0, trip_rounds - 1.0)
            # the set-up's compute simulated with its warps together where given, else one warp's stalls
            return (Chain(cycles=0.0 if setup_by_warps else max(0.0, outside_cycles - outside),
                          dram=max(0.0, outside_rounds - setup_own)), Chain(dram=extra))
        # everything is the one trip, the setup's load included
        return Chain(), Chain(dram=max(0.0, outside_rounds - 1.0 - setup_own))

    setup_chain, trip_chain = chains(outside_loads, trip_loads)
    in_l2 = {}
    if len(rest) > 1:  # the round trips the code exposes when its loads hit L2 (`Program.in_l2`)
        setup_l2, trip_l2 = chains(*rest[1])
        in_l2 = {"l2_setup_chain": replace(setup_l2, l2=setup_l2.dram, dram=0.0),
                 "l2_trip_chain": replace(trip_l2, l2=trip_l2.dram, dram=0.0)}
    return replace(program, trip_chain=trip_chain, setup_chain=setup_chain, trip_cycles_by_warps=by_warps,
                   setup_cycles_by_warps=setup_by_warps if per_trip else (), **in_l2)
