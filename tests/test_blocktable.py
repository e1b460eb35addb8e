"""The numpy prefix-hash table behaves as a dict under any sequence of inserts, deletes and look-ups."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.blocktable import BlockTable

# small key space so that inserts, deletes and re-inserts of the same key and long probe runs all happen
KEYS = st.integers(min_value=0, max_value=2**64 - 1) | st.integers(min_value=0, max_value=3000)
OPS = st.lists(st.tuples(st.sampled_from(["put", "delete", "get"]), st.lists(KEYS, max_size=40)), max_size=60)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_matches_a_dict(ops):
    table, ref = BlockTable(), {}
    counter = 0
    for op, keys in ops:
        keys = list(dict.fromkeys(keys))  # distinct, as the cache guarantees
        if op == "put":
            new = [k for k in keys if k not in ref]
            values = list(range(counter, counter + len(new)))
            counter += len(new)
            table.put_many(np.array(new, dtype=np.uint64), np.array(values, dtype=np.int64))
            ref.update(zip(new, values, strict=True))
        elif op == "delete":
            gone = [k for k in keys if k in ref]
            table.delete_many(np.array(gone, dtype=np.uint64))
            for k in gone:
                del ref[k]
        probe = keys + list(ref)[:20]
        got = table.get_many(np.array(probe, dtype=np.uint64)).tolist()
        assert got == [ref.get(k, -1) for k in probe]
        assert len(table) == len(ref)


def test_grows_past_its_first_size_and_keeps_every_entry():
    table = BlockTable()
    rng = np.random.default_rng(3)
    keys = np.unique(rng.integers(0, 2**63, size=50_000, dtype=np.uint64))
    for part in np.array_split(np.arange(keys.size), 25):
        table.put_many(keys[part], part)
    table.delete_many(keys[::2])
    got = table.get_many(keys)
    assert (got[::2] == -1).all()
    assert (got[1::2] == np.arange(keys.size)[1::2]).all()


def test_deleting_an_absent_key_is_an_error():
    table = BlockTable()
    table.put_many(np.array([5], dtype=np.uint64), np.array([1]))
    with pytest.raises(KeyError, match="absent"):
        table.delete_many(np.array([6], dtype=np.uint64))
