"""Predicted against measured for recorded kernel rows: per-row error and per-family median and p90.

Covers the `gemm` suite now; the companion-kernel suites join it with issue 6. A row recorded with
`host_gaps=hidden` timed the GPU alone, so it is compared with the prediction less its launch
overhead; other rows are compared with the whole prediction.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from hwmodels.calibration import load_calibration
from hwmodels.roofline import LaunchMode, kernel_time
from hwmodels.spec import load_gpu
from workloads.kernels import Gemm

DATA_DIR = Path(__file__).parent / "data"
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "fp8", "float32": "fp32"}


@dataclass(frozen=True)
class Comparison:
    """One measured row beside its prediction."""

    label: str
    regime: str  # "prefill" (m >= 1024) or "decode" (m < 1024): fitted or tested separately
    dtype: str
    launch_mode: str
    measured_s: float
    predicted_s: float
    bound: str

    @property
    def error(self) -> float:
        """Signed relative error of the prediction."""
        return (self.predicted_s - self.measured_s) / self.measured_s


def compare_gemm(path: Path, gpu_name: str) -> list[Comparison]:
    """Every row of a gemm.csv beside the model's prediction for the same shape and launch mode."""
    gpu, calib = load_gpu(gpu_name), load_calibration(gpu_name)
    out = []
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            m, n, k = int(row["m"]), int(row["n"]), int(row["k"])
            dtype = _TORCH_DTYPES.get(row["dtype"], row["dtype"])
            (launch,) = Gemm(m=m, n=n, k=k, dtype=dtype).launches()
            predicted = kernel_time(launch, gpu, calib, LaunchMode(row["launch_mode"]))
            gpu_only = row.get("host_gaps") == "hidden" and row["launch_mode"] == "eager"
            out.append(Comparison(
                label=f"{m}x{n}x{k}",
                regime="prefill" if m >= 1024 else "decode",
                dtype=dtype,
                launch_mode=row["launch_mode"],
                measured_s=float(row["time_s_median"]),
                predicted_s=predicted.time_s - (predicted.launch_s if gpu_only else 0.0),
                bound=predicted.bound.value,
            ))
    return out


def error_summary(rows: list[Comparison]) -> dict[str, dict[str, float]]:
    """Median and p90 absolute % error per (dtype, regime) group."""
    groups: dict[str, list[float]] = {}
    for row in rows:
        groups.setdefault(f"gemm {row.dtype} {row.regime}", []).append(abs(row.error) * 100)
    return {
        name: {"rows": len(errs), "median_abs_pct": statistics.median(errs),
               "p90_abs_pct": statistics.quantiles(errs, n=10, method="inclusive")[-1] if len(errs) > 1 else errs[0]}
        for name, errs in sorted(groups.items())
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation.report", description=__doc__.splitlines()[0])
    parser.add_argument("--hw", default="h200", help="GPU whose data folder to read (default h200)")
    args = parser.parse_args(argv)
    path = DATA_DIR / args.hw / "gemm.csv"
    if not path.exists():
        print(f"report: no measurements at {path}", file=sys.stderr)
        return 2
    rows = compare_gemm(path, args.hw)
    for row in rows:
        print(f"{row.label:>18} {row.dtype:5} {row.launch_mode:5} measured {row.measured_s * 1e6:10.1f} us  "
              f"predicted {row.predicted_s * 1e6:10.1f} us  {row.error * 100:+6.1f}%  {row.bound}")
    for name, summary in error_summary(rows).items():
        print(f"{name:24} rows {summary['rows']:3}  median |err| {summary['median_abs_pct']:5.1f}%  "
              f"p90 |err| {summary['p90_abs_pct']:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
