"""Runs suite `mla_decode` (`validation.suites.mla_decode`): the split-KV MLA decode kernel in CUDA graphs.

Each case is checked against float64 on the first and last sequences of fresh standard-normal inputs, then
timed as a graph of `ops_per_sample` calls, call j on rotated input set j mod the number of sets.
"""

from __future__ import annotations

import functools
import itertools
import traceback
from collections.abc import Sequence

import torch

from companion.bench.timing import (
    DEVICE,
    REL_ERR_MAX,
    MeasurementError,
    bench,
    capture_graph,
    provenance,
)
from companion.kernels.mla_decode import mla_decode, mla_decode_ref
from validation.measure_output import summarize
from validation.suites import BF16, case_row
from validation.suites.mla_decode import KV_LORA, WIDTH, MlaDecodeCase, rotation_sets


def _inputs(case: MlaDecodeCase, device: str) -> tuple:
    """Fresh standard-normal bf16 q (seqs, heads, 576) and cache (seqs, context, 576), uniform lengths."""
    q = torch.randn(case.seqs, case.heads, WIDTH, device=device, dtype=torch.bfloat16)
    cache = torch.randn(case.seqs, case.context, WIDTH, device=device, dtype=torch.bfloat16)
    lengths = torch.full((case.seqs,), case.context, device=device, dtype=torch.int32)
    return q, cache, lengths


def _check(case: MlaDecodeCase, inputs: tuple, launch, rel_err_max: float) -> float:
    """Largest relative error of the first and last sequences against float64; raises if out of bounds."""
    q, cache, lengths = inputs
    out = launch(q, cache, lengths)
    torch.cuda.synchronize()
    if out.shape != (case.seqs, case.heads, KV_LORA) or out.dtype != torch.bfloat16:
        raise MeasurementError(f"{case}: output {tuple(out.shape)} {out.dtype}")
    if not bool(torch.isfinite(out).all()):
        raise MeasurementError(f"{case}: non-finite output")
    errs = []
    for b in sorted({0, case.seqs - 1}):
        ref = mla_decode_ref(q[b : b + 1], cache[b : b + 1], lengths[b : b + 1])
        errs.append(float((out[b : b + 1].double() - ref).norm() / ref.norm()))
    err = max(errs)
    if not err < rel_err_max:
        raise MeasurementError(f"{case}: relative error {err:.3e} >= {rel_err_max}")
    return err


def _time_graph(case: MlaDecodeCase, sets: list, launch) -> list[float]:
    """Per-call seconds of a graph of ops_per_sample calls, call j on input set j mod len(sets)."""
    def body() -> None:
        for j in range(case.ops_per_sample):
            launch(*sets[j % len(sets)])

    graph = capture_graph(body)
    try:
        return bench(graph.replay, case.ops_per_sample, hide_host_gaps=True)
    finally:
        del graph
        torch.cuda.synchronize()


def run(cases: Sequence[MlaDecodeCase], env: dict) -> tuple[list[dict], list[str]]:
    """Check each case against float64 on fresh inputs, then time a graph of ops_per_sample calls."""
    rows: list[dict] = []
    failures: list[str] = []
    for _, group in itertools.groupby(cases, key=lambda c: (c.seqs, c.context, c.heads)):
        group = list(group)
        try:
            n_sets = rotation_sets(group[0].input_set_bytes(), env["l2_bytes"])
            sets = [_inputs(group[0], DEVICE) for _ in range(n_sets)]
        except Exception as e:  # a failed shape must not stop the other shapes
            failures.append(f"{group[0]}: {e}")
            traceback.print_exc()
            continue
        for case in group:
            try:
                if n_sets > case.ops_per_sample:
                    raise MeasurementError(f"{case}: {n_sets} input sets do not fit a graph of {case.ops_per_sample}")
                launch = functools.partial(mla_decode, num_splits=case.num_splits, pad_heads_to=case.pad_heads_to,
                                           block_n=case.block_n, num_warps=case.num_warps)
                sets[0][0].normal_()  # fresh inputs for this case's check
                sets[0][1].normal_()
                err = _check(case, sets[0], launch, REL_ERR_MAX[BF16])
                times = _time_graph(case, sets, launch)
            except Exception as e:
                failures.append(f"{case}: {e}")
                traceback.print_exc()
                continue
            rows.append({**case_row(case), **summarize(times), "n_input_sets": n_sets, **provenance(env)})
            t = rows[-1]["time_s_median"]
            print(f"mla_decode seqs={case.seqs} context={case.context} splits={case.num_splits} "
                  f"pad={case.pad_heads_to}: {n_sets} sets, rel err {err:.2e}, {t * 1e6:.1f} us, "
                  f"{case.bytes() / t / 1e9:.0f} GB/s", flush=True)
        del sets
        torch.cuda.empty_cache()
    return rows, failures
