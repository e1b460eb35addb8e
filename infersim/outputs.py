"""What `infersim run --out DIR` writes: summary.json, requests.csv, steps.csv, report.html and the resolved
scenario.yaml (`infersim run DIR/scenario.yaml` reproduces the run), each atomically; and the Chrome traces of
`--trace FILE` (`infersim step`, `infersim run`)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from simulator.simulate import SimulationResult


def atomic_write(path: Path, write: Callable[[str], None]) -> None:
    """Write through a temporary file in the same folder, then rename: no reader sees half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes files private; results are ordinary files
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


OUTPUT_NAMES = ("summary.json", "requests.csv", "steps.csv", "report.html", "scenario.yaml")


def check_out_dir(out_dir: str | Path) -> Path:
    """`out_dir` as a Path if it is or can become a folder; a ValueError naming it otherwise (checked before a run)."""
    if str(out_dir) == "":
        raise ValueError("--out needs a folder name, got ''")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: exists and is not a folder")
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise ValueError(f"--out {out}: {parent} is not a folder")
    return out


def scenario_yaml(scenario: Any) -> str:
    """The resolved scenario as YAML: every key, so that `infersim run` of this file reproduces the run."""
    import yaml

    from simulator.scenario import to_mapping

    header = ("# The resolved scenario of an infersim run, overlays and --set applied.\n"
              "# `infersim run` of this file repeats the run.\n")
    return header + yaml.safe_dump(to_mapping(scenario), sort_keys=False, allow_unicode=True)


def write_outputs(result: SimulationResult, out_dir: str | Path, extra: Mapping[str, str] | None = None) -> list[Path]:
    """The run's files under `out_dir` (created if missing), and `extra` files by name and text; returns their paths.

    Every file's text is made before the first is written, so a failure leaves nothing behind; each file is then
    written atomically."""
    out = check_out_dir(out_dir)
    texts = {
        "summary.json": json.dumps(result.summary, indent=2, allow_nan=False) + "\n",
        "requests.csv": result.requests.to_csv(index=False),
        "steps.csv": result.steps.to_csv(index=False),
        "report.html": report_figure(result).to_html(include_plotlyjs=True, full_html=True),
        "scenario.yaml": scenario_yaml(result.scenario),
        **(extra or {}),
    }
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / name for name in (*OUTPUT_NAMES, *(extra or {}))]
    for path in paths:
        atomic_write(path, lambda tmp, text=texts[path.name]: Path(tmp).write_text(text, encoding="utf-8"))
    return paths


def infersim_version() -> str:
    """The installed infersim's version, for the files it writes."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("infersim")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def check_trace_path(path: str | Path) -> Path:
    """`path` as a Path if a trace file can be written there; a ValueError naming it otherwise (checked before work)."""
    if str(path) == "":
        raise ValueError("--trace needs a file name, got ''")
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"--trace {target}: is a folder, not a file")
    parent = target.parent
    if not parent.exists():
        raise ValueError(f"--trace {target}: folder {parent} does not exist")
    if not parent.is_dir():
        raise ValueError(f"--trace {target}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"--trace {target}: cannot write in {parent}")
    return target


def write_trace(trace: Mapping[str, Any], path: str | Path) -> Path:
    """A Chrome trace document as JSON at `path`, atomically: the text is made before the file is touched."""
    target = check_trace_path(path)
    text = json.dumps(trace, separators=(",", ":"), allow_nan=False) + "\n"
    atomic_write(target, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    return target


def run_trace(result: SimulationResult, max_steps: int | None = None) -> dict[str, Any]:
    """The run's engine steps as a Chrome trace (the first `max_steps`, by default RUN_TRACE_STEPS)."""
    from hwmodels.calibration import load_calibration
    from hwmodels.spec import load_platform
    from infersim import chrome_trace

    s = result.scenario
    platform = load_platform(s.hardware.platform)
    p = s.parallel
    layout = f"tp={p.tp}" + (f", dcp={p.dcp}" if p.dcp > 1 else "") + (f", ep={p.ep}" if p.ep > 1 else "")
    other = {
        "infersim_version": infersim_version(),
        "trace": "simulated engine steps of a serving run",
        "scenario": s.name,
        "model": s.model.name,
        "platform": platform.name,
        "hw": platform.gpu,
        "tp": p.tp, "dcp": p.dcp, "ep": p.ep,
        "drafts": s.spec_decode.drafts,
        "cost_model": load_calibration(platform.gpu, cost_model=s.cost.model).cost_model.value,
        "simulated_s": result.summary.get("simulated_s"),
        "requests_completed": result.summary.get("requests_completed"),
    }
    process = f"infersim simulated run: {s.name} ({s.model.name} on {platform.name}, {layout})"
    bound = chrome_trace.RUN_TRACE_STEPS if max_steps is None else max_steps
    return chrome_trace.run_trace(result.steps, process, other, bound)


# (row, col) of each report panel -> (x-axis title, y-axis title), each with its unit.
AXIS_TITLES = {
    (1, 1): ("TTFT (s)", "share of requests (CDF, 0-1)"),
    (1, 2): ("TPOT (s)", "share of requests (CDF, 0-1)"),
    (2, 1): ("simulated time (s)", "output throughput (tokens/s)"),
    (2, 2): ("simulated time (s)", "per step (sequences; prefill in k tokens)"),
    (3, 1): ("simulated time (s)", "KV blocks in use (share of total, 0-1)"),
    (3, 2): ("cached share of prompt (0-1)", "requests (count)"),
}


def report_figure(result: SimulationResult) -> Any:
    """TTFT and TPOT CDFs, throughput over time, batch composition and KV occupancy, in one page."""
    import numpy as np
    from plotly.subplots import make_subplots

    from simulator.metrics import ttft_s

    requests, steps = result.requests, result.steps
    figure = make_subplots(rows=3, cols=2, subplot_titles=(
        "TTFT CDF", "TPOT CDF", "output tokens/s over time", "batch composition per step",
        "KV blocks in use", "prefix-cache hits per request"))
    for col, values, name in ((1, ttft_s(requests), "TTFT (s)"),
                              (2, ((requests["finish_s"] - requests["first_token_s"])
                                   / (requests["output_tokens"] - 1).clip(lower=1)).to_numpy(), "TPOT (s)")):
        ordered = np.sort(values)
        cdf = np.arange(1, len(ordered) + 1) / max(1, len(ordered))
        figure.add_scatter(x=ordered, y=cdf, name=name, row=1, col=col)
    if len(steps):
        window = max(1.0, float(steps["end_s"].max()) / 100)
        bins = (steps["end_s"] // window) * window
        rate = steps.groupby(bins)["committed_tokens"].sum() / window
        figure.add_scatter(x=rate.index, y=rate.to_numpy(), name="output tok/s", row=2, col=1)
        for column in ("decode_seqs", "verify_seqs"):
            figure.add_scatter(x=steps["start_s"], y=steps[column], name=column, mode="lines", row=2, col=2)
        figure.add_scatter(x=steps["start_s"], y=steps["prefill_tokens"] / 1000, name="prefill tokens (k)",
                           mode="lines", row=2, col=2)
        figure.add_scatter(x=steps["start_s"], y=steps["kv_blocks_used"] / steps["kv_blocks_total"],
                           name="KV used (share)", mode="lines", row=3, col=1)
    if len(requests):
        figure.add_histogram(x=requests["cached_tokens"] / requests["prompt_tokens"].clip(lower=1),
                             name="cached share of prompt", row=3, col=2)
    for (row, col), (x_title, y_title) in AXIS_TITLES.items():
        figure.update_xaxes(title_text=x_title, row=row, col=col)
        figure.update_yaxes(title_text=y_title, row=row, col=col)
    figure.update_layout(title=f"infersim run: {result.scenario.name}", height=1100, showlegend=True)
    return figure
