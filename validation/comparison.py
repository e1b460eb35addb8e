"""One measured row beside the model's prediction for the same kernel launches and launch mode."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from hwmodels.calibration import load_calibration
from hwmodels.program import Chain, Program
from hwmodels.roofline import LaunchMode, kernel_time
from hwmodels.spec import load_gpu
from hwmodels.work import Work
from workloads.kernel_base import KernelKind

TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "fp8", "float32": "fp32"}


@dataclass(frozen=True)
class Comparison:
    """One measured row beside its prediction."""

    label: str
    group: str  # rows summarised together (a kernel family), e.g. "gemm bf16 decode"
    launch_mode: str
    measured_s: float
    predicted_s: float
    bound: str
    fitted: bool = False  # True when a constant of the model was fitted on this row
    kernels: tuple[KernelKind, ...] = ()  # what was priced, to be asked of `infersim kernel` (tests/validation)
    mode: str = ""  # the product's launch mode it was priced in (`launch_mode_of`)

    @property
    def error(self) -> float:
        """Signed relative error of the prediction."""
        return (self.predicted_s - self.measured_s) / self.measured_s


@dataclass(frozen=True)
class Compiled(KernelKind):
    """A model's launches told what the companion kernel's compiled code shows (validation/sass_counts.py)."""

    kind: ClassVar[str] = "compiled"

    kernel: KernelKind
    warp_instructions: tuple[float | None, ...]  # per launch: warp instructions of its busiest workgroup
    registers: tuple[int | None, ...]  # per launch: registers per thread; None keeps the model's figures
    # per launch: (instructions outside the loop, per loop iteration) of one thread, for the workgroup's
    # program (cycle-level model); None keeps the program's own estimate. Empty: none given.
    per_thread: tuple[tuple[int, int] | None, ...] = ()
    # per launch: `validation.sass_counts.cycles_of` of its compiled kernel (one warp's cycles outside the loop
    # and per trip, the global-load round trips it waits for in series, the trip's cycles by warps per
    # scheduler); empty: none given
    cycles: tuple[tuple | None, ...] = ()

    def launches(self) -> tuple[Work, ...]:
        works = self.kernel.launches()
        if not len(works) == len(self.warp_instructions) == len(self.registers):
            raise ValueError(f"{len(works)} launches, {len(self.warp_instructions)} instruction counts and "
                             f"{len(self.registers)} register counts")
        per_thread = self.per_thread or (None,) * len(works)
        cycles = self.cycles or (None,) * len(works)
        out = []
        for w, i, r, counts, timed in zip(works, self.warp_instructions, self.registers, per_thread, cycles,
                                          strict=True):
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
    outside the loop join the setup.
    """
    outside_cycles, _, outside_loads, trip_loads, by_warps, *setup = timed
    setup_by_warps = setup[0] if setup else ()
    if per_trip and trip_loads >= UNPIPELINED_ROUND_TRIPS:
        program = replace(program, prefetch=0)
    # round trips the program's own loads pay (Little's law): its setup's load, then each trip's
    setup_own = 1.0 if program.setup_load_bytes > 0 else 0.0
    if per_trip:
        extra = 0.0 if program.prefetch >= 1 else max(0.0, trip_loads - 1.0)
        # the set-up's compute simulated with its warps together where given, else one warp's stalls
        setup_chain = Chain(cycles=0.0 if setup_by_warps else max(0.0, outside_cycles - outside),
                            dram=max(0.0, outside_loads - setup_own))
    else:  # everything is the one trip, the setup's load included
        extra = max(0.0, outside_loads - 1.0 - setup_own)
        setup_chain = Chain()
    return replace(program, trip_chain=Chain(dram=extra), setup_chain=setup_chain, trip_cycles_by_warps=by_warps,
                   setup_cycles_by_warps=setup_by_warps if per_trip else ())


def launch_mode_of(row: dict[str, str]) -> LaunchMode:
    """The product's launch mode of a measured row: eager with the host hidden is queued."""
    mode = LaunchMode(row["launch_mode"])
    return LaunchMode.QUEUED if mode is LaunchMode.EAGER and row.get("host_gaps") == "hidden" else mode


def compare(
    row: dict[str, str], kernels: KernelKind | Sequence[KernelKind], gpu_name: str, label: str, group: str,
    fitted: bool = False,
) -> Comparison:
    """Sum of the predicted times of every launch of `kernels`, against the row's median time per op.

    A row timed with `host_gaps=hidden` in eager mode measured the GPU alone, with the host's launches issued
    ahead of it: the product's queued launch mode (`LaunchMode.QUEUED`: the GPU's own cost of a launch, measured by
    the floor probe as one empty kernel between two events). Every other row is timed in its own mode. The sum is
    what `infersim kernel` reports for the same kernels and mode; nothing is re-priced here.
    """
    gpu, calib = load_gpu(gpu_name), load_calibration(gpu_name)
    kernels = (kernels,) if isinstance(kernels, KernelKind) else tuple(kernels)
    mode = launch_mode_of(row)
    total_s, bounds = 0.0, []
    for kernel in kernels:
        for launch in kernel.launches():
            t = kernel_time(launch, gpu, calib, mode)
            total_s += t.time_s
            bounds.append((t.time_s, t.bound.value))
    return Comparison(
        label=label,
        group=group,
        launch_mode=row["launch_mode"],
        measured_s=float(row["time_s_median"]),
        predicted_s=total_s,
        bound=max(bounds)[1],
        fitted=fitted,
        kernels=kernels,
        mode=mode.value,
    )
