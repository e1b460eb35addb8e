"""What `infersim run --out DIR` writes: summary.json, requests.csv, steps.csv, report.html, the resolved
scenario.yaml (`infersim run DIR/scenario.yaml` reproduces the run) and the folder's marker
(`infersim/output_paths.py`), as one set: written into a temporary folder beside DIR and swapped into place, so DIR
holds the previous run or the new one, never a mix; and the Chrome traces of `--trace FILE` (`infersim step`,
`infersim run`)."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hwmodels.output_files import signals_held
from infersim.output_paths import MARKER, RUN, atomic_write, check_run_folder, infersim_version, marker_text
from infersim.worker_pool import alive
from simulator.simulate import SimulationResult

OUTPUT_NAMES = ("summary.json", "requests.csv", "steps.csv", "report.html", "scenario.yaml")


def scenario_yaml(scenario: Any) -> str:
    """The resolved scenario as YAML: every key, so that `infersim run` of this file reproduces the run."""
    import yaml

    from simulator.scenario import to_mapping

    header = ("# The resolved scenario of an infersim run, overlays and --set applied.\n"
              "# `infersim run` of this file repeats the run.\n")
    return header + yaml.safe_dump(to_mapping(scenario), sort_keys=False, allow_unicode=True)


_TEMP_TAG = ".infersim-"  # beside OUT: .NAME.infersim-new-PID-XXXX (being written), .NAME.infersim-old-PID-XXXX
WRITE_DELAY_ENV = "INFERSIM_WRITE_DELAY_S"  # seconds to pause after each file: widens the window signal tests hit


def write_outputs(result: SimulationResult, out_dir: str | Path, extra: Mapping[str, str] | None = None,
                  force: bool = False) -> list[Path]:
    """The run's files as one set at `out_dir`, and `extra` files by name and text; returns their paths.

    The files are written into a temporary folder beside `out_dir`, then that folder takes `out_dir`'s place in one
    rename (an exchange where the old run stays until the new one is in); a failure or a signal leaves the old
    folder as it was and no temporary files."""
    out = check_run_folder(out_dir, force)
    delay_s = float(os.environ.get(WRITE_DELAY_ENV) or 0)
    writers: dict[str, Callable[[Path], None]] = {
        "requests.csv": lambda path: result.requests.to_csv(path, index=False),
        "steps.csv": lambda path: result.steps.to_csv(path, index=False),
        "report.html": lambda path: report_figure(result).write_html(path, include_plotlyjs=True, full_html=True),
        "scenario.yaml": lambda path: path.write_text(scenario_yaml(result.scenario), encoding="utf-8"),
        **{name: (lambda path, text=text: path.write_text(text, encoding="utf-8"))
           for name, text in (extra or {}).items()},
        "summary.json": lambda path: path.write_text(json.dumps(result.summary, indent=2, allow_nan=False) + "\n",
                                                     encoding="utf-8"),
    }
    # last, so that a folder with it is a complete run; it lists the files, so that a later run replaces only a
    # folder that holds nothing else
    listed = list(writers)
    writers[MARKER] = lambda path: path.write_text(marker_text(RUN, listed), encoding="utf-8")
    parent = out.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(out)
    with _temporary_folder(parent, f".{out.name}{_TEMP_TAG}new-{os.getpid()}-") as staging:
        for name, write in writers.items():
            write(staging / name)
            if delay_s:
                time.sleep(delay_s)
        _fsync_folder(staging)
        with signals_held():  # the swap and the removal of the old run are not cut halfway by SIGINT or SIGTERM
            _swap_in(staging, out)
    return [out / name for name in (*OUTPUT_NAMES, *(extra or {}))]


def remove_leftovers(out: Path) -> None:
    """Remove the temporary folders a killed run (SIGKILL, power loss) left beside `out`; restore an old run a kill
    left aside while `out` was missing."""
    parent = out.absolute().parent
    if not parent.is_dir():
        return
    prefix = f".{out.name}{_TEMP_TAG}"
    for entry in sorted(parent.iterdir()):
        if not entry.name.startswith(prefix):
            continue
        kind, _, rest = entry.name[len(prefix):].partition("-")
        pid = rest.partition("-")[0]
        if pid.isdigit() and int(pid) != os.getpid() and alive(int(pid)):
            continue  # another run is writing next to us right now
        if kind == "old" and not out.exists() and not out.is_symlink():
            os.rename(entry, out)  # killed between moving the old run aside and moving the new one in
            continue
        shutil.rmtree(entry, ignore_errors=True)


@contextmanager
def _temporary_folder(parent: Path, prefix: str) -> Any:
    """A new folder in `parent`, removed on the way out unless it was renamed away. SIGINT and SIGTERM wait while it
    is made, so that one arriving as it appears (a watcher may act on it at once) finds it already owned by the
    removal below."""
    folder: Path | None = None
    try:
        with signals_held():
            folder = Path(tempfile.mkdtemp(dir=parent, prefix=prefix))
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(folder, 0o777 & ~umask)  # mkdtemp makes folders private; results are ordinary folders
        yield folder
    finally:
        if folder is not None:
            with signals_held():
                shutil.rmtree(folder, ignore_errors=True)


def _fsync_folder(folder: Path) -> None:
    """Flush the files and the folder entry, so that the swap never publishes files still in the page cache."""
    for path in folder.iterdir():
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


_RENAME_EXCHANGE = 2  # linux/fs.h


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False where the system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def _swap_in(staging: Path, out: Path) -> None:
    """Put `staging` at `out`; the old `out` (a folder) goes away only once the new one is in place."""
    if not out.exists():
        os.rename(staging, out)
        return
    if _exchange(staging, out):
        shutil.rmtree(staging)  # it now holds the old run
        return
    aside = Path(tempfile.mkdtemp(dir=out.absolute().parent, prefix=f".{out.name}{_TEMP_TAG}old-{os.getpid()}-"))
    os.rmdir(aside)
    os.rename(out, aside)
    try:
        os.rename(staging, out)
    except BaseException:
        os.rename(aside, out)  # put the old run back
        raise
    shutil.rmtree(aside)


def write_trace(trace: Mapping[str, Any], path: str | Path) -> Path:
    """A Chrome trace document as JSON at `path`, atomically: the text is made before the file is touched."""
    text = json.dumps(trace, separators=(",", ":"), allow_nan=False) + "\n"
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"), "--trace")


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


MAX_POINTS = 5000  # per trace of report.html: more than a screen's width shows, so any run's page stays small


def thin(x: Any, y: Any, limit: int = MAX_POINTS) -> tuple[Any, Any]:
    """At most about `limit` points of a series: each of limit / 2 runs keeps its lowest and highest point, so spikes
    stay visible where a stride would skip them."""
    import numpy as np

    x, y = np.asarray(x), np.asarray(y)
    if x.size <= limit:
        return x, y
    edges = np.linspace(0, x.size, limit // 2 + 1).astype(np.int64)
    starts, ends = edges[:-1], edges[1:]
    keep = set()
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        part = y[start:end]
        keep.add(start + int(np.argmin(part)))
        keep.add(start + int(np.argmax(part)))
    index = np.fromiter(sorted(keep), dtype=np.int64)
    return x[index], y[index]


def _cdf(values: Any, limit: int = MAX_POINTS) -> tuple[Any, Any]:
    """The empirical CDF at at most `limit` evenly spaced ranks (its first and last point included)."""
    import numpy as np

    ordered = np.sort(np.asarray(values, dtype=np.float64))
    cdf = np.arange(1, len(ordered) + 1) / max(1, len(ordered))
    if ordered.size > limit:
        index = np.unique(np.linspace(0, ordered.size - 1, limit).round().astype(np.int64))
        ordered, cdf = ordered[index], cdf[index]
    return ordered, cdf


def report_figure(result: SimulationResult) -> Any:
    """TTFT and TPOT CDFs, throughput over time, batch composition and KV occupancy, in one page (each trace at
    most MAX_POINTS points, whatever the run's size)."""
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
        ordered, cdf = _cdf(values)
        figure.add_scatter(x=ordered, y=cdf, name=name, row=1, col=col)
    if len(steps):
        window = max(1.0, float(steps["end_s"].max()) / 100)
        bins = (steps["end_s"] // window) * window
        rate = steps.groupby(bins)["committed_tokens"].sum() / window
        figure.add_scatter(x=rate.index, y=rate.to_numpy(), name="output tok/s", row=2, col=1)
        start = steps["start_s"].to_numpy()
        for column in ("decode_seqs", "verify_seqs"):
            x, y = thin(start, steps[column].to_numpy())
            figure.add_scatter(x=x, y=y, name=column, mode="lines", row=2, col=2)
        x, y = thin(start, steps["prefill_tokens"].to_numpy() / 1000)
        figure.add_scatter(x=x, y=y, name="prefill tokens (k)", mode="lines", row=2, col=2)
        x, y = thin(start, (steps["kv_blocks_used"] / steps["kv_blocks_total"]).to_numpy())
        figure.add_scatter(x=x, y=y, name="KV used (share)", mode="lines", row=3, col=1)
    if len(requests):
        # counted here into 50 bins, so the page holds 50 bars and not one value per request
        share = (requests["cached_tokens"] / requests["prompt_tokens"].clip(lower=1)).to_numpy()
        counts, edges = np.histogram(share, bins=50, range=(0.0, 1.0))
        figure.add_bar(x=(edges[:-1] + edges[1:]) / 2, y=counts, width=edges[1] - edges[0],
                       name="cached share of prompt", row=3, col=2)
    for (row, col), (x_title, y_title) in AXIS_TITLES.items():
        figure.update_xaxes(title_text=x_title, row=row, col=col)
        figure.update_yaxes(title_text=y_title, row=row, col=col)
    figure.update_layout(title=f"infersim run: {result.scenario.name}<br><sup>{headline(result.summary)}</sup>",
                         height=1100, showlegend=True)
    return figure


def headline(summary: dict[str, Any]) -> str:
    """The run's headline numbers in one line, as the page's subtitle."""
    def get(key: str, part: str | None = None) -> float | None:
        value = summary.get(key)
        value = value.get(part) if part and isinstance(value, dict) else value
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    items = [("throughput", get("total_tok_per_s_per_gpu"), "{:,.0f} tok/s/GPU"),
             ("output", get("output_tok_per_s_per_gpu"), "{:,.0f} tok/s/GPU"),
             ("TTFT p50", get("ttft_s", "p50"), "ms"), ("TTFT p90", get("ttft_s", "p90"), "ms"),
             ("TPOT p50", get("tpot_s", "p50"), "ms"), ("TPOT p90", get("tpot_s", "p90"), "ms"),
             ("interactivity p90", get("interactivity_tok_per_s_per_user", "p90"), "{:,.1f} tok/s/user"),
             ("requests", get("requests_completed"), "{:,.0f}"), ("simulated", get("simulated_s"), "{:,.0f} s")]
    shown = []
    for label, value, unit in items:
        if value is None:
            continue
        text = f"{value * 1e3:,.1f} ms" if unit == "ms" else unit.format(value)
        shown.append(f"{label} {text}")
    return ", ".join(shown)
