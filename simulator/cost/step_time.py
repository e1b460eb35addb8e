"""Time of one engine step's plan: its kernels and collectives in order on every rank.

Ranks are symmetric (the busiest DCP rank is the one modelled), so a collective starts when the
modelled rank reaches it and no rank waits on a slower one. Collectives serialize with compute
unless the deployment overlaps them (`KernelOptions.overlap_collectives`): then the step takes the
longer of the two streams, the optimistic bound of a perfect overlap (`step_total_s`, the one place
that rule is written).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from compiled.launch_time import launch_works
from hwmodels.calibration import Calibration
from hwmodels.interconnect import Fabric
from hwmodels.roofline import kernel_busy, launch_overhead_s
from hwmodels.spec import GPU
from hwmodels.work import Work
from simulator.cost.collective_policy import collective_time
from simulator.cost.workgroup_des import dispatch_s
from workloads.codecs import Codec
from workloads.kernel_base import KernelKind
from workloads.step import StepItem, StepPlan


@dataclass(frozen=True)
class StepTime:
    """A step's (or a part of a step's) time and its breakdown, in seconds."""

    total_s: float
    kernel_s: float
    collective_s: float
    by_family_s: dict[str, float]
    by_collective_s: dict[str, float]  # keyed "allreduce:ring", "allgather:ring", ...
    kernel_launches: int


def step_total_s(kernel_s: float, collective_s: float, overlap_collectives: bool) -> float:
    """A step's seconds from its compute and collective streams: serialized, or perfectly overlapped."""
    return max(kernel_s, collective_s) if overlap_collectives else kernel_s + collective_s


@dataclass
class TimedItems:
    """Times of kernels and collectives already costed: a step repeats the same shapes layer after layer."""

    kernels: dict[KernelKind, list[tuple[str, float]]] = field(default_factory=dict)
    collectives: dict[tuple, list[tuple[str, float]]] = field(default_factory=dict)  # by (op, payload, group)
    # (family, busy seconds, launched through Triton's launcher) of each launch of a kernel (`kernel_busy`): the
    # same in every launch mode, so the memos of one deployment's graph and eager timings may share it
    busy: dict[KernelKind, list[tuple[str, float, bool]]] = field(default_factory=dict)
    # `kernel_busy` seconds of each launch by its `Work.value_key`: distinct kernels often launch the same work
    launch_busy: dict[tuple, float] = field(default_factory=dict)


def timed_items(plan: StepPlan, fabric: Fabric, calib: Calibration, quickreduce: Codec | None = None,
                timed: TimedItems | None = None) -> Iterator[tuple[StepItem, list[tuple[str, float]]]]:
    """Every item of a step plan in order with (family, seconds) of each of its kernel launches, or a collective's
    one ("op:algorithm", seconds): the one loop that times a plan. The lists are the memo's: read, never change."""
    d = plan.deployment
    mode = d.options.launch
    timed = timed if timed is not None else TimedItems()
    for item in plan.items:
        if item.kernel is not None:
            launched = timed.kernels.get(item.kernel)
            if launched is None:
                busy = timed.busy.get(item.kernel)
                if busy is None:
                    busy = timed.busy[item.kernel] = [
                        (w.family.value if w.family else "other", _busy_s(w, d.gpu, calib, timed.launch_busy),
                         w.triton_launch and w.workgroups > 0) for w in launch_works(item.kernel, d.gpu)]
                # as `kernel_time` adds them: the busy time, then the launch in the deployment's mode
                launched = timed.kernels[item.kernel] = [
                    (family, busy_s + launch_overhead_s(d.gpu, calib, mode, triton)) for family, busy_s, triton in busy]
        else:
            c = item.collective
            key = (c.op, c.payload_bytes, c.group_size)  # the purpose does not time it
            launched = timed.collectives.get(key)
            if launched is None:
                result = collective_time(c, fabric, d.gpu, calib, mode=mode, quickreduce=quickreduce)
                launched = timed.collectives[key] = [(f"{c.op.value}:{result.algorithm.value}", result.time_s)]
        yield item, launched


def _busy_s(work: Work, gpu: GPU, calib: Calibration, memo: dict[tuple, float]) -> float:
    """`kernel_busy` seconds of one launch, memoized by the launch's value."""
    key = work.value_key()
    busy_s = memo.get(key)
    if busy_s is None:
        busy_s = memo[key] = kernel_busy(work, gpu, calib, dispatch_s).time_s
    return busy_s


def time_plan(plan: StepPlan, fabric: Fabric, calib: Calibration, quickreduce: Codec | None = None,
              timed: TimedItems | None = None) -> StepTime:
    """Every kernel launch and collective of a step plan, timed and summed per family."""
    by_family: dict[str, float] = {}
    by_collective: dict[str, float] = {}
    kernel_s = collective_s = 0.0
    launches = 0
    for item, launched in timed_items(plan, fabric, calib, quickreduce, timed):
        if item.kernel is not None:
            for family, t in launched:
                by_family[family] = by_family.get(family, 0.0) + t
                kernel_s += t
            launches += len(launched)
        else:
            label, t = launched[0]
            by_collective[label] = by_collective.get(label, 0.0) + t
            collective_s += t
    total = step_total_s(kernel_s, collective_s, plan.deployment.options.overlap_collectives)
    return StepTime(total, kernel_s, collective_s, by_family, by_collective, launches)


@dataclass(frozen=True)
class TimedLaunch:
    """One kernel launch or collective of a step plan, in plan order, with its predicted seconds."""

    item: StepItem
    launch: int  # which of the item's kernel launches (0 for a collective)
    label: str  # the launch's kernel family, or a collective's "op:algorithm"
    time_s: float


def timed_launches(plan: StepPlan, fabric: Fabric, calib: Calibration, quickreduce: Codec | None = None,
                   timed: TimedItems | None = None) -> Iterator[TimedLaunch]:
    """The launches of `timed_items` one by one, for a timeline."""
    for item, launched in timed_items(plan, fabric, calib, quickreduce, timed):
        for index, (label, t) in enumerate(launched):
            yield TimedLaunch(item, index, label, t)


COMPUTE, COLLECTIVES = "compute", "collectives"  # the streams of a step's timeline


@dataclass(frozen=True)
class PlacedLaunch:
    """A timed launch on the step's timeline: its stream and its start, in seconds from the step's start."""

    timed: TimedLaunch
    stream: str  # COMPUTE or COLLECTIVES
    start_s: float

    @property
    def end_s(self) -> float:
        return self.start_s + self.timed.time_s


def place(launches: Iterable[TimedLaunch], overlap_collectives: bool) -> list[PlacedLaunch]:
    """The step's timeline: kernels back to back on the compute stream, each collective on its own stream.

    Serialized (the default), a collective starts where the plan issues it and compute waits for it, so the
    timeline ends at `step_total_s`. Overlapped, compute runs on and a collective starts at its issue or when the
    previous one ends; `step_total_s` takes the longer stream (a perfect overlap, which does not wait for the
    issue), so this timeline can end later than it.
    """
    placed = []
    compute_s = collective_s = 0.0  # where each stream is free
    for t in launches:
        if t.item.kernel is not None:
            placed.append(PlacedLaunch(t, COMPUTE, compute_s))
            compute_s += t.time_s
        else:
            start = max(compute_s, collective_s)
            placed.append(PlacedLaunch(t, COLLECTIVES, start))
            collective_s = start + t.time_s
            if not overlap_collectives:
                compute_s = collective_s
    return placed


def weighted_sum(parts: Iterable[tuple[StepTime, int]], overlap_collectives: bool) -> StepTime:
    """Parts repeated by their weights (layers that share a signature), as one step's time."""
    kernel_s = collective_s = 0.0
    launches = 0
    by_family: dict[str, float] = {}
    by_collective: dict[str, float] = {}
    for part, weight in parts:
        kernel_s += weight * part.kernel_s
        collective_s += weight * part.collective_s
        launches += weight * part.kernel_launches
        for key, value in part.by_family_s.items():
            by_family[key] = by_family.get(key, 0.0) + weight * value
        for key, value in part.by_collective_s.items():
            by_collective[key] = by_collective.get(key, 0.0) + weight * value
    return StepTime(step_total_s(kernel_s, collective_s, overlap_collectives), kernel_s, collective_s,
                    by_family, by_collective, launches)
