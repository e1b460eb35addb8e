"""The occupancy probe computes its documented result (dot sum, pointer chase), and its suite plans a step."""

from __future__ import annotations

import pytest
import torch

from companion.kernels.occupancy_probe import (
    TILE,
    chase_table,
    occupancy_probe,
    occupancy_probe_ref,
    probe_inputs,
)
from validation.suites import case_row
from validation.suites import occupancy as suite

PROGRAMS = 5
SEGMENT = 64
STEPS = 37  # not a divisor of the cycle length, so a missed or extra step lands elsewhere


@pytest.mark.parametrize(("block_k", "num_stages", "k_iters"), [(16, 2, 2), (64, 3, 2), (128, 4, 3)])
def test_probe_matches_reference(rng, device, block_k, num_stages, k_iters):
    a, b = probe_inputs(k_iters, block_k, rng)
    table = chase_table(PROGRAMS, SEGMENT, rng)
    pos, dot, _ = occupancy_probe(a.to(device), b.to(device), table.to(device), PROGRAMS, STEPS,
                                  num_stages=num_stages)
    ref_pos, ref_dot = occupancy_probe_ref(a, b, table, PROGRAMS, STEPS)
    # Integer inputs below 4 and fewer than 2^14 terms per entry: every fp32 partial sum is an exact
    # integer below 2^24, so the dot must match exactly, and so must the chase it seeds.
    assert torch.equal(dot.cpu().double(), ref_dot)
    assert torch.equal(pos.cpu().long(), ref_pos)
    assert int(pos.min()) >= 0 and int(pos.max()) < SEGMENT


def test_chase_takes_exactly_the_steps_asked(rng, device):
    """One step more or fewer ends elsewhere: each segment is a single cycle of SEGMENT > STEPS + 1 entries."""
    a, b = probe_inputs(2, 16, rng)
    table = chase_table(PROGRAMS, SEGMENT, rng)
    pos, _, _ = occupancy_probe(a.to(device), b.to(device), table.to(device), PROGRAMS, STEPS, num_stages=2)
    for other in (STEPS - 1, STEPS + 1):
        other_pos, _ = occupancy_probe_ref(a, b, table, PROGRAMS, other)
        assert not torch.equal(pos.cpu().long(), other_pos)


def test_chase_table_segments_are_single_cycles(rng):
    table = chase_table(3, 16, rng).long()
    for p in range(3):
        idx, seen = p * 16, set()
        for _ in range(16):
            seen.add(idx)
            idx = int(table[idx])
        assert idx == p * 16 and seen == set(range(p * 16, p * 16 + 16))


def test_probe_rejects_wrong_tile(rng, device):
    a, b = probe_inputs(2, 16, rng)
    with pytest.raises(ValueError, match=str(TILE)):
        occupancy_probe(a[:, :8].to(device), b.to(device), chase_table(2, 8, rng).to(device), 2, 3, num_stages=2)


def test_suite_plans_a_sweep_with_a_step():
    cases = suite.cases()
    assert 12 <= len(cases) <= 20
    assert all(c.flop() > 0 and c.bytes() > 0 for c in cases)
    planned = [suite.planned_shared_bytes(c) for c in cases]
    assert planned == sorted(planned) and min(planned) <= 10_000 and max(planned) >= 200_000
    waves = [suite.predicted_waves(c.grid, c.num_warps, s, registers=0, gpu_name="h200") for c, s in
             zip(cases, planned, strict=True)]
    assert waves == sorted(waves) and len(set(waves)) >= 4  # 1, 2, 3, 4 and 8 waves at 8 programs per SM


def _synthetic_row(case, shared: int, anchor_shared: int, anchor_time_s: float, anchor: str) -> dict[str, str]:
    """A row as the CSV would hold it, with made-up times: this checks the mapping, it measures nothing."""
    row = {**case_row(case), "time_s_median": 3e-4, "shared_bytes": shared, "registers": 40, "spills": 0,
           "anchor": anchor, "anchor_time_s": anchor_time_s, "anchor_shared_bytes": anchor_shared,
           "anchor_registers": 40}
    return {k: str(v) for k, v in row.items()}


def test_compare_predicts_the_waves_ratio_from_the_anchor():
    cases = suite.cases()
    first, last = cases[0], cases[-1]
    small, large = suite.planned_shared_bytes(first), suite.planned_shared_bytes(last)
    anchor = suite.case_label(first)
    big = suite.compare(_synthetic_row(last, large, small, 1e-4, anchor), "h200")
    assert big.group == "occupancy waves ratio" and not big.fitted
    # 8 programs per SM resident at the smallest reservation (one wave), one at the largest (8 waves).
    assert big.predicted_s == pytest.approx(8e-4)
    own = suite.compare(_synthetic_row(first, small, small, 1e-4, anchor), "h200")
    assert own.fitted and own.predicted_s == pytest.approx(1e-4)
