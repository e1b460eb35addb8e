"""Serving metrics on tiny hand-worked request and step tables: exact values, edge cases and the JSON contract."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.metrics import (
    REQUEST_COLUMNS,
    STEP_COLUMNS,
    request_rows_to_frame,
    step_rows_to_frame,
    summarize,
    weighted_percentile,
)

CONTRACT_KEYS = {
    "requests_completed", "simulated_s", "wall_s", "sim_speedup", "gpus", "ttft_s", "tpot_s", "itl_s",
    "interactivity_tok_per_s_per_user", "output_tok_per_s", "total_tok_per_s", "output_tok_per_s_per_gpu",
    "total_tok_per_s_per_gpu", "tokens_per_dollar", "prefix_hit_rate", "spec_tokens_per_cycle",
}
# e2el_s and queue_wait_s joined the summary when latencies came to be measured from a request's send (sent_s):
# end-to-end latency from the send, and the client's wait between arrival and send
EXTRA_KEYS = {"mean_batch_decode_seqs", "kv_utilization_mean", "e2el_s", "queue_wait_s"}
RUN = {"gpus": 2, "usd_per_gpu_hour": 3.6, "simulated_s": 5.0, "wall_s": 0.5}


def _request(request_id, arrival_s, first_token_s, finish_s, prompt, cached, output):
    return {
        "request_id": request_id, "session_id": request_id // 2, "turn": request_id % 2,
        "arrival_s": arrival_s, "scheduled_s": arrival_s, "first_token_s": first_token_s, "finish_s": finish_s,
        "prompt_tokens": prompt, "cached_tokens": cached, "output_tokens": output, "preemptions": 0,
    }


def _step(start_s, end_s, *, prefill=0, decode=0, verify=0, cycles=0, spec_tokens=0, kv_used=0, kv_total=100):
    return {
        "start_s": start_s, "end_s": end_s, "prefill_tokens": prefill, "decode_seqs": decode,
        "verify_seqs": verify, "committed_tokens": decode + spec_tokens, "spec_cycles": cycles,
        "spec_committed_tokens": spec_tokens, "kv_blocks_used": kv_used, "kv_blocks_total": kv_total,
        "in_system": decode + verify, "in_system_end": decode + verify,
    }


@pytest.fixture
def requests():
    # TTFT 0.5, 1.0, 0.25, 0.5 s; TPOT 2.0/4, 1.0/10, (one token: none), 0.5/2 s.
    return request_rows_to_frame([
        _request(0, 0.0, 0.5, 2.5, 100, 0, 5),
        _request(1, 1.0, 2.0, 3.0, 200, 150, 11),
        _request(2, 2.0, 2.25, 2.25, 300, 50, 1),
        _request(3, 3.0, 3.5, 4.0, 400, 400, 3),
    ])


@pytest.fixture
def steps():
    return step_rows_to_frame([
        _step(0.0, 1.0, decode=2, kv_used=10),                                # 2 seqs see 1.0 s per token
        _step(1.0, 1.5, verify=3, cycles=3, spec_tokens=9, kv_used=50),       # 3 seqs see 0.5 / (9/3) s
        _step(1.5, 3.5, decode=1, verify=1, cycles=1, spec_tokens=4, kv_used=20),  # 2.0 s and 2.0 / 4 s
        _step(3.5, 4.0, prefill=512, kv_used=40),                              # prefill only: no ITL sample
    ])


@pytest.fixture
def summary(requests, steps):
    return summarize(requests, steps, **RUN)


def test_keys_are_the_contract_plus_extras(summary):
    assert set(summary) == CONTRACT_KEYS | EXTRA_KEYS
    for key in ("ttft_s", "tpot_s", "itl_s"):
        assert set(summary[key]) == {"p50", "p90", "p99", "mean"}
    assert set(summary["interactivity_tok_per_s_per_user"]) == {"p50", "p90"}


def test_run_fields(summary):
    assert summary["requests_completed"] == 4
    assert summary["simulated_s"] == 5.0
    assert summary["wall_s"] == 0.5
    assert summary["sim_speedup"] == pytest.approx(5.0 / 0.5)
    assert summary["gpus"] == 2


def test_ttft_linear_percentiles(summary):
    # sorted [0.25, 0.5, 0.5, 1.0]; linear position (n - 1) * q = 3 * q
    assert summary["ttft_s"] == pytest.approx({
        "p50": 0.5,                          # position 1.5, between 0.5 and 0.5
        "p90": 0.5 + 0.7 * (1.0 - 0.5),      # position 2.7
        "p99": 0.5 + 0.97 * (1.0 - 0.5),     # position 2.97
        "mean": (0.5 + 1.0 + 0.25 + 0.5) / 4,
    })


def test_tpot_skips_single_token_requests(summary):
    # TPOT = (finish - first) / (output - 1): 2.0/4 = 0.5, 1.0/10 = 0.1, 0.5/2 = 0.25; sorted [0.1, 0.25, 0.5]
    assert summary["tpot_s"] == pytest.approx({
        "p50": 0.25,
        "p90": 0.25 + 0.8 * (0.5 - 0.25),    # position 2 * 0.9 = 1.8
        "p99": 0.25 + 0.98 * (0.5 - 0.25),   # position 1.98
        "mean": (0.5 + 0.1 + 0.25) / 3,
    })


def test_interactivity_is_reciprocal_of_tpot_percentile(summary):
    assert summary["interactivity_tok_per_s_per_user"]["p50"] == pytest.approx(1 / 0.25)
    assert summary["interactivity_tok_per_s_per_user"]["p90"] == pytest.approx(1 / (0.25 + 0.8 * 0.25))
    assert summary["interactivity_tok_per_s_per_user"]["p90"] == pytest.approx(1 / summary["tpot_s"]["p90"])


def test_throughput_counts_cached_prompt_tokens(summary):
    output_tokens = 5 + 11 + 1 + 3
    all_tokens = 100 + 200 + 300 + 400 + output_tokens
    assert summary["output_tok_per_s"] == pytest.approx(output_tokens / 5.0)
    assert summary["total_tok_per_s"] == pytest.approx(all_tokens / 5.0)
    assert summary["output_tok_per_s_per_gpu"] == pytest.approx(output_tokens / 5.0 / 2)
    assert summary["total_tok_per_s_per_gpu"] == pytest.approx(all_tokens / 5.0 / 2)
    assert summary["tokens_per_dollar"] == pytest.approx(all_tokens / 5.0 / 2 * 3600 / 3.6)


def test_prefix_hit_rate(summary):
    assert summary["prefix_hit_rate"] == pytest.approx((0 + 150 + 50 + 400) / (100 + 200 + 300 + 400))


def test_spec_tokens_per_cycle(summary):
    assert summary["spec_tokens_per_cycle"] == pytest.approx((9 + 4) / (3 + 1))


def test_spec_tokens_per_cycle_is_one_without_speculation(requests):
    steps = step_rows_to_frame([_step(0.0, 1.0, decode=4)])
    assert summarize(requests, steps, **RUN)["spec_tokens_per_cycle"] == 1.0


def test_itl_weights_each_sequence_once_per_step(summary):
    # samples (value x weight): 1.0 x2, (0.5 / 3) x3, 2.0 x1, (2.0 / 4) x1
    # expanded and sorted: [1/6, 1/6, 1/6, 0.5, 1.0, 1.0, 2.0]; position 6 * q
    assert summary["itl_s"] == pytest.approx({
        "p50": 0.5,                              # position 3
        "p90": 1.0 + 0.4 * (2.0 - 1.0),          # position 5.4
        "p99": 1.0 + 0.94 * (2.0 - 1.0),         # position 5.94
        "mean": (2 * 1.0 + 3 * (0.5 / 3) + 2.0 + 0.5) / 7,
    })


def test_time_weighted_batch_and_kv(summary):
    # step durations 1.0, 0.5, 2.0, 0.5 s; busy time 4.0 s
    assert summary["mean_batch_decode_seqs"] == pytest.approx((2 * 1.0 + 3 * 0.5 + 2 * 2.0 + 0 * 0.5) / 4.0)
    assert summary["kv_utilization_mean"] == pytest.approx((0.10 * 1.0 + 0.50 * 0.5 + 0.20 * 2.0 + 0.40 * 0.5) / 4.0)


@pytest.mark.parametrize("frames", [
    (lambda: request_rows_to_frame([]), lambda: step_rows_to_frame([])),
    (pd.DataFrame, pd.DataFrame),
])
def test_empty_inputs_give_nulls_not_crashes(frames):
    make_requests, make_steps = frames
    summary = summarize(make_requests(), make_steps(), **RUN)
    assert summary["requests_completed"] == 0
    for key in ("ttft_s", "tpot_s", "itl_s", "interactivity_tok_per_s_per_user"):
        assert set(summary[key].values()) == {None}
    assert summary["output_tok_per_s"] == 0.0
    assert summary["tokens_per_dollar"] == 0.0
    assert summary["prefix_hit_rate"] is None
    assert summary["spec_tokens_per_cycle"] == 1.0
    assert summary["mean_batch_decode_seqs"] is None
    assert summary["kv_utilization_mean"] is None
    json.dumps(summary, allow_nan=False)


def test_zero_simulated_time_gives_null_rates():
    summary = summarize(pd.DataFrame(), pd.DataFrame(), **{**RUN, "simulated_s": 0.0})
    assert summary["output_tok_per_s"] is None
    assert summary["tokens_per_dollar"] is None
    assert summary["sim_speedup"] == 0.0


def _plain(value) -> bool:
    """True when value is built only from JSON's own Python types (no numpy scalars)."""
    if isinstance(value, dict):
        return all(type(k) is str and _plain(v) for k, v in value.items())
    return value is None or type(value) in (int, float, str, bool)


def test_json_round_trip_has_no_numpy_types(summary):
    assert _plain(summary)
    assert json.loads(json.dumps(summary, allow_nan=False)) == summary


def test_numpy_arguments_still_give_plain_types(requests, steps):
    run = {"gpus": np.int64(2), "usd_per_gpu_hour": np.float64(3.6), "simulated_s": np.float64(5.0), "wall_s": 0.5}
    assert _plain(summarize(requests, steps, **run))


@pytest.mark.parametrize("wall_s", [0.0, -1.0])
def test_nonpositive_wall_time_raises(requests, steps, wall_s):
    with pytest.raises(ValueError, match="wall_s"):
        summarize(requests, steps, **{**RUN, "wall_s": wall_s})


@pytest.mark.parametrize(("key", "value"), [("gpus", 0), ("usd_per_gpu_hour", 0.0), ("simulated_s", -1.0)])
def test_bad_run_arguments_raise_naming_them(requests, steps, key, value):
    with pytest.raises(ValueError, match=key):
        summarize(requests, steps, **{**RUN, key: value})


def test_frames_have_exact_columns_and_dtypes(requests, steps):
    assert list(requests.columns) == list(REQUEST_COLUMNS)
    assert list(steps.columns) == list(STEP_COLUMNS)
    assert {name: str(dtype) for name, dtype in requests.dtypes.items()} == REQUEST_COLUMNS
    assert {name: str(dtype) for name, dtype in steps.dtypes.items()} == STEP_COLUMNS
    empty = request_rows_to_frame([])
    assert len(empty) == 0
    assert {name: str(dtype) for name, dtype in empty.dtypes.items()} == REQUEST_COLUMNS


def test_frames_accept_columns_of_arrays(steps):
    columns = {name: steps[name].to_numpy() for name in STEP_COLUMNS}
    pd.testing.assert_frame_equal(step_rows_to_frame(columns), steps)


def test_missing_column_is_named():
    row = _step(0.0, 1.0, decode=1)
    del row["kv_blocks_total"]
    with pytest.raises(ValueError, match="kv_blocks_total"):
        step_rows_to_frame([row])


def test_missing_value_in_one_row_is_named():
    rows = [_request(0, 0.0, 0.5, 1.0, 10, 0, 2), _request(1, 0.0, 0.5, 1.0, 10, 0, 2)]
    del rows[1]["preemptions"]
    with pytest.raises(ValueError, match="preemptions"):
        request_rows_to_frame(rows)


def test_fractional_count_is_rejected():
    with pytest.raises(ValueError, match="output_tokens"):
        request_rows_to_frame([_request(0, 0.0, 0.5, 1.0, 10, 0, 2.5)])


@pytest.mark.parametrize(("row", "problem"), [
    (_request(0, 1.0, 0.5, 2.0, 10, 0, 2), "first_token_s < arrival_s"),
    (_request(0, 0.0, 1.5, 1.0, 10, 0, 2), "finish_s < first_token_s"),
    (_request(0, 0.0, 0.5, 1.0, 10, 11, 2), "cached_tokens > prompt_tokens"),
])
def test_impossible_requests_raise(steps, row, problem):
    with pytest.raises(ValueError, match=problem):
        summarize(request_rows_to_frame([row]), steps, **RUN)


@pytest.mark.parametrize(("row", "problem"), [
    (_step(1.0, 0.5, decode=1), "end_s < start_s"),
    (_step(0.0, 1.0, decode=1, kv_total=0), "kv_blocks_total <= 0"),
    (_step(0.0, 1.0, decode=1, kv_used=101), "kv_blocks_used > kv_blocks_total"),
    (_step(0.0, 1.0, verify=1, cycles=2, spec_tokens=2), "spec_cycles > verify_seqs"),
])
def test_impossible_steps_raise(requests, row, problem):
    with pytest.raises(ValueError, match=problem):
        summarize(requests, step_rows_to_frame([row]), **RUN)


@given(
    st.lists(st.tuples(st.floats(0, 10), st.integers(0, 5)), min_size=1, max_size=20).filter(
        lambda pairs: any(w > 0 for _, w in pairs)),
    st.floats(0, 100),
)
def test_weighted_percentile_equals_numpy_on_expanded_samples(pairs, q):
    values, weights = np.array([v for v, _ in pairs]), np.array([w for _, w in pairs])
    expected = np.percentile(np.repeat(values, weights), q)
    assert weighted_percentile(values, weights, q) == pytest.approx(expected, abs=1e-12)


def test_weighted_percentile_rejects_no_samples():
    with pytest.raises(ValueError, match="positive weight"):
        weighted_percentile(np.array([1.0]), np.array([0]), 50)
