"""Measurement suites of the companion kernels (`validation/kernels/`), one module per kernel family.

Each module `validation.suites.<name>` holds, with no torch or triton import at module level:

- `SUITE` (the CSV's stem, equal to <name>), `SHAPE_COLUMNS` and `METHOD_COLUMNS` (tuples of column names);
- `cases()`: the planned cases, frozen dataclasses with `kernel`, `dtype`, `launch_mode`, `host_gaps`,
  `ops_per_sample` and `suite` attributes and `flop()`, `bytes()` (counted before timing) and `shape()`
  (a dict keyed by SHAPE_COLUMNS) methods, like `validation.measure.GemmCase`;
- `run(cases, env) -> (rows, failures)`: checks each kernel against its float64 reference, then times it
  on the GPU (imports torch and triton inside);
- `compare(row, gpu_name) -> validation.comparison.Comparison`: the model's prediction for a recorded row.
"""

from __future__ import annotations

import importlib
from types import ModuleType

NAMES = ("codec", "kda", "mla_decode", "norm", "occupancy")


def load(name: str) -> ModuleType:
    """The suite module called `name`; the error lists the valid names."""
    if name not in NAMES:
        raise ValueError(f"unknown companion suite {name!r}; valid: {', '.join(NAMES)}")
    return importlib.import_module(f"validation.suites.{name}")
