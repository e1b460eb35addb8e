"""KVCache: hand-worked LRU states, prefix-hit rules, all-or-nothing allocation, and agreement with a naive model."""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.kvcache import KVCache
from workloads.traces import AgenticConfig, agentic_stream, random_stream, theoretical_prefix_reuse

A1, A2, B1, B2, C1, C2 = 101, 102, 201, 202, 301, 302


def _state(cache: KVCache, seq_ids=()) -> tuple:
    """Everything observable about a cache, to compare before and after a refused call."""
    return (cache.used_blocks, cache.free_blocks, cache.cached_free_blocks, cache.hits_tokens, cache.lookups_tokens,
            cache.evictions, cache.preemptions, cache.running, cache.lru_blocks(),
            tuple(cache.blocks(s) for s in seq_ids))


def test_lru_evicts_the_earliest_freed_sequence_tail_first():
    cache = KVCache(capacity_blocks=4, block_tokens=16)
    assert cache.allocate(1, (A1, A2), 32) == 0
    assert cache.allocate(2, np.array([B1, B2], dtype=np.uint64), 32) == 0
    assert (cache.blocks(1), cache.blocks(2)) == ((0, 1), (2, 3))
    assert (cache.used_blocks, cache.free_blocks) == (4, 0)

    cache.free(1)
    cache.free(2)
    # Each sequence enters the LRU tail first, so A's tail (block 1) is the next to go.
    assert cache.lru_blocks() == (1, 0, 3, 2)
    assert (cache.used_blocks, cache.cached_free_blocks, cache.free_blocks) == (0, 4, 4)

    assert cache.allocate(3, (C1, C2), 32) == 0
    assert cache.blocks(3) == (1, 0)  # A's blocks, its tail first
    assert (cache.hash_of(1), cache.hash_of(0)) == (C1, C2)
    assert cache.lru_blocks() == (3, 2)
    assert cache.evictions == 2
    assert cache.match((A1, A2)) == 0
    assert cache.match((B1, B2)) == 2

    cache.free(3)
    assert cache.lru_blocks() == (3, 2, 0, 1)
    assert cache.allocate(4, (B1, B2), 40) == 32  # reuses blocks 2, 3 and evicts C's tail block 0
    assert cache.blocks(4) == (2, 3, 0)
    assert cache.hash_of(0) is None
    assert cache.lru_blocks() == (1,)
    assert (cache.match((C1,)), cache.match((C1, C2))) == (1, 1)
    assert (cache.used_blocks, cache.cached_free_blocks, cache.evictions) == (3, 1, 3)
    assert (cache.hits_tokens, cache.lookups_tokens) == (32, 136)


def test_match_stops_at_the_first_miss_and_keeps_the_lru_order():
    cache = KVCache(8)
    cache.allocate(1, (11, 12, 13), 48)
    cache.free(1)
    before = _state(cache)
    assert cache.match((11, 12, 13)) == 3
    assert cache.match((11, 99, 13)) == 1
    assert cache.match((99, 12, 13)) == 0
    assert cache.match(()) == 0
    assert _state(cache) == before


def test_cached_tokens_are_capped_one_short_of_the_prompt():
    cache = KVCache(8)
    assert cache.allocate(1, (11, 12, 13), 48) == 0
    cache.free(1)
    assert cache.allocate(2, (11, 12, 13), 48) == 47  # vLLM recomputes the last prompt token
    cache.free(2)
    assert cache.allocate(3, (11, 12, 13), 50) == 48
    assert cache.blocks(3)[:3] == (0, 1, 2)


def test_kda_checkpoints_round_hits_down_to_a_resume_point():
    # Kimi K3 study, mechanism 2: MLA history to token 3072 but the last KDA checkpoint at 2048.
    cache = KVCache(400, 16, checkpoint_tokens=2048)
    hashes = np.arange(1, 3072 // 16 + 1, dtype=np.uint64)
    cache.allocate(1, hashes, 3100)
    cache.free(1)
    assert cache.allocate(2, hashes, 3100) == 2048


def test_allocate_refuses_without_changing_anything():
    cache = KVCache(4)
    cache.allocate(1, (11, 12), 32)
    before = _state(cache, [1])
    assert cache.allocate(2, (21, 22, 23), 48) is None
    assert 2 not in cache
    assert _state(cache, [1]) == before

    cache.free(1)
    before = _state(cache)
    # Reusing the two cached blocks takes them out of the evictable pool, so 3 new ones cannot be found.
    assert cache.allocate(3, (11, 12, 31), 80) is None
    assert _state(cache) == before
    assert cache.allocate(3, (11, 12), 64) == 32
    assert (cache.used_blocks, cache.free_blocks) == (4, 0)


def test_grow_adds_blocks_until_the_pool_runs_out():
    cache = KVCache(2)
    assert cache.allocate(1, (), 10) == 0
    assert cache.grow(1, 32) and cache.blocks(1) == (0, 1)
    before = _state(cache, [1])
    assert not cache.grow(1, 33)
    assert _state(cache, [1]) == before
    assert cache.grow(1, 20)  # no shrinking, no change
    assert cache.blocks(1) == (0, 1)
    cache.free(1)
    assert (cache.cached_free_blocks, cache.free_blocks) == (0, 2)  # unhashed blocks are not cached


def test_shared_prefix_blocks_stay_used_until_the_last_holder_frees():
    cache = KVCache(8)
    assert cache.allocate(1, (11, 12), 40) == 0
    assert cache.allocate(2, (11, 12, 13), 48) == 32
    assert cache.blocks(1) == (0, 1, 2)
    assert cache.blocks(2) == (0, 1, 3)
    assert cache.used_blocks == 4
    cache.preempt(1)
    assert (cache.used_blocks, cache.cached_free_blocks, cache.preemptions) == (3, 0, 1)
    assert cache.match((11, 12, 13)) == 3
    cache.free(2)
    assert cache.used_blocks == 0
    assert cache.lru_blocks() == (3, 1, 0)
    assert cache.usage() == 0.0


def test_unlimited_cache_never_runs_out():
    cache = KVCache.unlimited()
    assert cache.capacity_blocks is None and KVCache(None).capacity_blocks is None
    assert cache.allocate(1, range(1, 5001), 80_000) == 0
    assert cache.grow(1, 90_000)
    assert (cache.used_blocks, cache.free_blocks, cache.usage()) == (5625, math.inf, 0.0)
    cache.free(1)
    assert (cache.used_blocks, cache.cached_free_blocks) == (0, 5000)
    assert cache.allocate(2, range(1, 5001), 80_001) == 80_000
    assert cache.evictions == 0


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"capacity_blocks": 0}, "capacity_blocks"), ({"capacity_blocks": -3}, "capacity_blocks"),
    ({"capacity_blocks": 2.5}, "capacity_blocks"), ({"capacity_blocks": True}, "capacity_blocks"),
    ({"capacity_blocks": 4, "block_tokens": 0}, "block_tokens"),
    ({"capacity_blocks": 4, "checkpoint_tokens": 0}, "checkpoint_tokens"),
])
def test_bad_construction_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        KVCache(**kwargs)


def test_bad_calls_raise_value_error():
    cache = KVCache(4)
    cache.allocate(1, (), 5)
    with pytest.raises(ValueError, match="already holds"):
        cache.allocate(1, (), 5)
    with pytest.raises(ValueError, match="holds no blocks"):
        cache.free(7)
    with pytest.raises(ValueError, match="holds no blocks"):
        cache.grow(7, 3)
    with pytest.raises(ValueError, match="full blocks"):
        cache.allocate(2, (1, 2), 31)
    with pytest.raises(ValueError, match="tokens"):
        cache.allocate(2, (), 0)
    with pytest.raises(ValueError, match="repeat"):
        cache.allocate(2, (3, 3), 32)


@pytest.fixture(scope="module")
def agentic():
    return agentic_stream(AgenticConfig(sessions=20), np.random.default_rng(3))


def _replay(cache: KVCache, stream) -> float:
    """Admit each request in arrival order and free it at once; the cache's hit rate."""
    for i in range(len(stream)):
        assert cache.allocate(i, stream.hashes(i), int(stream.prompt_tokens[i])) is not None
        cache.free(i)
    assert cache.lookups_tokens == int(stream.prompt_tokens.sum())
    return cache.hit_rate()


def test_unlimited_cache_reaches_theoretical_reuse_and_a_small_one_does_not(agentic):
    theoretical = theoretical_prefix_reuse(agentic)
    unlimited = _replay(KVCache.unlimited(agentic.block_tokens), agentic)
    assert unlimited <= theoretical  # only the tokens - 1 cap separates them
    assert unlimited == pytest.approx(theoretical, rel=0.005)

    distinct_blocks = np.unique(agentic.hash_pool).size
    largest_request = -(-int(agentic.prompt_tokens.max()) // agentic.block_tokens)
    small = KVCache(max(distinct_blocks // 50, largest_request), agentic.block_tokens)
    assert _replay(small, agentic) < theoretical - 0.1
    assert small.evictions > 0


def test_without_snapshots_a_multi_turn_stream_gets_the_same_hits_and_blocks(agentic):
    """Snapshots are a fast path of the look-up only: a cache that keeps none hands out the same blocks."""
    largest_request = -(-int(agentic.prompt_tokens.max()) // agentic.block_tokens)
    capacity = max(np.unique(agentic.hash_pool).size // 20, largest_request)
    fast, plain = (KVCache(capacity, agentic.block_tokens, snapshots=kept) for kept in (True, False))
    for i in range(len(agentic)):
        tokens = int(agentic.prompt_tokens[i])
        assert fast.allocate(i, agentic.hashes(i), tokens) == plain.allocate(i, agentic.hashes(i), tokens)
        assert fast.blocks(i) == plain.blocks(i)
        fast.free(i)
        plain.free(i)
    assert fast.evictions == plain.evictions > 0 and fast.hits_tokens == plain.hits_tokens > 0
    assert fast.lru_blocks() == plain.lru_blocks()


class NaiveCache:
    """The same policy written the obvious way (one block at a time), as a reference for KVCache."""

    def __init__(self, capacity_blocks: int, block_tokens: int) -> None:
        self.block_tokens = block_tokens
        self.never_used = list(range(capacity_blocks - 1, -1, -1))
        self.lru: OrderedDict[int, None] = OrderedDict()
        self.hash_of: dict[int, int] = {}
        self.block_of: dict[int, int] = {}
        self.refs = [0] * capacity_blocks
        self.seqs: dict[int, list[int]] = {}
        self.evictions = 0

    def match(self, hashes) -> int:
        count = 0
        while count < len(hashes) and hashes[count] in self.block_of:
            count += 1
        return count

    def allocate(self, seq_id, hashes, tokens):
        hit = self.match(hashes)
        matched = [self.block_of[h] for h in hashes[:hit]]
        need = -(-tokens // self.block_tokens) - hit
        revived = [b for b in matched if self.refs[b] == 0]
        if need > len(self.never_used) + len(self.lru) - len(revived):
            return None
        for block in revived:
            del self.lru[block]
        for block in matched:
            self.refs[block] += 1
        new = self._take(need)
        for key, block in zip(hashes[hit:], new, strict=False):
            if key not in self.block_of:
                self.block_of[key], self.hash_of[block] = block, key
        self.seqs[seq_id] = matched + new
        return min(hit * self.block_tokens, tokens - 1)

    def grow(self, seq_id, tokens) -> bool:
        need = -(-tokens // self.block_tokens) - len(self.seqs[seq_id])
        if need > len(self.never_used) + len(self.lru):
            return False
        self.seqs[seq_id] += self._take(max(need, 0))
        return True

    def free(self, seq_id) -> None:
        for block in reversed(self.seqs.pop(seq_id)):
            self.refs[block] -= 1
            if self.refs[block] == 0:
                if block in self.hash_of:
                    self.lru[block] = None
                else:
                    self.never_used.append(block)

    def _take(self, count):
        taken = []
        for _ in range(count):
            if self.never_used:
                block = self.never_used.pop()
            else:
                block, _ = self.lru.popitem(last=False)
                del self.block_of[self.hash_of.pop(block)]
                self.evictions += 1
            self.refs[block] = 1
            taken.append(block)
        return taken


_OPS = st.lists(st.tuples(st.sampled_from(["allocate", "grow", "free", "preempt"]), st.integers(0, 5),
                          st.integers(1, 40), st.lists(st.integers(0, 9), max_size=10, unique=True)), max_size=60)


def _apply(cache: KVCache, naive: NaiveCache | None, op: str, seq: int, tokens: int, keys: list[int]) -> None:
    """Run one operation on both caches (skipping calls that would be errors) and compare their results."""
    if op == "allocate" and seq not in cache:
        hashes = keys[: tokens // cache.block_tokens]
        got = cache.allocate(seq, hashes, tokens)
        assert got is None or 0 <= got < tokens
        if naive is not None:
            assert got == naive.allocate(seq, hashes, tokens)
    elif op == "grow" and seq in cache:
        total = len(cache.blocks(seq)) * cache.block_tokens + tokens
        got = cache.grow(seq, total)
        assert got == (naive.grow(seq, total) if naive is not None else True)
    elif op in ("free", "preempt") and seq in cache:
        getattr(cache, op)(seq)
        if naive is not None:
            naive.free(seq)


def _check_invariants(cache: KVCache) -> None:
    """Block accounting adds up, and what the LRU holds is exactly the free cached blocks."""
    held = {b for s in range(6) if s in cache for b in cache.blocks(s)}
    lru = cache.lru_blocks()
    assert cache.used_blocks == len(held) >= 0
    assert len(lru) == len(set(lru)) == cache.cached_free_blocks
    assert not held & set(lru)
    assert all(cache.hash_of(b) is not None for b in lru)
    if cache.capacity_blocks is not None:
        assert cache.used_blocks <= cache.capacity_blocks
        assert cache.used_blocks + cache.free_blocks == cache.capacity_blocks
        assert cache.cached_free_blocks <= cache.free_blocks


@settings(max_examples=150, deadline=None)
@given(capacity=st.one_of(st.none(), st.integers(1, 10)), ops=_OPS)
def test_random_operations_keep_the_books_and_match_the_naive_model(capacity, ops):
    cache = KVCache(capacity, block_tokens=4)
    naive = NaiveCache(capacity, 4) if capacity is not None else None
    for op, seq, tokens, keys in ops:
        _apply(cache, naive, op, seq, tokens, keys)
        _check_invariants(cache)
        if naive is not None:
            assert cache.lru_blocks() == tuple(naive.lru)
            assert all(cache.blocks(s) == tuple(naive.seqs[s]) for s in naive.seqs)
            assert cache.evictions == naive.evictions


def test_a_long_random_run_matches_the_naive_model():
    # Long enough that the LRU's entry arrays fill, compact and grow several times.
    rng = np.random.default_rng(7)
    cache, naive = KVCache(40, block_tokens=2), NaiveCache(40, 2)
    for step in range(8000):
        op = ("allocate", "grow", "free", "preempt")[int(rng.integers(4))]
        keys = rng.choice(60, size=int(rng.integers(0, 12)), replace=False).tolist()
        _apply(cache, naive, op, int(rng.integers(6)), int(rng.integers(1, 24)), keys)
        if step % 500 == 0:
            _check_invariants(cache)
            assert cache.lru_blocks() == tuple(naive.lru)
    assert all(cache.blocks(s) == tuple(naive.seqs[s]) for s in naive.seqs)
    assert cache.evictions == naive.evictions > 100


def test_host_tier_keeps_evicted_blocks_and_a_later_hit_loads_them_back():
    kv = KVCache(5, 16, host_capacity_blocks=10)
    a, b = np.array([11, 12, 13, 14], dtype=np.uint64), np.array([21, 22, 23, 24], dtype=np.uint64)
    assert kv.allocate(1, a, 64) == 0
    kv.free(1)
    assert kv.allocate(2, b, 64) == 0  # needs 4 blocks: 1 never used + 3 evicted from A's tail
    kv.free(2)
    assert kv.take_transfers() == (3, 0)  # A's last three blocks went to the host
    # A again: block 11 is still in HBM, 12-14 come back from the host (the last token is recomputed)
    assert kv.allocate(3, a, 64) == 63
    # 3 blocks loaded back; making room for them evicted 3 of B's blocks to the host
    assert kv.take_transfers() == (3, 3)
    assert kv.host_hits_tokens == 63 - 16
    assert kv.take_transfers() == (0, 0)


def test_without_a_host_tier_evicted_blocks_are_gone():
    kv = KVCache(5, 16)
    a, b = np.array([11, 12, 13, 14], dtype=np.uint64), np.array([21, 22, 23, 24], dtype=np.uint64)
    kv.allocate(1, a, 64)
    kv.free(1)
    kv.allocate(2, b, 64)
    kv.free(2)
    assert kv.take_transfers() == (0, 0)
    assert kv.allocate(3, a, 64) == 16  # only block 11 survived in HBM


def test_growing_session_prompts_match_the_naive_model():
    # Each session's next prompt extends its last one, so admissions take the released-prompt snapshot
    # path; a small pool keeps evicting, so snapshots go stale and must fall back to full look-ups.
    rng = np.random.default_rng(11)
    cache, naive = KVCache(150, block_tokens=2), NaiveCache(150, 2)
    chains = {s: (10_000 * (s + 1) + np.arange(400)).tolist() for s in range(6)}
    length = dict.fromkeys(range(6), 0)
    snapshot_hits = 0
    for step in range(6000):
        seq = int(rng.integers(6))
        if seq in cache:
            op = ("grow", "free", "preempt")[int(rng.integers(3))]
            _apply(cache, naive, op, seq, int(rng.integers(1, 8)), [])
        else:
            length[seq] = min(length[seq] + int(rng.integers(0, 6)), 40)
            tokens = 2 * length[seq] + int(rng.integers(1, 3))
            before = len(cache._tails)
            _apply(cache, naive, "allocate", seq, tokens, chains[seq])
            snapshot_hits += len(cache._tails) < before
        if step % 300 == 0:
            _check_invariants(cache)
            assert cache.lru_blocks() == tuple(naive.lru)
    assert snapshot_hits > 100  # the fast path ran, and agreed with the naive model every time


def test_a_random_stream_through_a_small_cache_matches_the_naive_model():
    # Requests with a shared prefix, admitted a few at a time, grown by a decode block and freed oldest first:
    # hits, evictions, revived blocks and the partial last blocks all happen, on the stream's own uint64 hashes.
    stream = random_stream(600, 48, 4, range_ratio=0.5, prefix_len=20, rng=np.random.default_rng(11), block_tokens=4)
    cache, naive = KVCache(60, block_tokens=4), NaiveCache(60, 4)
    running: list[int] = []
    for i in range(len(stream)):
        hashes, tokens = stream.hashes(i), int(stream.prompt_tokens[i])
        got = cache.allocate(i, hashes, tokens)
        assert got == naive.allocate(i, hashes.tolist(), tokens)
        if got is None:
            continue
        running.append(i)
        assert cache.grow(i, tokens + 4) == naive.grow(i, tokens + 4)
        while len(running) > 3:
            done = running.pop(0)
            cache.free(done)
            naive.free(done)
        assert cache.lru_blocks() == tuple(naive.lru)
        assert all(cache.blocks(s) == tuple(naive.seqs[s]) for s in running)
    assert cache.evictions == naive.evictions > 1000
    assert 0 < cache.hits_tokens < cache.lookups_tokens
    assert all(cache.hash_of(b) == naive.hash_of[b] for b in cache.lru_blocks())


def test_hash_of_names_only_hashed_blocks():
    cache = KVCache(4, block_tokens=2)
    cache.allocate(1, (7, 8), 5)  # two hashed blocks and a partial one
    assert [cache.hash_of(b) for b in range(-1, 5)] == [None, 7, 8, None, None, None]
    cache.free(1)
    cache.allocate(2, (9, 10, 11), 6)  # the freed partial block, the never-used one, then the LRU's oldest (hash 8)
    assert cache.blocks(2) == (2, 3, 1)
    assert [cache.hash_of(b) for b in range(4)] == [7, 11, 9, 10]


def test_repeated_hashes_are_refused_after_a_snapshot_too():
    cache = KVCache(16, block_tokens=2)
    cache.allocate(1, (1, 2), 4)
    cache.free(1)  # its prompt's blocks are kept as a snapshot for a next turn
    with pytest.raises(ValueError, match="repeat"):
        cache.allocate(2, (1, 2, 1), 6)
    with pytest.raises(ValueError, match="repeat"):
        cache.allocate(2, (1, 2, 3, 3), 8)
    assert cache.allocate(2, (1, 2, 3), 6) == 4
