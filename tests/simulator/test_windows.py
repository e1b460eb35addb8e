"""Honest windows: workload.duration_s stops admitting and throughput is over the window the admitted requests were
served in; serving.max_model_len rejects longer requests as vLLM does; the engine keeps its records in columns."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.engine import REQUEST_FIELDS, Columns
from simulator.metrics import request_rows_to_frame
from simulator.prefix_reuse import prefix_reuse
from simulator.scenario import ScenarioError, load_scenario
from simulator.simulate import simulate, stream_of
from workloads.traces import theoretical_prefix_reuse

BASE = ["hardware.platform=h200-8", "model.name=qwen3-32b", "parallel.tp=8", "spec_decode.drafts=0", "precision={}",
        "workload.kind=random", "workload.num_prompts=100", "workload.input_len=256", "workload.output_len=8",
        "workload.arrival=fixed", "workload.rate_per_s=1"]


def _run(*sets: str):
    return simulate(load_scenario(sets=[*BASE, *sets]))


def test_the_window_cuts_later_arrivals_and_measures_over_what_was_served():
    whole, cut = _run(), _run("workload.duration_s=10")
    # arrivals at 0, 1, ..., 99 s: those at 0..10 s come, the 89 after the window never do
    assert cut.summary["requests_completed"] == 11 and cut.summary["requests_cut"] == 89
    assert cut.summary["requests_completed"] + cut.summary["requests_cut"] == 100
    assert cut.summary["admit_until_s"] == 10
    # the clock stops when the client has the last admitted request's last token (the front end's few
    # milliseconds after the engine's last step), not at the cut requests' arrivals
    last = float(cut.requests["finish_s"].max())
    assert 10 < cut.summary["window_s"] == cut.summary["simulated_s"] == last < 12
    assert 0 < last - float(cut.steps["end_s"].max()) < 0.05
    tokens = int(cut.requests["output_tokens"].sum())
    assert cut.summary["output_tok_per_s"] == pytest.approx(tokens / cut.summary["window_s"])
    # the same load, so about the same rate as the whole run (8 tokens a second), not diluted by the cut
    assert cut.summary["output_tok_per_s"] == pytest.approx(whole.summary["output_tok_per_s"], rel=0.15)
    assert whole.summary["requests_cut"] == 0 and whole.summary["window_s"] == whole.summary["simulated_s"]


def test_an_agentic_window_cuts_whole_remaining_sessions():
    sets = ["workload.sessions=6", "workload.turns_mean=6", "workload.seed=3"]
    whole = simulate(load_scenario(sets=sets))
    cut = simulate(load_scenario(sets=[*sets, "workload.duration_s=20"]))
    assert cut.summary["requests_cut"] > 0
    assert cut.summary["requests_completed"] + cut.summary["requests_cut"] == whole.summary["requests_completed"]
    assert float(cut.requests["arrival_s"].max()) <= 20


@pytest.mark.parametrize("value", ["-1", ".nan", ".inf"])
def test_a_duration_that_is_no_time_is_an_error(value):
    with pytest.raises((ScenarioError, ValueError), match="duration_s"):
        _run(f"workload.duration_s={value}")


def test_requests_over_max_model_len_are_rejected_and_counted():
    result = _run("workload.range_ratio=0.5", "serving.max_model_len=300")
    stream = stream_of(load_scenario(sets=[*BASE, "workload.range_ratio=0.5"]),
                       np.random.default_rng(np.random.SeedSequence(0)))
    over = int(np.count_nonzero(stream.prompt_tokens + np.maximum(1, stream.output_tokens) > 300))
    assert 0 < over < 100
    assert result.summary["requests_rejected"] == over
    assert result.summary["requests_completed"] == 100 - over
    assert int((result.requests["prompt_tokens"] + result.requests["output_tokens"]).max()) <= 300


def test_every_request_over_max_model_len_is_an_error():
    with pytest.raises(ScenarioError, match=r"serving\.max_model_len: every request"):
        _run("serving.max_model_len=100")


# Qwen3-32B on one H200 at half its HBM: a KV cache of about 14,000 tokens past the weights
# 70.5 GB of the H200's 150.1 GB: Qwen3-32B's weights and a few GB of cache
SMALL_KV = ["parallel.tp=1", "serving.gpu_memory_utilization=0.4697", "workload.num_prompts=20",
            "workload.input_len=8000", "workload.range_ratio=0.9"]


def _blocks_held(result) -> int:
    """Tokens in the KV cache's whole blocks."""
    block = load_scenario(sets=BASE).cache.block_tokens
    return result.summary["kv_capacity_tokens"] // block * block


def test_auto_max_model_len_rejects_what_the_kv_cache_cannot_hold():
    result = _run(*SMALL_KV)  # serving.max_model_len: -1, the default (vLLM's --max-model-len auto)
    limit = _blocks_held(result) - 1  # one token of lookahead a decode step (no drafts)
    stream = stream_of(load_scenario(sets=[*BASE, *SMALL_KV]), np.random.default_rng(np.random.SeedSequence(0)))
    lengths = stream.prompt_tokens + np.maximum(1, stream.output_tokens)
    over = int(np.count_nonzero(lengths > limit))
    assert 0 < over < 20
    assert result.summary["requests_rejected"] == over
    assert result.summary["requests_completed"] == 20 - over
    assert int((result.requests["prompt_tokens"] + result.requests["output_tokens"]).max()) <= limit
    assert result.summary["max_model_len"] == limit


def test_a_max_model_len_the_kv_cache_cannot_hold_is_refused_as_vllm_refuses_to_start():
    with pytest.raises(ScenarioError, match=r"serving\.max_model_len: 200000 tokens do not fit in the KV cache "
                                            r"\(\d+ blocks of 128 tokens hold requests of at most \d+\)"):
        _run(*SMALL_KV, "serving.max_model_len=200000")


def test_a_max_model_len_of_zero_is_refused():
    with pytest.raises(ValueError, match=r"max_model_len.*-1 for the longest request the KV cache holds"):
        _run("serving.max_model_len=0")


def test_columns_grow_in_chunks_and_keep_their_dtypes():
    rows = Columns({"a": "int64", "b": "float64"}, chunk=2)
    for i in range(5):
        rows.append(i, i / 2)
    columns = rows.columns()
    assert len(rows) == 5 and columns["a"].dtype == np.int64 and columns["b"].dtype == np.float64
    assert columns["a"].tolist() == [0, 1, 2, 3, 4] and columns["b"].tolist() == [0, 0.5, 1, 1.5, 2]


def test_columns_sized_up_front_are_filled_in_place_and_framed_without_a_copy():
    rows = Columns(REQUEST_FIELDS, chunk=4, rows=10)
    arrays = rows._arrays
    for i in range(10):
        rows.append(i, i, 0, 0.5 * i, 0.5 * i, 0.5 * i, 0.5 * i + 1, 0.5 * i + 2, 16, 0, 2, 0)
    columns = rows.columns()
    assert rows._arrays is arrays and all(a.size == 10 for a in arrays)  # never regrown
    assert columns["request_id"].tolist() == list(range(10)) and columns["finish_s"][-1] == 6.5
    frame = request_rows_to_frame(columns)
    assert frame["finish_s"].tolist() == columns["finish_s"].tolist()
    assert np.shares_memory(frame["finish_s"].to_numpy(), columns["finish_s"])


@pytest.mark.parametrize("sets", [
    ["workload.sessions=12", "workload.turns_mean=6"],
    ["workload.kind=random", "workload.num_prompts=500", "workload.input_len=300", "workload.range_ratio=0.5"],
])
def test_the_array_prefix_reuse_equals_the_set_one(sets):
    for seed in range(3):
        stream = stream_of(load_scenario(sets=[*sets, f"workload.seed={seed}"]), np.random.default_rng(seed))
        assert math.isclose(prefix_reuse(stream), theoretical_prefix_reuse(stream), rel_tol=0, abs_tol=0)
