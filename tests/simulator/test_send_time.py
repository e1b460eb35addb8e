"""Latencies from the send: under serving.max_concurrency the client holds a request until a slot frees, and TTFT,
TPOT, ITL and E2E count from then (vllm bench serve --max-concurrency); without a cap nothing changes."""

from __future__ import annotations

import heapq

import numpy as np
import pandas as pd
import pytest

from simulator.metrics import REQUEST_COLUMNS, request_rows_to_frame, step_rows_to_frame, summarize
from simulator.scenario import load_scenario
from simulator.simulate import simulate


def scenario(*sets: str):
    """A dense model on 8x H200 serving a random workload of equal requests, all at t = 0."""
    base = ["hardware.platform=h200-8", "model.name=qwen3-32b", "parallel.tp=8", "spec_decode.drafts=0",
            "precision={}", "workload.kind=random", "workload.num_prompts=20", "workload.input_len=512",
            "workload.output_len=32", "workload.arrival=infinite", "workload.range_ratio=0.0",
            "cache.prefix_caching=false", "serving.max_num_seqs=64"]
    return load_scenario(sets=[*base, *sets])


def fifo_sends(arrival_s: np.ndarray, finish_s: np.ndarray, cap: int) -> np.ndarray:
    """A FIFO client with `cap` slots, given each request's finish: send = max(arrival, the earliest free slot)."""
    free, sent = [0.0] * cap, np.empty_like(arrival_s)
    for i in range(arrival_s.size):  # in arrival order
        sent[i] = max(arrival_s[i], heapq.heappop(free))
        heapq.heappush(free, finish_s[i])
    return sent


def test_the_first_c_requests_go_at_once_and_each_later_one_when_a_slot_frees():
    cap = 4
    result = simulate(scenario(f"serving.max_concurrency={cap}"))
    requests = result.requests.sort_values("request_id").reset_index(drop=True)
    assert len(requests) == 20 and (requests["arrival_s"] == 0).all()
    first, later = requests.iloc[:cap], requests.iloc[cap:]
    assert (first["sent_s"] == first["arrival_s"]).all()
    # each later request takes the slot of the earliest request still unaccounted for: sorted sends of the later
    # ones are the earliest finishes, one for one
    finishes = np.sort(requests["finish_s"].to_numpy())
    np.testing.assert_array_equal(np.sort(later["sent_s"].to_numpy()), finishes[: len(later)])
    assert (later["sent_s"] > 0).all()
    # never more than `cap` requests between send and finish
    starts, ends = np.sort(requests["sent_s"].to_numpy()), finishes
    assert (np.arange(1, starts.size + 1) - np.searchsorted(ends, starts, side="right")).max() == cap
    ttft_from_send = requests["first_token_s"] - requests["sent_s"]
    ttft_from_arrival = requests["first_token_s"] - requests["arrival_s"]
    assert (ttft_from_send <= ttft_from_arrival).all() and (ttft_from_send < ttft_from_arrival).sum() == 20 - cap
    s = result.summary
    assert s["ttft_s"]["mean"] == pytest.approx(ttft_from_send.mean(), rel=1e-12)
    assert s["ttft_s"]["mean"] < ttft_from_arrival.mean()
    assert s["e2el_s"]["mean"] == pytest.approx((requests["finish_s"] - requests["sent_s"]).mean(), rel=1e-12)
    assert s["queue_wait_s"]["mean"] == pytest.approx(requests["sent_s"].mean(), rel=1e-12)
    assert s["queue_wait_s"]["p50"] > 0


def test_sends_under_a_cap_are_those_of_a_fifo_client_with_poisson_arrivals():
    cap = 6
    result = simulate(scenario(f"serving.max_concurrency={cap}", "workload.arrival=poisson",
                               "workload.rate_per_s=40", "workload.num_prompts=120", "workload.range_ratio=0.5"))
    requests = result.requests.sort_values(["arrival_s", "request_id"]).reset_index(drop=True)
    expected = fifo_sends(requests["arrival_s"].to_numpy(), requests["finish_s"].to_numpy(), cap)
    np.testing.assert_array_equal(requests["sent_s"].to_numpy(), expected)
    assert (requests["sent_s"] > requests["arrival_s"]).any()  # the cap binds
    assert (requests["arrival_s"] <= requests["sent_s"]).all()
    assert (requests["sent_s"] <= requests["first_token_s"]).all()


def test_without_a_cap_every_request_is_sent_when_it_arrives_and_a_slack_cap_changes_nothing():
    free = simulate(scenario())
    slack = simulate(scenario("serving.max_concurrency=20"))
    requests = free.requests
    assert (requests["sent_s"] == requests["arrival_s"]).all()
    pd.testing.assert_frame_equal(free.requests, slack.requests)
    pd.testing.assert_frame_equal(free.steps, slack.steps)
    s = free.summary
    # the definitions from the arrival, as they were before the send time existed
    assert s["ttft_s"]["mean"] == pytest.approx((requests["first_token_s"] - requests["arrival_s"]).mean(), rel=1e-12)
    assert s["e2el_s"]["mean"] == pytest.approx((requests["finish_s"] - requests["arrival_s"]).mean(), rel=1e-12)
    assert s["queue_wait_s"] == {"p50": 0.0, "p90": 0.0, "p99": 0.0, "mean": 0.0}
    for key in ("ttft_s", "tpot_s", "itl_s", "output_tok_per_s", "total_tok_per_s", "simulated_s"):
        assert s[key] == slack.summary[key]


def _row(arrival_s, sent_s, first_token_s, finish_s, output=3):
    row = {"request_id": 0, "session_id": 0, "turn": 0, "arrival_s": arrival_s, "sent_s": sent_s,
           "scheduled_s": sent_s, "first_token_s": first_token_s, "finish_s": finish_s, "prompt_tokens": 10,
           "cached_tokens": 0, "output_tokens": output, "preemptions": 0}
    assert list(row) == list(REQUEST_COLUMNS)
    return row


STEPS = step_rows_to_frame([{"start_s": 0.0, "end_s": 4.0, "prefill_tokens": 10, "decode_seqs": 1,
                             "verify_seqs": 0, "committed_tokens": 1, "spec_cycles": 0, "spec_committed_tokens": 0,
                             "kv_blocks_used": 1, "kv_blocks_total": 10, "in_system": 1, "in_system_end": 0}])
RUN = {"gpus": 1, "usd_per_gpu_hour": 2.0, "simulated_s": 5.0, "wall_s": 1.0}


def test_ttft_e2el_and_the_client_wait_count_from_the_send():
    requests = request_rows_to_frame([_row(0.0, 1.5, 2.0, 4.0), _row(1.0, 1.0, 1.25, 3.25)])
    s = summarize(requests, STEPS, **RUN)
    assert s["ttft_s"]["mean"] == pytest.approx((0.5 + 0.25) / 2)
    assert s["e2el_s"]["mean"] == pytest.approx((2.5 + 2.25) / 2)
    assert s["queue_wait_s"]["mean"] == pytest.approx(1.5 / 2)
    assert s["tpot_s"]["mean"] == pytest.approx(1.0)  # (finish - first token) / 2: the send does not enter


def test_a_table_without_sent_s_was_sent_on_arrival():
    row = _row(1.0, 1.0, 1.5, 2.0)
    del row["sent_s"]
    requests = request_rows_to_frame([row])
    assert list(requests.columns) == list(REQUEST_COLUMNS) and requests["sent_s"].iloc[0] == 1.0


@pytest.mark.parametrize(("row", "problem"), [
    (_row(1.0, 0.5, 2.0, 3.0), "sent_s < arrival_s"),
    (_row(0.0, 1.5, 1.0, 3.0), "first_token_s < sent_s"),
])
def test_a_send_outside_arrival_to_first_token_is_impossible(row, problem):
    with pytest.raises(ValueError, match=problem):
        summarize(request_rows_to_frame([row]), STEPS, **RUN)


def test_burstiness_one_draws_the_poisson_arrivals_and_another_value_the_gamma_ones():
    poisson = ("workload.arrival=poisson", "workload.rate_per_s=40", "workload.num_prompts=200")
    plain = simulate(scenario(*poisson)).requests["arrival_s"].to_numpy()
    one = simulate(scenario(*poisson, "workload.burstiness=1.0")).requests["arrival_s"].to_numpy()
    bursty = simulate(scenario(*poisson, "workload.burstiness=0.2")).requests["arrival_s"].to_numpy()
    np.testing.assert_array_equal(plain, one)
    assert not np.array_equal(plain, bursty)
    assert np.diff(np.sort(bursty)).std() > 1.5 * np.diff(np.sort(plain)).std()  # bursts: a wider spread of gaps
