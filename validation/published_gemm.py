"""Published block-scaled FP8 GEMM kernel times on the MI300X and MI355X (`published/aiter_gemm.csv`) against the
product's GEMM.

AITER's GEMM tuner commits, for each shape of DeepSeek-V3/R1's dense projections it tuned for, the kernel it chose
and the time it measured (`aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_ds_v3.csv`): per GPU (gfx942 on
304 CUs, gfx950 on 256), token count M and weight shape N x K. Its method (`aiter/utility/mp_tuner.py`,
`aiter/test_common.py: perftest`): kernel durations from PyTorch's profiler, the mean of 101 runs after warm-up, on
inputs rotated to exceed the caches. Nothing is fitted to the times.

Each row is priced as the engine prices a dense FP8 projection: `workloads.tiles.blas_gemm` (the tile and split
of the product's one GEMM policy), its own execution without the launch cost, as `infersim kernel --hw GPU gemm
--param m=M --param n=N --param k=K --param dtype=fp8 --launch graph` reports it less its `launch_s`.
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path

TABLE = Path(__file__).parent / "published" / "aiter_gemm.csv"
TOKEN_BANDS = (64, 1024)  # decode batches; mid-size; prefill chunks


@dataclass(frozen=True)
class GemmRow:
    """One published row beside its prediction."""

    gpu: str
    m: int
    n: int
    k: int
    measured_s: float
    predicted_s: float

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0

    @property
    def label(self) -> str:
        return f"{self.gpu} fp8 {self.m}x{self.n}x{self.k}"


def compare() -> list[GemmRow]:
    """Every row of the table against the product's GEMM at its shape."""
    from compiled.launch_time import launch_times
    from hwmodels.calibration import load_calibration
    from hwmodels.dtypes import Dtype
    from hwmodels.roofline import LaunchMode
    from hwmodels.spec import load_gpu
    from workloads.tiles import blas_gemm

    out = []
    with TABLE.open(newline="") as f:
        for row in csv.DictReader(f):
            gpu = load_gpu(row["gpu"])
            calib = load_calibration(gpu.name)
            m, n, k = int(row["m"]), int(row["n"]), int(row["k"])
            kernel = blas_gemm(gpu, m, n, k, Dtype(row["dtype"]))
            predicted = sum(t.time_s - t.launch_s for t in launch_times(kernel, gpu, calib, LaunchMode.QUEUED))
            out.append(GemmRow(row["gpu"], m, n, k, float(row["us"]) * 1e-6, predicted))
    return out


def band(m: int) -> str:
    """The token band of a row: decode batches, mid-size, prefill chunks."""
    low, high = TOKEN_BANDS
    return f"m <= {low}" if m <= low else f"{low} < m <= {high}" if m <= high else f"m > {high}"


def summary(rows: list[GemmRow]) -> list[dict[str, object]]:
    """Per GPU and token band: rows, median |error|, p90 |error| and signed median."""
    groups: dict[tuple[str, int, str], list[GemmRow]] = {}
    for r in rows:
        groups.setdefault((r.gpu, sum(r.m > b for b in TOKEN_BANDS), band(r.m)), []).append(r)
    out = []
    for (gpu, _, tokens), members in sorted(groups.items()):
        errors = sorted(abs(r.error) for r in members)
        out.append({"gpu": gpu, "tokens": tokens, "rows": len(members),
                    "median_abs_pct": 100 * statistics.median(errors),
                    "p90_abs_pct": 100 * errors[min(len(errors) - 1, int(0.9 * len(errors)))],
                    "median_signed_pct": 100 * statistics.median(r.error for r in members)})
    return out
