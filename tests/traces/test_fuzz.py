"""Whatever a file holds (random bytes, random JSON, mutated copies of the samples), read_trace returns a Trace
or raises TraceError: nothing else escapes."""

from __future__ import annotations

import csv
import gzip
import io
import itertools
import json
import math
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.traces.conftest import (
    KINETO,
    NSYS_CSV,
    NSYS_SQLITE,
    ROCPD,
    ROCPROF_COPIES,
    ROCPROF_CSV,
    ROCPROF_JSON,
)
from traces.formats import Trace, TraceError, read_trace

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_files = itertools.count()

# the magic numbers and first bytes that lead the sniffer into each reader
PREFIXES = [b"", b"\x1f\x8b", b"SQLite format 3\x00", b"{", b"[", b'{"traceEvents": [', b'"Kind","Kernel_Name",',
            b"Start (ns),Duration (ns),Name\n", b'{"rocprofiler-sdk-tool": [']
KEYS = ["traceEvents", "cat", "name", "ph", "ts", "dur", "args", "pid", "tid", "device", "stream", "correlation",
        "External id", "grid", "block", "Input Dims", "Input type", "rocprofiler-sdk-tool", "buffer_records",
        "kernel_dispatch", "memory_copy", "dispatch_info", "kernel_id", "kernel_symbols", "start_timestamp",
        "end_timestamp", "agents", "agent_id", "handle", "grid_size", "workgroup_size", "x", "y", "z", "type",
        "logical_node_type_id", "formatted_kernel_name", "strings", "operation", "stream_id", "queue_id"]
WORDS = ["kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "cpu_op", "X", "B", "i",
         "cudaGraphLaunch", "cudaLaunchKernel", "aten::mm", "MEMORY_COPY", ""]
ODD_VALUES = [None, True, -1, 0, -3.5, float("nan"), float("inf"), -float("inf"), 1e308, 10**30, 2**64, -(2**70),
              "", "x", "-5", "nan", "1e999", "12:00", [], {}, [1, 2, 3], {"handle": -1}]

scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True, allow_infinity=True)
           | st.text(max_size=12) | st.sampled_from(WORDS) | st.sampled_from(ODD_VALUES))
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6),
                                                                        inner, max_size=6), max_leaves=40)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _path(folder: Path, suffix: str = "") -> Path:
    return folder / f"case{next(_files)}{suffix}"


def _read(path: Path) -> None:
    """read_trace either returns a Trace or raises TraceError (any other exception fails the test)."""
    try:
        result = read_trace(path)
    except TraceError as error:
        assert "\n" not in str(error) and str(error).startswith(f"{path}: ")
        return
    assert isinstance(result, Trace) and result.kernels
    assert all(k.duration_s > 0 and math.isfinite(k.start_s) for k in result.kernels)
    assert math.isfinite(result.busy_s()) and result.busy_s() > 0


@FUZZ
@given(prefix=st.sampled_from(PREFIXES), body=st.binary(max_size=2048), packed=st.booleans())
def test_random_bytes(folder, prefix, body, packed):
    content = prefix + body
    path = _path(folder)
    path.write_bytes(gzip.compress(content) if packed else content)
    _read(path)


@FUZZ
@given(value=json_values, wrap=st.sampled_from([None, "traceEvents", "rocprofiler-sdk-tool"]))
def test_random_json(folder, value, wrap):
    document = value if wrap is None else {wrap: value if isinstance(value, list) else [value]}
    path = _path(folder, ".json")
    path.write_text(json.dumps(document))
    _read(path)


def _mutate_json(document: object, data: st.DataObject) -> object:
    """Delete a key, or put an odd value at a random place of a parsed JSON document."""
    node, steps = document, data.draw(st.integers(1, 8))
    for _ in range(steps):
        children = list(node.items()) if isinstance(node, dict) else list(enumerate(node)) if isinstance(
            node, list) else []
        if not children:
            break
        key, child = data.draw(st.sampled_from(children))
        if not isinstance(child, dict | list) or data.draw(st.booleans()):
            action = data.draw(st.sampled_from(["delete", "replace"]))
            if action == "delete" and isinstance(node, dict):
                del node[key]
            else:
                node[key] = data.draw(scalars | json_values)
            return document
        node = child
    return document


@FUZZ
@given(sample=st.sampled_from([KINETO, ROCPROF_JSON]), data=st.data(), packed=st.booleans(),
       cut=st.none() | st.integers(0, 20000))
def test_mutated_json_samples(folder, sample, data, packed, cut):
    document = json.loads(sample.read_text())
    for _ in range(data.draw(st.integers(1, 6))):
        document = _mutate_json(document, data)
    content = json.dumps(document).encode()
    if cut is not None:
        content = content[:cut]
    path = _path(folder, ".json")
    path.write_bytes(gzip.compress(content) if packed else content)
    _read(path)


@FUZZ
@given(sample=st.sampled_from([NSYS_CSV, ROCPROF_CSV, ROCPROF_COPIES]), data=st.data(),
       cut=st.none() | st.integers(0, 3000))
def test_mutated_csv_samples(folder, sample, data, cut):
    rows = list(csv.reader(io.StringIO(sample.read_text())))
    for _ in range(data.draw(st.integers(1, 8))):
        if not rows:
            break
        row = data.draw(st.integers(0, len(rows) - 1))
        if not rows[row]:
            continue
        action = data.draw(st.sampled_from(["cell", "cell", "drop column", "drop cell", "drop row"]))
        column = data.draw(st.integers(0, len(rows[row]) - 1))
        if action == "cell":
            rows[row][column] = data.draw(st.sampled_from([str(v) for v in ODD_VALUES]) | st.text(max_size=8))
        elif action == "drop column":
            rows = [r[:column] + r[column + 1:] for r in rows]
        elif action == "drop cell":
            del rows[row][column]
        else:
            del rows[row]
    text = io.StringIO()
    csv.writer(text).writerows(rows)
    content = text.getvalue() if cut is None else text.getvalue()[:cut]
    path = _path(folder, ".csv")
    path.write_text(content)
    _read(path)


SQL_VALUES = [None, -1, 0, 2**63 - 1, -(2**63), 1.5, float("nan"), float("inf"), "", "text", "12", b"\x00\xff",
              b"blob", "caf\u00e9"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sample=st.sampled_from([NSYS_SQLITE, ROCPD]), data=st.data(), cut=st.none() | st.integers(0, 70000))
def test_mutated_sqlite_samples(folder, sample, data, cut):
    path = _path(folder, ".sqlite")
    path.write_bytes(sample.read_bytes())
    with closing(sqlite3.connect(path)) as db, db:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT "
                                                 "LIKE 'sqlite_%'")]
        for _ in range(data.draw(st.integers(1, 5))):
            table = data.draw(st.sampled_from(tables))
            action = data.draw(st.sampled_from(["update", "update", "update", "delete", "drop"]))
            if action == "drop":
                db.execute(f'DROP TABLE IF EXISTS "{table}"')
                continue
            columns = [row[1] for row in db.execute(f'PRAGMA table_info("{table}")')]
            if not columns:
                continue
            if action == "delete":
                db.execute(f'DELETE FROM "{table}" WHERE rowid % 2 = 0')
                continue
            column = data.draw(st.sampled_from(columns))
            value, every = data.draw(st.sampled_from(SQL_VALUES)), data.draw(st.integers(1, 3))
            try:
                db.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE rowid % ? = 0', (value, every))
            except sqlite3.IntegrityError:  # NOT NULL, UNIQUE, an integer primary key: not a file to read
                continue
    if cut is not None:
        path.write_bytes(path.read_bytes()[:cut])
    _read(path)
