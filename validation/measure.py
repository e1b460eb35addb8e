"""Measure kernel times on a CUDA GPU and write one CSV per suite.

    python -m validation.measure --suite all --out DIR      # DIR defaults to $OUT
    python -m validation.measure --suite gemm --list        # the planned cases, no GPU needed

This module holds what needs no GPU: the cases of each suite with their exact FLOP and minimal
HBM byte counts (counted before anything is timed), the summary statistics, the CSV layout, the
atomic writers and the choice of output folder. The timing code is in `validation.measure_suites`,
which imports torch and triton; it is imported only when a GPU run starts, so
`import validation.measure` works without either.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from validation import suites as companion_suites
from validation.measure_output import (  # noqa: F401 - re-exported for the suites and tests
    output_folder,
    percentile,
    report_failures,
    summarize,
    write_csv_atomic,
    write_text_atomic,
)

BASE_SUITES = ("gemm", "copy_grid", "launch")
SUITES = (*BASE_SUITES, *companion_suites.NAMES)

BF16 = "bfloat16"
FP8 = "float8_e4m3fn"
FP32 = "float32"
ELEMENT_BYTES = {BF16: 2, FP8: 1, FP32: 4}
GEMM_OUT_ELEMENT_BYTES = 2  # both GEMM kernels write bf16 outputs

EAGER = "eager"
GRAPH = "graph"
LAUNCH_MODES = (EAGER, GRAPH)
# host_gaps: "hidden" means a sleep kernel was queued ahead of each timed sample, so the events
# bracket GPU execution only; "included" means the host issued the sample's launches while the
# GPU waited, so the time per op includes the host's launch cost.
HOST_GAPS = ("hidden", "included")

SHAPE_COLUMNS = {
    "gemm": ("m", "n", "k"),
    "copy_grid": ("grid", "n_elems", "block", "num_warps"),
    "launch": ("numel",),
}
TIMING_COLUMNS = (
    "dtype",
    "launch_mode",
    "host_gaps",
    "time_s_median",
    "time_s_p10",
    "time_s_p90",
    "repeats",
    "ops_per_sample",
    "flop",
    "bytes",
)
METHOD_COLUMNS = {"gemm": ("n_input_sets",), "copy_grid": (), "launch": ()}
PROVENANCE_COLUMNS = ("sm_count", "gpu_name", "driver", "torch", "triton", "cuda", "date")
REQUIRED_COLUMNS = (
    "kernel",
    "dtype",
    "launch_mode",
    "time_s_median",
    "time_s_p10",
    "time_s_p90",
    "repeats",
    "flop",
    "bytes",
    "sm_count",
    "gpu_name",
    "driver",
    "torch",
    "triton",
    "date",
)

# GEMM shapes (the brief of this measurement; assumption: representative of 70B-class layers).
GEMM_SQUARE = (1024, 2048, 4096, 8192, 16384)
GEMM_FP8_SQUARE = (2048, 4096, 8192, 16384)
GEMM_WEIGHTS_NK = ((7168, 7168), (28672, 8192), (8192, 28672))
GEMM_PREFILL_M = (2048, 8192)
GEMM_DECODE_M = (1, 8, 32, 64, 128, 256)
GEMM_OPS_PER_GRAPH = 20  # matmuls captured in one CUDA graph, and issued per eager sample
GEMM_EAGER_BATCH_BELOW_M = 1024  # skinny shapes: time both eagerly (host gaps in) and in a graph

# Copy grid: 1 GiB source and 1 GiB destination, far above the 50-60 MB L2 (H200.md).
COPY_N_ELEMS = 1 << 28  # float32 elements
COPY_BLOCK = 4096
COPY_NUM_WARPS = 4
COPY_GRIDS = (1, 2, 4, 8, 16, 33, 66, 99, 132, 198, 264, 528, 1056)

LAUNCH_NUMEL = 256
LAUNCH_EAGER_OPS = 1000
LAUNCH_GRAPH_OPS = 100


def gemm_flop(m: int, n: int, k: int) -> int:
    """FLOP of one m×k by k×n matrix product (a multiply and an add per term)."""
    return 2 * m * n * k


def gemm_bytes(m: int, n: int, k: int, in_element_bytes: int) -> int:
    """Minimal HBM bytes of one product: both inputs read once, the bf16 output written once."""
    return (m * k + k * n) * in_element_bytes + m * n * GEMM_OUT_ELEMENT_BYTES


@dataclass(frozen=True)
class GemmCase:
    """One timed GEMM configuration; B is an (n, k) row-major weight used transposed (nn.Linear)."""

    kernel: str
    dtype: str
    m: int
    n: int
    k: int
    launch_mode: str
    ops_per_sample: int

    @property
    def suite(self) -> str:
        return "gemm"

    @property
    def host_gaps(self) -> str:
        return "included" if self.launch_mode == EAGER and self.ops_per_sample > 1 else "hidden"

    def flop(self) -> int:
        return gemm_flop(self.m, self.n, self.k)

    def bytes(self) -> int:
        return gemm_bytes(self.m, self.n, self.k, ELEMENT_BYTES[self.dtype])

    def input_set_bytes(self) -> int:
        """Bytes of one (A, B) input pair, for sizing the rotation."""
        return (self.m * self.k + self.n * self.k) * ELEMENT_BYTES[self.dtype]

    def shape(self) -> dict[str, object]:
        return {"m": self.m, "n": self.n, "k": self.k}


@dataclass(frozen=True)
class CopyCase:
    """dst[i] = src[i] over n_elems; grid None means a library copy with its own grid."""

    kernel: str
    dtype: str
    grid: int | None
    n_elems: int
    block: int | None
    num_warps: int | None

    launch_mode: str = EAGER
    ops_per_sample: int = 1
    host_gaps: str = "hidden"

    @property
    def suite(self) -> str:
        return "copy_grid"

    def flop(self) -> int:
        return 0

    def bytes(self) -> int:
        return 2 * self.n_elems * ELEMENT_BYTES[self.dtype]

    def shape(self) -> dict[str, object]:
        return {"grid": self.grid, "n_elems": self.n_elems, "block": self.block, "num_warps": self.num_warps}


@dataclass(frozen=True)
class LaunchCase:
    """Launch cost of a kernel that does (almost) nothing: empty Triton kernel or a tiny add_."""

    kernel: str
    dtype: str
    numel: int
    launch_mode: str
    ops_per_sample: int

    @property
    def suite(self) -> str:
        return "launch"

    @property
    def host_gaps(self) -> str:
        return "included" if self.launch_mode == EAGER else "hidden"

    def flop(self) -> int:
        return self.numel if self.kernel == "torch_add_" else 0

    def bytes(self) -> int:
        return 2 * self.numel * ELEMENT_BYTES[self.dtype] if self.kernel == "torch_add_" else 0

    def shape(self) -> dict[str, object]:
        return {"numel": self.numel}


Case = GemmCase | CopyCase | LaunchCase


def gemm_cases() -> list[GemmCase]:
    """bf16 cuBLAS and fp8 scaled-mm cases; shapes sharing inputs are adjacent."""
    cases: list[GemmCase] = []
    for s in GEMM_SQUARE:
        cases.append(GemmCase("torch_matmul", BF16, s, s, s, EAGER, 1))
    for m in GEMM_PREFILL_M:
        for n, k in GEMM_WEIGHTS_NK:
            cases.append(GemmCase("torch_matmul", BF16, m, n, k, EAGER, 1))
    for m in GEMM_DECODE_M:
        for n, k in GEMM_WEIGHTS_NK:
            for mode in LAUNCH_MODES:
                cases.append(GemmCase("torch_matmul", BF16, m, n, k, mode, GEMM_OPS_PER_GRAPH))
    for s in GEMM_FP8_SQUARE:
        cases.append(GemmCase("torch_scaled_mm", FP8, s, s, s, EAGER, 1))
    for m in GEMM_PREFILL_M:
        for n, k in GEMM_WEIGHTS_NK:
            cases.append(GemmCase("torch_scaled_mm", FP8, m, n, k, EAGER, 1))
    return cases


def copy_cases() -> list[CopyCase]:
    """Persistent Triton copy at each grid, one program per block, and torch's own copy."""
    n_blocks = COPY_N_ELEMS // COPY_BLOCK
    cases = [
        CopyCase("triton_copy_persistent", FP32, g, COPY_N_ELEMS, COPY_BLOCK, COPY_NUM_WARPS)
        for g in (*COPY_GRIDS, n_blocks)
    ]
    cases.append(CopyCase("torch_copy", FP32, None, COPY_N_ELEMS, None, None))
    return cases


def launch_cases() -> list[LaunchCase]:
    """Empty Triton kernel and tiny torch add_, eager back to back and replayed in a graph."""
    cases = []
    for kernel in ("triton_empty", "torch_add_"):
        cases.append(LaunchCase(kernel, FP32, LAUNCH_NUMEL, EAGER, LAUNCH_EAGER_OPS))
        cases.append(LaunchCase(kernel, FP32, LAUNCH_NUMEL, GRAPH, LAUNCH_GRAPH_OPS))
    return cases


CASES: dict[str, Callable[[], Sequence[Case]]] = {
    "gemm": gemm_cases,
    "copy_grid": copy_cases,
    "launch": launch_cases,
}


def shape_columns(suite: str) -> tuple[str, ...]:
    """Shape columns of one suite, built in or companion."""
    return SHAPE_COLUMNS[suite] if suite in BASE_SUITES else companion_suites.load(suite).SHAPE_COLUMNS


def suite_cases(suite: str) -> Sequence[Case]:
    """The planned cases of one suite, built in or companion."""
    return CASES[suite]() if suite in BASE_SUITES else companion_suites.load(suite).cases()


def columns(suite: str) -> list[str]:
    """CSV header of one suite."""
    method = METHOD_COLUMNS[suite] if suite in BASE_SUITES else companion_suites.load(suite).METHOD_COLUMNS
    return ["kernel", *shape_columns(suite), *TIMING_COLUMNS, *method, *PROVENANCE_COLUMNS]


def case_row(case: Case) -> dict[str, object]:
    """The columns of a row that are known before timing: shape, dtype, mode and the counts."""
    return {
        "kernel": case.kernel,
        **case.shape(),
        "dtype": case.dtype,
        "launch_mode": case.launch_mode,
        "host_gaps": case.host_gaps,
        "ops_per_sample": case.ops_per_sample,
        "flop": case.flop(),
        "bytes": case.bytes(),
    }


def _shape_text(row: dict[str, object], suite: str) -> str:
    return " ".join(f"{c}={row[c]}" for c in shape_columns(suite) if row.get(c) not in (None, ""))


def format_table(suite: str, rows: Sequence[dict[str, object]]) -> str:
    """Short human table: median time per op and the achieved FLOP and byte rates."""
    lines = [f"== {suite} ({len(rows)} rows)"]
    lines.append(
        f"{'kernel':24} {'shape':34} {'dtype':14} {'mode':5} {'median_us':>10} {'TFLOP/s':>8} {'GB/s':>8}"
    )
    for row in rows:
        t = float(row["time_s_median"])
        flop_rate = int(row["flop"]) / t / 1e12
        byte_rate = int(row["bytes"]) / t / 1e9
        lines.append(
            f"{row['kernel']!s:24} {_shape_text(row, suite):34} {row['dtype']!s:14} {row['launch_mode']!s:5} "
            f"{t * 1e6:10.2f} {flop_rate:8.1f} {byte_rate:8.0f}"
        )
    return "\n".join(lines)


def expand_suites(names: Sequence[str]) -> list[str]:
    """Suite names in run order, with 'all' expanded and duplicates dropped."""
    out: list[str] = []
    for name in names:
        for s in SUITES if name == "all" else (name,):
            if s not in out:
                out.append(s)
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m validation.measure", description=__doc__.splitlines()[0])
    p.add_argument("--suite", action="append", required=True, choices=[*SUITES, "all"], help="repeatable")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: $OUT)")
    p.add_argument("--list", action="store_true", help="print the planned cases and their counts; no GPU")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    suites = expand_suites(args.suite)
    if args.list:
        for suite in suites:
            for case in suite_cases(suite):
                print(suite, case_row(case))
        return 0
    out = output_folder(args.out, "measure")
    if out is None:
        return 2
    try:
        import torch
    except ImportError:
        print("measure: torch is not installed; this needs a CUDA GPU with PyTorch", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("measure: no CUDA GPU visible (torch.cuda.is_available() is False)", file=sys.stderr)
        return 1

    from validation import measure_suites

    env = measure_suites.environment()
    print("environment:", env, flush=True)
    print("nvidia-smi:", measure_suites.smi_clocks(), flush=True)
    measure_suites.warm_clocks()
    failures: list[str] = []
    tables = []
    for suite in suites:
        rows, suite_failures = measure_suites.run_suite(suite, suite_cases(suite), env)
        failures += [f"{suite}: {f}" for f in suite_failures]
        path = out / f"{suite}.csv"
        write_csv_atomic(path, columns(suite), rows)
        print(f"wrote {path} ({len(rows)} rows); nvidia-smi: {measure_suites.smi_clocks()}", flush=True)
        tables.append(format_table(suite, rows))
    print("\n\n".join(tables))
    return report_failures("measure", failures)


if __name__ == "__main__":
    sys.exit(main())
