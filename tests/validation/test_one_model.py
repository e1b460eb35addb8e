"""One model: a `validate` row's prediction is what `infersim kernel` predicts for the same kernels, parameters, GPU
and launch mode, bit for bit, wherever the row prices a product kernel kind as it is.

The companion kernels' rows (MLA decode, KDA, the codecs) are timed from their compiled code by the product itself
(`compiled.companion`), as `infersim kernel` times them. The rows that are not replayed price kernels of
validation's own; they are listed here, so that a family leaving the list or joining it is a change this test sees."""

from __future__ import annotations

import csv
import dataclasses
from enum import Enum

import pytest

from infersim.queries import kernel_query
from validation import suites
from validation.report import DATA_DIR
from workloads.kernels import KERNEL_KINDS

GPUS = ("h200", "h100")  # the GPUs with measured suite rows (validation/data/<gpu>/)
# Families validation prices through kernels of its own (not the product's kinds), so no command can be asked the
# same question; the two-GPU collective rows are not suite rows (test_collective_quickreduce.py holds them to
# `infersim collective`).
NOT_YET_ONE_MODEL = {
    "occupancy waves ratio",  # a ratio of two launches of a probe kernel of validation's own, not a launch's time
}


def _text(value) -> str:
    return value.value if isinstance(value, Enum) else repr(value) if isinstance(value, float) else str(value)


def _as_product_kernel(kernel) -> bool:
    return KERNEL_KINDS.get(getattr(kernel, "kind", None)) is type(kernel)


def _rows(hw: str):
    """Every suite row `infersim validate --hw <hw>` compares (validation/report.py), as its Comparison."""
    for suite in suites.NAMES:
        path = DATA_DIR / hw / f"{suite}.csv"
        if not path.exists():
            continue
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                yield suite, suites.load(suite).compare(row, hw)


@pytest.mark.parametrize("hw", GPUS)
def test_every_row_that_prices_product_kernels_is_what_infersim_kernel_predicts(hw):
    replayed: dict[str, int] = {}
    other: set[str] = set()
    for _, comparison in _rows(hw):
        kernels = comparison.kernels
        if not kernels or not all(_as_product_kernel(k) for k in kernels):
            other.add(comparison.group)
            continue
        total_s = 0.0
        for kernel in kernels:
            # every field, tiles included (a tile left out is the engine's choice for the GPU); an empty tuple
            # (MLA's uneven `contexts`) is what leaving it out means
            params = {f.name: _text(getattr(kernel, f.name)) for f in dataclasses.fields(kernel)
                      if f.init and getattr(kernel, f.name) != ()}
            total_s += kernel_query(hw, kernel.kind, params, launch=comparison.mode)["time_s"]
        assert total_s == comparison.predicted_s, (comparison.group, comparison.label, comparison.mode)
        replayed[comparison.group] = replayed.get(comparison.group, 0) + 1
    assert {g for g in other if g not in replayed} <= NOT_YET_ONE_MODEL, sorted(other - NOT_YET_ONE_MODEL)
    assert set(replayed) >= {"gemm bf16 decode", "gemm bf16 prefill", "gemm fp8 prefill", "add-rmsnorm fused decode",
                             "add-rmsnorm unfused prefill", "mla decode", "kda prefill", "kda decode", "kda verify",
                             "codec quantize", "codec dequantize"}, replayed
    assert sum(replayed.values()) >= 228 + 48  # the moe suite's Triton rows among them


@pytest.mark.parametrize(("m", "n", "k"), [(4, 7168, 7168), (1, 4096, 4096), (2560, 8192, 1024), (8192, 8192, 8192)])
@pytest.mark.parametrize("hw", ["h200", "mi355x", "b200"])
def test_infersim_kernel_gemm_takes_the_engines_tiles_and_split(hw, m, n, k):
    from hwmodels.spec import load_gpu
    from workloads.tiles import blas_gemm

    result = kernel_query(hw, "gemm", {"m": str(m), "n": str(n), "k": str(k), "dtype": "bf16"}, launch="graph")
    engine = blas_gemm(load_gpu(hw), m, n, k)
    assert result["params"] == {f.name: _text(getattr(engine, f.name)) if isinstance(getattr(engine, f.name), Enum)
                                else getattr(engine, f.name) for f in dataclasses.fields(engine)}
