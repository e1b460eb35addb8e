"""The fixed cost of a vendor-library GEMM launch (`Calibration.library_gemm_setup_s`), from the gemm-floor probe.

`python -m companion.bench gemm-floor` times, graph-launched, GEMMs too small to do any work
(validation/data/<gpu>/library/gemm_floor.csv). What such a launch takes beyond the model's own time of it (its
launch, its tiles, the kernel floor), with the set-up left out, is the library kernel's set-up and completion:
the constant is the median of that excess over the probe's single-kernel rows of at most `MAX_K` depth (a few
trips of k: no work to speak of), bf16 and fp8 together. `python -m validation.gemm_floor h200` prints it.
"""

from __future__ import annotations

import csv
import dataclasses
import statistics
import sys
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
MAX_K = 256  # rows of at most this depth: at most 4 trips of a 64-deep bf16 stage


def excess(gpu_name: str) -> list[tuple[dict, float]]:
    """(probe row, measured minus the model's time without the set-up) of each single-kernel row of depth at most
    MAX_K."""
    from compiled.launch_time import launch_times
    from hwmodels.calibration import load_calibration
    from hwmodels.dtypes import Dtype
    from hwmodels.roofline import LaunchMode
    from hwmodels.spec import load_gpu
    from workloads.tiles import blas_gemm

    gpu = load_gpu(gpu_name)
    calib = dataclasses.replace(load_calibration(gpu.name), library_gemm_setup_s=0.0)
    out = []
    with open(DATA_DIR / gpu_name / "library" / "gemm_floor.csv", newline="") as f:
        for row in csv.DictReader(f):
            if ";" in row["kernels"] or int(row["k"]) > MAX_K:
                continue
            dtype = Dtype.FP8 if row["dtype"].startswith("float8") else Dtype.BF16
            kernel = blas_gemm(gpu, int(row["m"]), int(row["n"]), int(row["k"]), dtype)
            predicted = sum(t.time_s for t in launch_times(kernel, gpu, calib, LaunchMode(row["launch_mode"])))
            out.append((row, float(row["time_s_median"]) - predicted))
    return out


def derive(gpu_name: str) -> float:
    """`library_gemm_setup_s` of `gpu_name`: the median excess (`excess`)."""
    return statistics.median(e for _, e in excess(gpu_name))


if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else "h200"
    for row, extra in excess(name):
        print(f"{row['dtype']:14} {row['m']}x{row['n']}x{row['k']}: {extra * 1e6:.3f} us beyond the model")
    print(f"library_gemm_setup_us: {derive(name) * 1e6:.3f}")
