"""prefix_reuse on streams whose hashes are made on demand: the same answer as on the stored pool."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simulator.prefix_reuse import prefix_reuse
from workloads.traces import ChainPool, random_stream, theoretical_prefix_reuse


@pytest.mark.parametrize("prefix_len", [0, 40])
def test_prefix_reuse_of_hashes_made_on_demand_equals_the_stored_pool_s(prefix_len, monkeypatch):
    stream = random_stream(3000, 100, 4, range_ratio=0.5, prefix_len=prefix_len, rng=np.random.default_rng(2))
    assert isinstance(stream.hash_pool, ChainPool)
    stored = replace(stream, hash_pool=np.asarray(stream.hash_pool))
    expected = prefix_reuse(stored)
    assert expected == theoretical_prefix_reuse(stored) and (expected > 0) == (prefix_len > 0)
    assert prefix_reuse(stream) == expected
    monkeypatch.setattr(ChainPool, "repeats", lambda self: None)  # keys that cannot settle it: the pool is sorted
    assert prefix_reuse(stream) == expected
