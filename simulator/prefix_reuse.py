"""The stream's prefix reuse with an unlimited cache, in arrays: the ceiling `prefix_hit_rate` is measured against.

It equals `workloads.traces.theoretical_prefix_reuse` (a test holds them equal) without its set of Python ints,
about 1 KB a request: a block counts as reused when an earlier request (in stream order) holds its hash. Hashes
are chained, so the blocks an earlier request holds are a prefix of a request's blocks, as that function assumes.
"""

from __future__ import annotations

import numpy as np

from workloads.traces import RequestStream


def prefix_reuse(stream: RequestStream) -> float:
    """Reused / total prompt tokens with an unlimited cache."""
    total_tokens = int(stream.prompt_tokens.sum())
    if total_tokens == 0 or stream.hash_pool.size == 0:
        return 0.0
    starts, counts = stream.hash_start, stream.hash_count
    n = starts.size
    index = np.int32 if n < 2 ** 31 else np.int64
    disjoint = bool(np.array_equal(starts[1:], starts[:-1] + counts[:-1])) and (n == 0 or starts[0] == 0)
    if disjoint:  # each pool entry belongs to one request (random streams): its owner without a loop
        owner = np.repeat(np.arange(n, dtype=index), counts)
        if owner.size < stream.hash_pool.size:
            owner = np.concatenate([owner, np.full(stream.hash_pool.size - owner.size, n, dtype=index)])
    else:  # turns of a session share one chain: an entry's owner is the first request that holds it
        owner = np.full(stream.hash_pool.size, n, dtype=index)
        for i in range(n - 1, -1, -1):  # later requests first, so the earliest one's mark stays
            owner[starts[i]:starts[i] + counts[i]] = i
    # first request holding each hash value: sort the entries by value, the smallest owner of each run
    order = np.lexsort((owner, stream.hash_pool))
    values = stream.hash_pool[order]
    run_start = np.ones(values.size, dtype=bool)
    run_start[1:] = values[1:] != values[:-1]
    del values
    first_owner = np.empty(stream.hash_pool.size, dtype=index)
    first_of_run = owner[order][run_start]
    first_owner[order] = np.repeat(first_of_run, np.diff(np.append(np.flatnonzero(run_start), order.size)))
    del order, run_start, first_of_run
    if disjoint:
        reused_blocks = int(np.count_nonzero(first_owner < owner))
    else:
        reused_blocks = sum(int(np.count_nonzero(first_owner[starts[i]:starts[i] + counts[i]] < i)) for i in range(n))
    return reused_blocks * stream.block_tokens / total_tokens
