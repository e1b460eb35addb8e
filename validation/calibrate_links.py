"""Fit a platform's collective-library protocols to measured NCCL all-reduce times, holding half out.

    python -m validation.calibrate_links --platform h200-2            # fit, write, report held-out errors
    python -m validation.calibrate_links --platform h200-2 --check    # report only, write nothing

Training rows: all-reduce in graph launch mode (how engines replay decode collectives) at the even
powers of two (4 KiB, 16 KiB, ..., 1 GiB). Test rows: the odd powers, and all-gather and
reduce-scatter at every size, which the fit never sees. The per-step latency of both protocols is the
platform's one-hop link latency (its spec); the fit finds each protocol's fixed latency and bandwidth
share, minimising squared log error for each candidate switch size, and keeps the best. The result
is written to `hwmodels/calibrations/libraries/<platform>.yaml` with its provenance.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hwmodels.calibration import load_calibration
from hwmodels.interconnect import build_fabric
from hwmodels.library import LIBRARY_DIR, CollectiveLibrary
from hwmodels.roofline import LaunchMode, launch_overhead_s
from hwmodels.spec import load_gpu, load_platform
from simulator.cost.collective_algorithms import ring_time
from validation.measure_output import write_text_atomic
from workloads.collectives import CollectiveOp

DATA = {"h200-2": Path(__file__).parent / "data" / "h200x2" / "collectives_nccl.csv"}
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


def fit(rows: list[Row], platform_name: str) -> CollectiveLibrary:
    """Least squares in log time over (latencies, efficiencies) for each switch size; the best wins."""
    from scipy.optimize import least_squares

    train = [r for r in rows if r.trains]
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
    note = f"fitted by python -m validation.calibrate_links on {source}"
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


def report(rows: list[Row], library: CollectiveLibrary, platform_name: str) -> dict[str, list[float]]:
    """Signed % error per row, printed, and grouped as train / held-out per op."""
    groups: dict[str, list[float]] = {}
    for row, predicted in zip(rows, predict(rows, library, platform_name), strict=True):
        error = (predicted - row.measured_s) / row.measured_s * 100
        group = f"{row.op.value} {'train' if row.trains else 'held-out'}"
        groups.setdefault(group, []).append(error)
        print(f"{row.op.value:14} {row.size_bytes:>11} measured {row.measured_s * 1e6:9.1f} us "
              f"predicted {predicted * 1e6:9.1f} us {error:+6.1f}% {'train' if row.trains else ''}")
    for group, errors in groups.items():
        magnitudes = [abs(e) for e in errors]
        print(f"{group:24} rows {len(errors):2}  median |err| {statistics.median(magnitudes):5.1f}%  "
              f"max |err| {max(magnitudes):5.1f}%")
    return groups


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation.calibrate_links", description=__doc__.splitlines()[0])
    parser.add_argument("--platform", default="h200-2", choices=sorted(DATA))
    parser.add_argument("--check", action="store_true", help="report the current calibration; write nothing")
    args = parser.parse_args(argv)
    rows = read_rows(DATA[args.platform])
    if args.check:
        from hwmodels.library import load_library

        library = load_library(args.platform)
    else:
        library = fit(rows, args.platform)
        data = DATA[args.platform].relative_to(Path(__file__).parent.parent)
        path = write_library(library, f"{data}: nccl_all_reduce, graph, even powers of two 4 KiB-1 GiB")
        print(f"wrote {path}")
    report(rows, library, args.platform)
    return 0


if __name__ == "__main__":
    sys.exit(main())
