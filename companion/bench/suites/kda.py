"""Runs suite `kda` (`validation.suites.kda`): chunked prefill, decode and verify, checked, then timed.

Each case rotates whole sets (inputs, state and outputs) past twice the L2, is checked against the float64
recurrence on fresh random inputs (unit-norm q and k, gates in [-5, 0), beta in (0, 1), a random state), then
timed: prefill eagerly with host gaps hidden, decode and verify in CUDA-graph mode.
"""

from __future__ import annotations

import itertools
import traceback

import torch

from companion.bench.timing import MeasurementError, bench, capture_graph, provenance
from companion.kernels import kda as kernels
from companion.kernels.kda_ref import kda_reference
from validation.measure_output import summarize
from validation.suites import case_row
from validation.suites.kda import DECODE, L2_ROTATION_FACTOR, PREFILL, KdaCase

# ||out - ref|| / ||ref|| against float64 (tests/companion/test_kda.py justifies the same bounds): the
# prefill rounds its intermediates and dot operands to bf16 as FLA does; decode and verify round only o to bf16.
REL_ERR_MAX = {"prefill": 3e-2, "o": 1e-2, "state": 1e-4}


def _make_set(case: KdaCase) -> dict:
    """Fresh random inputs (unit-norm q and k, gates in [-5, 0), beta in (0, 1), a random state) and outputs."""
    b, t, h, kd, vd = case.seqs, case.tokens, case.heads, case.key_dim, case.value_dim
    dev = "cuda"
    s = {
        "q": torch.nn.functional.normalize(torch.randn(b, t, h, kd, device=dev), dim=-1).to(torch.bfloat16),
        "k": torch.nn.functional.normalize(torch.randn(b, t, h, kd, device=dev), dim=-1).to(torch.bfloat16),
        "v": torch.randn(b, t, h, vd, device=dev).to(torch.bfloat16),
        "g": -5.0 * torch.sigmoid(torch.randn(b, t, h, kd, device=dev)),
        "beta": torch.sigmoid(torch.randn(b, t, h, device=dev)),
        "state": torch.randn(b, h, kd, vd, device=dev),
        "o": torch.empty(b, t, h, vd, device=dev, dtype=torch.bfloat16),
    }
    if case.kernel == PREFILL:
        s["final"] = torch.empty_like(s["state"])
    elif case.store_states:
        s["states"] = torch.empty(b, t, h, kd, vd, device=dev)
    return s


def _launcher(case: KdaCase):
    """A function that runs the case's kernel once on one set."""
    common = {"block_v": case.block_v, "num_warps": case.num_warps}
    inputs = ("q", "k", "v", "g", "beta", "state")
    if case.kernel == PREFILL:
        return lambda s: kernels.kda_prefill(*(s[n] for n in inputs), o=s["o"], final=s["final"], **common)
    if case.kernel == DECODE:
        return lambda s: kernels.kda_decode(*(s[n] for n in inputs), o=s["o"], **common)
    return lambda s: kernels.kda_verify(*(s[n] for n in inputs), store_states=bool(case.store_states), o=s["o"],
                                        states=s.get("states"), **common)


def _check(case: KdaCase, s: dict, launch) -> float:
    """Largest relative error of o and the written state(s) against float64; raises if out of bounds."""
    before = s["state"].clone()
    launch(s)
    torch.cuda.synchronize()
    ref_o, ref_state, ref_states = kda_reference(s["q"], s["k"], s["v"], s["g"], s["beta"], before,
                                                 keep_states=bool(case.store_states))
    if case.kernel == PREFILL:
        pairs, bounds = ((s["o"], ref_o), (s["final"], ref_state)), (REL_ERR_MAX["prefill"],) * 2
    elif case.store_states:
        pairs, bounds = ((s["o"], ref_o), (s["states"], ref_states)), (REL_ERR_MAX["o"], REL_ERR_MAX["state"])
    else:
        pairs, bounds = ((s["o"], ref_o), (s["state"], ref_state)), (REL_ERR_MAX["o"], REL_ERR_MAX["state"])
    if (case.kernel == PREFILL or case.store_states) and not torch.equal(s["state"], before):
        raise MeasurementError(f"{case}: the input state was modified")
    errs = [float((out.double() - ref).norm() / ref.norm()) for out, ref in pairs]
    for err, bound in zip(errs, bounds, strict=True):
        if not err < bound:  # also catches NaN
            raise MeasurementError(f"{case}: relative error {err:.3e} >= {bound}")
    return max(errs)


def _time(case: KdaCase, sets: list[dict], launch) -> list[float]:
    """Per-op seconds: eager prefills cycling over the sets, or one graph of launches over every set."""
    if case.launch_mode == "eager":
        order = itertools.cycle(sets)
        return bench(lambda: launch(next(order)), case.ops_per_sample, hide_host_gaps=True)

    def body() -> None:
        for j in range(case.ops_per_sample):
            launch(sets[j % len(sets)])

    graph = capture_graph(body)
    try:
        return bench(graph.replay, case.ops_per_sample, hide_host_gaps=True)
    finally:
        del graph


def _measure(case: KdaCase, env: dict) -> dict:
    """One row: rotation sized and checked, kernel checked on fresh inputs, then timed."""
    n_sets = case.n_sets
    if n_sets * case.set_bytes() <= L2_ROTATION_FACTOR * env["l2_bytes"]:
        raise MeasurementError(f"{case}: {n_sets} sets of {case.set_bytes()} B do not exceed "
                               f"{L2_ROTATION_FACTOR} x L2 ({env['l2_bytes']} B)")
    sets = [_make_set(case) for _ in range(n_sets)]
    launch = _launcher(case)
    err = _check(case, sets[0], launch)
    print(f"kda {case.kernel} {case.shape()}: {n_sets} sets, rel err {err:.2e}", flush=True)
    times = _time(case, sets, launch)
    torch.cuda.synchronize()
    return {**case_row(case), **summarize(times), "n_input_sets": n_sets, "rel_err": err, **provenance(env)}


def run(cases: list[KdaCase], env: dict) -> tuple[list[dict], list[str]]:
    """Rows of the cases that passed their float64 check and were timed, and a line per failed case."""
    rows: list[dict] = []
    failures: list[str] = []
    for case in cases:
        try:
            rows.append(_measure(case, env))
        except Exception as e:  # a failed case must not stop the others
            failures.append(f"{case}: {e}")
            traceback.print_exc()
    return rows, failures
