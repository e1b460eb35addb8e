"""Attention prefill on the H200 against the product (validation/attention_prefill.py)."""

from __future__ import annotations

import statistics

import pytest

from hwmodels.calibration import load_calibration
from hwmodels.dtypes import Dtype
from validation import attention_prefill as ap
from workloads.attention_kernels import AttentionPrefill


def test_the_calibration_holds_the_efficiency_its_rows_give():
    value = load_calibration("h200").compute_efficiency["attention_prefill"]["bf16"]
    assert value == pytest.approx(ap.fitted_efficiency(), abs=6e-4)


def test_rows_are_priced_as_the_kernel_command_prices_them():
    from infersim.queries import kernel_query

    row = next(r for r in ap.rows() if r.label.startswith("1 x 8192 tokens, 16 heads of 192/128"))
    shown = kernel_query("h200", "attention-prefill", {"seqs": "1", "q_len": "8192", "heads": "16",
                                                       "kv_heads": "16", "head_dim": "192", "head_dim_v": "128"},
                         launch="graph")
    assert shown["time_s"] == row.predicted_s


def test_long_mla_prefill_held_out_of_the_fit():
    rows = [r for r in ap.rows() if not r.fitted and "192/128" in r.label]
    long = [r for r in rows if int(r.label.split(" x ")[1].split()[0]) >= 4096]
    assert len(long) == 4
    # no MLA-shaped row was fitted: the 128-wide fit carries to 192-wide queries and 128-wide values
    assert all(abs(r.error) <= 0.10 for r in long)
    fitted = [r for r in ap.rows() if r.fitted]
    assert len(fitted) == 5
    assert abs(statistics.median(r.error for r in fitted)) <= 0.01


def test_value_width_sets_the_second_product_and_the_output():
    same = AttentionPrefill(seqs=1, q_len=1024, heads=16, kv_heads=16, head_dim=192).launches()[0]
    mla = AttentionPrefill(seqs=1, q_len=1024, heads=16, kv_heads=16, head_dim=192, head_dim_v=128).launches()[0]
    pairs = 1024 * 1025 // 2
    assert same.flop_by_dtype[Dtype.BF16] == 4 * 16 * 192 * pairs
    assert mla.flop_by_dtype[Dtype.BF16] == 2 * 16 * (192 + 128) * pairs
    assert mla.write_bytes == 2 * 1024 * 16 * 128
    assert mla.read_bytes == 2 * (1024 * 16 * 192 + 1024 * 16 * (192 + 128))
