"""`infersim trace predict` and `infersim calibrate`: measured profiler traces against the model.

    infersim trace predict TRACE... --hw h200 [--calibration YAML] [--step-times CSV] [--html FILE] [--json]
    infersim calibrate TRACE... --hw h200 --out calibration.yaml [--step-times CSV] [--train-share 0.5]

`--step-times CSV` names each trace's measured step time (a CSV with columns `trace` and `time_s_median`, as
`engine_step.csv` holds): the predicted graph step is then compared with it, beside the traced GPU-busy time.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

TOP_UNMATCHED = 10
STEP_TIMES_MAX_BYTES = 100_000_000  # assumption: a step per trace, a line each; far fewer bytes than this


def _plan(step: dict[str, Any] | None, hw: str):
    """The step plan the traces ran (`trace predict --model ...`), or None."""
    if step is None:
        return None
    from infersim.workload_queries import _step
    from workloads.layers import build_step

    if not (step.get("decode") or step.get("prefill")):
        raise ValueError("--model needs the traced step's batch: --decode NxCONTEXT and/or --prefill NxTOKENS")
    parts, batch = _step(step["model"], hw, step["tp"], step["dcp"], step["ep"], step["decode"], step["prefill"],
                         None, 0, tuple(step["options"]), None, None)
    return build_step(batch, parts.deployment)


def _load(files: Sequence[str], hw: str, calibration: str | None, group_size: int | None = None,
          step: dict[str, Any] | None = None):
    """Each trace predicted; collectives over `group_size` ranks of the GPU's node (None: each trace's own device
    count when it holds more than one GPU, else collectives stay unpredicted)."""
    from hwmodels.calibration import load_calibration
    from hwmodels.interconnect import build_fabric
    from hwmodels.spec import load_gpu, load_platform
    from infersim.collective_queries import platform_for
    from traces.formats import read_trace
    from traces.predict import predict_trace

    if not files:
        raise ValueError("give at least one trace file")
    if group_size is not None and group_size < 2:
        raise ValueError(f"--group-size must be at least 2, got {group_size}")
    gpu = load_gpu(hw)
    calib = load_calibration(hw, calibration)
    plan = _plan(step, hw)
    predictions = []
    for f in files:
        trace = read_trace(f)
        # the traced collectives' ranks: as given, else the trace's GPUs, else the traced step's tensor parallelism
        ranks = group_size or (len(trace.devices()) if len(trace.devices()) > 1 else None) or (
            step["tp"] if step is not None and step["tp"] > 1 else None)
        fabric = None
        if ranks is not None:
            platform = load_platform(platform_for(hw, ranks))
            if ranks > platform.gpus:
                raise ValueError(f"--group-size {ranks}: {platform.name} has {platform.gpus} GPUs")
            fabric = build_fabric(platform, gpu)
        predictions.append(predict_trace(trace, gpu, calib, fabric, ranks, plan))
    return predictions, calib


def read_step_times(path: str | None, files: Sequence[str]) -> list[float] | None:
    """Each trace's measured step time from a CSV of `trace` and `time_s_median` (None without a CSV)."""
    if path is None:
        return None
    from hwmodels.input_files import FileTooLarge, read_regular

    try:
        text = read_regular(path, STEP_TIMES_MAX_BYTES).decode("utf-8-sig")
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
    except FileTooLarge:
        raise ValueError(f"--step-times {path}: larger than {STEP_TIMES_MAX_BYTES} bytes") from None
    except OSError as err:
        raise ValueError(f"--step-times {path}: cannot read: {err.strerror or err}") from None
    except (UnicodeDecodeError, csv.Error) as err:
        raise ValueError(f"--step-times {path}: cannot read: {' '.join(str(err).split())[:200]}") from None
    if not rows or not {"trace", "time_s_median"} <= set(rows[0]):
        raise ValueError(f"--step-times {path}: needs the columns trace and time_s_median")
    times: dict[str, float] = {}
    for i, row in enumerate(rows, start=2):
        try:
            value = float(row["time_s_median"])
        except (TypeError, ValueError):
            raise ValueError(f"--step-times {path}: line {i}: time_s_median {row['time_s_median']!r} is not a number"
                             ) from None
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"--step-times {path}: line {i}: time_s_median must be positive, got {value}")
        times[Path(row["trace"]).name] = value
    missing = [Path(f).name for f in files if Path(f).name not in times]
    if missing:
        raise ValueError(f"--step-times {path}: no row for {', '.join(missing)}")
    return [times[Path(f).name] for f in files]


def _pct(predicted: float, measured: float) -> float:
    return 100.0 * (predicted / measured - 1.0) if measured else float("nan")


def _matched_pct(predicted: float, traced: float) -> float | None:
    """The model's error on the kernels it matched; None (null) where it matched none: unmatched time is never
    counted as predicted."""
    return 100.0 * (predicted / traced - 1.0) if traced else None


# catalog GPU names as the profilers' device names spell them (NVIDIA's product names, AMD's marketing names)
_GPU_NAMES = (("h100", "H100"), ("h200", "H200"), ("b200", "B200"), ("b300", "B300"), ("mi300x", "MI300X"),
              ("mi325x", "MI325X"), ("mi355x", "MI355X"))


def gpu_warnings(predictions, hw: str) -> list[str]:
    """One line per trace recorded on another GPU than `hw` (where the trace names its GPU)."""
    lines = []
    for p in predictions:
        named = p.trace.gpu_name
        if not named:
            continue
        own = next((spec for spec, text in _GPU_NAMES if text.lower() in named.lower()), None)
        if own != hw:
            advice = (f"--hw {own} predicts for the GPU it was recorded on" if own else
                      "the catalog has no spec of that GPU")
            lines.append(f"{Path(p.trace.path).name} was recorded on {named!r}, predicted here for {hw} ({advice})")
    return lines


def _method_pcts(predictions) -> dict[str, float]:
    """Per way of matching, its share of the traced time in %, over the traces."""
    total = sum(p.traced_s for p in predictions)
    out: dict[str, float] = {}
    for p in predictions:
        for method, share in p.method_shares().items():
            out[method] = out.get(method, 0.0) + 100.0 * share * p.traced_s / total
    return dict(sorted(out.items(), key=lambda kv: -kv[1])) if total else {}


def _trace_row(p, measured_s: float | None, calibrated_s: float | None = None) -> dict[str, Any]:
    from traces.alignment import ALIGNED
    from traces.matching import LAUNCH, SHAPES

    row: dict[str, Any] = {
        "trace": Path(p.trace.path).name, "format": p.trace.format, "launches": p.launches,
        "traced_busy_s": p.trace.busy_s(), "predicted_kernels_s": p.predicted_kernels_s,
        "matched_traced_s": p.matched_traced_s, "matched_predicted_s": p.matched_predicted_s,
        "kernels_error_pct": _matched_pct(p.matched_predicted_s, p.matched_traced_s),
        "predicted_graph_step_s": p.predicted_step_s,
        "unmatched_pct": 100.0 * p.unmatched_share,
        # how the matched time was matched (`traces.matching`: operator shapes exact, launch geometry estimated)
        "shapes_pct": 100.0 * p.method_shares().get(SHAPES, 0.0),
        "launch_pct": 100.0 * p.method_shares().get(LAUNCH, 0.0),
        "aligned_pct": 100.0 * p.method_shares().get(ALIGNED, 0.0), "skipped_records": p.trace.skipped}
    if p.trace.gpu_name:
        row["trace_gpu"] = p.trace.gpu_name
    if measured_s is not None:
        row["measured_step_s"] = measured_s
        row["step_error_pct"] = _pct(p.predicted_step_s, measured_s)
    if calibrated_s is not None:
        row["calibrated_step_s"] = calibrated_s
        row["calibrated_error_pct"] = _pct(calibrated_s, measured_s) if measured_s else float("nan")
    return row


def _family_rows(predictions) -> list[dict[str, Any]]:
    from traces.predict import family_totals

    return [{"family": t.family, "groups": t.groups, "traced_s": t.traced_s + t.unmatched_s,
             "predicted_s": t.predicted_s if t.predicted_s else None,
             "error_pct": t.error_pct if t.predicted_s else None,
             "unmatched_s": t.unmatched_s} for t in family_totals(predictions).values()]


def _unmatched_rows(predictions) -> list[dict[str, Any]]:
    total = sum(p.traced_s for p in predictions)
    merged: dict[tuple[str, str], list] = {}
    for p in predictions:
        for name, reason, count, seconds in p.unmatched():
            row = merged.setdefault((name, reason), [0, 0.0])
            row[0] += count
            row[1] += seconds
    rows = sorted(merged.items(), key=lambda kv: -kv[1][1])
    return [{"kernel": name[:100], "reason": reason, "launches": n, "traced_s": s, "share_pct": 100.0 * s / total}
            for (name, reason), (n, s) in rows[:TOP_UNMATCHED]]


def trace_predict_query(files: Sequence[str], hw: str, calibration: str | None = None,
                        step_times: str | None = None, html: str | None = None,
                        group_size: int | None = None, step: dict[str, Any] | None = None) -> dict[str, Any]:
    """Per trace and per family, the model's time against the traced; the unmatched kernels with their share.
    `step` (model, tp, dcp, ep, decode, prefill, options): the step the traces ran, to align their unsized kernels
    with."""
    measured = read_step_times(step_times, files)
    if html is not None:
        from infersim.output_paths import write_target

        write_target(html, "--html")
    predictions, calib = _load(files, hw, calibration, group_size, step)
    traces = [_trace_row(p, measured[i] if measured else None) for i, p in enumerate(predictions)]
    traced = sum(p.traced_s for p in predictions)
    result: dict[str, Any] = {
        "hw": hw, "calibration": calib.name, "traces": len(predictions),
        "traced_kernels_s": traced, "traced_busy_s": sum(p.trace.busy_s() for p in predictions),
        "predicted_kernels_s": sum(p.predicted_kernels_s for p in predictions),
        "matched_traced_s": sum(p.matched_traced_s for p in predictions),
        "matched_predicted_s": sum(p.matched_predicted_s for p in predictions),
        "kernels_error_pct": _matched_pct(sum(p.matched_predicted_s for p in predictions),
                                          sum(p.matched_traced_s for p in predictions)),
        "unmatched_pct": 100.0 * sum(p.unmatched_s for p in predictions) / traced if traced else 0.0,
        "matched_by_pct": _method_pcts(predictions),
    }
    warnings = gpu_warnings(predictions, hw)
    if warnings:
        result["gpu_warnings"] = warnings
        for warning in warnings:
            print(f"infersim: warning: {warning}", file=sys.stderr)
    if measured:
        errors = [abs(r["step_error_pct"]) for r in traces]
        result["step_median_abs_error_pct"] = statistics.median(errors)
    result["per_trace"] = traces
    result["families"] = _family_rows(predictions)
    result["unmatched"] = _unmatched_rows(predictions)
    if html is not None:
        result["page"] = str(write_prediction_page(predictions, result, html))
    return result


def write_prediction_page(predictions, result: dict[str, Any], path: str) -> Path:
    """A plotly page: per family, traced against predicted seconds; per kernel group, predicted over traced."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from infersim.output_paths import atomic_write

    families = result["families"]
    figure = make_subplots(rows=1, cols=2, subplot_titles=(
        "per family: traced and predicted time (all traces)", "per kernel group: predicted over traced"))
    names = [f["family"] for f in families]
    figure.add_trace(go.Bar(x=names, y=[f["traced_s"] * 1e3 for f in families], name="traced"), row=1, col=1)
    figure.add_trace(go.Bar(x=names, y=[(f["predicted_s"] or 0.0) * 1e3 for f in families], name="predicted"),
                     row=1, col=1)
    by_family: dict[str, tuple[list, list, list]] = {}
    for p in predictions:
        for g in p.groups:
            if g.predicted_s is None:
                continue
            xs, ys, labels = by_family.setdefault(g.group.family, ([], [], []))
            xs.append(g.group.traced_s * 1e6)
            ys.append(g.predicted_s / g.group.traced_s)
            labels.append(f"{g.group.kernels[-1].op} {g.group.kernels[-1].shapes}")
    for family, (xs, ys, labels) in by_family.items():
        figure.add_trace(go.Scattergl(x=xs, y=ys, text=labels, mode="markers", name=family, marker={"size": 5}),
                         row=1, col=2)
    figure.update_xaxes(title_text="kernel family (infersim name)", row=1, col=1)
    figure.update_yaxes(title_text="time (ms)", row=1, col=1)
    figure.update_xaxes(title_text="traced time (µs)", type="log", row=1, col=2)
    figure.update_yaxes(title_text="predicted over traced (ratio)", type="log", row=1, col=2)
    figure.update_layout(title=f"Traces against the model on {result['hw']} ({result['traces']} traces, "
                               f"calibration {result['calibration']})", barmode="group")
    return atomic_write(path, lambda tmp: figure.write_html(tmp, include_plotlyjs=True, full_html=True), "--html")


def calibrate_query(files: Sequence[str], hw: str, out: str, step_times: str | None = None,
                    train_share: float = 0.5) -> dict[str, Any]:
    """Fit a calibration on a share of the traces (every other one, in name order), report the error on the rest
    before and after, and write the calibration overlay to `out`."""
    from infersim.output_paths import atomic_write, write_target
    from traces.predict import TraceCalibrator, calibration_yaml

    if not 0 < train_share < 1:
        raise ValueError(f"--train-share must be in (0, 1), got {train_share}")
    ordered = sorted(files, key=lambda f: Path(f).name)
    if len(ordered) < 2:
        raise ValueError("calibrate needs at least two traces: some to fit on, the rest to test")
    write_target(out, "--out")  # before any trace is read
    measured = read_step_times(step_times, ordered)
    train_idx = _split(len(ordered), train_share)
    test_idx = [i for i in range(len(ordered)) if i not in train_idx]
    predictions, _ = _load(ordered, hw, None)
    fitter = TraceCalibrator().fit([predictions[i] for i in train_idx],
                                   [measured[i] for i in train_idx] if measured else None)

    def err(i: int, predicted: float) -> float:
        truth = measured[i] if measured else predictions[i].traced_s
        return abs(_pct(predicted, truth))

    def kernels_only(i: int) -> float:  # without step times: the traced kernels, no graph nodes
        return fitter.predict(predictions[i]) - predictions[i].launches * (
            fitter.launch_graph_node_s_ if fitter.launch_graph_node_s_ is not None else predictions[i].graph_node_s)

    def before(i: int) -> float:
        return predictions[i].predicted_step_s if measured else predictions[i].predicted_kernels_s

    def after(i: int) -> float:
        return fitter.predict(predictions[i]) if measured else kernels_only(i)

    compared = "measured graph step" if measured else "traced kernel time"
    summary = {"test_median_abs_error_pct_before": statistics.median(err(i, before(i)) for i in test_idx),
               "test_median_abs_error_pct_after": statistics.median(err(i, after(i)) for i in test_idx),
               "train_median_abs_error_pct_after": statistics.median(err(i, after(i)) for i in train_idx)}
    overlay = calibration_yaml(fitter, hw, [ordered[i] for i in train_idx], [ordered[i] for i in test_idx],
                               summary, compared)
    text = ("# infersim calibrate: a calibration overlay fitted on measured traces; pass it with --calibration\n"
            + yaml.safe_dump(overlay, sort_keys=False, allow_unicode=True, width=110))
    load_check = _check_loadable(text, hw)
    target = atomic_write(out, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"), "--out")
    rows = [{"trace": Path(ordered[i]).name, "set": "train" if i in train_idx else "test",
             **({"measured_s": measured[i]} if measured else {"traced_s": predictions[i].traced_s}),
             "before_s": before(i), "before_error_pct": _pct(before(i), measured[i] if measured else
                                                             predictions[i].traced_s),
             "after_s": after(i), "after_error_pct": _pct(after(i), measured[i] if measured else
                                                          predictions[i].traced_s)}
            for i in range(len(ordered))]
    return {"hw": hw, "out": str(target), "compared_with": compared, "train_traces": len(train_idx),
            "test_traces": len(test_idx), **summary,
            "launch_graph_node_s": fitter.launch_graph_node_s_, "family_time_scale": {
                f"{f}.{b}": v for f, t in fitter.family_time_scale_.items() for b, v in t.items()},
            "loads_as": load_check, "per_trace": rows}


def _split(n: int, train_share: float) -> list[int]:
    """Indices of the training traces: spread evenly over the name order (every other one at one half)."""
    k = max(1, min(n - 1, round(n * train_share)))
    return sorted({min(n - 1, math.floor(i * n / k)) for i in range(k)})


def _check_loadable(text: str, hw: str) -> str:
    """The calibration's name once loaded through the same loader as `--calibration` (a bad file never lands)."""
    import tempfile

    from hwmodels.calibration import load_calibration

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "calibration.yaml"
        path.write_text(text, encoding="utf-8")
        return load_calibration(hw, path).name
