"""What `infersim run --out DIR` writes: summary.json, requests.csv, steps.csv and report.html, each atomically."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
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


def write_outputs(result: SimulationResult, out_dir: str | Path) -> list[Path]:
    """The run's files under `out_dir` (created if missing); returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / name for name in ("summary.json", "requests.csv", "steps.csv", "report.html")}

    def summary(tmp: str) -> None:
        Path(tmp).write_text(json.dumps(result.summary, indent=2, allow_nan=False) + "\n")

    atomic_write(paths["summary.json"], summary)
    atomic_write(paths["requests.csv"], lambda tmp: result.requests.to_csv(tmp, index=False))
    atomic_write(paths["steps.csv"], lambda tmp: result.steps.to_csv(tmp, index=False))
    atomic_write(paths["report.html"], lambda tmp: report_figure(result).write_html(tmp, include_plotlyjs=True))
    return list(paths.values())


def report_figure(result: SimulationResult) -> Any:
    """TTFT and TPOT CDFs, throughput over time, batch composition and KV occupancy, in one page."""
    import numpy as np
    from plotly.subplots import make_subplots

    requests, steps = result.requests, result.steps
    figure = make_subplots(rows=3, cols=2, subplot_titles=(
        "TTFT CDF", "TPOT CDF", "output tokens/s over time", "batch composition per step",
        "KV blocks in use", "prefix-cache hits per request"))
    for col, values, name in ((1, requests["first_token_s"] - requests["arrival_s"], "TTFT (s)"),
                              (2, (requests["finish_s"] - requests["first_token_s"])
                               / (requests["output_tokens"] - 1).clip(lower=1), "TPOT (s)")):
        ordered = np.sort(values.to_numpy())
        cdf = np.arange(1, len(ordered) + 1) / max(1, len(ordered))
        figure.add_scatter(x=ordered, y=cdf, name=name, row=1, col=col)
        figure.update_xaxes(title_text=name, row=1, col=col)
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
    figure.update_layout(title=f"infersim run: {result.scenario.name}", height=1100, showlegend=True)
    return figure
