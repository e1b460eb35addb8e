"""The measurement suites: what each suite times, what it counts, its CSV columns, and how a row is predicted.

One module `validation.suites.<name>` per suite (the CSV's stem), with no torch or triton import:

- `SUITE` (equal to <name>), `SHAPE_COLUMNS` and `METHOD_COLUMNS` (tuples of column names);
- `cases()`: the planned cases, frozen dataclasses with `kernel`, `dtype`, `launch_mode`, `host_gaps`,
  `ops_per_sample` and `suite` attributes and `flop()`, `bytes()` (counted before timing) and `shape()`
  (a dict keyed by SHAPE_COLUMNS) methods;
- `compare(row, gpu_name) -> validation.comparison.Comparison`: the model's prediction for a recorded row.

`BASE` are the suites of library kernels and launches (cuBLAS GEMMs, a copy, empty launches); `COMPANION` are
those of the companion Triton kernels. Both are timed by the companion's bench
(`python -m companion.bench suites`), which reads the cases and columns from here.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from types import ModuleType

BASE = ("gemm", "copy_grid", "launch")
COMPANION = ("codec", "kda", "mla_decode", "moe", "norm", "occupancy")
NAMES = (*BASE, *COMPANION)
# Grids of their own that a suite may define as `<grid>_cases()`, measured as `<suite>_<grid>.csv` beside its
# planned CSV and compared as a family of their own (`<group> <grid>`): launches laid out to test one property of the
# model, each grid's predictions written before it ran (validation/NOTES.md)
EXTRA_GRIDS = ("residency", "generations", "splits")

# Values of the `dtype` column (PyTorch's names) and their bytes per element.
BF16 = "bfloat16"
FP8 = "float8_e4m3fn"
FP32 = "float32"
ELEMENT_BYTES = {BF16: 2, FP8: 1, FP32: 4}

EAGER = "eager"
GRAPH = "graph"
LAUNCH_MODES = (EAGER, GRAPH)
# host_gaps: "hidden" means a sleep kernel was queued ahead of each timed sample, so the events
# bracket GPU execution only; "included" means the host issued the sample's launches while the
# GPU waited, so the time per op includes the host's launch cost.
HOST_GAPS = ("hidden", "included")

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


def load(name: str) -> ModuleType:
    """The suite module called `name`; the error lists the valid names."""
    if name not in NAMES:
        raise ValueError(f"unknown suite {name!r}; valid: {', '.join(NAMES)}")
    return importlib.import_module(f"validation.suites.{name}")


def cases(suite: str) -> Sequence:
    """The planned cases of one suite."""
    return load(suite).cases()


def shape_columns(suite: str) -> tuple[str, ...]:
    """Shape columns of one suite."""
    return load(suite).SHAPE_COLUMNS


def columns(suite: str) -> list[str]:
    """CSV header of one suite."""
    return ["kernel", *shape_columns(suite), *TIMING_COLUMNS, *load(suite).METHOD_COLUMNS, *PROVENANCE_COLUMNS]


def case_row(case) -> dict[str, object]:
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


def expand(names: Sequence[str]) -> list[str]:
    """Suite names in run order, with 'all' expanded and duplicates dropped."""
    out: list[str] = []
    for name in names:
        for s in NAMES if name == "all" else (name,):
            if s not in out:
                out.append(s)
    return out
