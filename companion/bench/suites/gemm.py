"""Runs suite `gemm` (`validation.suites.gemm`): cuBLAS bf16 matmul and fp8 scaled-mm, checked, then timed.

Each shape is checked once before timing: two 64×64 corner blocks of the output against float64 on the same
(quantized) inputs, and the whole output finite. Inputs rotate over enough (A, W) pairs to exceed 2× the L2.
"""

from __future__ import annotations

import itertools
import traceback
from collections.abc import Callable, Sequence

import torch

from companion.bench.timing import (
    DEVICE,
    REL_ERR_MAX,
    MeasurementError,
    bench,
    capture_graph,
    provenance,
)
from validation.measure_output import summarize
from validation.suites import BF16, EAGER, FP8, case_row
from validation.suites.gemm import GemmCase

CHECK_BLOCK = 64
FP8_SCALE_A = 0.75  # assumption: arbitrary non-unit per-tensor scales, so the scales are exercised
FP8_SCALE_B = 1.25
L2_ROTATION_FACTOR = 2  # rotated inputs of a GEMM case exceed this many L2s


def _gemm_inputs(case: GemmCase) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh standard-normal A (m, k) and weight W (n, k), in the case's input dtype."""
    a = torch.randn(case.m, case.k, device=DEVICE, dtype=torch.bfloat16)
    w = torch.randn(case.n, case.k, device=DEVICE, dtype=torch.bfloat16)
    if case.dtype == FP8:
        a, w = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    return a, w


def _gemm_op(case: GemmCase) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """out = A @ W^T: cuBLAS bf16, or fp8 scaled-mm with fp32 scalar scales and bf16 output."""
    if case.dtype == BF16:
        return lambda a, w: torch.matmul(a, w.t())
    scale_a = torch.tensor(FP8_SCALE_A, device=DEVICE, dtype=torch.float32)
    scale_b = torch.tensor(FP8_SCALE_B, device=DEVICE, dtype=torch.float32)
    # w.t() of a row-major (n, k) tensor is the column-major (k, n) B that _scaled_mm requires.
    return lambda a, w: torch._scaled_mm(a, w.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def check_gemm(case: GemmCase, a: torch.Tensor, w: torch.Tensor, op: Callable) -> float:
    """Largest relative error of two corner sub-blocks against float64; raises if out of bounds."""
    out = op(a, w)
    torch.cuda.synchronize()
    if out.shape != (case.m, case.n) or out.dtype != torch.bfloat16:
        raise MeasurementError(f"{case}: output {tuple(out.shape)} {out.dtype}")
    if not bool(torch.isfinite(out).all()):
        raise MeasurementError(f"{case}: non-finite output")
    scale = FP8_SCALE_A * FP8_SCALE_B if case.dtype == FP8 else 1.0
    r, c = min(case.m, CHECK_BLOCK), min(case.n, CHECK_BLOCK)
    errs = []
    for rows, cols in ((slice(0, r), slice(0, c)), (slice(case.m - r, case.m), slice(case.n - c, case.n))):
        ref = (a[rows].float().double() @ w[cols].float().double().t()) * scale
        errs.append(_rel_err(out[rows, cols], ref))
    err = max(errs)
    if not err < REL_ERR_MAX[case.dtype]:
        raise MeasurementError(f"{case}: relative error {err:.3e} >= {REL_ERR_MAX[case.dtype]}")
    return err


def run(cases: Sequence[GemmCase], env: dict) -> tuple[list[dict], list[str]]:
    rows: list[dict] = []
    failures: list[str] = []
    groups = itertools.groupby(cases, key=lambda c: (c.kernel, c.dtype, c.m, c.n, c.k))
    for _, group in groups:
        group = list(group)
        first = group[0]
        try:
            n_sets = L2_ROTATION_FACTOR * env["l2_bytes"] // first.input_set_bytes() + 1
            inputs = [_gemm_inputs(first) for _ in range(n_sets)]
            op = _gemm_op(first)
            err = check_gemm(first, *inputs[0], op)
            print(
                f"gemm {first.kernel} {first.dtype} m={first.m} n={first.n} k={first.k}: "
                f"{n_sets} input sets, rel err {err:.2e}",
                flush=True,
            )
        except Exception as e:  # a failed shape must not stop the other shapes
            failures.append(f"{first}: {e}")
            traceback.print_exc()
            continue
        for case in group:
            try:
                times = _time_gemm(case, inputs, op)
            except Exception as e:
                failures.append(f"{case}: {e}")
                traceback.print_exc()
                continue
            rows.append({**case_row(case), **summarize(times), "n_input_sets": n_sets, **provenance(env)})
        del inputs
    return rows, failures


def _time_gemm(case: GemmCase, inputs: list, op: Callable) -> list[float]:
    n_sets = len(inputs)
    if case.launch_mode == EAGER:
        order = itertools.cycle(range(n_sets))

        def sample() -> None:
            for _ in range(case.ops_per_sample):
                op(*inputs[next(order)])

        return bench(sample, case.ops_per_sample, case.host_gaps == "hidden")

    def body() -> None:
        for j in range(case.ops_per_sample):
            op(*inputs[j % n_sets])

    graph = capture_graph(body)
    try:
        return bench(graph.replay, case.ops_per_sample, hide_host_gaps=True)
    finally:
        del graph
        torch.cuda.synchronize()
