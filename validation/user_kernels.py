"""Kernels a user writes, predicted with `infersim kernel --triton` and measured on a GPU: the test of that option.

The kernels are `compiled/examples/triton_kernels.py`; `CASES` are the grids and arguments they were measured at
(`python -m companion.bench user-kernels`, graph-launched, CSV in validation/data/<gpu>/user_kernels/). Nothing
in the model was fitted to these rows: the kernels are not companion kernels, and their shapes were chosen before
any was predicted. `python -m validation.user_kernels [--hw h200]` prints each row measured beside predicted, and
the median and p90 |error|.

The prediction compiles each kernel with the Triton installed here, the measurement ran the GPU machine's Triton:
the CSV's `triton` column says which, and a row whose compiler differs from the one predicting is flagged.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from compiled import examples

KERNELS_FILE = Path(examples.__file__).parent / "triton_kernels.py"
DATA_DIR = Path(__file__).resolve().parent / "data"
CSV_NAME = "user_kernels.csv"
COLUMNS = ("kernel", "grid", "args", "num_warps", "num_stages", "launch_mode", "time_s_median", "time_s_p10",
           "time_s_p90", "repeats", "launches_per_sample", "rel_err", "gpu_name", "sm_count", "driver", "torch",
           "triton", "cuda", "date")


@dataclass(frozen=True)
class Case:
    """One launch of a user kernel: its grid and `--arg` strings, as `infersim kernel --triton` takes them."""

    kernel: str
    grid: tuple[int, ...]
    args: tuple[str, ...]
    num_warps: int = 4
    num_stages: int = 3

    @property
    def grid_text(self) -> str:
        return ",".join(str(g) for g in self.grid)


def _matmul(m: int, n: int, k: int, tile: int, block_k: int, warps: int) -> Case:
    args = (f"a=bf16[{m},{k}]", f"b=bf16[{k},{n}]", f"c=bf16[{m},{n}]", f"M={m}", f"N={n}", f"K={k}", f"sam={k}",
            "sak=1", f"sbk={n}", "sbn=1", f"scm={n}", "scn=1", f"BM={tile}", f"BN={tile}", f"BK={block_k}")
    return Case("matmul", (-(-m // tile), -(-n // tile)), args, warps)


def _rows(kernel: str, rows: int, cols: int, block: int, dtype: str = "fp16") -> Case:
    out = f"out=fp32[{rows}]" if kernel == "row_sums" else f"out={dtype}[{rows},{cols}]"
    return Case(kernel, (rows,), (f"x={dtype}[{rows},{cols}]", out, f"cols={cols}", f"stride={cols}",
                                  f"BLOCK={block}"))


def _scale_add(n: int) -> Case:
    return Case("scale_add", (-(-n // 1024),), (f"x=fp32[{n}]", f"y=fp32[{n}]", f"out=fp32[{n}]", f"n={n}",
                                                 "alpha=0.5", "BLOCK=1024"))


CASES: tuple[Case, ...] = (
    _scale_add(1 << 20), _scale_add(1 << 24), _scale_add(1 << 27),
    _matmul(16, 4096, 4096, 128, 64, 8), _matmul(128, 4096, 4096, 128, 64, 8),
    _matmul(1024, 4096, 4096, 128, 64, 8), _matmul(4096, 4096, 4096, 128, 64, 8),
    _matmul(8192, 8192, 8192, 128, 64, 8), _matmul(256, 4096, 4096, 64, 32, 4),
    _rows("row_sums", 8192, 4096, 1024), _rows("row_sums", 1024, 16384, 512), _rows("row_sums", 128, 65536, 2048),
    _rows("softmax", 16384, 1024, 1024), _rows("softmax", 4096, 4096, 4096),
)


def measured(gpu: str) -> list[dict]:
    """The recorded rows of `gpu` (empty if none)."""
    path = DATA_DIR / gpu / "user_kernels" / CSV_NAME
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def predict(row: dict, gpu_name: str) -> float:
    """The product's prediction of a recorded row, as `infersim kernel --triton` gives it."""
    from compiled.triton_args import parse_args, parse_grid
    from compiled.triton_kernel import triton_launch
    from hwmodels.calibration import load_calibration
    from hwmodels.roofline import LaunchMode, kernel_time
    from hwmodels.spec import load_gpu

    gpu = load_gpu(gpu_name)
    found = triton_launch(f"{KERNELS_FILE}:{row['kernel']}", parse_grid(row["grid"]),
                          parse_args(row["args"].split()), gpu, int(row["num_warps"]), int(row["num_stages"]))
    return kernel_time(found.work, gpu, load_calibration(gpu.name, None), LaunchMode(row["launch_mode"])).time_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation.user_kernels", description=__doc__.split("\n")[0])
    parser.add_argument("--hw", default="h200", help="GPU whose measurements to compare (default h200)")
    args = parser.parse_args(argv)
    from compiled.triton_build import triton_version

    rows = measured(args.hw)
    if not rows:
        where = DATA_DIR / args.hw / "user_kernels" / CSV_NAME
        print(f"no measurements of user kernels for {args.hw} ({where})", file=sys.stderr)
        return 2
    errors = []
    print(f"{'kernel':10} {'grid':>10} {'measured us':>12} {'predicted us':>13} {'error %':>8}  args")
    for row in rows:
        got, want = predict(row, args.hw), float(row["time_s_median"])
        errors.append(100.0 * (got - want) / want)
        flag = "" if row["triton"] == triton_version() else f"  (measured with Triton {row['triton']})"
        print(f"{row['kernel']:10} {row['grid']:>10} {want * 1e6:12.1f} {got * 1e6:13.1f} {errors[-1]:8.1f}  "
              f"{row['args']}{flag}")
    magnitudes = sorted(abs(e) for e in errors)
    p90 = magnitudes[min(len(magnitudes) - 1, round(0.9 * (len(magnitudes) - 1)))]
    print(f"{len(rows)} rows: median |error| {statistics.median(magnitudes):.1f} %, p90 {p90:.1f} %, "
          f"signed median {statistics.median(errors):+.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
