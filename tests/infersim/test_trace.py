"""`--trace FILE` of `infersim step` and `infersim run`: Chrome trace JSON that ui.perfetto.dev opens.

The checks here hold the files to the Trace Event Format. The `perfetto` package's TraceProcessor would load them
too, but it downloads its trace_processor_shell binary when first run, which an offline machine (CI) cannot do:
the schema test is the check.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from pathlib import Path

import pandas as pd
import pytest

from infersim.chrome_trace import RUN_TRACE_STEPS
from infersim.cli import main

PHASES = {"X", "B", "E", "i", "I", "C", "M"}  # the phases the files may hold (they write X, C and M)
STEP = ["step", "--model", "qwen3-32b", "--hw", "h200", "--decode", "8x1024"]
QUICK_RUN = ["run", "--set", "workload.sessions=4", "--set", "workload.turns_mean=4"]


def check_chrome_trace(path: Path) -> dict:
    """The document at `path`, after checking it against the Trace Event Format; raises AssertionError otherwise."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list) and isinstance(doc["otherData"], dict)
    processes: set[int] = set()
    threads: set[tuple[int, int]] = set()
    used: set[tuple[int, int]] = set()
    tracks: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in doc["traceEvents"]:
        assert e["ph"] in PHASES, e
        assert type(e["pid"]) is int and type(e["tid"]) is int, e
        assert isinstance(e["ts"], (int, float)) and math.isfinite(e["ts"]) and e["ts"] >= 0, e
        assert isinstance(e["name"], str) and e["name"], e
        if e["ph"] == "M":
            if e["name"] == "process_name":
                processes.add(e["pid"])
            elif e["name"] == "thread_name":
                threads.add((e["pid"], e["tid"]))
            assert isinstance(e["args"], dict)
            continue
        used.add((e["pid"], e["tid"]))
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and math.isfinite(e["dur"]) and e["dur"] > 0, e
            assert isinstance(e["cat"], str) and isinstance(e["args"], dict)
            tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["dur"]))
        if e["ph"] == "C":
            assert e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values()), e
    assert {pid for pid, _ in used} <= processes, "a process without a process_name"
    assert {key for key in used if key in tracks} <= threads, "a track without a thread_name"
    for key, slices in tracks.items():  # one track's slices never overlap: Perfetto would nest or drop them
        slices.sort()
        for (ts, dur), (next_ts, _) in itertools.pairwise(slices):
            assert next_ts >= ts + dur, f"overlap on {key} at {next_ts} us"
    return doc


def x_events(doc: dict, tid: int | None = None) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and (tid is None or e["tid"] == tid)]


def track(doc: dict, name: str) -> int:
    """The tid of the thread named `name`."""
    return next(e["tid"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"
                and e["args"]["name"] == name)


def run_json(capsys, *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("overlap", [False, True], ids=["serialized", "overlapped"])
def test_step_trace_is_the_predicted_step_launch_by_launch(capsys, tmp_path, overlap):
    path = tmp_path / "predicted.json"
    option = ["--option", "overlap_collectives=true"] if overlap else []
    step = run_json(capsys, *STEP, "--tp", "2", *option, "--trace", str(path))
    doc = check_chrome_trace(path)
    compute, collectives = x_events(doc, track(doc, "compute")), x_events(doc, track(doc, "collectives"))
    assert len(compute) == step["kernel_launches"] and collectives
    compute_s = sum(e["dur"] for e in compute) / 1e6
    collective_s = sum(e["dur"] for e in collectives) / 1e6
    assert compute_s == pytest.approx(step["kernel_time_s"], rel=1e-9)
    assert collective_s == pytest.approx(step["collective_time_s"], rel=1e-9)
    end_s = max(e["ts"] + e["dur"] for e in compute + collectives) / 1e6
    if overlap:
        assert max(compute_s, collective_s) == pytest.approx(step["step_time_s"], rel=1e-9)
        assert end_s >= step["step_time_s"] * (1 - 1e-9)
        assert "overlapped" in doc["otherData"]["collectives"]
    else:
        assert end_s == pytest.approx(step["step_time_s"], rel=1e-9)
        assert "serialized" in doc["otherData"]["collectives"]
    other = doc["otherData"]
    assert (other["model"], other["hw"], other["tp"], other["cost_model"]) == ("qwen3-32b", "h200", 2, "cycle")
    assert other["step_time_s"] == step["step_time_s"] and other["infersim_version"] and other["units"]["ts"] == "us"
    process = next(e for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name")
    assert process["args"]["name"] == "infersim predicted step: qwen3-32b on h200, tp=2"


def test_step_trace_events_name_the_item_and_carry_its_counts(capsys, tmp_path):
    path = tmp_path / "predicted.json"
    step = run_json(capsys, *STEP, "--tp", "2", "--trace", str(path))
    doc = check_chrome_trace(path)
    names = [e["name"] for e in x_events(doc)]
    assert names[:2] == ["embedding", "embedding"]  # the lookup, then its all-reduce
    assert "layer3.gqa.qkv" in names and names[-1] == "sampling"
    qkv = next(e for e in x_events(doc) if e["name"] == "layer3.gqa.qkv")
    args = qkv["args"]
    assert qkv["cat"] == args["family"] == "gemm" and args["kind"] == "Gemm" and args["launch"] == "1/1"
    assert args["shape"]["m"] == 8 and args["shape"]["dtype"] == "bf16"
    assert args["flop"] > 0 and args["bytes"] > 0 and args["grid"] == [args["workgroups"], 1, 1]
    assert args["time_s"] * 1e6 == pytest.approx(qkv["dur"])
    flop = sum(e["args"]["flop"] for e in x_events(doc, track(doc, "compute")))
    assert flop == pytest.approx(step["flop"])
    reduce = next(e for e in x_events(doc) if e["name"] == "layer3.mlp.output")
    assert reduce["cat"] == "collective"
    assert reduce["args"]["op"] == "allreduce" and reduce["args"]["group_size"] == 2
    assert reduce["args"]["algorithm"] and reduce["args"]["payload_bytes"] == 8 * 5120 * 2


def test_a_single_gpu_step_has_no_collective_track(capsys, tmp_path):
    path = tmp_path / "predicted.json"
    step = run_json(capsys, *STEP, "--trace", str(path))
    doc = check_chrome_trace(path)
    assert {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"} == {"compute"}
    assert sum(e["dur"] for e in x_events(doc)) / 1e6 == pytest.approx(step["step_time_s"], rel=1e-9)


def test_run_trace_holds_the_first_steps_of_the_run(capsys, tmp_path):
    path = tmp_path / "run.json"
    run_json(capsys, *QUICK_RUN, "--trace", str(path), "--trace-steps", "40", "--out", str(tmp_path / "out"))
    steps = pd.read_csv(tmp_path / "out" / "steps.csv")
    assert len(steps) > 40
    doc = check_chrome_trace(path)
    engine = x_events(doc, track(doc, "engine"))
    assert len(engine) == 40
    other = doc["otherData"]
    assert other["window"] == f"first 40 of {len(steps)} steps"
    assert (other["steps_written"], other["steps_total"], other["max_steps"]) == (40, len(steps), 40)
    assert other["window_end_s"] == steps["end_s"].iloc[39] and other["model"] == "kimi-k3"
    for event, row in zip(engine, steps.head(40).itertuples(), strict=True):
        assert event["ts"] == pytest.approx(row.start_s * 1e6, abs=1e-6)
        assert event["ts"] + event["dur"] == pytest.approx(row.end_s * 1e6, abs=1e-6)
        assert event["args"]["prefill_tokens"] == row.prefill_tokens
        assert event["args"]["verifies"] == row.verify_seqs and event["args"]["decodes"] == row.decode_seqs
    counters = {e["name"] for e in doc["traceEvents"] if e["ph"] == "C"}
    assert counters == {"requests in system", "KV cache"}
    assert max(e["ts"] for e in doc["traceEvents"]) <= steps["end_s"].iloc[39] * 1e6 + 1e-6


def test_run_trace_bound_defaults_to_the_first_2000_steps(capsys, tmp_path):
    path = tmp_path / "run.json"
    summary = run_json(capsys, *QUICK_RUN, "--trace", str(path))
    doc = check_chrome_trace(path)
    other = doc["otherData"]
    assert other["max_steps"] == RUN_TRACE_STEPS == 2000
    assert len(x_events(doc)) == other["steps_written"] == min(2000, other["steps_total"])
    assert other["simulated_s"] == summary["simulated_s"]


def _one_line_error(capsys, argv: list[str], *needles: str) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "Traceback" not in captured.err
    for needle in needles:
        assert needle in captured.err


def _no_trace_files(folder: Path) -> None:
    left = [p.name for p in folder.rglob("*") if p.suffix in (".json", ".tmp")]
    assert left == [], left


@pytest.mark.parametrize("command", ["step", "run"])
def test_trace_to_a_folder_or_an_unwritable_path_fails_with_one_line(capsys, tmp_path, monkeypatch, command):
    import infersim.progress

    def no_run(scenario):
        raise AssertionError("simulated although --trace is unusable")

    monkeypatch.setattr(infersim.progress, "run_with_progress", no_run)
    argv = STEP if command == "step" else QUICK_RUN
    a_file = tmp_path / "notes.txt"
    a_file.write_text("keep me\n")
    _one_line_error(capsys, [*argv, "--trace", str(tmp_path)], "--trace", "is a folder")
    _one_line_error(capsys, [*argv, "--trace", str(a_file / "trace.json")], str(a_file), "not a folder")
    _one_line_error(capsys, [*argv, "--trace", str(tmp_path / "missing" / "trace.json")], "does not exist")
    _one_line_error(capsys, [*argv, "--trace", ""], "--trace")
    assert a_file.read_text() == "keep me\n"
    _no_trace_files(tmp_path)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into a read-only folder")
def test_trace_into_a_read_only_folder_fails_with_one_line(capsys, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        _one_line_error(capsys, [*STEP, "--trace", str(locked / "trace.json")], "cannot write")
    finally:
        locked.chmod(0o700)
    assert list(locked.iterdir()) == []


def test_a_write_that_fails_late_leaves_no_file(capsys, tmp_path, monkeypatch):
    import infersim.outputs

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(infersim.outputs.os, "replace", refuse)
    _one_line_error(capsys, [*STEP, "--trace", str(tmp_path / "trace.json")], "cannot write", "Permission denied")
    assert list(tmp_path.iterdir()) == []


def test_trace_steps_needs_a_trace(capsys):
    _one_line_error(capsys, [*QUICK_RUN, "--trace-steps", "10"], "--trace-steps", "--trace FILE")
