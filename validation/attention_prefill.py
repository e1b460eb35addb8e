"""Causal attention prefill on the H200 (`data/h200/library/attention_prefill.csv`) against `infersim kernel
attention-prefill`, and the one constant those rows set.

The rows are cuDNN's fused attention through PyTorch's scaled_dot_product_attention, bf16, each one node of a
CUDA graph (`companion/bench/attention_prefill.py`; FlashAttention-3, which vLLM and SGLang run on Hopper, cannot be
installed where they were measured, and cuDNN is the faster of the two libraries PyTorch ships: FlashAttention-2
takes 1.2-2x its time). Each row is priced as `infersim kernel --hw h200 attention-prefill --launch graph` prices
it: the kind's tiles for the GPU, query, key and value widths as measured.

`compute_efficiency.attention_prefill.bf16` of the H200 calibration is fitted here, on the rows where it binds: the
long sequences (`FIT_MIN_TOKENS` and more) of 128-wide heads, compute-bound. `fitted_efficiency` is the value at
which the median signed error of those rows is zero; a test holds the calibration to it. Every other row tests
it: shorter sequences, 64-wide heads, and DeepSeek-style MLA prefill (192-wide queries and keys, 128-wide values).
"""

from __future__ import annotations

import csv
import dataclasses
import statistics
from pathlib import Path
from types import MappingProxyType

from hwmodels.calibration import Calibration, load_calibration
from hwmodels.roofline import LaunchMode
from hwmodels.spec import load_gpu
from validation.comparison import Comparison

DATA = Path(__file__).parent / "data" / "h200" / "library" / "attention_prefill.csv"
BACKEND, MODE = "cudnn", "graph"
FIT_MIN_TOKENS = 4096  # tokens a sequence: every SM busy with whole query blocks, compute-bound
FIT_HEAD_DIM = 128
GROUP = "attention prefill (cuDNN)"


def _measured() -> list[dict[str, str]]:
    with DATA.open(newline="") as f:
        return [r for r in csv.DictReader(f) if r["backend"] == BACKEND and r["launch_mode"] == MODE]


def _shape(row: dict[str, str]) -> tuple[int, int, int, int, int]:
    return tuple(int(row[k]) for k in ("batch", "tokens", "heads", "head_dim", "head_dim_v"))


def fits(row: dict[str, str]) -> bool:
    """Whether the row is one the efficiency is fitted on."""
    _, tokens, _, d, dv = _shape(row)
    return d == dv == FIT_HEAD_DIM and tokens >= FIT_MIN_TOKENS


def _kernel(row: dict[str, str]):
    """The row's kernel with the tiles `infersim kernel` picks for the H200."""
    from workloads.attention_kernels import AttentionPrefill
    from workloads.tiles import with_tiles

    b, s, h, d, dv = _shape(row)
    kernel, _ = with_tiles(AttentionPrefill(seqs=b, q_len=s, heads=h, kv_heads=h, head_dim=d, head_dim_v=dv),
                           load_gpu("h200"))
    return kernel


def _predicted(row: dict[str, str], calib: Calibration) -> float:
    from compiled.launch_time import launch_times

    return sum(t.time_s for t in launch_times(_kernel(row), load_gpu("h200"), calib, LaunchMode.GRAPH))


def rows(calib: Calibration | None = None) -> list[Comparison]:
    """Every cuDNN graph row against the product's prediction (`fitted`: the rows the efficiency is fitted on)."""
    calib = calib or load_calibration("h200")
    out = []
    for row in _measured():
        b, s, h, d, dv = _shape(row)
        out.append(Comparison(f"{b} x {s} tokens, {h} heads of {d}/{dv}", GROUP, MODE, float(row["time_s_median"]),
                              _predicted(row, calib), "", fitted=fits(row), kernels=(_kernel(row),),
                              mode=LaunchMode.GRAPH.value))
    return out


def with_efficiency(calib: Calibration, efficiency: float) -> Calibration:
    """The calibration with `compute_efficiency.attention_prefill.bf16` set to `efficiency`."""
    table = {family: dict(values) for family, values in calib.compute_efficiency.items()}
    table.setdefault("attention_prefill", {})["bf16"] = efficiency
    return dataclasses.replace(calib, compute_efficiency=MappingProxyType(
        {family: MappingProxyType(values) for family, values in table.items()}))


def fitted_efficiency(low: float = 0.3, high: float = 1.0, tolerance: float = 1e-4) -> float:
    """The bf16 efficiency at which the fit rows' median signed error is zero (bisection; the time falls as the
    efficiency rises)."""
    base = load_calibration("h200")
    fit_rows = [r for r in _measured() if fits(r)]

    def median_error(efficiency: float) -> float:
        calib = with_efficiency(base, efficiency)
        return statistics.median(_predicted(r, calib) / float(r["time_s_median"]) - 1 for r in fit_rows)

    while high - low > tolerance:
        mid = (low + high) / 2
        low, high = (mid, high) if median_error(mid) > 0 else (low, mid)
    return (low + high) / 2
