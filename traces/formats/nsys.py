"""Nsight Systems -> `Trace`: the SQLite export (`nsys export --type sqlite`) and the CSV of the
`cuda_gpu_trace` statistics report (`nsys stats --report cuda_gpu_trace --format csv`).

SQLite: kernels from `CUPTI_ACTIVITY_KIND_KERNEL` (`start`, `end` in ns, `deviceId`, `streamId`, `gridX..Z`,
`blockX..Z`, and the name as an id into `StringIds`: `demangledName`, else `shortName`, else `mangledName`),
copies from `CUPTI_ACTIVITY_KIND_MEMCPY` (named by `copyKind` through `ENUM_CUDA_MEMCPY_OPER` when the export
has it) and fills from `CUPTI_ACTIVITY_KIND_MEMSET`, as the report names them ("[CUDA memcpy Host-to-Device]",
"[CUDA memset]"). Tables are created lazily by the exporter: a report without CUDA kernels has no kernel table.

CSV: one row per kernel, copy or fill, columns "Start (ns)", "Duration (ns)", "CorrId", "GrdX".."GrdZ",
"BlkX".."BlkZ", ..., "Device", "Ctx", ["GreenCtx",] "Strm", "Name" (nsys 2021: "Start(sec)", "Duration(nsec)").
The time unit is read from the header (the reports take `--timeunit`), lines before the header (notices printed
with the report) are passed over, and the device is the index in "Device" ("NVIDIA H200 (0)"). Neither form
records the launching CPU op.
"""

from __future__ import annotations

import csv
import io
import re
import sqlite3

from traces.formats.records import (
    UNITS_S,
    BadRecord,
    Collector,
    Trace,
    TracedKernel,
    fail,
    integer,
    make_kernel,
    number,
    one_line,
    optional_integer,
    quoted,
    seconds,
    shown,
    span,
)

NS = 1e-9
KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
NAME_COLUMNS = ("demangledName", "shortName", "mangledName")
# CUpti_ActivityMemcpyKind, named as the nsys reports name them (used when the export has no enum table)
COPY_KINDS = {0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array", 4: "Array-to-Host",
              5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array", 8: "Device-to-Device",
              9: "Host-to-Host", 10: "Peer-to-Peer"}


def nsys_tables(connection: sqlite3.Connection) -> dict[str, str]:
    """The database's tables and views, lower-case name -> name."""
    rows = connection.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
    return {name.lower(): name for (name,) in rows if isinstance(name, str)}


def _columns(connection: sqlite3.Connection, table: str) -> list[str]:
    """The column names of a table or view."""
    return [row[1] for row in connection.execute(f'PRAGMA table_info("{table}")').fetchall()]


def read_nsys_sqlite(path: str, connection: sqlite3.Connection) -> Trace:
    """Read an open nsys SQLite export."""
    tables = nsys_tables(connection)
    if KERNEL_TABLE.lower() not in tables:
        raise fail(path, f"has no {KERNEL_TABLE} table (the report holds no CUDA kernels: was --trace cuda on?)")
    columns = _columns(connection, tables[KERNEL_TABLE.lower()])
    missing = [c for c in ("start", "end") if c not in columns]
    names = [c for c in NAME_COLUMNS if c in columns]
    if missing or not names:
        need = missing + ([] if names else ["demangledName or shortName"])
        raise fail(path, f"{KERNEL_TABLE} has no column {', '.join(need)}")
    strings = _strings(path, connection, tables)
    out = Collector(path, "nsys-sqlite")
    table = tables[KERNEL_TABLE.lower()]
    wanted = ["start", "end", *names, *(c for c in ("deviceId", "streamId", "gridX", "gridY", "gridZ", "blockX",
                                                     "blockY", "blockZ") if c in columns)]
    for number_, row in enumerate(_rows(connection, table, wanted), start=1):
        values = dict(zip(wanted, row, strict=True))
        name = _name(values, names, strings)
        try:
            if name is None:
                ids = ", ".join(f"{c} {shown(values[c])}" for c in names)
                raise BadRecord(f"has a name not in StringIds ({ids})")
            grid = tuple(optional_integer(values.get(c)) for c in ("gridX", "gridY", "gridZ"))
            block = tuple(optional_integer(values.get(c)) for c in ("blockX", "blockY", "blockZ"))
            out.add(_kernel(values, name, "kernel", None if None in grid else grid, None if None in block else block))
        except BadRecord as bad:
            out.skip(f"{table} row {number_} ({quoted(name if name is not None else values[names[0]])}) {bad}")
    if "target_info_gpu" in tables and "name" in _columns(connection, tables["target_info_gpu"]):
        named = [n for (n,) in _rows(connection, tables["target_info_gpu"], ["name"]) if isinstance(n, str) and n]
        out.gpu_name = one_line(named[0].strip())[:100] if named else ""
    if MEMCPY_TABLE.lower() in tables:
        _copies(path, connection, tables, out)
    if MEMSET_TABLE.lower() in tables:
        _fills(connection, tables, out)
    return out.trace(f"has no rows in {KERNEL_TABLE} (the trace holds no kernels)")


def _rows(connection: sqlite3.Connection, table: str, columns: list[str]):
    """The rows of a table, its columns in the given order."""
    listed = ", ".join(f'"{c}"' for c in columns)
    return connection.execute(f'SELECT {listed} FROM "{table}"')


def _strings(path: str, connection: sqlite3.Connection, tables: dict[str, str]) -> dict[int, str]:
    """StringIds as id -> text."""
    if "stringids" not in tables:
        raise fail(path, "has no StringIds table (kernel names are ids into it)")
    if not {"id", "value"} <= set(_columns(connection, tables["stringids"])):
        raise fail(path, "StringIds has no id and value columns")
    return {i: v for i, v in _rows(connection, tables["stringids"], ["id", "value"])
            if isinstance(i, int) and isinstance(v, str)}


def _name(values: dict, columns: list[str], strings: dict[int, str]) -> str | None:
    """The first of the name columns that resolves to a non-empty string."""
    for column in columns:
        value = values[column]
        name = strings.get(value) if isinstance(value, int) else value if isinstance(value, str) else None
        if name and name.strip():
            return name
    return None


def _kernel(values: dict, name: str, kind: str, grid=None, block=None) -> TracedKernel:
    """One row with start and end in ns, deviceId and streamId (and a copy's or fill's bytes), as a kernel."""
    start_s, duration_s = span(values["start"], values["end"], NS)
    device = values.get("deviceId")
    stream = values.get("streamId")
    size = optional_integer(values.get("bytes"))
    return make_kernel(name=name, start_s=start_s, duration_s=duration_s, kind=kind,
                       stream="" if stream is None else str(integer(stream, "streamId")),
                       device=0 if device is None else integer(device, "deviceId"), grid=grid, block=block,
                       bytes=size if size else None)


def _copies(path: str, connection: sqlite3.Connection, tables: dict[str, str], out: Collector) -> None:
    """Add the memcpy rows, named as the report names them."""
    table = tables[MEMCPY_TABLE.lower()]
    columns = _columns(connection, table)
    if not {"start", "end"} <= set(columns):
        raise fail(path, f"{MEMCPY_TABLE} has no start and end columns")
    labels = dict(COPY_KINDS)
    if "enum_cuda_memcpy_oper" in tables:
        enum = tables["enum_cuda_memcpy_oper"]
        if {"id", "label"} <= set(_columns(connection, enum)):
            labels.update({i: v for i, v in _rows(connection, enum, ["id", "label"])
                           if isinstance(i, int) and isinstance(v, str)})
    wanted = ["start", "end", *(c for c in ("deviceId", "streamId", "copyKind", "bytes") if c in columns)]
    for number_, row in enumerate(_rows(connection, table, wanted), start=1):
        values = dict(zip(wanted, row, strict=True))
        kind = values.get("copyKind")
        name = f"[CUDA memcpy {labels.get(kind, 'Unknown') if isinstance(kind, int) else 'Unknown'}]"
        try:
            out.add(_kernel(values, name, "memcpy"))
        except BadRecord as bad:
            out.skip(f"{table} row {number_} ({quoted(name)}) {bad}")


def _fills(connection: sqlite3.Connection, tables: dict[str, str], out: Collector) -> None:
    """Add the memset rows."""
    table = tables[MEMSET_TABLE.lower()]
    columns = _columns(connection, table)
    if not {"start", "end"} <= set(columns):
        return
    wanted = ["start", "end", *(c for c in ("deviceId", "streamId", "bytes") if c in columns)]
    for number_, row in enumerate(_rows(connection, table, wanted), start=1):
        try:
            out.add(_kernel(dict(zip(wanted, row, strict=True)), "[CUDA memset]", "memset"))
        except BadRecord as bad:
            out.skip(f'{table} row {number_} ("[CUDA memset]") {bad}')


# ---- the cuda_gpu_trace CSV

_TIME_HEADER = re.compile(r"^(Start|Duration)\s*(?:\((\S+)\))?$")
_DEVICE = re.compile(r"\((\d+)\)\s*$|(\d+)\s*$")
_REPORT_COLUMNS = {"CorrId", "GrdX", "BlkX", "Strm", "Device", "Ctx", "Name"}


def find_csv_header(rows: list[list[str]]) -> int | None:
    """The index of the cuda_gpu_trace header among the first rows, or None."""
    for index, row in enumerate(rows):
        cells = {c.strip() for c in row}
        times = {match.group(1) for match in map(_TIME_HEADER.match, cells) if match}
        if "Start" in times and ("Duration" in times or cells & _REPORT_COLUMNS):
            return index
    return None


def _unit_s(path: str, header: list[str], column: str) -> tuple[int, float]:
    """The index and time unit (s) of the "Start (ns)"- or "Duration (us)"-style column of a header."""
    for index, cell in enumerate(header):
        match = _TIME_HEADER.match(cell)
        if match and match.group(1) == column:
            unit = match.group(2) or "ns"
            if unit not in UNITS_S:
                raise fail(path, f"header column {quoted(cell)} has an unknown time unit {quoted(unit)}")
            return index, UNITS_S[unit]
    raise fail(path, f'header has no "{column} (ns)" column')


def read_nsys_csv(path: str, content: str) -> Trace:
    """Read the CSV of `nsys stats --report cuda_gpu_trace --format csv`."""
    reader = csv.reader(io.StringIO(content, newline=""))
    header = None
    try:
        for row in reader:
            if find_csv_header([row]) is not None:
                header = [c.strip() for c in row]
                break
        if header is None:
            raise fail(path, "has no cuda_gpu_trace header (Start (ns), Duration (ns), ..., Name)")
        if "Name" not in header:
            raise fail(path, f'header (line {reader.line_num}) has no "Name" column')
        column = {name: i for i, name in reversed(list(enumerate(header)))}
        start_col, start_unit = _unit_s(path, header, "Start")
        duration_col, duration_unit = _unit_s(path, header, "Duration")
        out = Collector(path, "nsys-csv")
        for row in reader:
            if not any(c.strip() for c in row):
                continue
            line = reader.line_num
            name = row[column["Name"]] if len(row) == len(header) else (row[-1] if row else "")
            try:
                if len(row) != len(header):
                    raise BadRecord(f"has {len(row)} fields, the header {len(header)}")
                out.add(_csv_kernel(row, column, start_col, duration_col, start_unit, duration_unit))
            except BadRecord as bad:
                out.skip(f"line {line} ({quoted(name)}) {bad}")
    except csv.Error as error:
        raise fail(path, f"line {reader.line_num} is not CSV: {error}") from None
    return out.trace("has a header but no rows (the trace holds no GPU activity)")


def _csv_kernel(row: list[str], column: dict[str, int], start_col: int, duration_col: int, start_unit: float,
                duration_unit: float) -> TracedKernel:
    """One report row as a kernel, copy or fill."""
    name = row[column["Name"]].strip()
    if not name:
        raise BadRecord("has no Name")
    start = number(row[start_col].strip(), "start")
    duration_s = seconds(number(row[duration_col].strip(), "duration"), duration_unit)

    def cells(names: tuple[str, ...]) -> tuple[int, int, int] | None:
        values = tuple(optional_integer(row[column[n]].strip()) if n in column else None for n in names)
        return None if None in values else values  # type: ignore[return-value]

    bare = name.lstrip("[")
    kind = "memcpy" if bare.startswith("CUDA memcpy") else "memset" if bare.startswith("CUDA memset") else "kernel"
    device = row[column["Device"]].strip() if "Device" in column else ""
    match = _DEVICE.search(device)
    size = None  # "Bytes (MB)", in 10^6 bytes to three decimals: a copy's size to the kilobyte
    if kind != "kernel" and "Bytes (MB)" in column:
        megabytes = row[column["Bytes (MB)"]].strip()
        try:
            size = round(float(megabytes) * 1e6) or None if megabytes else None
        except ValueError:
            size = None
    return make_kernel(name=name, start_s=start * start_unit, duration_s=duration_s, bytes=size,
                       stream=row[column["Strm"]].strip() if "Strm" in column else "",
                       device=integer(next(g for g in match.groups() if g is not None), "Device") if match else 0,
                       grid=cells(("GrdX", "GrdY", "GrdZ")) if kind == "kernel" else None,
                       block=cells(("BlkX", "BlkY", "BlkZ")) if kind == "kernel" else None, kind=kind)
