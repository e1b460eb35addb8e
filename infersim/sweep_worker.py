"""One point of `infersim sweep` on a worker: its scenario simulated, the summary's scalars as a row.

A worker is a long-lived process (a process pool's or a Dask worker's) that runs many points, so its imports are
paid once and the cycle-time memos are shared by its points of one deployment (`simulator/cost/cycle.py:
shared_memos`). A point that fails while simulating is a row with status "error" and the reason, never the end of the
sweep.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from hwmodels.calibration import calibration_chosen
from simulator.cost.cycle import shared_memos
from simulator.replicates import numeric_leaves
from simulator.scenario import Scenario, build
from simulator.simulate import SimulationResult, simulate

INTERACTIVITY_P90 = "interactivity_tok_per_s_per_user.p90"


@dataclass(frozen=True)
class Task:
    """What a worker needs for one (point, seed): the resolved scenario as plain values (a Scenario holds mapping
    proxies, which do not pickle) and the calibration file chosen on the command line."""

    point: int
    seed: int
    scenario: Mapping[str, Any]
    calibration: str | None = None


def run_point(task: Task) -> dict[str, Any]:
    """The row of one (point, seed): status "ok" with the summary's metrics, or "error" with the reason."""
    start = time.perf_counter()
    try:
        # the calibration is a context of the process that parsed the flags: set here; the memos live across points
        with calibration_chosen(task.calibration), shared_memos():
            result = simulate(build(Scenario, task.scenario))
        metrics, status, error = summary_metrics(result), "ok", ""
    except Exception as err:  # any failure of one point is that point's row
        metrics, status, error = {}, "error", error_text(err)
    return {"point": task.point, "seed": task.seed, "status": status, "error": error, "metrics": metrics,
            "wall_s": time.perf_counter() - start}


def error_text(err: BaseException) -> str:
    """One line: a scenario's own message as it is, anything else with its type."""
    text = " ".join(str(err).split())
    return text if isinstance(err, ValueError) and text else f"{type(err).__name__}: {text}"


def summary_metrics(result: SimulationResult) -> dict[str, float | int | None]:
    """The summary's numbers by dotted path (`ttft_s.p50`). Its `wall_s` (the engine loop's) gives way to the row's,
    and `cycle_cost` is left out: with memos shared across points its counts depend on what the worker ran before."""
    metrics = {k: v if v is None or math.isfinite(v) else None for k, v in numeric_leaves(result.summary).items()
               if not k.startswith("cycle_cost.")}
    metrics.pop("wall_s", None)
    if INTERACTIVITY_P90 not in metrics:  # the frontier's x: derived from the requests where the summary lacks it
        metrics[INTERACTIVITY_P90] = interactivity_p90(result.requests)
    return metrics


def interactivity_p90(requests: Any) -> float | None:
    """1 / P90 TPOT over the requests with at least 2 output tokens (InferenceX's P90 interactivity, tok/s/user)."""
    many = requests[requests["output_tokens"] >= 2]
    if not len(many):
        return None
    tpot_s = (many["finish_s"] - many["first_token_s"]) / (many["output_tokens"] - 1)
    p90 = float(np.percentile(tpot_s.to_numpy(dtype="float64"), 90))
    return 1.0 / p90 if p90 > 0 else None


def ignore_interrupts() -> None:
    """A pool worker's start: Ctrl-C is the parent's to handle (it keeps the finished rows and stops the pool)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
