"""Serving-simulator invariants: completion, token counts, Little's law, M/D/1, speculation, determinism."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simulator.engine_profiles import FRONT_ENDS
from simulator.scenario import load_scenario
from simulator.simulate import simulate


def small(*sets: str):
    """A quick scenario: a dense model on 8x H200 serving a random workload."""
    base = ["hardware.platform=h200-8", "model.name=qwen3-32b", "parallel.tp=8", "spec_decode.drafts=0",
            "precision={}", "workload.kind=random", "workload.num_prompts=300", "workload.input_len=512",
            "workload.output_len=32", "workload.arrival=poisson", "workload.rate_per_s=20",
            "workload.range_ratio=0.5"]
    return load_scenario(sets=[*base, *sets])


def test_every_request_completes_once_with_the_tokens_it_asked_for():
    result = simulate(small())
    requests = result.requests
    assert len(requests) == 300 and requests["request_id"].is_unique
    assert (requests["finish_s"] >= requests["first_token_s"]).all()
    assert (requests["first_token_s"] >= requests["arrival_s"]).all()
    assert int(result.steps["committed_tokens"].sum()) == int(requests["output_tokens"].sum())
    assert result.summary["requests_completed"] == 300


def test_the_same_seed_gives_identical_frames_and_another_seed_does_not():
    a, b = simulate(small("workload.seed=5")), simulate(small("workload.seed=5"))
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    c = simulate(small("workload.seed=6"))
    assert not a.requests["arrival_s"].equals(c.requests["arrival_s"])


def test_the_collector_settings_of_a_run_change_nothing_and_are_restored(monkeypatch):
    import gc

    import simulator.simulate as simulate_module

    before = gc.get_threshold()
    tuned = simulate(small("workload.seed=5"))
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    monkeypatch.setattr(simulate_module, "RUN_GC_THRESHOLDS", (1, 1, 1))  # a collection at nearly every allocation
    eager = simulate(small("workload.seed=5"))
    pd.testing.assert_frame_equal(tuned.requests, eager.requests)
    pd.testing.assert_frame_equal(tuned.steps, eager.steps)


def test_littles_law_holds_within_2_percent():
    scenario = small("workload.num_prompts=1500", "workload.rate_per_s=40")
    result = simulate(scenario)
    requests, steps = result.requests, result.steps
    horizon = float(requests["finish_s"].max())
    # the engine's counts hold a request from its arrival until its last step; the client has its last token the
    # front end's time later (engine_profiles.FrontEnd), which no count of the engine's holds
    front_end = FRONT_ENDS[scenario.serving.engine]
    sojourn = requests["finish_s"] - requests["arrival_s"] - front_end.seconds(requests["prompt_tokens"])
    assert front_end.request_s > 0
    arrival_rate = len(requests) / horizon
    # time-average of requests in the system, read from the engine's counts at each step's start and
    # end (trapezoid; idle time counts as zero), against arrival rate x mean time in the system
    duration = steps["end_s"] - steps["start_s"]
    in_system = float(((steps["in_system"] + steps["in_system_end"]) / 2 * duration).sum()) / horizon
    assert in_system == pytest.approx(arrival_rate * sojourn.mean(), rel=0.02)


def test_batch_one_with_a_fixed_step_matches_the_md1_mean_wait():
    # one sequence at a time, one output token: each request is one step of fixed length (M/D/1)
    md1 = ("serving.max_num_seqs=1", "workload.output_len=1", "workload.range_ratio=0.0",
           "cache.prefix_caching=false")
    probe = simulate(small(*md1, "workload.num_prompts=3", "workload.rate_per_s=1"))
    step_s = float((probe.steps["end_s"] - probe.steps["start_s"]).iloc[0])
    result = simulate(small(*md1, "workload.num_prompts=30000", f"workload.rate_per_s={0.6 / step_s}"))
    steps, requests = result.steps, result.requests
    service = (steps["end_s"] - steps["start_s"]).to_numpy()
    assert service.std() < 1e-9 * service.mean() + 1e-15  # deterministic service
    rate = 1 / np.diff(np.sort(requests["arrival_s"].to_numpy())).mean()
    rho = rate * service.mean()
    assert 0.3 < rho < 0.8
    expected_wait = rho * service.mean() / (2 * (1 - rho))
    waits = requests["scheduled_s"] - requests["arrival_s"]
    assert waits.mean() == pytest.approx(expected_wait, rel=0.02)


@pytest.mark.parametrize(("rates", "expected"), [((0.9, 0.7, 0.4), 3.00), ((0.9, 0.7, 0.4, 0.36), 3.36)])
def test_speculative_decoding_commits_the_expected_tokens_per_cycle(rates, expected):
    rates_text = "[" + ", ".join(str(r) for r in rates) + "]"
    result = simulate(small(f"spec_decode.drafts={len(rates)}", f"spec_decode.acceptance_rates={rates_text}",
                            "workload.output_len=2000", "workload.num_prompts=40", "workload.range_ratio=0.0"))
    assert result.summary["spec_tokens_per_cycle"] == pytest.approx(expected, rel=0.01)
    assert int(result.steps["spec_cycles"].sum()) > 10_000


def test_an_agentic_stream_with_a_large_cache_reaches_a_high_prefix_hit_rate():
    result = simulate(load_scenario(sets=["workload.sessions=6", "workload.turns_mean=8"]))
    assert result.summary["prefix_hit_rate"] > 0.85
    turns = result.requests.sort_values(["session_id", "turn"])
    later = turns[turns["turn"] > 0]
    assert (later["cached_tokens"] > 0).all()


def test_host_offload_raises_the_prefix_hit_rate_under_kv_pressure():
    # ~223k tokens of HBM KV (history + KDA checkpoints; 69.86 % of the MI355X's 309 GB) for 24 sessions whose
    # contexts grow past 30k
    pressure = ["workload.sessions=24", "workload.turns_mean=25", "workload.rate_per_s=4",
                "serving.gpu_memory_utilization=0.6986"]
    without = simulate(load_scenario(sets=pressure))
    with_host = simulate(load_scenario(sets=[*pressure, "cache.host_offload_gb_per_gpu=224.875"]))
    assert without.summary["host_prefix_hit_rate"] == 0
    assert with_host.summary["host_prefix_hit_rate"] > 0
    assert with_host.summary["prefix_hit_rate"] > without.summary["prefix_hit_rate"]
