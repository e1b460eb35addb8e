"""The free-cached blocks' LRU: a FIFO of (block, release stamp) entries in release order.

Reviving or re-freeing a block leaves its old entry stale rather than searching for it, and eviction
skips stale entries, so every operation is vectorized and O(1) per block; an OrderedDict costs ~10x
more per block. An entry is live while its block was last released at the entry's stamp: reviving a
block clears its stamp, and a block leaves the cache's hashed set only by being evicted here, so the
stamp alone tells a live entry from a stale one.
"""

from __future__ import annotations

import numpy as np

_FIRST_QUEUE_ENTRIES = 1024  # initial size of the entry arrays; they double as needed
_NOT_FREE = -1  # the stamp of a block that is not free-cached (no entry matches it)


class BlockLRU:
    """Free-cached blocks in least-recently-released order."""

    def __init__(self, blocks: int) -> None:
        self.freed_at = np.full(blocks, _NOT_FREE, dtype=np.int64)  # the release stamp of each block's live entry
        self._blocks = np.zeros(_FIRST_QUEUE_ENTRIES, dtype=np.int64)
        self._stamps = np.zeros(_FIRST_QUEUE_ENTRIES, dtype=np.int64)
        self._head = self._tail = 0  # live entries lie in [head, tail)
        self._clock = 0  # release stamps handed out so far
        self.evictable = 0  # free-cached blocks (live entries)

    def grow(self, blocks: int) -> None:
        """Track `blocks` block ids (an unlimited cache makes new ones)."""
        grown = np.full(blocks, _NOT_FREE, dtype=np.int64)
        grown[: self.freed_at.size] = self.freed_at
        self.freed_at = grown

    def _live(self, start: int, stop: int) -> np.ndarray:
        """Which entries in [start, stop) still stand for a free-cached block (the rest are stale)."""
        return self.freed_at[self._blocks[start:stop]] == self._stamps[start:stop]

    def order(self) -> tuple[int, ...]:
        """Free-cached block ids, the next to be evicted first."""
        live = self._live(self._head, self._tail)
        return tuple(self._blocks[self._head : self._tail][live].tolist())

    def push(self, blocks: np.ndarray) -> None:
        """Append released blocks at the most recently used end, in the given order."""
        count = blocks.size
        if self._tail + count > self._blocks.size:
            self._compact(count)
        stamps = np.arange(self._clock, self._clock + count, dtype=np.int64)
        self._clock += count
        self.freed_at[blocks] = stamps
        self._blocks[self._tail : self._tail + count] = blocks
        self._stamps[self._tail : self._tail + count] = stamps
        self._tail += count
        self.evictable += count

    def revive(self, blocks: np.ndarray) -> None:
        """These free-cached blocks are taken back into use: their entries go stale."""
        self.freed_at[blocks] = _NOT_FREE
        self.evictable -= blocks.size

    def _compact(self, extra: int) -> None:
        """Drop stale entries, keeping order, and make room for `extra` more."""
        live = self._live(self._head, self._tail)
        blocks = self._blocks[self._head : self._tail][live]
        stamps = self._stamps[self._head : self._tail][live]
        size = self._blocks.size
        while blocks.size + extra > size // 2:  # at most half full after compaction, so it stays amortized O(1)
            size *= 2
        self._blocks = np.zeros(size, dtype=np.int64)
        self._stamps = np.zeros(size, dtype=np.int64)
        self._blocks[: blocks.size] = blocks
        self._stamps[: blocks.size] = stamps
        self._head, self._tail = 0, blocks.size

    def evict(self, count: int) -> np.ndarray:
        """Take the `count` least recently released live blocks out (the caller checked they exist)."""
        if count <= 2:  # a decode crossing a block boundary: look at the oldest entries one by one
            taken = self._evict_few(count)
            if taken is not None:
                return taken
        found: list[np.ndarray] = []
        missing = count
        while missing and self._head < self._tail:
            start = self._head
            stop = min(self._tail, start + max(4 * missing, 64))
            live = self._live(start, stop).nonzero()[0][:missing]
            found.append(self._blocks[start + live])
            missing -= live.size
            self._head = start + int(live[-1]) + 1 if missing == 0 else stop
        if missing:
            raise RuntimeError(f"KVCache: the LRU holds fewer than the {self.evictable} blocks it counts")
        self.evictable -= count
        return found[0] if len(found) == 1 else np.concatenate(found)

    def _evict_few(self, count: int, look: int = 16) -> np.ndarray | None:
        """`evict` for a block or two, in plain Python; None if the oldest `look` entries hold too few live ones."""
        blocks, stamps, freed_at = self._blocks, self._stamps, self.freed_at
        taken: list[int] = []
        for i in range(self._head, min(self._tail, self._head + look)):
            b = int(blocks[i])
            if freed_at[b] == stamps[i]:
                taken.append(b)
                if len(taken) == count:
                    self._head = i + 1
                    self.evictable -= count
                    return np.array(taken, dtype=np.int64)
        return None
