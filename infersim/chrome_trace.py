"""Predicted timelines as Chrome trace documents (the Trace Event Format that ui.perfetto.dev and chrome://tracing
open): one engine step's launches on its compute and collective streams, or a run's engine steps.

Pure: the functions return the JSON-ready document and write nothing. Times are in microseconds, as the format
wants (`ts`, `dur`); every other number keeps its SI unit. Kernel events carry the launch facts that the PyTorch
profiler's Kineto traces put on a GPU kernel (`grid`, `block`, `shared memory`, `registers per thread`), spelled
as Kineto spells them, so that a predicted and a measured step read alike side by side.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

from simulator.cost.step_time import COLLECTIVES, COMPUTE, PlacedLaunch

US_PER_S = 1e6
# Kineto gives a GPU the pid of its device index (0-7) and the host its OS pid: pids of their own keep a predicted
# process apart from a measured one when both files are opened together.
STEP_PID = 1000
RUN_PID = 1001
STREAM_TIDS = {COMPUTE: 1, COLLECTIVES: 2}
ENGINE_TID = 1
RUN_TRACE_STEPS = 2000  # engine steps a run trace holds unless asked for another bound
UNITS = {"ts": "us", "dur": "us", "*_s": "s", "*bytes": "bytes", "flop": "FLOP"}
SERIALIZED = ("serialized: each collective starts where the plan issues it and compute waits for it, as the step's "
              "predicted time (kernel time + collective time) assumes")
OVERLAPPED = ("overlapped (overlap_collectives): compute runs on, and each collective starts where the plan issues it "
              "or when the previous one ends; the step's predicted time is the longer stream (a perfect overlap that "
              "does not wait for the issue), so this timeline can end later than it")


def step_trace(placed: Sequence[PlacedLaunch], layers: int, overlap_collectives: bool, process: str,
               other: Mapping[str, Any]) -> dict[str, Any]:
    """A trace of one predicted step: each launch an `X` event on its stream's track, in plan order."""
    events: list[dict[str, Any]] = []
    works: dict[Any, tuple] = {}  # one launches() per kernel kind: an item's launches are counted together
    free_ts = {COMPUTE: 0.0, COLLECTIVES: 0.0}
    for p in placed:
        t, item = p.timed, p.timed.item
        # The next launch starts where the last ended in seconds; in microseconds the two can differ by a rounding,
        # which must not make them overlap.
        ts = max(p.start_s * US_PER_S, free_ts[p.stream])
        dur = t.time_s * US_PER_S
        free_ts[p.stream] = ts + dur
        name = f"layer{item.layer}.{item.name}" if 1 <= item.layer <= layers else item.name
        if item.kernel is not None:
            launched = works.get(item.kernel)
            if launched is None:
                launched = works[item.kernel] = item.kernel.launches()
            args = _kernel_args(item.kernel, launched[t.launch], t.launch, len(launched), t.label)
        else:
            c = item.collective
            args = {"op": c.op.value, "algorithm": t.label.partition(":")[2], "payload_bytes": c.payload_bytes,
                    "group_size": c.group_size, "purpose": c.purpose}
        args.update(layer=item.layer, depends=item.depends.value, time_s=t.time_s)
        events.append({"ph": "X", "name": name, "cat": t.label if item.kernel is not None else "collective",
                       "pid": STEP_PID, "tid": STREAM_TIDS[p.stream], "ts": ts, "dur": dur, "args": args})
    streams = [s for s in (COMPUTE, COLLECTIVES) if any(p.stream == s for p in placed)]
    meta = _process(STEP_PID, process, "predicted")
    for order, stream in enumerate(streams):
        meta += _thread(STEP_PID, STREAM_TIDS[stream], stream, order)
    placement = {"collectives": OVERLAPPED if overlap_collectives else SERIALIZED,
                 "timeline_end_s": max((p.end_s for p in placed), default=0.0),
                 "kernel_launches": sum(p.stream == COMPUTE for p in placed),
                 "collective_count": sum(p.stream == COLLECTIVES for p in placed)}
    return _document(meta + events, {**other, **placement}, "ns")


def run_trace(steps: Any, process: str, other: Mapping[str, Any], max_steps: int = RUN_TRACE_STEPS
              ) -> dict[str, Any]:
    """A trace of a run's first `max_steps` engine steps (rows of `steps.csv`): each step an `X` event on the
    engine track, with counters of the requests in the system and the KV blocks in use."""
    if max_steps < 1:
        raise ValueError(f"a run trace holds at least one step, got {max_steps}")
    total = len(steps)
    kept = steps.head(max_steps)
    events: list[dict[str, Any]] = []
    free_ts = 0.0
    for index, row in enumerate(kept.itertuples(index=False)):
        ts = max(float(row.start_s) * US_PER_S, free_ts)  # as in step_trace: back to back never overlaps
        end = float(row.end_s) * US_PER_S
        free_ts = end
        kinds = [kind for kind, n in (("prefill", row.prefill_tokens), ("decode", row.decode_seqs),
                                      ("verify", row.verify_seqs)) if n]
        events.append({"ph": "X", "name": "step: " + ("+".join(kinds) or "empty"), "cat": "engine_step",
                       "pid": RUN_PID, "tid": ENGINE_TID, "ts": ts, "dur": end - ts, "args": {
                           "step": index, "prefill_tokens": int(row.prefill_tokens), "decodes": int(row.decode_seqs),
                           "verifies": int(row.verify_seqs), "committed_tokens": int(row.committed_tokens),
                           "spec_cycles": int(row.spec_cycles), "time_s": float(row.end_s - row.start_s)}})
        events.append({"ph": "C", "name": "requests in system", "pid": RUN_PID, "tid": ENGINE_TID, "ts": ts,
                       "args": {"requests": int(row.in_system)}})
        # the KV cache is counted after the step's tokens are committed: at its end
        events.append({"ph": "C", "name": "KV cache", "pid": RUN_PID, "tid": ENGINE_TID, "ts": end,
                       "args": {"blocks used": int(row.kv_blocks_used)}})
    window = {"window": f"first {len(kept)} of {total} steps", "steps_written": len(kept), "steps_total": total,
              "max_steps": max_steps,
              "window_end_s": float(kept["end_s"].iloc[-1]) if len(kept) else 0.0,
              "kv_blocks_total": int(steps["kv_blocks_total"].iloc[0]) if total else 0}
    meta = _process(RUN_PID, process, "simulated") + _thread(RUN_PID, ENGINE_TID, "engine", 0)
    return _document(meta + events, {**other, **window}, "ms")


def json_safe(value: Any) -> Any:
    """A kernel field as plain JSON: enums by value, tuples as lists, nested dataclasses as objects."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        return [json_safe(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: json_safe(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _kernel_args(kernel: Any, work: Any, launch: int, launches: int, family: str) -> dict[str, Any]:
    return {
        "kind": type(kernel).__name__,
        "shape": {f.name: json_safe(getattr(kernel, f.name)) for f in dataclasses.fields(kernel)},
        "family": family,
        "launch": f"{launch + 1}/{launches}",
        "flop": work.flop,
        "flop_by_dtype": {d.value: f for d, f in work.flop_by_dtype.items()},
        "bytes": work.bytes,
        "read_bytes": work.read_bytes,
        "write_bytes": work.write_bytes,
        "workgroups": work.workgroups,
        "grid": [work.workgroups, 1, 1],
        "block": [work.threads_per_workgroup, 1, 1],
        "shared memory": work.lds_bytes_per_workgroup,
        "registers per thread": work.registers_per_thread,  # 0: not known
    }


def _process(pid: int, name: str, label: str) -> list[dict[str, Any]]:
    return [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0, "args": {"name": name}},
            {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "ts": 0, "args": {"labels": label}}]


def _thread(pid: int, tid: int, name: str, order: int) -> list[dict[str, Any]]:
    return [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "ts": 0, "args": {"name": name}},
            {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "ts": 0, "args": {"sort_index": order}}]


def _document(events: list[dict[str, Any]], other: Mapping[str, Any], display_unit: str) -> dict[str, Any]:
    return {"traceEvents": events, "displayTimeUnit": display_unit, "otherData": {**other, "units": UNITS}}
