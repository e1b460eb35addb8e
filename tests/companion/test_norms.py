"""Fused and unfused residual add + RMSNorm against the float64 reference, at model widths and a ragged one."""

from __future__ import annotations

import pytest
import torch

from companion.kernels.norms import add_rmsnorm_fused, add_rmsnorm_ref, add_rmsnorm_unfused

EPS = 1e-6
# One fp32 -> bf16 conversion is within one rounding unit, relative: 2^-8 on the GPU (round to nearest,
# 8 significant bits); the interpreter truncates toward zero (seen with triton 3.9), so 2^-7 there.
ROUNDING = 2.0**-8 if torch.cuda.is_available() else 2.0**-7
# new_residual is one conversion of the exact sum, and so is the fused normed output (the sum stays in
# fp32). The unfused normed output is at most three away: its own conversion, the stored sum that the
# norm reads back, and the mean square of that rounded sum (<= one unit through the square root).
# fp32 arithmetic adds ~1e-6 relative, covered by the 1 % margin.
RESIDUAL_RTOL = ROUNDING * 1.01
NORMED_RTOL = {"fused": ROUNDING * 1.01, "unfused": 3 * ROUNDING * 1.01}
ATOL = 1e-30  # only exact zeros; every bound above is relative

PATHS = {"fused": add_rmsnorm_fused, "unfused": add_rmsnorm_unfused}


def _inputs(rng: torch.Generator, tokens: int, hidden: int, device: str):
    x = torch.randn(tokens, hidden, generator=rng).to(torch.bfloat16).to(device)
    residual = torch.randn(tokens, hidden, generator=rng).mul(4).to(torch.bfloat16).to(device)
    weight = (1 + 0.5 * torch.randn(hidden, generator=rng)).to(torch.bfloat16).to(device)
    return x, residual, weight


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("tokens", "hidden"), [(1, 7168), (3, 7168), (2, 5120), (5, 5120), (1, 1000), (7, 1000)])
def test_matches_float64_reference(rng, device, path, tokens, hidden):
    x, residual, weight = _inputs(rng, tokens, hidden, device)
    x_before, residual_before = x.clone(), residual.clone()
    normed, new_res = PATHS[path](x, residual, weight, EPS)
    ref_normed, ref_res = add_rmsnorm_ref(x.cpu(), residual.cpu(), weight.cpu(), EPS)
    assert normed.dtype == new_res.dtype == torch.bfloat16
    assert normed.shape == new_res.shape == (tokens, hidden)
    torch.testing.assert_close(new_res.cpu().double(), ref_res, rtol=RESIDUAL_RTOL, atol=ATOL)
    torch.testing.assert_close(normed.cpu().double(), ref_normed, rtol=NORMED_RTOL[path], atol=ATOL)
    assert torch.equal(x, x_before) and torch.equal(residual, residual_before)  # out of place


def test_each_row_is_normalised_on_its_own(rng, device):
    """Rows of very different scale: a kernel mixing rows' mean squares would miss the small row by far."""
    x, residual, weight = _inputs(rng, 2, 1000, device)
    x[1] *= 1000
    residual[1] *= 1000
    ref, _ = add_rmsnorm_ref(x.cpu(), residual.cpu(), weight.cpu(), EPS)
    for name, path in PATHS.items():
        normed, _ = path(x, residual, weight, EPS)
        torch.testing.assert_close(normed.cpu().double(), ref, rtol=NORMED_RTOL[name], atol=ATOL)


def test_preallocated_outputs_are_written(rng, device):
    x, residual, weight = _inputs(rng, 3, 1000, device)
    for path in PATHS.values():
        out = (torch.full_like(x, float("nan")), torch.full_like(x, float("nan")))
        normed, new_res = path(x, residual, weight, EPS, out=out)
        assert normed.data_ptr() == out[0].data_ptr() and new_res.data_ptr() == out[1].data_ptr()
        assert bool(torch.isfinite(normed).all()) and bool(torch.isfinite(new_res).all())


def test_rejects_mismatched_weight(rng, device):
    x, residual, _ = _inputs(rng, 2, 64, device)
    with pytest.raises(ValueError, match="weight"):
        add_rmsnorm_fused(x, residual, torch.ones(32, dtype=torch.bfloat16, device=device), EPS)


def test_suite_cases_and_counts_match_the_model():
    from validation.suites import norm as suite
    from workloads.kernels import AddRmsNorm

    cases = suite.cases()
    assert len(cases) == len(suite.TOKENS) * len(suite.HIDDEN) * 2
    for case in cases:
        assert case.flop() > 0 and case.bytes() > 0
        assert (case.launch_mode == "graph") == (case.tokens <= suite.DECODE_MAX_TOKENS)
        # A graph replays one launch per rotated set; their inputs exceed two planned L2s.
        if case.launch_mode == "graph":
            assert case.ops_per_sample * case.input_bytes() > suite.L2_ROTATION_FACTOR * suite.PLANNED_L2_BYTES
        model = AddRmsNorm(tokens=case.tokens, hidden=case.hidden, fused=case.fused).work()
        assert (model.flop, model.bytes, model.launches) == (case.flop(), case.bytes(), 1 if case.fused else 2)


def test_suite_thread_counts_match_the_kernels():
    from companion.kernels import norms
    from validation.suites import norm as suite
    from workloads.kernels import Elementwise

    # AddRmsNorm has one `threads` for both launches of the unfused pair, and the add's block is the model's.
    assert suite.ROW_NUM_WARPS == norms.ROW_NUM_WARPS == norms.ADD_NUM_WARPS
    assert Elementwise(elements=1).elements_per_workgroup == norms.ADD_BLOCK


def test_suite_rotation_grows_with_a_larger_l2():
    from companion.bench.suites.norm import _fit_rotation
    from validation.suites import norm as suite

    case = suite.cases()[0]  # fused, 1 token: a graph of one launch per set
    bigger = _fit_rotation(case, 4 * suite.PLANNED_L2_BYTES)
    assert bigger.ops_per_sample * case.input_bytes() > 2 * 4 * suite.PLANNED_L2_BYTES
    assert _fit_rotation(case, suite.PLANNED_L2_BYTES) == case


@pytest.mark.parametrize("index", [0, 1, -1, -2])
def test_suite_compare_on_a_synthetic_row(index):
    """Made-up times: this checks the mapping from a row to the model, it measures nothing."""
    from validation.suites import case_row
    from validation.suites import norm as suite

    case = suite.cases()[index]
    row = {k: str(v) for k, v in {**case_row(case), "time_s_median": 1e-5, "num_warps": 8}.items()}
    result = suite.compare(row, "h200")
    assert result.predicted_s > 0 and result.measured_s == 1e-5
    assert result.group == f"add-rmsnorm {'fused' if case.fused else 'unfused'} " \
                           f"{'decode' if case.launch_mode == 'graph' else 'prefill'}"
