"""The host-DRAM tier of the prefix cache (CPU offload: Kimi K3 study, mechanism 2).

Hashed blocks evicted from HBM are stored in host DRAM, least recently used evicted there too; a prefix
hit that continues past HBM into this tier loads those blocks back. The counts of blocks stored and
loaded since the last look are what PCIe must move.
"""

from __future__ import annotations

from collections import OrderedDict


class HostTier:
    """Prefix hashes of blocks held in host DRAM, in LRU order; capacity 0 keeps nothing."""

    def __init__(self, capacity_blocks: int) -> None:
        self._capacity = capacity_blocks
        self._keys: OrderedDict[int, None] = OrderedDict()
        self._stored = 0  # blocks copied to the host since the last `take_transfers()`
        self._loaded = 0  # blocks copied back to HBM since the last `take_transfers()`

    def leading(self, keys: list[int]) -> int:
        """How many of `keys`, from the first, the host holds."""
        if not self._keys:
            return 0
        count = 0
        for key in keys:
            if key not in self._keys:
                break
            count += 1
        return count

    def load(self, keys: list[int]) -> None:
        """These blocks are copied back to HBM (and become the host's most recently used)."""
        for key in keys:
            self._keys.move_to_end(key)
        self._loaded += len(keys)

    def store(self, key: int) -> None:
        """Keep an evicted block's prefix, evicting the host's least recently used one when full."""
        if not self._capacity:
            return
        if key in self._keys:
            self._keys.move_to_end(key)
            return
        self._keys[key] = None
        self._stored += 1
        if len(self._keys) > self._capacity:
            self._keys.popitem(last=False)

    def take_transfers(self) -> tuple[int, int]:
        """(blocks stored to, blocks loaded from) the host since the last call."""
        moved = (self._stored, self._loaded)
        self._stored = self._loaded = 0
        return moved
