"""Pairs of measured rows that differ in one knob: the measured and predicted ratios, the ratio error and its sign."""

from __future__ import annotations

import pytest

from validation.comparison import Comparison
from validation.design_changes import pairs, summary
from workloads.attention_kernels import MlaDecode
from workloads.kernels import AddRmsNorm


def _row(kernel, measured_s: float, predicted_s: float, mode: str = "graph") -> Comparison:
    return Comparison(label=repr(kernel), group="g", launch_mode=mode, measured_s=measured_s,
                      predicted_s=predicted_s, bound="memory", kernels=(kernel,), mode=mode)


def _mla(splits: int, context: int = 4096) -> MlaDecode:
    return MlaDecode(seqs=2, context=context, heads=12, num_splits=splits, block_n=32)


def test_a_pair_is_the_changed_row_over_the_reference_row_of_the_same_shape_and_mode():
    rows = [_row(_mla(1), 40e-6, 50e-6), _row(_mla(16), 10e-6, 20e-6),
            _row(_mla(16, context=8192), 9e-6, 9e-6),  # no reference row at this shape: no pair
            _row(_mla(4), 20e-6, 30e-6, mode="eager")]  # another launch mode: no pair
    (pair,) = pairs(rows)
    assert (pair.knob, pair.change) == ("MLA decode split-KV", "1 -> 16")
    assert pair.measured_ratio == pytest.approx(0.25) and pair.predicted_ratio == pytest.approx(0.4)
    assert pair.ratio_error == pytest.approx(0.6) and pair.right_sign


def test_the_sign_is_wrong_when_the_model_predicts_a_slow_down_for_a_speed_up():
    fused = AddRmsNorm(tokens=8, hidden=7168, fused=True)
    unfused = AddRmsNorm(tokens=8, hidden=7168, fused=False)
    (pair,) = pairs([_row(unfused, 10e-6, 10e-6), _row(fused, 8e-6, 11e-6)])
    assert pair.change == "unfused -> fused" and not pair.right_sign
    (row,) = summary([pair])
    assert row["pairs"] == 1 and row["right_sign_share"] == 0.0
    assert row["median_abs_ratio_error_pct"] == pytest.approx(abs(1.1 / 0.8 - 1) * 100)


def test_validate_reports_every_knob_it_has_pairs_for(capsys):
    import json

    from infersim.cli import main

    assert main(["validate", "--hw", "h200", "--json"]) == 0
    changes = json.loads(capsys.readouterr().out)["design_changes"]
    knobs = {c["knob"] for c in changes}
    assert knobs == {"MLA decode split-KV", "MLA decode head padding", "KDA verify tile columns",
                     "add+RMSNorm fusion"}
    assert all(0 <= c["right_sign_share"] <= 1 and c["pairs"] >= 1 for c in changes)
