"""Request streams: arrival processes, random and agentic generators, prefix reuse, and trace readers."""

from __future__ import annotations

import json
from dataclasses import replace
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workloads import traces
from workloads.arrivals import FixedRate, Infinite, Poisson, TraceTimestamps
from workloads.trace_readers import TraceFormat, read_azure, read_csv_trace, read_mooncake, read_trace
from workloads.traces import (
    AgenticConfig,
    ChainPool,
    Request,
    RequestStream,
    agentic_stream,
    mix_hash,
    random_stream,
    theoretical_prefix_reuse,
)

COLUMNS = ("request_id", "arrival_s", "prompt_tokens", "output_tokens", "session_id", "turn", "think_time_s",
           "hash_pool", "hash_start", "hash_count")


def rng(seed: int = 7) -> np.random.Generator:
    return np.random.default_rng(seed)


def same_stream(a: RequestStream, b: RequestStream) -> bool:
    return a.block_tokens == b.block_tokens and all(np.array_equal(getattr(a, c), getattr(b, c)) for c in COLUMNS)


# --- arrival processes -------------------------------------------------------------------------------


def test_poisson_sampled_rate_matches_the_stated_rate():
    times = Poisson(rate_per_s=40.0).sample(20_000, rng())
    assert times[0] == 0.0 and np.all(np.diff(times) >= 0)
    assert (times.size - 1) / times[-1] == pytest.approx(40.0, rel=0.03)
    assert np.diff(times).mean() == pytest.approx(1 / 40.0, rel=0.03)


def test_fixed_rate_is_exactly_spaced():
    times = FixedRate(rate_per_s=4.0).sample(9, rng())
    assert times.tolist() == [i / 4.0 for i in range(9)]
    assert np.all(np.diff(times) == 0.25)


def test_infinite_sends_everything_at_zero():
    assert Infinite().sample(5, rng()).tolist() == [0.0] * 5


def test_trace_timestamps_replay_the_recorded_times():
    process = TraceTimestamps(np.array([0.0, 0.5, 2.0]))
    assert process.sample(2, rng()).tolist() == [0.0, 0.5]
    with pytest.raises(ValueError, match="exceeds"):
        process.sample(4, rng())
    with pytest.raises(ValueError, match="sorted"):
        TraceTimestamps(np.array([1.0, 0.5]))


@pytest.mark.parametrize("make", [lambda: Poisson(-1.0), lambda: FixedRate(0), lambda: Poisson(float("inf"))])
def test_bad_rates_name_the_field(make):
    with pytest.raises(ValueError, match="rate_per_s"):
        make()


# --- random stream (vllm bench serve --dataset-name random) ------------------------------------------


def test_random_lengths_stay_in_the_range():
    stream = random_stream(2000, input_len=100, output_len=20, range_ratio=0.5, rng=rng())
    assert stream.prompt_tokens.min() >= 50 and stream.prompt_tokens.max() <= 150
    assert stream.output_tokens.min() >= 10 and stream.output_tokens.max() <= 30
    assert stream.prompt_tokens.min() == 50 and stream.prompt_tokens.max() == 150  # inclusive at both ends
    assert stream.session_id.tolist() == list(range(2000)) and not stream.turn.any()


def test_zero_range_ratio_gives_exact_lengths():
    stream = random_stream(50, input_len=128, output_len=64, rng=rng())
    assert set(stream.prompt_tokens.tolist()) == {128} and set(stream.output_tokens.tolist()) == {64}
    assert set(stream.hash_count.tolist()) == {8}


def test_shared_prefix_hashes_are_identical_across_requests():
    stream = random_stream(30, input_len=40, output_len=8, prefix_len=70, rng=rng())
    assert set(stream.prompt_tokens.tolist()) == {110}
    shared = {tuple(stream.hashes(i)[:4].tolist()) for i in range(len(stream))}  # 70 // 16 = 4 full blocks
    assert len(shared) == 1
    assert len({int(stream.hashes(i)[4]) for i in range(len(stream))}) == 30  # the rest is each request's own
    reused = theoretical_prefix_reuse(stream)
    assert reused == pytest.approx(29 * 64 / (30 * 110))


def test_random_stream_uses_the_arrival_process():
    stream = random_stream(10, 16, 4, arrivals=FixedRate(2.0), rng=rng())
    assert stream.arrival_s.tolist() == [i / 2 for i in range(10)]


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"num_prompts": 0}, "num_prompts"),
    ({"range_ratio": 1.0}, "range_ratio"),
    ({"input_len": -5}, "input_len"),
    ({"prefix_len": -1}, "prefix_len"),
])
def test_random_stream_rejects_bad_arguments(kwargs, field):
    args = {"num_prompts": 4, "input_len": 32, "output_len": 8, **kwargs}
    with pytest.raises(ValueError, match=field):
        random_stream(**args, rng=rng())


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 50), input_len=st.integers(1, 300), ratio=st.floats(0, 0.99), prefix=st.integers(0, 100))
def test_random_stream_properties(n, input_len, ratio, prefix):
    stream = random_stream(n, input_len, 10, ratio, prefix, rng=rng())
    assert np.all(stream.prompt_tokens >= prefix + max(int(np.floor(input_len * (1 - ratio))), 1))
    assert np.all(stream.prompt_tokens <= prefix + int(np.ceil(input_len * (1 + ratio))))
    assert np.array_equal(stream.hash_count, stream.prompt_tokens // 16)
    assert 0.0 <= theoretical_prefix_reuse(stream) < 1.0


# --- agentic sessions ----------------------------------------------------------------------------------


def test_default_agentic_workload_reaches_agentx_reuse():
    stream = agentic_stream(AgenticConfig(), rng())
    reuse = theoretical_prefix_reuse(stream)
    print(f"default AgenticConfig: {len(stream)} requests, theoretical prefix reuse {reuse:.4f}, "
          f"mean prompt {stream.prompt_tokens.mean():.0f} tokens")
    assert reuse >= 0.96
    assert stream.prompt_tokens.max() > 100_000  # long contexts, as the Kimi K3 study's 142k-token conversation


def test_turns_extend_the_previous_turn():
    stream = agentic_stream(replace(AgenticConfig(), sessions=12, turns_mean=6), rng())
    assert np.all(np.diff(stream.arrival_s) >= 0)
    system_blocks = 8192 // 16
    for session in np.unique(stream.session_id):
        rows = np.flatnonzero(stream.session_id == session)
        rows = rows[np.argsort(stream.turn[rows], kind="stable")]
        assert stream.turn[rows].tolist() == list(range(rows.size))
        assert np.all(np.diff(stream.arrival_s[rows]) >= 0)
        assert np.all(np.diff(stream.prompt_tokens[rows]) > 0)
        assert stream.think_time_s[rows[0]] == 0.0
        for before, after in pairwise(rows):
            previous = stream.hashes(before)
            assert np.array_equal(stream.hashes(after)[: previous.size], previous)
    openers = [stream.hashes(i) for i in np.flatnonzero(stream.turn == 0)]
    for other in openers[1:]:
        assert np.array_equal(other[:system_blocks], openers[0][:system_blocks])  # one shared system prompt
        assert other[system_blocks] != openers[0][system_blocks]  # then each session's own task


def test_turn_timing_is_latency_plus_think_time():
    config = replace(AgenticConfig(), sessions=3, turns_mean=5, assumed_turn_latency_s=1.5)
    stream = agentic_stream(config, rng())
    for session in range(3):
        rows = np.flatnonzero(stream.session_id == session)
        rows = rows[np.argsort(stream.turn[rows])]
        gaps = np.diff(stream.arrival_s[rows])
        assert np.allclose(gaps, 1.5 + stream.think_time_s[rows[1:]])


def test_no_shared_prompt_and_single_turns_give_no_reuse():
    config = replace(AgenticConfig(), system_prompt_tokens=0, turns_mean=1.0, sessions=200)
    stream = agentic_stream(config, rng())
    assert len(stream) == 200 and not stream.turn.any()
    assert theoretical_prefix_reuse(stream) < 0.01


def test_context_limit_ends_sessions():
    config = replace(AgenticConfig(), sessions=20, max_context_tokens=20_000)
    stream = agentic_stream(config, rng())
    assert np.all(stream.prompt_tokens + stream.output_tokens <= 20_000)


def test_same_seed_same_stream_other_seed_other_stream():
    config = AgenticConfig(sessions=20)
    assert same_stream(agentic_stream(config, rng(7)), agentic_stream(config, rng(7)))
    assert not same_stream(agentic_stream(config, rng(7)), agentic_stream(config, rng(8)))
    assert same_stream(random_stream(100, 64, 8, 0.3, 32, arrivals=Poisson(5.0), rng=rng(7)),
                       random_stream(100, 64, 8, 0.3, 32, arrivals=Poisson(5.0), rng=rng(7)))
    assert not same_stream(random_stream(100, 64, 8, rng=rng(7)), random_stream(100, 64, 8, rng=rng(8)))


@pytest.mark.parametrize(("field", "value"), [("sessions", 0), ("turns_mean", 0.5), ("tool_output_tokens_mean", -1.0),
                                              ("think_time_mean_s", -2.0), ("assumed_decode_tok_per_s", 0.0),
                                              ("session_arrivals", "poisson")])
def test_bad_agentic_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        AgenticConfig(**{field: value})


# --- theoretical prefix reuse and the stream container ------------------------------------------------


def test_reuse_on_a_hand_worked_example():
    first = Request(0, 0.0, prompt_tokens=48, output_tokens=4, session_id=0, turn=0, prefix_hashes=(11, 12, 13))
    second = Request(1, 1.0, prompt_tokens=64, output_tokens=4, session_id=1, turn=0, prefix_hashes=(11, 12, 23, 24))
    assert theoretical_prefix_reuse([first, second]) == pytest.approx(32 / 112)
    assert theoretical_prefix_reuse([second]) == 0.0
    with pytest.raises(ValueError, match="block_tokens"):
        theoretical_prefix_reuse(RequestStream.from_requests([first, second]), block_tokens=32)


def test_stream_round_trips_through_request_objects():
    stream = agentic_stream(AgenticConfig(sessions=5, turns_mean=4), rng())
    requests = list(stream)
    assert [r.request_id for r in requests] == list(range(len(stream)))
    assert requests[-1].prefix_hashes == tuple(stream.hashes(len(stream) - 1).tolist())
    rebuilt = RequestStream.from_requests(requests)
    assert all(np.array_equal(getattr(rebuilt, c), getattr(stream, c)) for c in COLUMNS[:7])
    assert theoretical_prefix_reuse(rebuilt) == theoretical_prefix_reuse(stream)


def test_stream_rejects_inconsistent_columns():
    good = RequestStream.from_requests([Request(0, 1.0, 16, 1, 0, 0), Request(1, 2.0, 16, 1, 1, 0)])
    fields = {name: getattr(good, name) for name in COLUMNS}
    with pytest.raises(ValueError, match="arrival_s must be sorted"):
        RequestStream(**{**fields, "arrival_s": np.array([2.0, 1.0])})
    with pytest.raises(ValueError, match="prompt_tokens must hold integers"):
        RequestStream(**{**fields, "prompt_tokens": np.array([16.5, 16.0])})
    with pytest.raises(ValueError, match="session_id has 1 entries"):
        RequestStream(**{**fields, "session_id": np.array([0])})
    with pytest.raises(ValueError, match="prompt_tokens"):
        Request(0, 0.0, prompt_tokens=0, output_tokens=1, session_id=0, turn=0)
    with pytest.raises(ValueError, match="hash_count"):
        RequestStream.from_requests([Request(0, 0.0, 20, 1, 0, 0, prefix_hashes=(1, 2))])


def test_with_arrivals_retimes_single_turn_streams():
    stream = random_stream(5, 32, 4, rng=rng()).with_arrivals(FixedRate(1.0), rng())
    assert stream.arrival_s.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    with pytest.raises(ValueError, match="multi-turn"):
        agentic_stream(AgenticConfig(sessions=3), rng()).with_arrivals(Infinite(), rng())


# --- trace readers -------------------------------------------------------------------------------------


def write_lines(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


def mooncake_line(timestamp=0, input_length=1024, output_length=10, hash_ids=(7, 8)):
    return json.dumps({"timestamp": timestamp, "input_length": input_length, "output_length": output_length,
                       "hash_ids": list(hash_ids)})


def test_mooncake_reblocks_512_token_ids(tmp_path):
    path = write_lines(tmp_path, "trace.jsonl", [
        mooncake_line(0, 1024, 10, [7, 8]),
        mooncake_line(3000, 1000, 5, [7, 9], ),
        "",
        mooncake_line(1500, 600, 3, [40, 41]),
    ])
    stream = read_mooncake(path)
    assert stream.request_id.tolist() == [0, 2, 1]  # sorted by time, ids keep the file order
    assert stream.arrival_s.tolist() == [0.0, 1.5, 3.0]
    assert stream.hash_count.tolist() == [64, 37, 62]  # 1024 // 16; 600 // 16; 1000 // 16 (tail not hashed)
    first, late = stream.hashes(0), stream.hashes(2)
    assert np.array_equal(first[:32], late[:32]) and not np.any(first[32:62] == late[32:62])
    assert len(set(first.tolist())) == 64
    assert theoretical_prefix_reuse(stream) == pytest.approx(32 * 16 / (1024 + 600 + 1000))
    coarse = read_mooncake(path, block_tokens=128)
    assert coarse.hash_count.tolist() == [8, 4, 7] and coarse.block_tokens == 128


@pytest.mark.parametrize(("bad", "problem"), [
    ('{"timestamp": 1, "input_length": 100, "output_length": 5}', "missing key 'hash_ids'"),
    (mooncake_line(1, -4, 5, []), "input_length must be >= 1"),
    (mooncake_line(1, "many", 5, [1]), "input_length must be an integer"),
    (mooncake_line("soon", 100, 5, [1]), "timestamp must be a finite number"),
    (mooncake_line(1, 100, 5, [1, 2]), "2 hash_ids for 100 tokens"),
    (mooncake_line(1, 100, 5, [-3]), "hash_ids must be >= 0"),
    ('{"timestamp": 1, "input_length": 100', "not valid JSON"),
    ("[1, 2, 3]", "expected a JSON object"),
])
def test_mooncake_malformed_line_names_the_line(tmp_path, bad, problem):
    path = write_lines(tmp_path, "bad.jsonl", [mooncake_line(), mooncake_line(5), bad])
    with pytest.raises(ValueError, match="line 3") as err:
        read_mooncake(path)
    assert problem in str(err.value) and str(path) in str(err.value)


def test_mooncake_block_size_must_divide_512(tmp_path):
    with pytest.raises(ValueError, match="block_tokens"):
        read_mooncake(write_lines(tmp_path, "t.jsonl", [mooncake_line()]), block_tokens=48)


def test_azure_timestamps_with_seven_fractional_digits(tmp_path):
    path = write_lines(tmp_path, "azure.csv", [
        "TIMESTAMP,ContextTokens,GeneratedTokens",
        "2023-11-16 18:15:46.6805900,4808,10",
        "2023-11-16 18:15:47.0000001,100,0",
        "2023-11-16 18:15:46.6805899,12,3",
    ])
    stream = read_azure(path)
    assert stream.request_id.tolist() == [2, 0, 1]
    assert stream.arrival_s.tolist() == pytest.approx([0.0, 1e-7, 0.3194102])
    assert stream.prompt_tokens.tolist() == [12, 4808, 100] and stream.output_tokens.tolist() == [3, 10, 0]
    assert stream.hash_pool.size == 0


@pytest.mark.parametrize(("row", "problem"), [
    ("2023-11-16 18:15:47.1,-3,4", "ContextTokens must be >= 1"),
    ("2023-11-16 18:15:47.1,3.5,4", "ContextTokens must be an integer"),
    ("yesterday,3,4", "TIMESTAMP is not a date"),
    ("2023-11-16 18:15:47.1,3", "expected 3 fields"),
])
def test_azure_malformed_line_names_the_line(tmp_path, row, problem):
    path = write_lines(tmp_path, "azure.csv", ["TIMESTAMP,ContextTokens,GeneratedTokens",
                                               "2023-11-16 18:15:46.6805900,4808,10", row])
    with pytest.raises(ValueError, match="line 3") as err:
        read_azure(path)
    assert problem in str(err.value)


def test_unknown_columns_list_the_expected_ones(tmp_path):
    path = write_lines(tmp_path, "azure.csv", ["TIMESTAMP,Context,GeneratedTokens", "2023-11-16 18:15:46,1,1"])
    with pytest.raises(ValueError, match="expected TIMESTAMP,ContextTokens,GeneratedTokens"):
        read_azure(path)
    path = write_lines(tmp_path, "plain.csv", ["arrival_s,prompt_tokens,output_tokens,priority", "0,1,1,9"])
    with pytest.raises(ValueError, match=r"unknown \['priority'\].*expected arrival_s,prompt_tokens,output_tokens"):
        read_csv_trace(path)


def test_plain_csv_with_and_without_sessions(tmp_path):
    plain = read_csv_trace(write_lines(tmp_path, "a.csv", ["arrival_s,prompt_tokens,output_tokens",
                                                           "0.5,100,10", "0.25,50,5"]))
    assert plain.arrival_s.tolist() == [0.25, 0.5] and plain.session_id.tolist() == [1, 0]
    sessions = read_csv_trace(write_lines(tmp_path, "b.csv", ["turn,session_id,arrival_s,prompt_tokens,output_tokens",
                                                              "0,4,1.0,100,10", "1,4,3.0,300,10"]))
    assert sessions.session_id.tolist() == [4, 4] and sessions.turn.tolist() == [0, 1]
    with pytest.raises(ValueError, match="together"):
        read_csv_trace(write_lines(tmp_path, "c.csv", ["arrival_s,prompt_tokens,output_tokens,turn", "0,1,1,0"]))
    with pytest.raises(ValueError, match=r"line 3: arrival_s must be >= 0"):
        read_csv_trace(write_lines(tmp_path, "d.csv", ["arrival_s,prompt_tokens,output_tokens", "0,1,1", "-1,1,1"]))


@pytest.mark.parametrize("fmt", list(TraceFormat))
def test_empty_traces_are_errors(tmp_path, fmt):
    path = write_lines(tmp_path, "empty.txt", [])
    with pytest.raises(ValueError, match="no requests"):
        read_trace(path, fmt)
    if fmt is not TraceFormat.MOONCAKE:
        header = {TraceFormat.AZURE: "TIMESTAMP,ContextTokens,GeneratedTokens",
                  TraceFormat.CSV: "arrival_s,prompt_tokens,output_tokens"}[fmt]
        with pytest.raises(ValueError, match="no requests"):
            read_trace(write_lines(tmp_path, "header_only.csv", [header]), fmt)


def test_read_trace_by_name(tmp_path):
    path = write_lines(tmp_path, "t.jsonl", [mooncake_line()])
    assert same_stream(read_trace(path, "Mooncake"), read_mooncake(path))
    with pytest.raises(ValueError, match="valid: mooncake, azure, csv"):
        read_trace(path, "sharegpt")


# --- hashes made on demand -----------------------------------------------------------------------------


def _reference_hash(chain_key: np.ndarray, shared_key: np.ndarray, shared_blocks: int, chain: int, j: int) -> int:
    """Block j of chain `chain`, one block at a time, straight from the rule ChainPool documents."""
    key = shared_key if j < shared_blocks else mix_hash(chain_key, chain)
    return int(mix_hash(key, j)[0])


@settings(max_examples=60, deadline=None)
@given(blocks=st.lists(st.integers(0, 9), min_size=1, max_size=30), shared=st.integers(0, 5), seed=st.integers(0, 99))
def test_chain_pool_slices_hold_each_block_s_chained_hash(blocks, shared, seed):
    blocks = np.array(blocks, dtype=np.int64)
    chain_key, shared_key = mix_hash(seed, 2), mix_hash(seed, 1)
    starts = np.concatenate(([0], np.cumsum(blocks)[:-1]))
    pool = ChainPool(starts, blocks, chain_key, shared_key, shared)
    expected = [_reference_hash(chain_key, shared_key, shared, c, j) for c in range(blocks.size)
                for j in range(blocks[c])]
    assert pool.size == len(expected) and np.asarray(pool).tolist() == expected
    order = np.random.default_rng(seed).permutation(blocks.size)  # any order of reads, so windows are remade
    for c in order.tolist():
        start = int(starts[c])
        assert pool[start : start + int(blocks[c])].tolist() == expected[start : start + int(blocks[c])]
    assert pool[: pool.size].tolist() == expected


def test_chain_pool_windows_cover_many_chains_and_are_read_only(monkeypatch):
    monkeypatch.setattr(traces, "_WINDOW_BLOCKS", 8)
    blocks = np.full(50, 3, dtype=np.int64)
    pool = ChainPool(np.arange(50) * 3, blocks, mix_hash(5, 2), mix_hash(5, 1), 1)
    stored = np.asarray(pool)
    for c in range(50):  # in order: each window serves the next few chains
        assert np.array_equal(pool[3 * c : 3 * c + 3], stored[3 * c : 3 * c + 3])
    with pytest.raises(ValueError, match="read-only"):
        pool[0:3][0] = 1
    with pytest.raises(TypeError, match="contiguous"):
        pool[::2]


def test_random_stream_makes_the_hashes_a_stored_pool_would_hold():
    stream = random_stream(400, 100, 4, range_ratio=0.5, prefix_len=40, rng=rng(3), block_tokens=16)
    assert isinstance(stream.hash_pool, ChainPool)
    shared_key, chain_key = traces._keys(rng(3))  # the stream's first draw
    for i in (0, 1, 199, 399):
        expected = [_reference_hash(chain_key, shared_key, 2, i, j) for j in range(int(stream.hash_count[i]))]
        assert stream.hashes(i).tolist() == expected
    stored = replace(stream, hash_pool=np.asarray(stream.hash_pool))
    assert isinstance(stored.hash_pool, np.ndarray) and same_stream(stream, stored)
    assert [r.prefix_hashes for r in stream] == [r.prefix_hashes for r in stored]
    assert theoretical_prefix_reuse(stream) == theoretical_prefix_reuse(stored) > 0


@settings(max_examples=40, deadline=None)
@given(blocks=st.lists(st.integers(0, 12), min_size=1, max_size=40), shared=st.integers(0, 6), seed=st.integers(0, 9))
def test_chain_pool_repeats_count_what_sorting_the_pool_counts(blocks, shared, seed):
    blocks = np.array(blocks, dtype=np.int64)
    pool = ChainPool(np.concatenate(([0], np.cumsum(blocks)[:-1])), blocks, mix_hash(seed, 2), mix_hash(seed, 1),
                     shared)
    stored = np.asarray(pool)
    assert pool.repeats() == stored.size - np.unique(stored).size


def test_chain_pool_repeats_give_up_when_keys_share_their_top_bits():
    # indices of up to 2**62 blocks leave 2 bits to tell 5 keys apart: two must agree, so only sorting can tell
    blocks = np.array([1, 1, 1, 1, 1 << 62], dtype=np.int64)
    pool = ChainPool(np.arange(5), blocks, mix_hash(1, 2), mix_hash(1, 1), 0)
    assert pool.repeats() is None
