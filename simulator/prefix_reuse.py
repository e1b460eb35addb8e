"""The stream's prefix reuse with an unlimited cache, in arrays: the ceiling `prefix_hit_rate` is measured against.

It equals `workloads.traces.theoretical_prefix_reuse` (a test holds them equal) without its set of Python ints,
about 1 KB a request: a block counts as reused when an earlier request (in stream order) holds its hash. Hashes
are chained, so the blocks an earlier request holds are a prefix of a request's blocks, as that function assumes.
"""

from __future__ import annotations

import numpy as np

from workloads.traces import ChainPool, RequestStream


def prefix_reuse(stream: RequestStream) -> float:
    """Reused / total prompt tokens with an unlimited cache."""
    total_tokens = int(stream.prompt_tokens.sum())
    if total_tokens == 0 or stream.hash_pool.size == 0:
        return 0.0
    starts, counts = stream.hash_start, stream.hash_count
    n = starts.size
    index = np.int32 if n < 2 ** 31 else np.int64
    if np.array_equal(starts[1:], starts[:-1] + counts[:-1]) and starts[0] == 0:
        return _disjoint_reuse(stream.hash_pool, int(counts.sum())) * stream.block_tokens / total_tokens
    pool = np.asarray(stream.hash_pool)
    # turns of a session share one chain: an entry's owner is the first request that holds it
    owner = np.full(pool.size, n, dtype=index)
    for i in range(n - 1, -1, -1):  # later requests first, so the earliest one's mark stays
        owner[starts[i]:starts[i] + counts[i]] = i
    # first request holding each hash value: sort the entries by value, the smallest owner of each run
    order = np.lexsort((owner, pool))
    values = pool[order]
    run_start = np.ones(values.size, dtype=bool)
    run_start[1:] = values[1:] != values[:-1]
    del values
    first_owner = np.empty(pool.size, dtype=index)
    first_of_run = owner[order][run_start]
    first_owner[order] = np.repeat(first_of_run, np.diff(np.append(np.flatnonzero(run_start), order.size)))
    del order, run_start, first_of_run
    reused_blocks = sum(int(np.count_nonzero(first_owner[starts[i]:starts[i] + counts[i]] < i)) for i in range(n))
    return reused_blocks * stream.block_tokens / total_tokens


_BUCKETS = 16  # the pool is sorted a sixteenth at a time, split by the hashes' top bits: a small transient


def _disjoint_reuse(pool: np.ndarray | ChainPool, size: int) -> int:
    """Reused blocks when each of the first `size` pool entries belongs to one request (random streams, in request
    order): every entry but the first of each hash value, since a request's own hashes are distinct
    (KVCache.allocate holds them so). A `ChainPool` that is all of it settles that from its keys when it can."""
    if isinstance(pool, ChainPool):
        repeats = pool.repeats() if size == pool.size else None
        if repeats is not None:
            return repeats
    pool = np.asarray(pool)[:size]
    reused, step = 0, 1 << 20
    top = np.empty(pool.size, dtype=np.uint8)
    for start in range(0, pool.size, step):  # a slice at a time: no full-size uint64 temporary
        top[start:start + step] = pool[start:start + step] >> np.uint64(60)
    for bucket in range(_BUCKETS):
        values = np.sort(pool[top == bucket])
        if values.size:
            reused += int(np.count_nonzero(values[1:] == values[:-1]))
    return reused
