"""A paged KV block manager with a prefix cache, after vLLM v1's BlockPool and KVCacheManager.

Blocks hold `block_tokens` tokens. A full prompt block is keyed by its chained prefix hash
(vllm/v1/core/kv_cache_utils.py), so a prefix hit is the unbroken run of cached hashes from block 0.
A block is used (reference count > 0), free-but-cached (count 0, hash kept, in the LRU that eviction
takes from, least recently freed first), or never used (count 0, no hash). New blocks come from the
never-used pool first and evict cached ones only when it is empty.

Simplifications, each a deliberate departure from vLLM v1:
- A new full prompt block's hash is registered at allocation. vLLM registers it once the block's
  tokens are computed, so here a request admitted during another's prefill can hit blocks whose KV is
  still being written; the simulator is assumed to let it wait on them rather than recompute.
- Blocks filled by generated tokens get no hash (vLLM hashes them once full, so a next turn could hit
  the previous answer). This matches `workloads.traces.theoretical_prefix_reuse`, which counts only
  blocks that earlier prompts had.
- A fully cached prompt reports tokens - 1 cached tokens (vLLM always recomputes at least the last
  prompt token to get its logits). vLLM itself rounds that cap down to whole blocks, and so recomputes
  the whole last block of a block-aligned prompt: 32 tokens for a cached 48-token prompt, not 47.
- A new block whose hash is already cached (possible only after a chain was evicted out of order)
  stays unhashed; vLLM would keep both copies under the one hash.

KDA layers (Kimi K3 study, mechanism 2) can resume only where a recurrent-state checkpoint was
saved: `checkpoint_tokens` rounds every hit down to a multiple of the checkpoint interval.
"""

from __future__ import annotations

import math
import numbers
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from simulator.block_lru import BlockLRU
from simulator.host_tier import HostTier

_FIRST_UNLIMITED_BLOCKS = 1024  # initial size of an unlimited cache's per-block arrays; they double as needed
_SNAPSHOT_SCAN = 256  # prompt blocks, from the end, searched first for a snapshot
_SNAPSHOTS = 4096  # released prompts remembered for their next turn (about 5 MB at 1k blocks each)


def _check_positive(name: str, value: object) -> int:
    """Raise ValueError naming `name` unless value is an integer >= 1 (bools refused)."""
    if type(value) is int and value >= 1:  # the hot path in a serving loop; isinstance on an ABC is slow
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"KVCache.{name} must be an integer, got {value!r}")
    if value < 1:
        raise ValueError(f"KVCache.{name} must be >= 1, got {value}")
    return int(value)


def _as_array(hashes: np.ndarray | Sequence[int]) -> np.ndarray:
    """Hashes as a uint64 array (a view when they already are one)."""
    if isinstance(hashes, np.ndarray) and hashes.dtype == np.uint64:
        return hashes
    return np.asarray(list(hashes), dtype=np.uint64)


def _as_keys(hashes: np.ndarray | Sequence[int]) -> list[int]:
    """Hashes as Python ints, converted once per call so dict look-ups are fast."""
    if isinstance(hashes, np.ndarray):
        return hashes.tolist()
    return list(map(int, hashes))


def _check_distinct(keys: np.ndarray) -> None:
    """Raise ValueError if a hash repeats: prefix hashes are chained, so they never do."""
    ordered = np.sort(keys)
    if (ordered[1:] == ordered[:-1]).any():
        raise ValueError("KVCache.allocate: block hashes repeat; prefix hashes are chained, so they never do")


def _leading(found: list[int | None]) -> int:
    """Length of the run of found blocks from index 0 (found[i] is None for a miss)."""
    try:
        return found.index(None)
    except ValueError:
        return len(found)


class _Held:
    """A running sequence's blocks: those taken at admission (an array) and those grown since (a list)."""

    __slots__ = ("head", "prompt", "tail")

    def __init__(self, head: np.ndarray, prompt: tuple[int, int] | None) -> None:
        self.head = head  # blocks at admission, in token order; the first prompt[1] hold the prompt's full blocks
        self.tail: list[int] = []
        self.prompt = prompt  # (hash of the last full prompt block, full prompt blocks), or None

    def __len__(self) -> int:
        return self.head.size + len(self.tail)

    def ids(self) -> list[int]:
        return self.head.tolist() + self.tail


class KVCache:
    """Paged KV blocks shared between sequences through a prefix cache; None capacity never evicts."""

    def __init__(self, capacity_blocks: int | None, block_tokens: int = 16, *,
                 checkpoint_tokens: int | None = None, host_capacity_blocks: int = 0, snapshots: bool = True) -> None:
        """`snapshots`: keep each released prompt's blocks for its session's next turn (`_lookup`'s fast path, the
        same result as looking every block up); a stream whose prompts never extend an earlier one (a random
        workload) gains nothing from them and skips their bookkeeping."""
        self._block_tokens = _check_positive("block_tokens", block_tokens)
        self._snapshots = snapshots
        self._checkpoint_tokens = (None if checkpoint_tokens is None
                                   else _check_positive("checkpoint_tokens", checkpoint_tokens))
        if capacity_blocks is None:
            self._capacity: int | None = None
            size = _FIRST_UNLIMITED_BLOCKS
            self._never_used: list[int] = []  # a stack: blocks are taken from the end
            self._next_block = 0  # an unlimited cache makes block ids on demand
        else:
            self._capacity = size = _check_positive("capacity_blocks", capacity_blocks)
            self._never_used = list(range(size - 1, -1, -1))  # so blocks are handed out as 0, 1, 2, ...
            self._next_block = size
        self._refs = np.zeros(size, dtype=np.int64)  # running sequences holding each block
        self._hashed = np.zeros(size, dtype=bool)  # whether each block is keyed in the prefix cache
        self._cached: dict[int, int] = {}  # prefix hash -> block (used or free-cached)
        self._lru = BlockLRU(size)  # free-cached blocks, least recently released first
        self._seqs: dict[int, _Held] = {}  # running sequence -> its blocks in token order
        self._tails: OrderedDict[int, np.ndarray] = OrderedDict()  # released prompts' blocks by last hash
        self._block_key = np.zeros(size, dtype=np.uint64)  # each hashed block's prefix hash (valid where hashed)
        self._host = HostTier(host_capacity_blocks)
        self._host_blocks = host_capacity_blocks
        self.host_hits_tokens = 0  # of hits_tokens, those loaded back from the host tier
        self._used = 0
        self.hits_tokens = 0  # prompt tokens served from the cache, summed over admitted sequences
        self.lookups_tokens = 0  # prompt tokens of admitted sequences
        self.evictions = 0  # free-cached blocks reclaimed for new data
        self.preemptions = 0

    @classmethod
    def unlimited(cls, block_tokens: int = 16, *, checkpoint_tokens: int | None = None) -> KVCache:
        """A cache that never runs out and never evicts: the theoretical-reuse reference."""
        return cls(None, block_tokens, checkpoint_tokens=checkpoint_tokens)

    @property
    def capacity_blocks(self) -> int | None:
        """Blocks in the pool; None for an unlimited cache."""
        return self._capacity

    @property
    def block_tokens(self) -> int:
        """Tokens per block."""
        return self._block_tokens

    @property
    def used_blocks(self) -> int:
        """Blocks held by at least one running sequence."""
        return self._used

    @property
    def cached_free_blocks(self) -> int:
        """Blocks no sequence holds whose KV is kept for prefix hits until evicted."""
        return self._lru.evictable

    @property
    def free_blocks(self) -> int | float:
        """Blocks a new allocation could take (never used + evictable); math.inf when unlimited."""
        if self._capacity is None:
            return math.inf
        return len(self._never_used) + self._lru.evictable

    @property
    def running(self) -> int:
        """Sequences currently holding blocks."""
        return len(self._seqs)

    def usage(self) -> float:
        """Fraction of the pool held by running sequences (0.0 for an unlimited cache, which is never full)."""
        return 0.0 if self._capacity is None else self._used / self._capacity

    def hit_rate(self) -> float:
        """Cached / looked-up prompt tokens over admitted sequences (0.0 before any)."""
        return self.hits_tokens / self.lookups_tokens if self.lookups_tokens else 0.0

    def __contains__(self, seq_id: object) -> bool:
        return seq_id in self._seqs

    def blocks(self, seq_id: int) -> tuple[int, ...]:
        """The sequence's block ids in token order (its block table)."""
        return tuple(self._seq(seq_id).ids())

    def lru_blocks(self) -> tuple[int, ...]:
        """Free-cached block ids, the next to be evicted first."""
        return self._lru.order()

    def hash_of(self, block: int) -> int | None:
        """The prefix hash a block is cached under, or None."""
        if not 0 <= block < self._hashed.size or not self._hashed[block]:
            return None
        return int(self._block_key[block])

    def match(self, hashes: np.ndarray | Sequence[int]) -> int:
        """Leading blocks of `hashes` that are cached (used or free); touches no LRU order or counter."""
        return _leading(list(map(self._cached.get, _as_keys(hashes))))

    def allocate(self, seq_id: int, hashes: np.ndarray | Sequence[int], tokens: int) -> int | None:
        """Admit a prompt of `tokens` tokens: its cached token count, or None (and no change) if blocks run out."""
        if seq_id in self._seqs:
            raise ValueError(f"KVCache.allocate: sequence {seq_id!r} already holds blocks")
        tokens = _check_positive("allocate tokens", tokens)
        array = _as_array(hashes)
        if array.size > tokens // self._block_tokens:
            raise ValueError(f"KVCache.allocate: {array.size} block hashes for a {tokens}-token prompt, which has "
                             f"only {tokens // self._block_tokens} full blocks of {self._block_tokens} tokens")
        hit_blocks, held, tail, fresh = self._lookup(array)
        host_blocks = self._host.leading(fresh)
        need = -(-tokens // self._block_tokens) - hit_blocks
        revived = held[self._refs[held] == 0] if held.size else held  # free-cached blocks taken back from the LRU
        if need > self._available() - revived.size:
            return None
        if held.size:
            self._lru.revive(revived)
            self._refs[held] += 1
        new = self._take(need)
        self._refs[new] = 1
        self._register(new[: len(fresh)], array[hit_blocks:], fresh)
        prompt = (int(array[-1]), array.size) if array.size and self._snapshots else None
        self._seqs[seq_id] = _Held(np.concatenate((held, new)) if held.size else new, prompt)
        if tail is not None:
            del self._tails[tail]
        self._used += revived.size + need
        self._host.load(fresh[:host_blocks])
        hit_tokens = min((hit_blocks + host_blocks) * self._block_tokens, tokens - 1)
        if self._checkpoint_tokens is not None:
            hit_tokens -= hit_tokens % self._checkpoint_tokens
        self.host_hits_tokens += max(0, hit_tokens - hit_blocks * self._block_tokens)
        self.hits_tokens += hit_tokens
        self.lookups_tokens += tokens
        return hit_tokens

    def _lookup(self, keys: np.ndarray) -> tuple[int, np.ndarray, int | None, list[int]]:
        """(leading cached blocks, their ids, the released-prompt snapshot used or None, the other hashes as ints).

        An agentic turn's prompt extends its previous turn's, so the blocks that prompt held when it was
        released are checked first, in one vectorized comparison, and only the new part is looked up in
        the (large, cache-unfriendly) dict. The check is exact: a block still stands for a hash only if it
        is still hashed under it. Without a valid snapshot every block is looked up. Raises ValueError if a
        hash repeats (a repeated hash would map two positions to one block).
        """
        m, ints = self._snapshot_end(keys)
        if m:
            snapshot = self._tails[int(keys[m - 1])]
            if snapshot.size == m and self._hashed[snapshot].all() and (self._block_key[snapshot] == keys[:m]).all():
                _check_distinct(keys)
                rest = keys[m:].tolist()
                found = list(map(self._cached.get, rest))
                lead = _leading(found)
                held = np.concatenate((snapshot, np.array(found[:lead], dtype=np.int64)))
                return m + lead, held, int(keys[m - 1]), rest[lead:]
        if ints is None or len(ints) < keys.size:
            ints = keys.tolist()
        if len(set(ints)) < len(ints):
            _check_distinct(keys)
        found = list(map(self._cached.get, ints))
        lead = _leading(found)
        return lead, np.array(found[:lead], dtype=np.int64), None, ints[lead:]

    def _snapshot_end(self, keys: np.ndarray) -> tuple[int, list[int] | None]:
        """(1 + the last index whose hash keys a released prompt's snapshot, or 0; the hashes scanned, as ints).

        Python ints are made only for the end of the prompt, in windows growing from its last blocks.
        """
        tails = self._tails
        if not tails or not keys.size:
            return 0, None
        window = _SNAPSHOT_SCAN
        while True:
            part = keys[max(0, keys.size - window):].tolist()
            if not tails.keys().isdisjoint(part):
                last = next(i for i in range(len(part) - 1, -1, -1) if part[i] in tails)
                return keys.size - len(part) + last + 1, part
            if window >= keys.size:
                return 0, part
            window *= 8

    def grow(self, seq_id: int, tokens: int) -> bool:
        """The sequence now holds `tokens` tokens: add unhashed blocks; False (and no change) if they run out."""
        blocks = self._seq(seq_id)
        need = -(-_check_positive("grow tokens", tokens) // self._block_tokens) - len(blocks)
        if need <= 0:
            return True
        if need > self._available():
            return False
        new = self._take(need)
        self._refs[new] = 1
        blocks.tail.extend(new.tolist())
        self._used += need
        return True

    def grow_many(self, seq_ids: Sequence[int], tokens: Sequence[int]) -> bool:
        """`grow` for several sequences in order, all or nothing: False (and no change) if blocks run out.

        Equal to calling `grow` on each in turn when all succeed (blocks are taken in the same order).
        """
        held = [self._seq(seq_id) for seq_id in seq_ids]
        block = self._block_tokens
        needs = [-(-_check_positive("grow tokens", t) // block) - len(h) for h, t in zip(held, tokens, strict=True)]
        total = sum(n for n in needs if n > 0)
        if not total:
            return True
        if total > self._available():
            return False
        new = self._take(total)
        self._refs[new] = 1
        new_ids = new.tolist()
        start = 0
        for blocks, need in zip(held, needs, strict=True):
            if need > 0:
                blocks.tail.extend(new_ids[start : start + need])
                start += need
        self._used += total
        return True

    def free(self, seq_id: int) -> None:
        """Release a finished sequence's blocks; hashed ones stay cached until evicted."""
        self._release(seq_id)

    def preempt(self, seq_id: int) -> None:
        """Release a sequence to be recomputed later (vLLM's recompute preemption), counted apart from free."""
        self._release(seq_id)
        self.preemptions += 1

    def _seq(self, seq_id: int) -> _Held:
        """The running sequence's block list, or ValueError naming it."""
        try:
            return self._seqs[seq_id]
        except KeyError:
            raise ValueError(f"KVCache: sequence {seq_id!r} holds no blocks") from None

    def _available(self) -> int | float:
        """Blocks that can be taken now without touching running sequences."""
        return math.inf if self._capacity is None else len(self._never_used) + self._lru.evictable

    def _take(self, count: int) -> np.ndarray:
        """`count` blocks for new data: never-used ones first, then LRU evictions (the caller checked they exist)."""
        pool = self._never_used
        from_pool = min(count, len(pool))
        taken = pool[len(pool) - from_pool :][::-1]
        del pool[len(pool) - from_pool :]
        rest = count - from_pool
        if not rest:
            return np.array(taken, dtype=np.int64)
        if self._capacity is None:
            start = self._next_block
            self._next_block += rest
            self._ensure_size(self._next_block)
            more = np.arange(start, start + rest, dtype=np.int64)
        else:
            more = self._evict(rest)
        return np.concatenate((np.array(taken, dtype=np.int64), more)) if taken else more

    def _evict(self, count: int) -> np.ndarray:
        """Reclaim the `count` least recently released free-cached blocks: unhash them (to the host tier, if any)."""
        evicted = self._lru.evict(count)
        self._hashed[evicted] = False
        keys = self._block_key[evicted].tolist()
        for key in keys:
            del self._cached[key]
        if self._host_blocks:
            for key in keys:
                self._host.store(key)
        self.evictions += count
        return evicted

    def take_transfers(self) -> tuple[int, int]:
        """(blocks stored to, blocks loaded from) the host since the last call: what PCIe must move."""
        return self._host.take_transfers()

    def _register(self, blocks: np.ndarray, keys: np.ndarray, ints: list[int]) -> None:
        """Key new full blocks by their (distinct) prefix hashes (`ints` = `keys` as Python ints), skipping hashes
        already cached."""
        if self._cached.keys().isdisjoint(ints):  # the usual case, at C speed
            self._cached.update(zip(ints, blocks.tolist(), strict=True))
            self._hashed[blocks] = True
            self._block_key[blocks] = keys
            return
        for key, block in zip(ints, blocks.tolist(), strict=True):
            if key not in self._cached:
                self._cached[key] = block
                self._hashed[block] = True
                self._block_key[block] = key

    def _release(self, seq_id: int) -> None:
        """Drop a sequence's references; blocks no one holds go to the LRU (hashed) or the never-used pool."""
        blocks = self._seq(seq_id)
        del self._seqs[seq_id]
        # Tail first, as vLLM's KVCacheManager.free does: a sequence's last blocks, which the fewest other
        # prompts share, reach the LRU's old end first and so are evicted before its head.
        if blocks.prompt is not None:  # a snapshot of the prompt's blocks, for its session's next turn (see _lookup)
            last_key, count = blocks.prompt
            self._tails[last_key] = blocks.head[:count]
            self._tails.move_to_end(last_key)
            if len(self._tails) > _SNAPSHOTS:
                self._tails.popitem(last=False)
        grown = blocks.tail
        for block in grown:  # blocks grown since admission are this sequence's alone and unhashed
            self._refs[block] = 0
        self._never_used.extend(reversed(grown))
        head = blocks.head[::-1]
        refs = self._refs[head] - 1
        self._refs[head] = refs
        released = head[refs == 0]
        self._used -= len(grown) + released.size
        hashed = self._hashed[released]
        if np.count_nonzero(hashed) == hashed.size:
            self._lru.push(released)
            return
        self._lru.push(released[hashed])
        self._never_used.extend(released[~hashed].tolist())

    def _ensure_size(self, size: int) -> None:
        """Grow an unlimited cache's per-block arrays to hold `size` blocks, doubling to amortize copies."""
        if size <= self._refs.size:
            return
        new_size = max(size, 2 * self._refs.size)
        self._lru.grow(new_size)
        for name in ("_refs", "_hashed", "_block_key"):
            old = getattr(self, name)
            grown = np.zeros(new_size, dtype=old.dtype)
            grown[: old.size] = old
            setattr(self, name, grown)
