"""The table of `infersim sweep`: one row per (point, seed), kept as a journal and written as Parquet and CSV.

A row is a mapping: `point`, `seed`, `grid` (the grid keys' resolved values), `status` ("ok", "error": failed while
simulating, "skipped": a combination of grid values the scenario refuses), `error` (the reason), `metrics` (the
run summary's scalars by dotted path), `wall_s` (the point on its worker, end to end) and `base_hash` (the
resolved base scenario's hash). Every finished row is appended to the journal `sweep.rows.jsonl` as one JSON line
at once; sweep.parquet and sweep.csv are rewritten from all rows, atomically, every few seconds and at the end. A
rerun reads both back (the journal wins), so an interrupted sweep keeps every row it finished.
"""

from __future__ import annotations

import io
import json
import math
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from hwmodels.input_files import FileTooLarge, kind_of, read_regular
from infersim.output_paths import atomic_write
from infersim.sweep_grid import MAX_POINTS

PARQUET, CSV, JOURNAL = "sweep.parquet", "sweep.csv", "sweep.rows.jsonl"
METADATA_KEY = b"infersim.sweep"  # Parquet schema metadata: the grid keys, so that a rerun can read rows back
LEADING = ("point", "seed")
STATUS = ("status", "error")
TRAILING = ("wall_s", "base_hash")
SKIPPED = "skipped"
# A row is about 2 KB (its ~60 metrics), so MAX_POINTS runs write about 2 GB; a file past twice that is no journal.
JOURNAL_MAX_BYTES = 4 << 30


class TableError(ValueError):
    """A sweep folder whose files cannot be read back."""


def canonical(value: Any) -> Any:
    """A grid value as compared across runs: numbers as floats (8 and 8.0 agree), text and booleans as they are."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, int | float | np.integer | np.floating):
        return float(value)
    return json.dumps(value, sort_keys=True)


def row_key(seed: int, grid: Mapping[str, Any], keys: Sequence[str]) -> tuple[Any, ...]:
    """What identifies a row within one base scenario: its seed and its values of `keys`."""
    return (int(seed), *(canonical(grid[key]) for key in keys))


def open_journal(out: Path) -> IO[str]:
    """The journal, opened to append, locked against a second sweep writing the same folder, and ending in a whole
    line: a last line that a killed sweep left half-written is cut off (its row runs again)."""
    import fcntl

    path = out / JOURNAL
    try:  # a regular file only: no link followed, and a pipe refused rather than waited on
        descriptor = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666)
    except OSError as err:
        raise TableError(f"{path}: cannot open the sweep's journal: {err.strerror or err}") from None
    handle = os.fdopen(descriptor, "a+b")
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise TableError(f"{path}: is {kind_of(mode)}, not the sweep's journal (a regular file)")
        os.set_blocking(descriptor, True)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise TableError(f"--out {out}: another sweep is writing there") from None
        _cut_torn_line(handle)
    except BaseException:
        handle.close()
        raise
    return io.TextIOWrapper(handle, encoding="utf-8", newline="\n")


def _cut_torn_line(handle: IO[bytes]) -> None:
    """Truncate a journal after its last newline, so that the next row starts a line of its own."""
    size = handle.seek(0, os.SEEK_END)
    end = size
    while end > 0:
        start = max(0, end - 65536)
        handle.seek(start)
        block = handle.read(end - start)
        newline = block.rfind(b"\n")
        if newline >= 0:
            end = start + newline + 1
            break
        end = start
    if end != size:
        handle.truncate(end)
    handle.seek(0, os.SEEK_END)


def append(journal: IO[str], row: Mapping[str, Any]) -> None:
    """One finished row, as one JSON line, on disk before the next row is waited for."""
    journal.write(json.dumps(row, allow_nan=False, separators=(",", ":")) + "\n")
    journal.flush()


def read_rows(out: Path) -> list[dict[str, Any]]:
    """The rows a folder holds, from sweep.parquet then the journal (later rows replace earlier ones)."""
    rows = _parquet_rows(out / PARQUET) if (out / PARQUET).exists() else []
    if (out / JOURNAL).exists():
        rows += _journal_rows(out / JOURNAL)
    return [row for row in rows if row["status"] != SKIPPED]  # skips are recomputed from the grid each run


def _journal_rows(path: Path) -> list[dict[str, Any]]:
    """The journal's rows. A last line without its newline is a row a killed sweep left half-written: skipped (it runs
    again). Any other line that is not a row is an error naming the file and the line."""
    try:
        data = read_regular(path, JOURNAL_MAX_BYTES)
    except FileTooLarge:
        raise TableError(f"{path}: larger than {JOURNAL_MAX_BYTES} bytes, more than a sweep of "
                         f"{MAX_POINTS:,} runs writes") from None
    except OSError as err:
        raise TableError(f"{path}: cannot read the sweep's journal: {err.strerror or err}") from None
    lines = data.split(b"\n")[:-1]  # what follows the last newline is a torn row, or nothing
    rows = []
    for number, line in enumerate(lines, start=1):
        try:
            row = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise TableError(f"{path}: line {number} is not UTF-8 text (byte {err.start + 1}: {err.reason}); remove "
                             "the line (its run goes again) or give another --out") from None
        except (ValueError, RecursionError):
            raise TableError(f"{path}: line {number} is not a JSON row; remove the line (its run goes again) or give "
                             "another --out") from None
        if isinstance(row, dict) and {"point", "seed", "grid", "status", "metrics", "base_hash"} <= set(row):
            rows.append(row)
        else:
            raise TableError(f"{path}: line {number} is not a sweep row; remove the line or give another --out")
    return rows


def _parquet_rows(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as err:  # a truncated or foreign file: name it rather than fail deep inside pyarrow
        raise TableError(f"{path}: cannot read it back as a sweep table: {err}") from None
    meta = (table.schema.metadata or {}).get(METADATA_KEY)
    if meta is None:
        raise TableError(f"{path}: not a sweep table (no grid keys in its metadata)")
    grid_keys = json.loads(meta)["grid_keys"]
    fixed = set(LEADING) | set(STATUS) | set(TRAILING) | set(grid_keys)
    rows = []
    for record in table.to_pylist():
        rows.append({
            "point": record["point"], "seed": record["seed"], "grid": {k: record[k] for k in grid_keys},
            "status": record["status"], "error": record["error"] or "",
            "metrics": {k: _number(v) for k, v in record.items() if k not in fixed},
            "wall_s": _number(record["wall_s"]), "base_hash": record["base_hash"],
        })
    return rows


def _number(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def frame(rows: Iterable[Mapping[str, Any]], grid_keys: Sequence[str]) -> Any:
    """The rows as one DataFrame: point, seed, the grid keys, status, error, the metrics, wall_s, base_hash."""
    import pandas as pd

    rows = list(rows)
    metric_names: dict[str, None] = {}
    for row in rows:
        metric_names.update(dict.fromkeys(row["metrics"]))
    columns = [*LEADING, *grid_keys, *STATUS, *metric_names, *TRAILING]
    records = [{"point": row["point"], "seed": row["seed"], **{k: row["grid"][k] for k in grid_keys},
                "status": row["status"], "error": row["error"],
                **{m: row["metrics"].get(m) for m in metric_names}, "wall_s": row["wall_s"],
                "base_hash": row["base_hash"]} for row in rows]
    table = pd.DataFrame.from_records(records, columns=columns)
    for key in grid_keys:  # one type per column for Parquet: mixed values (a refused text beside numbers) as text
        kinds = {type(v) for v in table[key] if v is not None}
        if len(kinds) > 1 and not kinds <= {int, float}:
            table[key] = table[key].map(lambda v: v if v is None else str(v))
    for name in metric_names:
        if table[name].dtype == object and table[name].isna().all():
            table[name] = table[name].astype("float64")  # a metric no row has: a float column of NaN, not nulls
    return table


def write_table(out: Path, table: Any, grid_keys: Sequence[str]) -> list[Path]:
    """sweep.parquet (the grid keys in its metadata) and sweep.csv, each atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrow = pa.Table.from_pandas(table, preserve_index=False)
    meta = {**(arrow.schema.metadata or {}), METADATA_KEY: json.dumps({"grid_keys": list(grid_keys)}).encode()}
    arrow = arrow.replace_schema_metadata(meta)
    atomic_write(out / PARQUET, lambda tmp: pq.write_table(arrow, tmp))
    csv = table.to_csv(index=False)
    atomic_write(out / CSV, lambda tmp: Path(tmp).write_text(csv, encoding="utf-8"))
    return [out / PARQUET, out / CSV]
