"""Predicted against measured for recorded kernel rows: per-row error and per-group median and p90.

Covers the `gemm`, `copy_grid` and `launch` suites; the companion-kernel suites join with issue 6.
No constant of the model is fitted to these rows: GEMM efficiencies and launch overheads come from
published figures or stated assumptions (hwmodels/specs, hwmodels/calibrations), so every row here
is held out. A row recorded with `host_gaps=hidden` timed the GPU alone, so an eager one is compared
with the prediction less its launch overhead; other rows are compared with the whole prediction.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

from validation import suites as companion_suites
from validation.comparison import TORCH_DTYPES, Comparison, compare
from workloads.kernels import Copy, Elementwise, Gemm

DATA_DIR = Path(__file__).parent / "data"


def _gemm(row: dict[str, str], gpu_name: str) -> Comparison:
    m, n, k = int(row["m"]), int(row["n"]), int(row["k"])
    dtype = TORCH_DTYPES.get(row["dtype"], row["dtype"])
    regime = "prefill" if m >= 1024 else "decode"
    return compare(row, Gemm(m=m, n=n, k=k, dtype=dtype), gpu_name, f"{m}x{n}x{k}", f"gemm {dtype} {regime}")


def _copy(row: dict[str, str], gpu_name: str) -> Comparison:
    size = int(row["n_elems"]) * 4  # float32
    grid = int(row["grid"]) if row["grid"] else None  # torch's own copy: its own grid
    kernel = Copy(size_bytes=size) if grid is None else Copy(size_bytes=size, bytes_per_workgroup=-(-size // grid))
    return compare(row, kernel, gpu_name, f"{row['kernel']} grid {row['grid'] or '-'}", "copy")


def _launch(row: dict[str, str], gpu_name: str) -> Comparison:
    kernel = Elementwise(elements=int(row["numel"]), inputs=1, dtype="fp32")
    return compare(row, kernel, gpu_name, f"{row['kernel']} {row['launch_mode']}", f"launch {row['launch_mode']}")


SUITES = {"gemm": _gemm, "copy_grid": _copy, "launch": _launch}


def compare_suite(path: Path, gpu_name: str) -> list[Comparison]:
    """Every row of one suite's CSV beside the model's prediction for the same shape and launch mode."""
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    one = SUITES[path.stem] if path.stem in SUITES else companion_suites.load(path.stem).compare
    return [one(row, gpu_name) for row in rows]


def error_summary(rows: list[Comparison]) -> dict[str, dict[str, float]]:
    """Median and p90 absolute % error per group."""
    groups: dict[str, list[float]] = {}
    for row in rows:
        groups.setdefault(row.group, []).append(abs(row.error) * 100)
    return {
        name: {"rows": len(errs), "median_abs_pct": statistics.median(errs),
               "p90_abs_pct": statistics.quantiles(errs, n=10, method="inclusive")[-1] if len(errs) > 1 else errs[0]}
        for name, errs in sorted(groups.items())
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation.report", description=__doc__.splitlines()[0])
    parser.add_argument("--hw", default="h200", help="GPU whose data folder to read (default h200)")
    args = parser.parse_args(argv)
    paths = [DATA_DIR / args.hw / f"{suite}.csv" for suite in (*SUITES, *companion_suites.NAMES)]
    paths = [p for p in paths if p.exists()]
    if not paths:
        print(f"report: no measurements under {DATA_DIR / args.hw}", file=sys.stderr)
        return 2
    rows = [row for path in paths for row in compare_suite(path, args.hw)]
    for row in rows:
        print(f"{row.label:>30} {row.group:18} {row.launch_mode:5} measured {row.measured_s * 1e6:10.1f} us  "
              f"predicted {row.predicted_s * 1e6:10.1f} us  {row.error * 100:+6.1f}%  {row.bound}")
    for name, summary in error_summary(rows).items():
        print(f"{name:24} rows {summary['rows']:3}  median |err| {summary['median_abs_pct']:5.1f}%  "
              f"p90 |err| {summary['p90_abs_pct']:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
