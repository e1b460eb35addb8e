"""rocprofv3 (ROCprofiler-SDK) -> `Trace`: the kernel-trace and memory-copy-trace CSVs, the JSON output
(`--output-format json`) and the rocpd SQLite database (the default output in ROCm 7).

CSV (`<pid>_kernel_trace.csv`): "Kind", "Agent_Id", "Queue_Id", ["Stream_Id",] "Kernel_Name",
"Correlation_Id", "Start_Timestamp", "End_Timestamp" (ns), "Workgroup_Size_X..Z", "Grid_Size_X..Z" and
version-dependent columns between them. `<pid>_memory_copy_trace.csv` has "Direction", "Source_Agent_Id" and
"Destination_Agent_Id" instead of the kernel columns; each file is read on its own.

JSON (`<pid>_results.json`): {"rocprofiler-sdk-tool": [one object per process]} with "agents",
"kernel_symbols" (indexed by kernel id), "strings" and "buffer_records" {"kernel_dispatch": [...],
"memory_copy": [...]}; a dispatch has "start_timestamp", "end_timestamp", "stream_id" and "dispatch_info"
{"agent_id", "queue_id", "kernel_id", "workgroup_size", "grid_size"}.

rocpd (`<pid>_results.db`): read through its documented views `kernels` (name, start, end, agent_type_index,
queue_id, stream_id, grid_x.., workgroup_x..) and `memory_copies`.

The grid is counted in work-items in the CSV and JSON (HSA's convention, as in the dispatch packet);
`TracedKernel.grid` is in workgroups (CUDA's blocks), so it is the grid divided by the workgroup size, rounded
up (a partial workgroup is launched). The device is the GPU's index among GPUs where the file says it (JSON,
rocpd, and CSV written with `--agent-index type-relative`: "GPU 1"); otherwise the agent number as written
("Agent 4", or a bare 4 in ROCm 6 output), which counts the CPU agents too. The stream is the HIP stream where the
file has one, else the HSA queue. rocprofv3 records no CPU op with a dispatch: op and shapes stay None.
"""

from __future__ import annotations

import csv
import io
import re
import sqlite3

from traces.formats.records import (
    BadRecord,
    Collector,
    Trace,
    TracedKernel,
    fail,
    integer,
    make_kernel,
    optional_integer,
    quoted,
    span,
    text,
    triple,
    workgroups,
)

NS = 1e-9
KERNEL_COLUMNS = ("Kernel_Name", "Start_Timestamp", "End_Timestamp")
COPY_COLUMNS = ("Direction", "Start_Timestamp", "End_Timestamp")
GPU_AGENT = 2  # rocprofiler_agent_type_t: 1 CPU, 2 GPU
_AGENT = re.compile(r"^\s*(?:(?:Agent|GPU|CPU)\s*)?(\d+)\s*$", re.IGNORECASE)


def csv_kind(header: list[str]) -> str | None:
    """"kernel" or "copy" when the header is a rocprofv3 kernel or memory copy trace, else None."""
    cells = {c.strip() for c in header}
    timed = bool(cells & {"Start_Timestamp", "End_Timestamp", "Correlation_Id", "Kind"})
    if "Kernel_Name" in cells and timed:
        return "kernel"
    if "Direction" in cells and timed:
        return "copy"
    return None


def _agent(value: str | None, what: str) -> int:
    """The number of an agent as the CSV writes it: 4, "Agent 4" or "GPU 1"."""
    if value is None or not value.strip():
        return 0
    match = _AGENT.match(value)
    if not match:
        raise BadRecord(f"has an unreadable {what} {quoted(value)}")
    return integer(match.group(1), what)


def read_rocprof_csv(path: str, content: str) -> Trace:
    """Read a rocprofv3 kernel trace or memory copy trace CSV."""
    reader = csv.reader(io.StringIO(content, newline=""))
    out = Collector(path, "rocprofv3-csv")
    try:
        header = next((row for row in reader if any(c.strip() for c in row)), None)
        kind = csv_kind(header) if header is not None else None
        if header is None or kind is None:
            raise fail(path, "has no rocprofv3 trace header (Kind, ..., Kernel_Name, Start_Timestamp, "
                             "End_Timestamp)")
        header = [c.strip() for c in header]
        missing = [c for c in (KERNEL_COLUMNS if kind == "kernel" else COPY_COLUMNS) if c not in header]
        if missing:
            raise fail(path, f"header (line {reader.line_num}) has no {', '.join(missing)} column")
        label = "Kernel_Name" if kind == "kernel" else "Direction"
        for row in reader:
            if not any(c.strip() for c in row):
                continue
            fields = dict(zip(header, row, strict=False))
            try:
                if len(row) != len(header):
                    raise BadRecord(f"has {len(row)} fields, the header {len(header)}")
                record = fields.get("Kind", "").strip()
                if kind == "kernel" and record not in ("", "KERNEL_DISPATCH"):
                    continue  # not a dispatch: other kinds carry no kernel
                out.add(_csv_dispatch(fields) if kind == "kernel" else _csv_copy(fields))
            except BadRecord as bad:
                out.skip(f"line {reader.line_num} ({quoted(fields.get(label, ''))}) {bad}")
    except csv.Error as error:
        raise fail(path, f"line {reader.line_num} is not CSV: {error}") from None
    return out.trace("has a header but no rows (the trace holds no dispatches)")


def _stream(fields: dict[str, str]) -> str:
    """The HIP stream of a row when the file has the column, else its HSA queue."""
    stream = fields.get("Stream_Id", "").strip()
    return stream if stream else fields.get("Queue_Id", "").strip()


def _csv_dispatch(fields: dict[str, str]) -> TracedKernel:
    """One kernel-trace row as a kernel."""
    name = text(fields["Kernel_Name"].strip() or None, "Kernel_Name")
    start_s, duration_s = span(fields["Start_Timestamp"].strip(), fields["End_Timestamp"].strip(), NS)
    block = triple([fields.get(f"Workgroup_Size_{a}", "").strip() for a in "XYZ"])
    grid = triple([fields.get(f"Grid_Size_{a}", "").strip() for a in "XYZ"])
    return make_kernel(name=name, start_s=start_s, duration_s=duration_s, stream=_stream(fields),
                       device=_agent(fields.get("Agent_Id"), "Agent_Id"), grid=workgroups(grid, block),
                       block=block)


def _csv_copy(fields: dict[str, str]) -> TracedKernel:
    """One memory-copy-trace row as a copy, on the GPU end of it."""
    direction = text(fields["Direction"].strip() or None, "Direction")
    start_s, duration_s = span(fields["Start_Timestamp"].strip(), fields["End_Timestamp"].strip(), NS)
    # the device that takes part: the source of a device-to-host copy, the destination otherwise
    side = "Source_Agent_Id" if "DEVICE_TO_HOST" in direction.upper() else "Destination_Agent_Id"
    return make_kernel(name=direction, start_s=start_s, duration_s=duration_s, stream=_stream(fields),
                       device=_agent(fields.get(side), side), kind="memcpy")


# ---- JSON

def read_rocprof_json(path: str, data: dict) -> Trace:
    """Read the parsed JSON output of rocprofv3."""
    processes = data.get("rocprofiler-sdk-tool")
    processes = [processes] if isinstance(processes, dict) else processes
    if not isinstance(processes, list):
        raise fail(path, 'has no "rocprofiler-sdk-tool" list')
    out = Collector(path, "rocprofv3-json")
    found = False
    for number_, process in enumerate(processes):
        records = process.get("buffer_records") if isinstance(process, dict) else None
        if not isinstance(records, dict):
            out.skip(f"process {number_} has no buffer_records object")
            continue
        gpus = _gpus(process.get("agents"))
        names = _symbols(process.get("kernel_symbols"))
        dispatches, copies = records.get("kernel_dispatch"), records.get("memory_copy")
        if isinstance(dispatches, list):
            found = True
            for index, record in enumerate(dispatches):
                name = names.get(_kernel_id(record))
                try:
                    out.add(_json_dispatch(record, names, gpus))
                except BadRecord as bad:
                    out.skip(f"process {number_} kernel_dispatch {index} ({quoted(name or '')}) {bad}")
        if isinstance(copies, list):
            found = True
            operations = _copy_operations(process.get("strings"))
            for index, record in enumerate(copies):
                try:
                    out.add(_json_copy(record, operations, gpus))
                except BadRecord as bad:
                    out.skip(f"process {number_} memory_copy {index} {bad}")
    if not found and not out.skipped:
        raise fail(path, "has no kernel_dispatch or memory_copy records (was --kernel-trace given?)")
    return out.trace("has no kernel dispatches or copies")


def _handle(value: object) -> int | None:
    """The integer of a {"handle": n} object (agents, queues, streams), or of a bare integer."""
    return optional_integer(value.get("handle") if isinstance(value, dict) else value)


def _gpus(agents: object) -> dict[int, int]:
    """Agent handle -> the GPU's index among GPUs, for the GPU agents."""
    found = {}
    for agent in agents if isinstance(agents, list) else []:
        if isinstance(agent, dict) and agent.get("type") == GPU_AGENT:
            handle, index = _handle(agent.get("id")), optional_integer(agent.get("logical_node_type_id"))
            if handle is not None and index is not None:
                found[handle] = index
    return found


def _symbols(symbols: object) -> dict[int, str]:
    """Kernel id -> name (formatted as the CSV prints it, else demangled, else as compiled)."""
    entries = symbols.values() if isinstance(symbols, dict) else symbols if isinstance(symbols, list) else []
    names = {}
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        kernel_id = optional_integer(entry.get("kernel_id"))
        name = next((entry[k] for k in ("formatted_kernel_name", "demangled_kernel_name", "kernel_name")
                     if isinstance(entry.get(k), str) and entry[k].strip()), None)
        if kernel_id is not None and name is not None:
            names[kernel_id] = name
    return names


def _kernel_id(record: object) -> int | None:
    """The kernel id of a dispatch record, or None."""
    info = record.get("dispatch_info") if isinstance(record, dict) else None
    return optional_integer(info.get("kernel_id")) if isinstance(info, dict) else None


def _copy_operations(strings: object) -> list[str]:
    """The names of the MEMORY_COPY operations, by operation number."""
    kinds = strings.get("buffer_records") if isinstance(strings, dict) else None
    for kind in kinds if isinstance(kinds, list) else []:
        if isinstance(kind, dict) and kind.get("kind") == "MEMORY_COPY" and isinstance(kind.get("operations"), list):
            return [op if isinstance(op, str) else "MEMORY_COPY" for op in kind["operations"]]
    return []


def _device(agent: object, gpus: dict[int, int]) -> int:
    """The GPU index of an agent handle, 0 when the file does not say."""
    handle = _handle(agent)
    return gpus.get(handle, 0) if handle is not None else 0


def _json_dispatch(record: object, names: dict[int, str], gpus: dict[int, int]) -> TracedKernel:
    """One kernel_dispatch record as a kernel."""
    if not isinstance(record, dict):
        raise BadRecord("is not an object")
    info = record.get("dispatch_info")
    if not isinstance(info, dict):
        raise BadRecord("has no dispatch_info")
    kernel_id = integer(info.get("kernel_id"), "kernel_id")
    if kernel_id not in names:
        raise BadRecord(f"has kernel_id {kernel_id}, not in kernel_symbols")
    start_s, duration_s = span(record.get("start_timestamp"), record.get("end_timestamp"), NS)
    size = info.get("workgroup_size")
    block = triple([size.get(a) for a in "xyz"]) if isinstance(size, dict) else None
    size = info.get("grid_size")
    grid = triple([size.get(a) for a in "xyz"]) if isinstance(size, dict) else None
    stream = _handle(record.get("stream_id"))
    stream = stream if stream is not None else _handle(info.get("queue_id"))
    return make_kernel(name=names[kernel_id], start_s=start_s, duration_s=duration_s,
                       stream="" if stream is None else str(stream), device=_device(info.get("agent_id"), gpus),
                       grid=workgroups(grid, block), block=block)


def _json_copy(record: object, operations: list[str], gpus: dict[int, int]) -> TracedKernel:
    """One memory_copy record as a copy, on its GPU end."""
    if not isinstance(record, dict):
        raise BadRecord("is not an object")
    operation = optional_integer(record.get("operation"))
    name = operations[operation] if operation is not None and operation < len(operations) else "MEMORY_COPY"
    start_s, duration_s = span(record.get("start_timestamp"), record.get("end_timestamp"), NS)
    ends = [_handle(record.get(k)) for k in ("dst_agent_id", "src_agent_id")]
    device = next((gpus[h] for h in ends if h is not None and h in gpus), 0)
    stream = _handle(record.get("stream_id"))
    return make_kernel(name=name, start_s=start_s, duration_s=duration_s, kind="memcpy", device=device,
                       stream="" if stream is None else str(stream))


# ---- rocpd

def is_rocpd(tables: dict[str, str]) -> bool:
    """Whether a database's tables are rocpd's."""
    return "kernels" in tables or any(name.startswith("rocpd_") for name in tables)


def read_rocpd(path: str, connection: sqlite3.Connection, tables: dict[str, str]) -> Trace:
    """Read a rocpd database through its kernels and memory_copies views."""
    if "kernels" not in tables:
        raise fail(path, "has no kernels view (a rocpd database without kernel dispatches: was --kernel-trace "
                         "given?)")
    out = Collector(path, "rocpd")
    view = tables["kernels"]
    columns = _columns(connection, view)
    missing = [c for c in ("name", "start", "end") if c not in columns]
    if missing:
        raise fail(path, f"the kernels view has no column {', '.join(missing)}")
    wanted = [c for c in ("name", "start", "end", "agent_type_index", "queue_id", "stream_id", "grid_x", "grid_y",
                          "grid_z", "workgroup_x", "workgroup_y", "workgroup_z") if c in columns]
    for number_, row in enumerate(_select(connection, view, wanted), start=1):
        values = dict(zip(wanted, row, strict=True))
        try:
            out.add(_rocpd_kernel(values))
        except BadRecord as bad:
            out.skip(f"kernels row {number_} ({quoted(values['name'])}) {bad}")
    if "memory_copies" in tables:
        view = tables["memory_copies"]
        columns = _columns(connection, view)
        if {"name", "start", "end"} <= set(columns):
            wanted = [c for c in ("name", "start", "end", "dst_agent_type", "dst_agent_type_index", "src_agent_type",
                                  "src_agent_type_index", "queue_id", "stream_id") if c in columns]
            for number_, row in enumerate(_select(connection, view, wanted), start=1):
                values = dict(zip(wanted, row, strict=True))
                try:
                    out.add(_rocpd_copy(values))
                except BadRecord as bad:
                    out.skip(f"memory_copies row {number_} ({quoted(values['name'])}) {bad}")
    return out.trace("has no rows in its kernels view (the trace holds no dispatches)")


def _columns(connection: sqlite3.Connection, table: str) -> list[str]:
    """The column names of a table or view."""
    return [row[1] for row in connection.execute(f'PRAGMA table_info("{table}")').fetchall()]


def _select(connection: sqlite3.Connection, table: str, columns: list[str]):
    """The rows of a table or view, its columns in the given order."""
    return connection.execute(f'SELECT {", ".join(chr(34) + c + chr(34) for c in columns)} FROM "{table}"')


def _rocpd_stream(values: dict) -> str:
    """The HIP stream of a row when it has one, else its queue."""
    stream = optional_integer(values.get("stream_id"))
    stream = stream if stream is not None else optional_integer(values.get("queue_id"))
    return "" if stream is None else str(stream)


def _rocpd_kernel(values: dict) -> TracedKernel:
    """One row of the kernels view as a kernel."""
    name = text(values["name"])
    start_s, duration_s = span(values["start"], values["end"], NS)
    block = triple([values.get(f"workgroup_{a}") for a in "xyz"])
    grid = triple([values.get(f"grid_{a}") for a in "xyz"])
    return make_kernel(name=name, start_s=start_s, duration_s=duration_s, stream=_rocpd_stream(values),
                       device=optional_integer(values.get("agent_type_index")) or 0, grid=workgroups(grid, block),
                       block=block)


def _rocpd_copy(values: dict) -> TracedKernel:
    """One row of the memory_copies view as a copy, on its GPU end."""
    name = text(values["name"])
    start_s, duration_s = span(values["start"], values["end"], NS)
    side = "dst" if values.get("dst_agent_type") == "GPU" or values.get("src_agent_type") != "GPU" else "src"
    return make_kernel(name=name, start_s=start_s, duration_s=duration_s, kind="memcpy",
                       stream=_rocpd_stream(values), device=optional_integer(values.get(f"{side}_agent_type_index"))
                       or 0)
