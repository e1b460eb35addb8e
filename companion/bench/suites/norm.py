"""Runs suite `norm` (`validation.suites.norm`): fused and unfused add + RMSNorm, checked, then timed.

Each case is checked against float64 on fresh random inputs, both outputs within their bf16 rounding bound;
graph cases get more launches than planned when this GPU's L2 is larger than the planned one.
"""

from __future__ import annotations

import itertools
import traceback
from collections.abc import Sequence
from dataclasses import replace

import torch

from companion.bench.timing import DEVICE, MeasurementError, bench, bench_graph, provenance
from companion.kernels import norms
from companion.kernels.norms import add_rmsnorm_ref
from validation.measure_output import summarize
from validation.suites import EAGER, GRAPH, case_row
from validation.suites.norm import FUSED, UNFUSED, NormCase

EPS = 1e-6
ROUNDING = 2.0**-8  # bf16 round to nearest on the GPU: one conversion is within 2^-8 relative
# new_residual and the fused normed output are one conversion from the exact value; the unfused normed
# output three (its own, the stored sum it reads back, that sum's mean square); 1 % margin for fp32.
RTOL = {"residual": ROUNDING * 1.01, FUSED: ROUNDING * 1.01, UNFUSED: 3 * ROUNDING * 1.01}


def _fit_rotation(case: NormCase, l2_bytes: int) -> NormCase:
    """A graph case with enough launches to rotate past this GPU's L2 (more than planned if its L2 is larger)."""
    if case.launch_mode == GRAPH and case.ops_per_sample < case.sets_needed(l2_bytes):
        return replace(case, ops_per_sample=case.sets_needed(l2_bytes))
    return case


def _check(case: NormCase, op, x, residual, weight, out) -> float:
    """Largest error of both outputs as a share of its bound, against float64; raises above 1."""
    op(x, residual, weight, EPS, out=out)
    torch.cuda.synchronize()
    ref_normed, ref_res = add_rmsnorm_ref(x, residual, weight, EPS)
    if not (bool(torch.isfinite(out[0]).all()) and bool(torch.isfinite(out[1]).all())):
        raise MeasurementError("non-finite output")
    worst = 0.0
    for name, got, ref, rtol in (("normed", out[0], ref_normed, RTOL[case.kernel]),
                                 ("new_residual", out[1], ref_res, RTOL["residual"])):
        share = float(((got.double() - ref).abs() / (rtol * ref.abs())).nan_to_num(nan=0.0).max())  # 0/0: both 0
        if not share <= 1.0:
            raise MeasurementError(f"{name} error {share:.2f}x its bound {rtol:.2e}")
        worst = max(worst, share)
    return worst


def _time_case(case: NormCase, env: dict) -> dict[str, object]:
    op = norms.add_rmsnorm_fused if case.fused else norms.add_rmsnorm_unfused
    n_sets = case.ops_per_sample if case.launch_mode == GRAPH else case.sets_needed(env["l2_bytes"])
    shape = (n_sets, case.tokens, case.hidden)
    xs = torch.randn(shape, device=DEVICE, dtype=torch.bfloat16)
    residuals = torch.randn(shape, device=DEVICE, dtype=torch.bfloat16)
    normed, new_res = torch.empty_like(xs), torch.empty_like(xs)
    weight = (1 + 0.5 * torch.randn(case.hidden, device=DEVICE)).to(torch.bfloat16)
    sets = [(xs[i], residuals[i], weight, EPS, (normed[i], new_res[i])) for i in range(n_sets)]
    x0, r0, _, _, out0 = sets[0]
    share = _check(case, op, x0, r0, weight, out0)
    if case.launch_mode == EAGER:
        order = itertools.cycle(sets)

        def sample() -> None:
            args = next(order)
            op(*args[:4], out=args[4])

        times = bench(sample, case.ops_per_sample, hide_host_gaps=True)
    else:

        def body() -> None:
            for args in sets:
                op(*args[:4], out=args[4])

        times = bench_graph(body, case.ops_per_sample)
    row = {**case_row(case), **summarize(times), "n_input_sets": n_sets, "num_warps": norms.ROW_NUM_WARPS,
           **provenance(env)}
    print(f"norm {case.kernel} t={case.tokens} h={case.hidden} {case.launch_mode}: {n_sets} sets, "
          f"error {share:.2f} of bound, {row['time_s_median'] * 1e6:.2f} us, "
          f"{case.bytes() / row['time_s_median'] / 1e9:.0f} GB/s", flush=True)
    return row


def run(cases: Sequence[NormCase], env: dict) -> tuple[list[dict], list[str]]:
    """Check each case against float64 on fresh random inputs, then time it; a failed case does not stop others."""
    rows: list[dict] = []
    failures: list[str] = []
    for planned in cases:
        case = _fit_rotation(planned, int(env["l2_bytes"]))
        try:
            rows.append(_time_case(case, env))
        except Exception as e:
            failures.append(f"{case}: {e}")
            traceback.print_exc()
    return rows, failures
