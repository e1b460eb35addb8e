"""Runs suite `launch` (`validation.suites.launch`): empty Triton launches and a tiny add_, eager and in a graph."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence

import torch
import triton

from companion.bench.timing import DEVICE, MeasurementError, bench, capture_graph, provenance, spaced_bench
from validation.measure_output import summarize
from validation.suites import EAGER, case_row
from validation.suites.launch import LaunchCase


@triton.jit
def empty_kernel(x_ptr):
    """Does nothing: its time is the launch cost alone."""
    pass


def _launch_body(case: LaunchCase, x: torch.Tensor) -> Callable[[], None]:
    """ops_per_sample back-to-back launches of the case's kernel, after checking it once."""
    if case.kernel == "triton_empty":

        def one() -> None:
            empty_kernel[(1,)](x)

    elif case.kernel == "torch_add_":
        before = x.clone()
        x.add_(1)
        torch.cuda.synchronize()
        if not torch.equal(x, before + 1):
            raise MeasurementError(f"{case}: add_ result wrong")

        def one() -> None:
            x.add_(1)

    else:
        raise MeasurementError(f"unknown launch kernel {case.kernel}")

    def body() -> None:
        for _ in range(case.ops_per_sample):
            one()

    return body


def run(cases: Sequence[LaunchCase], env: dict) -> tuple[list[dict], list[str]]:
    """Each case's row, in the cases' order. The eager cases (host cost included) are timed together in rounds
    spread over minutes (`spaced_bench`), as the host probe times the model's eager constants."""
    rows: list[dict] = []
    failures: list[str] = []
    x = torch.randn(cases[0].numel, device=DEVICE, dtype=torch.float32)
    eager = [c for c in cases if c.launch_mode == EAGER]
    try:
        host = spaced_bench({c: (_launch_body(c, x), c.ops_per_sample) for c in eager})
    except Exception as e:
        failures += [f"{c}: {e}" for c in eager]
        traceback.print_exc()
        host = {}
    for case in cases:
        if case.launch_mode == EAGER and case not in host:
            continue
        try:
            if case.launch_mode == EAGER:
                times = host[case]
            else:
                body = _launch_body(case, x)
                graph = capture_graph(body)
                times = bench(graph.replay, case.ops_per_sample, hide_host_gaps=True)
                del graph
            torch.cuda.synchronize()
        except Exception as e:
            failures.append(f"{case}: {e}")
            traceback.print_exc()
            continue
        rows.append({**case_row(case), **summarize(times), **provenance(env)})
    return rows, failures
