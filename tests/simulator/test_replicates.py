"""Replicates: seeds, common random numbers across configurations, and the Student t interval."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from scipy import stats

from simulator.replicates import Interval, numeric_leaves, replicate_seeds, summary_intervals, t_interval, with_seed
from simulator.scenario import load_scenario
from simulator.simulate import simulate

QUICK = ["workload.sessions=3", "workload.turns_mean=3"]  # the default (Kimi K3, agentic, drafts 2), small


def by_request(result) -> pd.DataFrame:
    return result.requests.set_index("request_id").sort_index()


def test_replicate_k_runs_seed_plus_k_and_equals_the_plain_run_of_that_seed():
    scenario = load_scenario(sets=[*QUICK, "workload.seed=4"])
    assert replicate_seeds(scenario, 3) == (4, 5, 6)
    replicate = simulate(with_seed(scenario, 6))
    plain = simulate(load_scenario(sets=[*QUICK, "workload.seed=6"]))
    pd.testing.assert_frame_equal(replicate.requests, plain.requests)
    pd.testing.assert_frame_equal(replicate.steps, plain.steps)
    assert with_seed(scenario, 6) == load_scenario(sets=[*QUICK, "workload.seed=6"])


@pytest.mark.parametrize("n", [0, -3, 1.5, True])
def test_replicate_seeds_need_a_whole_number_of_at_least_one(n):
    with pytest.raises(ValueError, match=r"a whole number in 1\.\.1000"):
        replicate_seeds(load_scenario(), n)


def test_a_change_that_does_not_touch_timing_gives_identical_runs():
    # the price changes tokens per dollar and nothing the engine sees
    base = simulate(load_scenario(sets=[*QUICK, "workload.seed=2"]))
    priced = simulate(load_scenario(sets=[*QUICK, "workload.seed=2", "cost.usd_per_gpu_hour=3.0"]))
    pd.testing.assert_frame_equal(base.requests, priced.requests)
    pd.testing.assert_frame_equal(base.steps, priced.steps)
    assert priced.summary["tokens_per_dollar"] == pytest.approx(base.summary["tokens_per_dollar"] * 1.5 / 3.0)


@pytest.mark.parametrize("change", ["parallel.dcp=8", "serving.max_num_batched_tokens=1024"])
def test_a_change_that_moves_timing_meets_the_same_requests_and_acceptance_draws(change):
    base = simulate(load_scenario(sets=[*QUICK, "workload.seed=1"]))
    changed = simulate(load_scenario(sets=[*QUICK, "workload.seed=1", change]))
    a, b = by_request(base), by_request(changed)
    assert not a["finish_s"].equals(b["finish_s"])  # the change does move timing
    assert a.index.equals(b.index)
    for column in ("session_id", "turn", "prompt_tokens", "output_tokens"):
        assert a[column].equals(b[column]), column
    first = a["turn"] == 0  # later turns arrive a think time after the previous one finishes
    assert a.loc[first, "arrival_s"].equals(b.loc[first, "arrival_s"])
    # every request commits the same tokens at each output position, so it takes the same verify cycles
    for column in ("spec_cycles", "spec_committed_tokens"):
        assert int(base.steps[column].sum()) == int(changed.steps[column].sum()), column


def test_an_open_loop_stream_arrives_the_same_under_a_change():
    sets = ["hardware.platform=h200-8", "model.name=qwen3-32b", "parallel.tp=8", "precision={}",
            "workload.kind=random", "workload.num_prompts=120", "workload.input_len=512", "workload.output_len=64",
            "workload.rate_per_s=20", "workload.range_ratio=0.5", "spec_decode.drafts=2",
            "spec_decode.acceptance_rates=[0.8, 0.5]"]
    base = simulate(load_scenario(sets=sets))
    changed = simulate(load_scenario(sets=[*sets, "serving.max_num_seqs=4"]))
    a, b = by_request(base), by_request(changed)
    assert not a["finish_s"].equals(b["finish_s"])
    for column in ("arrival_s", "prompt_tokens", "output_tokens"):
        assert a[column].equals(b[column]), column
    assert int(base.steps["spec_cycles"].sum()) == int(changed.steps["spec_cycles"].sum())


VALUES = [3.1, 2.7, 3.9, 3.3, 2.8, 3.6]


@pytest.mark.parametrize("confidence", [0.95, 0.9, 0.99])
@pytest.mark.parametrize("n", [2, 3, 6])
def test_the_t_interval_matches_scipy(confidence, n):
    values = VALUES[:n]
    lo, hi = stats.t.interval(confidence, n - 1, loc=sum(values) / n, scale=stats.sem(values))
    interval = t_interval(values, confidence)
    assert interval.mean == pytest.approx(sum(values) / n, rel=1e-15)
    assert (interval.lo, interval.hi) == (pytest.approx(lo, rel=1e-12), pytest.approx(hi, rel=1e-12))
    assert interval.n == n and interval.significant is bool(lo > 0)


def test_the_t_interval_of_fixed_numbers():
    # mean 3, s = sqrt(2/3), t(0.975, 3) = 3.1824463: half-width 3.1824463 * sqrt(2/3) / 2 = 1.2992
    interval = t_interval([2.0, 3.0, 4.0, 3.0])
    assert interval.mean == 3.0
    assert interval.lo == pytest.approx(1.700771736374889, abs=1e-12)
    assert interval.hi == pytest.approx(4.299228263625110, abs=1e-12)


def test_zero_deltas_are_not_significant_and_one_value_has_no_interval():
    assert t_interval([0.0, 0.0, 0.0]) == Interval(0.0, 0.0, 0.0, 3)
    assert t_interval([0.0, 0.0, 0.0]).significant is False
    assert t_interval([-1.0, 2.0, 0.5]).significant is False
    single = t_interval([4.2])
    assert (single.mean, single.lo, single.hi, single.significant) == (4.2, None, None, None)
    with pytest.raises(ValueError, match="at least one"):
        t_interval([])


def test_summary_intervals_cover_every_number_of_the_summaries():
    summaries = [{"a": 1.0, "b": {"p90": 2, "text": "x"}, "c": None, "d": True},
                 {"a": 3.0, "b": {"p90": 4, "text": "y"}, "c": 1.0, "d": False}]
    assert list(numeric_leaves(summaries[0])) == ["a", "b.p90", "c"]
    metrics = summary_intervals(summaries)
    assert metrics["a"]["mean"] == 2.0 and metrics["a"]["values"] == [1.0, 3.0]
    assert metrics["b.p90"]["lo"] == pytest.approx(3.0 - stats.t.ppf(0.975, 1) * math.sqrt(2) / math.sqrt(2))
    assert metrics["c"] == {"mean": None, "lo": None, "hi": None, "values": [None, 1.0]}
