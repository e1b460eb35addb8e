"""A measured trace predicted kernel by kernel, and a calibration fitted on traces (scikit-learn's conventions).

`predict_trace` times every matched kernel group of a trace (`traces.matching`) with the model: the
launch's time without its launch overhead, since a profiler's kernel duration starts when the kernel does.
Unmatched groups keep their traced time and are reported with their share. A whole step is predicted as a
CUDA graph runs it: the predicted kernel times, the unmatched kernels' traced times, and one graph node's
overhead per launch (`predicted_step_s`).

`TraceCalibrator` fits what a calibration file can carry (`hwmodels.calibration.Calibration`): per family,
the factor on the model's launch times that makes the training traces' summed predictions equal their summed
traced times (`family_time_scale_`), and, where the steps' measured graph times are given, the graph node's
overhead that makes the predicted steps equal the measured ones in median (`launch_graph_node_s_`).
"""

from __future__ import annotations

import dataclasses
import datetime
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from compiled.launch_time import launch_times
from hwmodels.calibration import DEFAULT, Calibration
from hwmodels.interconnect import PCIE_EFFICIENCY, Fabric
from hwmodels.roofline import Bound, LaunchMode, launch_overhead_s
from hwmodels.spec import GPU
from simulator.cost.collective_policy import collective_time
from simulator.cost.workgroup_des import dispatch_s
from traces.alignment import ALIGNED, align
from traces.formats import Trace
from traces.matching import NAME, KernelGroup, match_kernels
from workloads.kernel_base import KernelKind
from workloads.step import StepPlan


@dataclass(frozen=True)
class GroupPrediction:
    """One kernel group: its traced seconds and the model's (None when the group is unmatched), and the term
    that bounds the model's time of its longest launch ("compute", "memory" or "latency")."""

    group: KernelGroup
    predicted_s: float | None
    bound: str = ""

    @property
    def key(self) -> tuple[str, str]:
        """What a calibration scales it by: (family, bound)."""
        return self.group.family, self.bound


@dataclass(frozen=True)
class FamilyTotals:
    """A family's groups in one or more traces: traced and predicted seconds of the matched ones."""

    family: str
    groups: int
    traced_s: float
    predicted_s: float
    unmatched_s: float

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted_s / self.traced_s - 1.0) if self.traced_s else float("nan")


@dataclass(frozen=True)
class TracePrediction:
    """A trace's groups with the model's times, and what a CUDA graph of the same launches would take."""

    trace: Trace
    gpu: str
    groups: tuple[GroupPrediction, ...]
    graph_node_s: float  # the model's overhead of one graph node (calibrated where the calibration sets it)

    @property
    def launches(self) -> int:
        return len(self.trace.kernels)

    @property
    def traced_s(self) -> float:
        """The traced kernels' summed durations."""
        return sum(g.group.traced_s for g in self.groups)

    @property
    def unmatched_s(self) -> float:
        return sum(g.group.traced_s for g in self.groups if g.predicted_s is None)

    @property
    def unmatched_share(self) -> float:
        return self.unmatched_s / self.traced_s if self.traced_s else 0.0

    @property
    def matched_traced_s(self) -> float:
        """The traced seconds of the groups the model predicts."""
        return sum(g.group.traced_s for g in self.groups if g.predicted_s is not None)

    @property
    def matched_predicted_s(self) -> float:
        """The model's seconds of those groups."""
        return sum(g.predicted_s for g in self.groups if g.predicted_s is not None)

    def method_shares(self) -> dict[str, float]:
        """Each way of matching (`traces.matching.SHAPES`, `LAUNCH`, `NAME`) with its share of the traced time."""
        shares: dict[str, float] = {}
        for g in self.groups:
            method = g.group.method if g.predicted_s is not None else NAME
            shares[method] = shares.get(method, 0.0) + g.group.traced_s
        total = self.traced_s
        return {m: s / total for m, s in shares.items()} if total else {}

    @property
    def predicted_kernels_s(self) -> float:
        """The matched groups' predicted seconds plus the unmatched groups' traced seconds."""
        return sum(g.predicted_s if g.predicted_s is not None else g.group.traced_s for g in self.groups)

    @property
    def predicted_step_s(self) -> float:
        """The launches as one CUDA graph: kernels back to back, one node's overhead each."""
        return self.predicted_kernels_s + self.launches * self.graph_node_s

    def by_family(self) -> dict[str, FamilyTotals]:
        return family_totals([self])

    def unmatched(self) -> list[tuple[str, str, int, float]]:
        """(kernel name, reason, groups, traced seconds) of the unmatched groups, largest first."""
        rows: dict[tuple[str, str], list] = {}
        for g in self.groups:
            if g.predicted_s is None:
                row = rows.setdefault((g.group.name, g.group.reason), [0, 0.0])
                row[0] += 1
                row[1] += g.group.traced_s
        return sorted(((n, r, c, s) for (n, r), (c, s) in rows.items()), key=lambda x: -x[3])


def family_totals(predictions: Sequence[TracePrediction]) -> dict[str, FamilyTotals]:
    """Per family, over the traces: groups, traced and predicted seconds of the matched, traced of the unmatched."""
    acc: dict[str, list] = {}
    for p in predictions:
        for g in p.groups:
            row = acc.setdefault(g.group.family, [0, 0.0, 0.0, 0.0])
            row[0] += 1
            if g.predicted_s is None:
                row[3] += g.group.traced_s
            else:
                row[1] += g.group.traced_s
                row[2] += g.predicted_s
    return {f: FamilyTotals(f, *row) for f, row in sorted(acc.items(), key=lambda kv: -(kv[1][1] + kv[1][3]))}


def kind_busy_s(kind: KernelKind, gpu: GPU, calib: Calibration, launch: int | None = None) -> tuple[float, str]:
    """The model's seconds of a kind's launches (or of its `launch`-th alone) without their launch overheads (a
    profiler's kernel time), and the bound of the longest launch."""
    total, longest, bound = 0.0, -1.0, ""
    times = launch_times(kind, gpu, calib, LaunchMode.GRAPH, dispatch_s)
    for t in times if launch is None else times[launch:launch + 1]:
        busy = t.time_s - t.launch_s
        total += busy
        if busy > longest:
            longest, bound = busy, (t.bound.value if t.bound is not Bound.LAUNCH else "latency")
    return total, bound


def predict_trace(trace: Trace, gpu: GPU, calib: Calibration, fabric: Fabric | None = None,
                  group_size: int | None = None, plan: StepPlan | None = None) -> TracePrediction:
    """Every kernel group of the trace with the model's time on `gpu` under `calib`; collectives over
    `group_size` ranks on `fabric` (without them, collectives stay unpredicted). With `plan` (the step the trace
    ran), kernels that neither shapes nor their launch size take the launch they align with in the plan's order
    (`traces.alignment`)."""
    memo: dict[tuple[KernelKind, int | None], tuple[float, str]] = {}  # a step repeats its shapes layer by layer
    node_s = launch_overhead_s(gpu, calib, LaunchMode.GRAPH)

    def predicted(group: KernelGroup) -> GroupPrediction:
        if group.host_copy_bytes is not None:  # over the host link at the rate the serving loop's KV offload takes
            return GroupPrediction(group, group.host_copy_bytes / (gpu.host_link_bytes_per_s * PCIE_EFFICIENCY),
                                   "memory")
        if group.collective is not None and fabric is not None:
            # the collective's time less one launch: a profiler's kernel starts when the kernel does
            t = collective_time(group.collective, fabric, gpu, calib, mode=LaunchMode.GRAPH).time_s
            return GroupPrediction(group, max(t - node_s, 0.0), "latency")
        if group.kernel is None:
            if group.collective is not None:
                group = dataclasses.replace(group, collective=None, reason="a collective needs the platform's "
                                                                          "links")
            return GroupPrediction(group, None)
        key = (group.kernel, group.launch)
        if key not in memo:
            memo[key] = kind_busy_s(group.kernel, gpu, calib, group.launch)
        return GroupPrediction(group, *memo[key])

    matched = match_kernels(trace.kernels, gpu, group_size)
    if plan is not None:
        matched = _aligned(matched, trace, plan, gpu)
    groups = tuple(predicted(g) for g in matched)
    return TracePrediction(trace, gpu.name, groups, node_s)


def _aligned(groups: list[KernelGroup], trace: Trace, plan: StepPlan, gpu: GPU) -> list[KernelGroup]:
    """The groups with each unmatched one that aligns with a launch of the plan taking that launch's kind."""
    placed, _ = align(trace.kernels, plan, gpu)
    out, start = [], 0
    for group in groups:
        planned = placed.get(start)
        start += len(group.kernels)
        if group.matched or planned is None:
            out.append(group)
        elif planned.kind is not None:
            out.append(dataclasses.replace(group, family=planned.family, kernel=planned.kind, reason="",
                                           method=ALIGNED, launch=planned.launch))
        else:
            out.append(dataclasses.replace(group, family="collective", collective=planned.collective, reason="",
                                           method=ALIGNED))
    return out


class TraceCalibrator:
    """Fits a calibration's time factors per family and bound (and the graph node's overhead) on predicted traces.

    `fit(predictions, step_times_s=None)` returns self. `family_time_scale_[family][bound]` is the summed
    traced over the summed predicted time of the training groups of that family and bound (`default`: of the
    whole family), for the keys with at least `min_groups` matched groups; `launch_graph_node_s_` (None
    without step times) is the graph node's overhead that makes the calibrated steps match the measured ones
    in median. `predict(prediction)` is a trace's predicted graph step in seconds with them applied;
    `calibration(base, fitted_on)` is `base` with them set.
    """

    def __init__(self, min_groups: int = 3):
        self.min_groups = min_groups

    def fit(self, predictions: Sequence[TracePrediction], step_times_s: Sequence[float] | None = None
            ) -> TraceCalibrator:
        if not predictions:
            raise ValueError("fit needs at least one predicted trace")
        sums: dict[tuple[str, str], list] = {}
        for p in predictions:
            for g in p.groups:
                if g.predicted_s is None or g.group.family in ("unknown", "collective"):
                    continue
                for key in (g.key, (g.group.family, DEFAULT)):
                    row = sums.setdefault(key, [0, 0.0, 0.0])
                    row[0] += 1
                    row[1] += g.group.traced_s
                    row[2] += g.predicted_s
        scales: dict[str, dict[str, float]] = {}
        for (family, bound), (n, traced, predicted) in sorted(sums.items()):
            if n >= self.min_groups and predicted > 0:
                scales.setdefault(family, {})[bound] = traced / predicted
        self.family_time_scale_ = scales
        self.launch_graph_node_s_ = None
        if step_times_s is not None:
            if len(step_times_s) != len(predictions):
                raise ValueError(f"{len(step_times_s)} step times for {len(predictions)} traces")
            # what a graph adds per launch beyond the kernels' own times, per step, in median
            gaps = [(measured - self._kernels_s(p)) / p.launches for p, measured in
                    zip(predictions, step_times_s, strict=True)]
            self.launch_graph_node_s_ = max(0.0, statistics.median(gaps))
        return self

    def scale(self, family: str, bound: str) -> float:
        table = self.family_time_scale_.get(family, {})
        return table.get(bound, table.get(DEFAULT, 1.0))

    def _kernels_s(self, p: TracePrediction) -> float:
        return sum(g.predicted_s * self.scale(*g.key) if g.predicted_s is not None else g.group.traced_s
                   for g in p.groups)

    def predict(self, prediction: TracePrediction) -> float:
        node = self.launch_graph_node_s_ if self.launch_graph_node_s_ is not None else prediction.graph_node_s
        return self._kernels_s(prediction) + prediction.launches * node

    def calibration(self, base: Calibration, fitted_on: str) -> Calibration:
        changes: dict = {"family_time_scale": {f: dict(t) for f, t in self.family_time_scale_.items()},
                         "fitted_on": fitted_on}
        if self.launch_graph_node_s_ is not None:
            changes["launch_graph_node_s"] = self.launch_graph_node_s_
        return dataclasses.replace(base, **changes)


def calibration_yaml(calibrator: TraceCalibrator, gpu: str, train: Sequence[str], test: Sequence[str],
                     summary: Mapping[str, float], compared: str) -> dict:
    """A calibration overlay (the YAML `--calibration` reads) of what `calibrator` fitted, with its provenance."""
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    names = ", ".join(Path(t).name for t in train)
    fitted = (f"infersim calibrate --hw {gpu}, {when}: fitted on {len(train)} traces ({names}); "
              f"tested on {len(test)} others ({', '.join(Path(t).name for t in test) or 'none'}); "
              + "; ".join(f"{k} {v:.4g}" for k, v in summary.items()) + f" (against the {compared})")
    out: dict = {"name": f"{gpu}-fitted", "gpu": gpu, "fitted_on": fitted, "family_time_scale": {
        f: {b: {"value": round(v, 4), "source": f"sum of traced over sum of predicted times of the {f} launches "
                                                 f"{'of every bound' if b == DEFAULT else f'bound by {b}'} in the "
                                                 f"{len(train)} training traces"}
            for b, v in table.items()}
        for f, table in sorted(calibrator.family_time_scale_.items())}}
    if calibrator.launch_graph_node_s_ is not None:
        out["launch_graph_node_us"] = {
            "value": round(calibrator.launch_graph_node_s_ * 1e6, 4),
            "source": "median over the training steps of (measured graph step - calibrated kernels) / launches"}
    return out
