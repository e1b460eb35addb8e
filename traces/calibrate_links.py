"""Fit a platform's collective-library protocols to measured NCCL all-reduce times, holding half out.

    infersim validate --links h200-2            # the current calibration's error on every row, train and held out
    infersim validate --links h200-2 --refit    # fit again, write the calibration, then the same errors

Training rows: all-reduce in graph launch mode (how engines replay decode collectives) at the even
powers of two (4 KiB, 16 KiB, ..., 1 GiB). Test rows: the odd powers, and all-gather and
reduce-scatter at every size, which the fit never sees. The per-step latency of both protocols is the
platform's one-hop link latency (its spec); the fit finds each protocol's fixed latency and bandwidth
share, minimising squared log error for each candidate switch size, and keeps the best. The result
is written to `hwmodels/calibrations/libraries/<platform>.yaml` with its provenance.

The measured sweeps are validation's data (`validation.collective_sweep.NCCL_SWEEPS`, platform -> CSV); their
paths are passed in.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hwmodels.calibration import load_calibration
from hwmodels.interconnect import build_fabric
from hwmodels.library import LIBRARY_DIR, CollectiveLibrary, load_library
from hwmodels.output_files import write_text_atomic
from hwmodels.roofline import LaunchMode, launch_overhead_s
from hwmodels.spec import load_gpu, load_platform
from simulator.cost.collective_algorithms import ring_time
from workloads.collectives import CollectiveOp

OPS = {"nccl_all_reduce": CollectiveOp.ALL_REDUCE, "nccl_all_gather": CollectiveOp.ALL_GATHER,
       "nccl_reduce_scatter": CollectiveOp.REDUCE_SCATTER}


@dataclass(frozen=True)
class Row:
    op: CollectiveOp
    size_bytes: int
    world: int
    measured_s: float

    @property
    def trains(self) -> bool:
        """All-reduce at even powers of two trains the fit; everything else tests it."""
        return self.op is CollectiveOp.ALL_REDUCE and int(math.log2(self.size_bytes)) % 2 == 0


def read_rows(path: Path, mode: str = "graph") -> list[Row]:
    with path.open(newline="") as handle:
        return [Row(OPS[r["kernel"]], int(r["size_bytes"]), int(r["world_size"]), float(r["time_s_median"]))
                for r in csv.DictReader(handle) if r["kernel"] in OPS and r["launch_mode"] == mode]


def predict(rows: list[Row], library: CollectiveLibrary, platform_name: str) -> list[float]:
    platform = load_platform(platform_name)
    gpu = load_gpu(platform.gpu)
    fabric = build_fabric(platform, gpu)
    launch = launch_overhead_s(gpu, load_calibration(gpu.name), LaunchMode.GRAPH)
    return [ring_time(r.op, r.size_bytes, r.world, fabric, library, launch).time_s for r in rows]


def fit(rows: list[Row], platform_name: str, train: Callable[[Row], bool] | None = None) -> CollectiveLibrary:
    """Least squares in log time over (latencies, efficiencies) for each switch size; the best wins.

    `train` picks the rows that fit (default: `Row.trains`, all-reduce at even powers of two)."""
    from scipy.optimize import least_squares

    train = [r for r in rows if (train or Row.trains.fget)(r)]
    measured = np.log([r.measured_s for r in train])
    step_s = load_platform(platform_name).link_latency_s
    best: tuple[float, CollectiveLibrary] | None = None
    for exponent in range(12, 31):
        switch = float(2**exponent)

        def residual(p: np.ndarray, switch: float = switch) -> np.ndarray:
            return np.log(predict(train, _library("fit", p, step_s, switch), platform_name)) - measured

        result = least_squares(residual, x0=[5.0, 0.4, 5.0, 0.8], bounds=([0, 0.01, 0, 0.01], [100, 1, 100, 1]))
        library = _library(platform_name, result.x, step_s, switch)
        cost = float(np.sum(result.fun**2))
        if best is None or cost < best[0]:
            best = (cost, library)
    if best is None:
        raise ValueError("no training rows")
    return best[1]


def _library(name: str, p: np.ndarray, step_s: float, switch: float) -> CollectiveLibrary:
    """p: small fixed latency (in us, the fit's scale) and share, large fixed latency (us) and share."""
    return CollectiveLibrary(name, p[0] * 1e-6, step_s, p[1], p[2] * 1e-6, step_s, p[3], switch)


def write_library(library: CollectiveLibrary, source: str) -> Path:
    """The fitted constants as a YAML overlay, written atomically."""
    target = LIBRARY_DIR / f"{library.name}.yaml"
    note = f"fitted by infersim validate --links {library.name} --refit on {source}"
    step_note = f"not fitted: the platform spec's link_latency_us ({library.name}.yaml)"
    lines = [
        f"# {library.name}: collective-library protocols {note}. Do not edit by hand; re-run the fit.",
        f"name: {library.name}",
        f'small_latency_us: {{value: {library.small_latency_s * 1e6:.4f}, source: "{note}"}}',
        f'small_step_latency_us: {{value: {library.small_step_latency_s * 1e6:.4f}, source: "{step_note}"}}',
        f'small_efficiency: {{value: {library.small_efficiency:.4f}, source: "{note}"}}',
        f'large_latency_us: {{value: {library.large_latency_s * 1e6:.4f}, source: "{note}"}}',
        f'large_step_latency_us: {{value: {library.large_step_latency_s * 1e6:.4f}, source: "{step_note}"}}',
        f'large_efficiency: {{value: {library.large_efficiency:.4f}, source: "{note}"}}',
        f'protocol_switch_bytes: {{value: {int(library.protocol_switch_bytes)}, source: "{note}"}}',
    ]
    write_text_atomic(target, "\n".join(lines) + "\n")
    return target


def errors(rows: list[Row], library: CollectiveLibrary, platform_name: str) -> list[dict[str, object]]:
    """Each row's measured and predicted time and signed % error, and whether it trained the fit."""
    return [{"op": row.op.value, "size_bytes": row.size_bytes, "measured_s": row.measured_s, "predicted_s": predicted,
             "error_pct": (predicted - row.measured_s) / row.measured_s * 100, "train": row.trains}
            for row, predicted in zip(rows, predict(rows, library, platform_name), strict=True)]


def group_errors(per_row: list[dict[str, object]]) -> list[dict[str, object]]:
    """Median and largest absolute % error of each op's training rows and of its held-out rows."""
    groups: dict[str, list[float]] = {}
    for row in per_row:
        groups.setdefault(f"{row['op']} {'train' if row['train'] else 'held-out'}", []).append(abs(row["error_pct"]))
    return [{"group": group, "rows": len(magnitudes), "median_abs_pct": statistics.median(magnitudes),
             "max_abs_pct": max(magnitudes)} for group, magnitudes in groups.items()]


def check(platform_name: str, sweeps: Mapping[str, Path], refit: bool = False) -> dict[str, object]:
    """The calibration's errors on the platform's measured sweep (`sweeps`: platform -> its NCCL CSV); with
    `refit`, fit it first and write it."""
    if platform_name not in sweeps:
        raise ValueError(f"no NCCL measurements for --links {platform_name!r}; recorded: {', '.join(sorted(sweeps))}")
    rows = read_rows(sweeps[platform_name])
    data = sweeps[platform_name].relative_to(Path(__file__).parent.parent)
    result: dict[str, object] = {"platform": platform_name, "data": str(data)}
    if refit:
        library = fit(rows, platform_name)
        source = f"{data}: nccl_all_reduce, graph, even powers of two 4 KiB-1 GiB"
        result["written"] = str(write_library(library, source))
    else:
        library = load_library(platform_name)
    per_row = errors(rows, library, platform_name)
    return {**result, "groups": group_errors(per_row), "every_row": per_row}
