"""Predicted against measured for recorded kernel rows: per-row error and per-group median and p90.

Covers the built-in suites (`gemm`, `copy_grid`, `launch`), the companion-kernel suites
(`validation.suites`) and the two-GPU collective sweeps (`validation.collective_report`). GEMM
efficiencies and launch overheads come from published figures or stated assumptions
(hwmodels/specs, hwmodels/calibrations), so those rows are held out; rows that fitted a constant
(the NCCL library protocols, the occupancy probe's anchor row) carry `fitted` and are summarized apart.
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


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1] if len(values) > 1 else values[0]


def error_summary(rows: list[Comparison]) -> dict[str, dict[str, float]]:
    """Per group: row counts, and the median and p90 absolute % error of its held-out rows.

    Rows used to fit a constant (`fitted`) are counted apart and summarized apart; a group whose rows
    were all fitted reports their errors under `fitted_median_abs_pct` only.
    """
    groups: dict[str, list[Comparison]] = {}
    for row in rows:
        groups.setdefault(row.group, []).append(row)
    out: dict[str, dict[str, float]] = {}
    for name, members in sorted(groups.items()):
        held = [abs(r.error) * 100 for r in members if not r.fitted]
        fitted = [abs(r.error) * 100 for r in members if r.fitted]
        entry: dict[str, float] = {"rows": len(members), "held_out_rows": len(held), "fitted_rows": len(fitted)}
        if held:
            signed = statistics.median(r.error * 100 for r in members if not r.fitted)
            entry |= {"median_abs_pct": statistics.median(held), "p90_abs_pct": _p90(held),
                      "median_signed_pct": signed}  # < 0: the model predicts faster than measured
        if fitted:
            entry |= {"fitted_median_abs_pct": statistics.median(fitted), "fitted_p90_abs_pct": _p90(fitted)}
        out[name] = entry
    return out


def compare_all(hw: str) -> list[Comparison]:
    """Every recorded row of a GPU: its kernel suites, and its two-GPU collective sweeps if any."""
    from validation.collective_report import compare_collectives

    paths = [DATA_DIR / hw / f"{suite}.csv" for suite in (*SUITES, *companion_suites.NAMES)]
    rows = [row for path in paths if path.exists() for row in compare_suite(path, hw)]
    return rows + compare_collectives(f"{hw}x2")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation.report", description=__doc__.splitlines()[0])
    parser.add_argument("--hw", default="h200", help="GPU whose data folder to read (default h200)")
    parser.add_argument("--write", action="store_true", help="regenerate validation/REPORT.md and its figure")
    args = parser.parse_args(argv)
    rows = compare_all(args.hw)
    if not rows:
        print(f"report: no measurements under {DATA_DIR / args.hw}", file=sys.stderr)
        return 2
    for row in rows:
        print(f"{row.label:>34} {row.group:28} {row.launch_mode:5} measured {row.measured_s * 1e6:10.1f} us  "
              f"predicted {row.predicted_s * 1e6:10.1f} us  {row.error * 100:+6.1f}%  {row.bound}"
              f"{'  (fitted)' if row.fitted else ''}")
    for name, summary in error_summary(rows).items():
        held = (f"median |err| {summary['median_abs_pct']:5.1f}%  p90 |err| {summary['p90_abs_pct']:5.1f}%"
                if "median_abs_pct" in summary else "no held-out rows")
        print(f"{name:30} rows {summary['rows']:3} (fitted {summary['fitted_rows']:2})  {held}")
    if args.write:
        from validation.report_document import write_report

        for path in write_report(args.hw, rows):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
