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
