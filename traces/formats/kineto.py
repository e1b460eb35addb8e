"""PyTorch profiler (Kineto) Chrome-trace JSON -> `Trace`, each kernel with the CPU op that launched it.

What `torch.profiler.profile(record_shapes=True).export_chrome_trace(path)` writes (libkineto's
`output_json.cpp`): an object whose "traceEvents" list holds complete events ("ph": "X", "ts" and "dur" in
microseconds). GPU activities have "cat" "kernel", "gpu_memcpy" or "gpu_memset" (older Kineto: "Kernel",
"Memcpy", "Memset") and "args" with "device", "stream", "correlation", "grid", "block" and "External id". The
launch on the CPU is a "cuda_runtime" (or "cuda_driver") event with the same "correlation"; its "External id"
is the "External id" of the CPU op ("cat" "cpu_op", older "Operator") that was innermost when it ran, whose
"args" hold "Input Dims" and "Input type" when shapes were recorded.

A kernel's op: the runtime event with its correlation gives the External id (else the kernel's own "External
id"); among the cpu_ops with that id the innermost (latest start) containing the launch is the op. Without a
matching id, the innermost cpu_op on the launching thread that contains the launch. Kernels of a replayed CUDA
or HIP graph (their runtime event is a graph launch) have no op of their own: op and shapes stay None.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

from traces.formats.records import (
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
    text,
    triple,
)

US = 1e-6
GPU_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset",
             "memset": "memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver", "privateuse1_runtime", "privateuse1_driver"}
OP_CATS = {"cpu_op", "operator"}
GRAPH_LAUNCHES = {"cudaGraphLaunch", "cudaGraphLaunch_v10000", "cuGraphLaunch", "cuGraphLaunch_ptsz",
                  "hipGraphLaunch"}
_SHAPE_DEPTH = 4  # inputs, a tensor list's tensors, their dims: deeper "Input Dims" are not shapes


@dataclass(frozen=True)
class _Op:
    """A CPU op event: its span on the CPU clock (us), its thread and its recorded inputs."""

    name: str
    start: float
    end: float
    thread: tuple
    shapes: tuple | None
    dtypes: tuple | None


@dataclass(frozen=True)
class _Launch:
    """A runtime or driver call that launched GPU work."""

    name: str
    start: float
    external_id: int | None
    thread: tuple


def read_kineto(path: str, data: object) -> Trace:
    """Read a parsed Kineto trace (the JSON object, or a bare list of events)."""
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise fail(path, "has no traceEvents list (not a Chrome trace from the PyTorch profiler)")
    out = Collector(path, "kineto")
    devices = data.get("deviceProperties") if isinstance(data, dict) else None
    if isinstance(devices, list) and devices and isinstance(devices[0], dict) and isinstance(devices[0].get("name"),
                                                                                          str):
        out.gpu_name = one_line(devices[0]["name"].strip())[:100]
    ops_by_id: dict[int, list[_Op]] = defaultdict(list)
    ops_by_thread: dict[tuple, list[_Op]] = defaultdict(list)
    launches: dict[int, _Launch] = {}
    gpu: list[tuple[int, object, str]] = []  # (index, event, kind); kind "" for a non-object
    for index, event in enumerate(events):
        if not isinstance(event, dict):
            gpu.append((index, event, ""))  # reported in file order with the GPU events
            continue
        cat = event.get("cat")
        cat = cat.lower() if isinstance(cat, str) else ""
        if cat in GPU_KINDS:
            gpu.append((index, event, GPU_KINDS[cat]))
        elif cat in LAUNCH_CATS:
            _launch(event, launches)
        elif cat in OP_CATS:
            _op(event, ops_by_id, ops_by_thread)
    if not any(kind for _, _, kind in gpu):
        raise fail(path, "has no GPU events (cat kernel, gpu_memcpy or gpu_memset): was CUDA activity profiled?")
    parsed = []
    for index, event, kind in gpu:
        if not kind:
            out.skip(f"event {index} is not an object but {type(event).__name__}")
            continue
        try:
            parsed.append(_gpu_event(event, kind))
        except BadRecord as bad:
            out.skip(f"event {index} ({quoted(event.get('name'))}) {bad}")
    innermost = _innermost_by_thread(ops_by_thread, [launches.get(p[1]) for p in parsed if p[1] is not None])
    for kernel, correlation, external_id in parsed:
        op = _op_of(correlation, external_id, launches, ops_by_id, innermost)
        if op is not None:
            kernel = replace(kernel, op=op.name, shapes=op.shapes, dtypes=op.dtypes)
        out.add(kernel)
    return out.trace()


def _gpu_event(event: dict, kind: str) -> tuple[TracedKernel, int | None, int | None]:
    """One GPU event as a kernel, with its correlation id and External id (None where absent)."""
    name = text(event.get("name"))
    phase = event.get("ph", "X")
    if phase != "X":
        raise BadRecord(f"is a {quoted(phase)} event, not a complete (\"X\") one")
    start = number(event.get("ts"), "ts")
    duration_s = seconds(number(event.get("dur"), "dur"), US)
    args = event.get("args")
    args = args if isinstance(args, dict) else {}
    device = args.get("device")
    # without "device", the GPU row's pid: Kineto numbers its GPU rows by device
    device = (optional_integer(event.get("pid")) or 0) if device is None else integer(device, "device")
    stream = args.get("stream", event.get("tid"))
    stream = str(stream) if isinstance(stream, int | float | str) and not isinstance(stream, bool) else ""
    size = optional_integer(args.get("bytes")) if kind != "kernel" else None
    kernel = make_kernel(name=name, start_s=start * US, duration_s=duration_s, stream=stream, device=device,
                         grid=triple(args.get("grid")), block=triple(args.get("block")), kind=kind,
                         bytes=size if size is not None and size > 0 else None)
    return kernel, optional_integer(args.get("correlation")), _external_id(args)


def _external_id(args: dict) -> int | None:
    """The "External id" of an event's args (older Kineto: "external id")."""
    return optional_integer(args.get("External id", args.get("external id")))


def _thread(event: dict) -> tuple:
    """The (pid, tid) of an event, as hashable values."""
    return tuple(v if isinstance(v, int | str) and not isinstance(v, bool) else None
                 for v in (event.get("pid"), event.get("tid")))


def _launch(event: dict, launches: dict[int, _Launch]) -> None:
    """Index a runtime or driver event by its correlation id; unusable ones are left out."""
    args = event.get("args")
    if not isinstance(args, dict) or not isinstance(event.get("name"), str):
        return
    correlation = optional_integer(args.get("correlation"))
    try:
        start = number(event.get("ts"), "ts")
    except BadRecord:
        return
    if correlation is not None:
        launches[correlation] = _Launch(event["name"], start, _external_id(args), _thread(event))


def _op(event: dict, by_id: dict[int, list[_Op]], by_thread: dict[tuple, list[_Op]]) -> None:
    """Index a CPU op by its External id and its thread; unusable ones are left out."""
    args = event.get("args")
    args = args if isinstance(args, dict) else {}
    try:
        name = text(event.get("name"))
        start = number(event.get("ts"), "ts")
        duration = number(event.get("dur", 0), "dur")
    except BadRecord:
        return
    dims = args.get("Input Dims", args.get("Input dims"))  # "Input dims": Kineto of 2021
    op = _Op(name, start, start + max(duration, 0.0), _thread(event), _shapes(dims), _dtypes(args.get("Input type")))
    external_id = _external_id(args)
    if external_id is not None:
        by_id[external_id].append(op)
    by_thread[op.thread].append(op)


def _op_of(correlation: int | None, external_id: int | None, launches: dict[int, _Launch],
           ops_by_id: dict[int, list[_Op]], innermost: dict[int, _Op | None]) -> _Op | None:
    """The CPU op that launched a GPU event, or None (a graph replay, or nothing recorded)."""
    launch = launches.get(correlation) if correlation is not None else None
    if launch is not None and launch.name in GRAPH_LAUNCHES:
        return None
    if launch is not None and launch.external_id is not None:
        external_id = launch.external_id
    candidates = ops_by_id.get(external_id, []) if external_id is not None else []
    if candidates:
        if launch is not None:
            containing = [op for op in candidates if op.start <= launch.start <= op.end]
            candidates = containing or candidates
        return max(candidates, key=lambda op: op.start)
    return innermost.get(id(launch)) if launch is not None else None


def _innermost_by_thread(ops_by_thread: dict[tuple, list[_Op]], launches: list[_Launch | None]) -> dict[int, _Op]:
    """For each launch, the innermost CPU op of its thread that contains it (keyed by id of the launch)."""
    found: dict[int, _Op] = {}
    queries: dict[tuple, list[_Launch]] = defaultdict(list)
    for launch in launches:
        if launch is not None:
            queries[launch.thread].append(launch)
    for thread, asked in queries.items():
        # one sweep in time: the stack holds the ops open at the sweep's time, outermost at the bottom
        ops = sorted(ops_by_thread.get(thread, []), key=lambda op: (op.start, -op.end))
        stack: list[_Op] = []
        following = 0
        for launch in sorted(asked, key=lambda launch: launch.start):
            while following < len(ops) and ops[following].start <= launch.start:
                while stack and stack[-1].end < ops[following].start:
                    stack.pop()
                stack.append(ops[following])
                following += 1
            while stack and stack[-1].end < launch.start:
                stack.pop()
            if stack:
                found[id(launch)] = stack[-1]
    return found


def _shapes(dims: object) -> tuple | None:
    """"Input Dims" as nested tuples of ints, e.g. ((16, 5120), (5120, 1024)); None when it is not that."""

    def convert(value: object, depth: int) -> object:
        if isinstance(value, list) and depth < _SHAPE_DEPTH:
            return tuple(convert(v, depth + 1) for v in value)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ValueError("not a shape")

    if not isinstance(dims, list):
        return None
    try:
        return convert(dims, 0)  # type: ignore[return-value]
    except ValueError:
        return None


def _dtypes(types: object) -> tuple | None:
    """"Input type" as a tuple of the type names the profiler wrote; None when it is not a list of text."""
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        return None
    return tuple(types)
