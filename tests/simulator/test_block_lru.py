"""BlockLRU: release order, revived and re-freed blocks' stale entries, compaction, and eviction a few at a time."""

from __future__ import annotations

import numpy as np

from simulator.block_lru import BlockLRU


def _push(lru: BlockLRU, *blocks: int) -> None:
    lru.push(np.array(blocks, dtype=np.int64))


def test_a_revived_block_is_skipped_and_a_refreed_one_moves_to_the_new_end():
    lru = BlockLRU(8)
    _push(lru, 3, 1, 4)
    _push(lru, 5, 2)
    lru.revive(np.array([1, 5], dtype=np.int64))
    assert lru.order() == (3, 4, 2) and lru.evictable == 3
    _push(lru, 1)  # freed again: its old entry stays stale, the new one is the most recent
    assert lru.order() == (3, 4, 2, 1)
    assert lru.evict(2).tolist() == [3, 4]  # one by one
    assert lru.evict(2).tolist() == [2, 1]
    assert lru.order() == () and lru.evictable == 0


def test_eviction_in_windows_skips_stale_entries_and_compaction_keeps_the_order():
    lru = BlockLRU(5000)
    rng = np.random.default_rng(1)
    expected: list[int] = []
    for start in range(0, 5000, 50):  # enough entries that the queue compacts and grows several times
        blocks = np.arange(start, start + 50)
        lru.push(blocks)
        expected += blocks.tolist()
        revived = rng.choice(expected, size=10, replace=False)
        lru.revive(revived)
        expected = [b for b in expected if b not in set(revived.tolist())]
    assert lru.order() == tuple(expected) and lru.evictable == len(expected)
    taken = lru.evict(300)
    assert taken.tolist() == expected[:300] and lru.order() == tuple(expected[300:])


def test_grow_tracks_new_blocks_as_not_free():
    lru = BlockLRU(2)
    _push(lru, 0, 1)
    lru.grow(4)
    assert lru.order() == (0, 1)
    _push(lru, 3)
    assert lru.order() == (0, 1, 3) and lru.evict(3).tolist() == [0, 1, 3]
