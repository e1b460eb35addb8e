"""Runs suite `copy_grid` (`validation.suites.copy_grid`): a persistent Triton copy at each grid, and torch's copy.

Each grid is checked exact (`torch.equal`) once, on a destination poisoned with NaN, then timed eagerly.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence

import torch
import triton
import triton.language as tl

from companion.bench.timing import DEVICE, MeasurementError, bench, provenance
from validation.measure_output import summarize
from validation.suites import case_row
from validation.suites.copy_grid import CopyCase


@triton.jit
def copy_persistent_kernel(src_ptr, dst_ptr, n_blocks, n_programs, BLOCK: tl.constexpr):
    """Each of the n_programs programs copies blocks pid, pid + G, pid + 2G, ... of BLOCK elements."""
    pid = tl.program_id(0)
    for block in range(pid, n_blocks, n_programs):
        offs = block * BLOCK + tl.arange(0, BLOCK)
        tl.store(dst_ptr + offs, tl.load(src_ptr + offs))


def _copy_launcher(case: CopyCase, src: torch.Tensor, dst: torch.Tensor) -> Callable[[], object]:
    """One launch of the case's copy: torch's own, or the persistent Triton kernel on its grid."""
    if case.grid is None:
        return lambda: dst.copy_(src)
    if src.numel() % case.block:
        raise MeasurementError(f"{case}: n_elems is not a multiple of block")
    n_blocks = src.numel() // case.block
    g, block, warps = case.grid, case.block, case.num_warps
    return lambda: copy_persistent_kernel[(g,)](src, dst, n_blocks, g, BLOCK=block, num_warps=warps)


def run(cases: Sequence[CopyCase], env: dict) -> tuple[list[dict], list[str]]:
    rows: list[dict] = []
    failures: list[str] = []
    n = cases[0].n_elems
    if any(c.n_elems != n or c.dtype != cases[0].dtype for c in cases):
        raise MeasurementError("copy cases must share one buffer size and dtype")
    if n >= 2**31:
        raise MeasurementError("copy kernel indexes with int32: n_elems must be below 2**31")
    src = torch.randn(n, device=DEVICE, dtype=getattr(torch, cases[0].dtype))
    dst = torch.empty_like(src)
    for case in cases:
        try:
            launch = _copy_launcher(case, src, dst)
            dst.fill_(float("nan"))  # poison: every element must be written
            launch()
            torch.cuda.synchronize()
            if not torch.equal(dst, src):
                raise MeasurementError(f"{case}: copy is not exact")
            times = bench(launch, 1, hide_host_gaps=True)
        except Exception as e:
            failures.append(f"{case}: {e}")
            traceback.print_exc()
            continue
        rows.append({**case_row(case), **summarize(times), **provenance(env)})
        rate_bytes_per_s = case.bytes() / rows[-1]["time_s_median"]
        print(f"copy {case.kernel} grid={case.grid}: {rate_bytes_per_s / 1e9:.0f} GB/s", flush=True)
    return rows, failures
