"""The scheduler's one-request decode path gives exactly what the one-at-a-time path gives."""

from __future__ import annotations

import copy
from collections import deque

import numpy as np
import pytest

from simulator.kvcache import KVCache
from simulator.scheduler import Decision, Sequence, _schedule_decodes, _schedule_decodes_at_once


def _state(rng: np.random.Generator, capacity: int):
    kv = KVCache(capacity, block_tokens=4)
    running = []
    for i in range(int(rng.integers(1, 12))):
        prompt = int(rng.integers(1, 40))
        seq = Sequence(index=i, request_id=i, session_id=i, turn=0, arrival_s=0.0, prompt_tokens=prompt,
                       output_tokens=100, hashes=np.arange(1000 * i, 1000 * i + prompt // 4, dtype=np.uint64))
        if kv.allocate(i, seq.hashes, prompt) is None:
            break
        seq.computed_tokens = prompt if rng.random() < 0.8 else prompt // 2  # some still prefilling
        seq.generated = int(rng.integers(0, 9)) if seq.computed_tokens == prompt else 0
        seq.reserved_tokens = -(-prompt // 4) * 4
        kv.grow(i, seq.reserved_tokens + 4 * (seq.generated // 4))
        seq.reserved_tokens += 4 * (seq.generated // 4)
        running.append(seq)
    return kv, running


@pytest.mark.parametrize("seed", range(40))
def test_decodes_at_once_equal_decodes_one_by_one(seed):
    rng = np.random.default_rng(seed)
    kv, running = _state(rng, capacity=int(rng.integers(20, 120)))
    per_decode, budget = int(rng.integers(1, 4)), int(rng.integers(4, 64))
    kv2, running2 = copy.deepcopy((kv, running))
    fast, slow = Decision(), Decision()
    if _schedule_decodes_at_once(running, kv, per_decode, budget, fast):
        left = _schedule_decodes(running2, deque(), kv2, per_decode, budget, slow)
        assert [s.request_id for s in fast.decodes] == [s.request_id for s in slow.decodes]
        assert budget - len(fast.decodes) * per_decode == left
        assert [s.reserved_tokens for s in running] == [s.reserved_tokens for s in running2]
        assert all(kv.blocks(s.request_id) == kv2.blocks(s.request_id) for s in running)
        assert kv.free_blocks == kv2.free_blocks and not slow.preempted
    else:  # it declined: nothing changed
        assert all(kv.blocks(s.request_id) == kv2.blocks(s.request_id) for s in running)
        assert [s.reserved_tokens for s in running] == [s.reserved_tokens for s in running2]
        assert not fast.decodes


def _request(i: int, prompt: int, target: bool = True) -> Sequence:
    seq = Sequence(index=i, request_id=i, session_id=i, turn=0, arrival_s=0.0, prompt_tokens=prompt,
                   output_tokens=100, hashes=np.arange(1000 * i, 1000 * i + prompt // 4, dtype=np.uint64))
    seq.prefill_target = prompt
    return seq


@pytest.mark.parametrize("mixed", [True, False])
def test_a_prefill_first_engine_runs_prefills_alone_and_decodes_when_none_wait(mixed):
    from simulator.scheduler import Budget, schedule

    kv = KVCache(1000, block_tokens=4)
    decoding = _request(0, 8)
    kv.allocate(0, decoding.hashes, 8)
    decoding.computed_tokens, decoding.reserved_tokens, decoding.generated = 8, 8, 3
    running, waiting = [decoding], deque([_request(1, 40)])
    budget = Budget(max_num_seqs=8, max_num_batched_tokens=64, mixed_prefill=mixed)
    first = schedule(running, waiting, kv, budget, 0.0)
    assert [s.request_id for s, _ in first.prefills] == [1]
    # vLLM's chunked prefill rides the decode step; SGLang's prefill-first step leaves the decode for the next
    assert [s.request_id for s in first.decodes] == ([0] if mixed else [])
    running[1].computed_tokens = 40  # its prefill done, nothing waits: the next step decodes both
    second = schedule(running, waiting, kv, budget, 1.0)
    assert not second.prefills and [s.request_id for s in second.decodes] == [0, 1]


def test_a_prefill_first_step_the_kv_pool_refuses_decodes_instead():
    from simulator.scheduler import Budget, schedule

    kv = KVCache(3, block_tokens=4)
    decoding = _request(0, 8)
    kv.allocate(0, decoding.hashes, 8)
    decoding.computed_tokens, decoding.reserved_tokens, decoding.generated = 8, 12, 1
    running, waiting = [decoding], deque([_request(1, 400)])  # 100 blocks: no room
    step = schedule(running, waiting, kv, Budget(8, 64, mixed_prefill=False), 0.0)
    assert not step.prefills and [s.request_id for s in step.decodes] == [0] and len(waiting) == 1
