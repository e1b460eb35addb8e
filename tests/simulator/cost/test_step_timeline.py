"""A step's timeline: the same timed launches as `time_plan`, placed on a compute and a collective stream."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from hwmodels.calibration import load_calibration
from hwmodels.interconnect import build_fabric
from hwmodels.spec import load_gpu, load_platform
from simulator.cost.step_parts import StepParts
from simulator.cost.step_time import COLLECTIVES, COMPUTE, place, time_plan, timed_launches
from workloads.deployment import Deployment
from workloads.layers import build_step
from workloads.model import load_model
from workloads.step import Batch, PrefillChunk

H200 = load_gpu("h200")
H200_8 = build_fabric(load_platform("h200-8"), H200)
MI355X = load_gpu("mi355x")
MI355X_8 = build_fabric(load_platform("mi355x-8"), MI355X)
CASES = [
    (Deployment(load_model("llama-3.1-70b"), H200, tp=8), H200_8, Batch(decodes=(4000,) * 32)),
    (Deployment(load_model("qwen3-32b"), H200, tp=1), H200_8, Batch(decodes=(1024,) * 8)),
    (Deployment(load_model("kimi-k3"), MI355X, tp=8), MI355X_8,
     Batch(prefills=(PrefillChunk(512, 256),), decodes=(3000, 9000), verifies=(5000,), drafts=2)),
]


def _parts(d: Deployment, fabric, overlap: bool) -> StepParts:
    d = replace(d, options=replace(d.options, overlap_collectives=overlap)) if overlap else d
    return StepParts(d, fabric, load_calibration(d.gpu.name))


@pytest.mark.parametrize("overlap", [False, True], ids=["serialized", "overlapped"])
@pytest.mark.parametrize(("deployment", "fabric", "batch"), CASES, ids=["llama-tp8", "qwen3-tp1", "kimi-k3-mixed"])
def test_the_timeline_sums_to_the_steps_predicted_time(deployment, fabric, batch, overlap):
    parts = _parts(deployment, fabric, overlap)
    step = parts.step_time(batch)
    placed = parts.timeline(batch)
    compute = [p for p in placed if p.stream == COMPUTE]
    collectives = [p for p in placed if p.stream == COLLECTIVES]
    assert len(compute) == step.kernel_launches
    assert sum(p.timed.time_s for p in compute) == pytest.approx(step.kernel_s, rel=1e-9)
    assert sum(p.timed.time_s for p in collectives) == pytest.approx(step.collective_s, rel=1e-9, abs=0)
    end = max(p.end_s for p in placed)
    if overlap:  # the step takes the longer stream; collectives that wait for their issue can end later
        assert max(compute[-1].end_s, sum(p.timed.time_s for p in collectives)) == pytest.approx(step.total_s,
                                                                                                 rel=1e-9)
        assert end >= step.total_s * (1 - 1e-9)
    else:
        assert end == pytest.approx(step.total_s, rel=1e-9)
    assert compute[0].start_s == 0.0
    for before, after in itertools.pairwise(compute):  # back to back, waiting only for serialized collectives
        assert after.start_s >= before.end_s
    for before, after in itertools.pairwise(collectives):
        assert after.start_s >= before.end_s


def test_a_serialized_collective_holds_compute_and_an_overlapped_one_does_not():
    d, fabric, batch = CASES[0]
    for overlap in (False, True):
        placed = _parts(d, fabric, overlap).timeline(batch)
        for i, p in enumerate(placed[:-1]):
            if p.stream != COLLECTIVES or placed[i + 1].stream != COMPUTE:
                continue
            issued = max(q.end_s for q in placed[:i] if q.stream == COMPUTE)
            assert p.start_s >= issued  # starts where the plan issues it
            next_start = placed[i + 1].start_s
            assert next_start == (issued if overlap else p.end_s)


def test_time_plan_is_the_sum_of_the_timed_launches():
    d, fabric, batch = CASES[2]
    calib = load_calibration(d.gpu.name)
    plan = build_step(batch, d)
    launches = list(timed_launches(plan, fabric, calib))
    step = time_plan(plan, fabric, calib)
    assert [t.item for t in launches if t.launch == 0] == list(plan.items)
    assert sum(t.time_s for t in launches if t.item.kernel is not None) == step.kernel_s
    assert sum(t.time_s for t in launches if t.item.collective is not None) == step.collective_s
    placed = place(launches, overlap_collectives=False)
    assert [p.timed for p in placed] == launches

