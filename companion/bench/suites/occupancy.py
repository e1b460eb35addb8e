"""Runs suite `occupancy` (`validation.suites.occupancy`): the probe at each shared-memory reservation.

Each case runs on this GPU's grid (8 programs per SM), is checked against the reference chase and dot on fresh
inputs, then timed eagerly; every row records the compiled kernel's shared bytes, registers and spills and,
after the sweep, its anchor: the row with the smallest recorded reservation.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Sequence
from dataclasses import replace

import torch

from companion.bench.timing import DEVICE, MeasurementError, bench, provenance
from companion.kernels import occupancy_probe as probe
from validation.measure_output import summarize
from validation.suites import case_row
from validation.suites.occupancy import K_ITERS, PROGRAMS_PER_SM, OccupancyCase, anchor_label, case_label

SEGMENT = 512  # table entries per program: a 256-step chase visits distinct entries of one cycle


def _time_case(case: OccupancyCase, env: dict) -> dict[str, object]:
    rng = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))  # fresh inputs every run
    a, b = probe.probe_inputs(K_ITERS, case.block_k, rng)
    table = probe.chase_table(case.grid, SEGMENT, rng)
    ref_pos, ref_dot = probe.occupancy_probe_ref(a, b, table, case.grid, case.chase_steps)
    a, b, table = a.to(DEVICE), b.to(DEVICE), table.to(DEVICE)

    def launch():
        return probe.occupancy_probe(a, b, table, case.grid, case.chase_steps, num_stages=case.num_stages,
                                     num_warps=case.num_warps)

    pos, dot, compiled = launch()
    torch.cuda.synchronize()
    if not (torch.equal(dot.cpu().double(), ref_dot) and torch.equal(pos.cpu().long(), ref_pos)):
        raise MeasurementError("probe result differs from the reference")
    times = bench(launch, 1, hide_host_gaps=True)
    row = {**case_row(case), **summarize(times), "shared_bytes": int(compiled.metadata.shared),
           "registers": int(compiled.n_regs), "spills": int(compiled.n_spills), **provenance(env)}
    print(f"occupancy {case_label(case)}: shared {row['shared_bytes']} B, {row['registers']} regs, "
          f"{row['spills']} spills, {row['time_s_median'] * 1e6:.1f} us", flush=True)
    return row


def run(cases: Sequence[OccupancyCase], env: dict) -> tuple[list[dict], list[str]]:
    """Check and time each case, then give every row the anchor: the row with the smallest recorded reservation."""
    rows: list[dict] = []
    failures: list[str] = []
    for planned in cases:
        case = replace(planned, grid=int(env["sm_count"]) * PROGRAMS_PER_SM)
        try:
            rows.append(_time_case(case, env))
        except Exception as e:
            failures.append(f"{case}: {e}")
            traceback.print_exc()
    if rows:
        anchor = min(rows, key=lambda r: (r["shared_bytes"], r["registers"]))
        for row in rows:
            row.update(anchor=anchor_label(anchor["block_k"], anchor["num_stages"]),
                       anchor_time_s=anchor["time_s_median"], anchor_shared_bytes=anchor["shared_bytes"],
                       anchor_registers=anchor["registers"])
    return rows, failures
