"""Runs suite `moe` (`validation.suites.moe`): grouped expert GEMMs, checked against float64, then timed.

Each case's output is checked row by row against float64 on fresh random inputs (bf16 tokens and weights of
unit scale): every value within its bf16 rounding (2^-8 of the row's largest magnitude, with fp32 accumulation
over k terms covered by the same margin). `torch._grouped_mm` runs on the same rows sorted by expert; a
case it refuses (a shape or alignment this PyTorch does not take) is a failure of that case only.
"""

from __future__ import annotations

import itertools
import traceback
from collections.abc import Callable, Sequence

import torch

from companion.bench.timing import DEVICE, MeasurementError, bench, bench_graph, provenance
from companion.kernels import moe
from validation.measure_output import summarize
from validation.suites import EAGER, GRAPH, case_row
from validation.suites.moe import EAGER_SETS, TRITON, MoeCase, routing

NUM_WARPS, NUM_STAGES = 4, 3  # the engine's assumption for the fused-MoE Triton config (workloads.tiles)
TOLERANCE = 2.0**-8 * 1.05  # bf16 output rounding, 5 % margin for fp32 accumulation order


def _inputs(case: MoeCase, offset: int) -> dict:
    choices = torch.tensor(routing(case.routing, case.tokens, case.experts, case.top_k, offset), device=DEVICE)
    a = torch.randn(case.tokens, case.k, device=DEVICE).to(torch.bfloat16)
    return {"a": a, "ids": choices, "out": torch.empty(case.tokens * case.top_k, case.n, device=DEVICE,
                                                       dtype=torch.bfloat16)}


def _check(got: torch.Tensor, want: torch.Tensor) -> float:
    """Largest error as a share of its bound (bf16 rounding of the row's largest value); raises above 1."""
    if not bool(torch.isfinite(got).all()):
        raise MeasurementError("non-finite output")
    scale = want.abs().amax(dim=1, keepdim=True).clamp_min(1e-30)
    share = float(((got.double() - want).abs() / (TOLERANCE * scale)).max())
    if not share <= 1.0:
        raise MeasurementError(f"error {share:.2f}x its bound")
    return share


def _triton_op(case: MoeCase, w: torch.Tensor, sets: list[dict]) -> list[Callable[[], object]]:
    t = case.tiles()
    ops = []
    for s in sets:
        aligned = moe.align(s["ids"], case.experts, t["tile_m"])

        def op(s=s, aligned=aligned) -> None:
            moe.grouped_gemm(s["a"], w, s["ids"], t["tile_m"], t["tile_n"], t["tile_k"], NUM_WARPS, NUM_STAGES,
                             out=s["out"], aligned=aligned)
        ops.append(op)
    return ops


def _vendor_op(case: MoeCase, w: torch.Tensor, sets: list[dict]) -> list[Callable[[], object]]:
    """torch._grouped_mm on the rows sorted by expert; its output lands in sorted order (checked so)."""
    wt = w.transpose(-2, -1)  # [E, k, n], each expert's weight column-major as CUTLASS's TN layout takes it
    ops = []
    for s in sets:
        flat = s["ids"].flatten()
        order = torch.argsort(flat, stable=True)
        s["order"] = order
        s["sorted_a"] = s["a"][order // case.top_k].contiguous()
        offs = torch.cumsum(torch.bincount(flat, minlength=case.experts), 0).to(torch.int32)

        def op(s=s, offs=offs) -> None:
            s["out"] = torch._grouped_mm(s["sorted_a"], wt, offs=offs)
        ops.append(op)
    return ops


def _time_case(case: MoeCase, env: dict) -> dict[str, object]:
    n_sets = case.ops_per_sample if case.launch_mode == GRAPH else EAGER_SETS
    w = (torch.randn(case.experts, case.n, case.k, device=DEVICE) / case.k**0.5).to(torch.bfloat16)
    sets = [_inputs(case, i * (case.top_k if case.routing == "balanced" else 1)) for i in range(n_sets)]
    ops = (_triton_op if case.kernel == TRITON else _vendor_op)(case, w, sets)
    ops[0]()
    torch.cuda.synchronize()
    want = moe.grouped_gemm_ref(sets[0]["a"], w, sets[0]["ids"])
    got = sets[0]["out"] if case.kernel == TRITON else torch.empty_like(sets[0]["out"]).index_copy_(
        0, sets[0]["order"], sets[0]["out"])
    share = _check(got, want)
    if case.launch_mode == EAGER:
        order = itertools.cycle(ops)
        times = bench(lambda: next(order)(), case.ops_per_sample, hide_host_gaps=True)
    else:
        def body() -> None:
            for op in ops:
                op()

        times = bench_graph(body, case.ops_per_sample)
    counts = case.counts()
    row = {**case_row(case), **summarize(times), "n_input_sets": n_sets, "num_warps": NUM_WARPS,
           "num_stages": NUM_STAGES, "active_experts": sum(1 for c in counts if c), "max_rows": max(counts),
           "rows_by_expert": " ".join(str(c) for c in counts), **provenance(env)}
    print(f"moe {case.kernel} {case.model} {case.gemm} t={case.tokens} {case.routing} {case.launch_mode}: "
          f"error {share:.2f} of bound, {row['time_s_median'] * 1e6:.2f} us, "
          f"{case.bytes() / row['time_s_median'] / 1e9:.0f} GB/s, {case.flop() / row['time_s_median'] / 1e12:.1f} "
          "TFLOP/s", flush=True)
    return row


def run(cases: Sequence[MoeCase], env: dict) -> tuple[list[dict], list[str]]:
    """Check each case against float64 on fresh random inputs, then time it; a failed case does not stop others."""
    rows: list[dict] = []
    failures: list[str] = []
    for case in cases:
        try:
            rows.append(_time_case(case, env))
        except Exception as e:
            failures.append(f"{case}: {e}")
            traceback.print_exc()
        torch.cuda.empty_cache()
    return rows, failures
