"""`shared_memos`: runs of one deployment share cycle times and step parts, and no result changes."""

from __future__ import annotations

from simulator.cost.cycle import shared_memos
from simulator.scenario import load_scenario
from simulator.simulate import simulate

QUICK = ["workload.sessions=2", "workload.turns_mean=3"]
TIMING = ("wall_s", "sim_speedup", "cycle_cost")  # wall-clock and memo counts: the run's, not the model's


def _model(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k not in TIMING}


def test_shared_memos_change_no_result_and_pay_each_shape_once():
    scenarios = [load_scenario(None, [], [*QUICK, f"spec_decode.drafts={drafts}", f"serving.max_concurrency={cap}"])
                 for drafts, cap in ((0, 1), (2, 1), (2, 2), (0, 2))]
    alone = [simulate(s).summary for s in scenarios]
    with shared_memos():
        shared = [simulate(s).summary for s in reversed(scenarios)][::-1]
    assert [_model(s) for s in shared] == [_model(s) for s in alone]
    # the run that came last under sharing found the shapes the others had timed
    assert shared[0]["cycle_cost"]["misses"] < alone[0]["cycle_cost"]["misses"]
    assert shared[0]["cycle_cost"]["hits"] > alone[0]["cycle_cost"]["hits"]


def test_without_the_context_each_run_has_its_own_memos():
    scenario = load_scenario(None, [], QUICK)
    with shared_memos():
        simulate(scenario)
    first, second = simulate(scenario).summary, simulate(scenario).summary
    assert first["cycle_cost"]["misses"] == second["cycle_cost"]["misses"] > 0
