"""Replicates on the command line: the runs of several seeds (and changes) in a process pool, and what
`infersim run --seeds N` reports of them.

Replicate k of a scenario runs seed `workload.seed + k` (`simulator/replicates.py`). Every run is a pure function
of its scenario, and results come back in the order the runs were listed, so nothing depends on `--jobs`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infersim.worker_pool import usable_cpus
from simulator.replicates import CONFIDENCE, replicate_seeds, summary_intervals, with_seed
from simulator.scenario import Scenario
from simulator.simulate import SimulationResult


def count_flag(flag: str, text: str | int | None, default: int) -> int:
    """The value of --seeds or --jobs (their ranges: infersim/flags.py SEEDS, JOBS); a one-line ValueError otherwise."""
    from infersim.flags import JOBS, SEEDS, whole

    if text is None:
        return default
    return whole(str(text), flag, {"--seeds": SEEDS, "--jobs": JOBS}[flag])


def default_jobs(runs: int) -> int:
    """Worker processes: the CPUs this process may use, capped by the runs."""
    return max(1, min(usable_cpus(), runs))


@dataclass(frozen=True)
class _Task:
    """One run for a worker: the scenario as plain values (a Scenario holds mapping proxies, which do not pickle)
    and the calibration and cost model chosen on the command line (contexts of the parsing process)."""

    scenario: Mapping[str, Any]
    keep: bool  # send back the whole result (its frames too), not the summary alone
    calibration: str | None
    cost_model: str | None


@dataclass(frozen=True)
class Outcome:
    """A run's summary (and, where asked for, its request and step frames), or the one-line reason it could not run.

    The frames, not the SimulationResult: its scenario holds mapping proxies, which do not pickle."""

    summary: dict[str, Any] | None
    requests: Any = None  # pandas.DataFrame
    steps: Any = None  # pandas.DataFrame
    error: str | None = None


def _run_task(task: _Task) -> Outcome:
    from hwmodels.calibration import calibration_chosen, cost_model_chosen
    from simulator.scenario import build
    from simulator.simulate import simulate

    with cost_model_chosen(task.cost_model), calibration_chosen(task.calibration):
        try:
            result = simulate(build(Scenario, task.scenario))
        except ValueError as err:  # the scenario cannot serve its workload: the caller decides what that means
            return Outcome(None, error=str(err))
    if task.keep:
        return Outcome(result.summary, result.requests, result.steps)
    return Outcome(result.summary)


def run_all(scenarios: Sequence[Scenario], jobs: int, keep: Collection[int] = ()) -> list[Outcome]:
    """Each scenario simulated, in a pool of `jobs` processes (in this one for a single job or run); outcomes in
    the scenarios' order. `keep`: the indices whose whole result comes back."""
    from hwmodels.calibration import chosen
    from infersim.progress import CountProgress
    from simulator.scenario import to_mapping

    calibration, cost_model = chosen()
    tasks = [_Task(to_mapping(s), i in keep, calibration, cost_model) for i, s in enumerate(scenarios)]
    jobs = min(jobs, len(tasks))
    if jobs <= 1:
        outcomes = []
        with CountProgress(len(tasks), "runs", "simulating") as progress:
            for task in tasks:
                outcomes.append(_run_task(task))
                progress.advance()
        return outcomes
    from concurrent.futures import as_completed

    from infersim.worker_pool import process_pool

    with process_pool(jobs) as pool:
        # every run is submitted (and the workers started) before the progress bar starts its thread
        futures = [pool.submit(_run_task, task) for task in tasks]
        try:
            with CountProgress(len(tasks), "runs", "simulating") as progress:
                for _ in as_completed(futures):
                    progress.advance()
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        return [future.result() for future in futures]


def run_replicates(scenario: Scenario, seeds: int, jobs: int | None = None) -> tuple[SimulationResult, dict[str, str]]:
    """Replicate 0's whole result (the plain run of the scenario's own seed) with the `replicates` object in its
    summary, and the text of `replicates.json` (every replicate's summary)."""
    import json

    seed_list = replicate_seeds(scenario, seeds)
    outcomes = run_all([with_seed(scenario, s) for s in seed_list], jobs or default_jobs(seeds), keep={0})
    for seed, outcome in zip(seed_list, outcomes, strict=True):
        if outcome.error is not None:
            raise ValueError(f"seed {seed}: {outcome.error}")
    summaries = [o.summary for o in outcomes if o.summary is not None]
    first = outcomes[0]
    replicates = {
        "n": seeds, "seeds": list(seed_list), "confidence": CONFIDENCE,
        "interval": f"mean and {CONFIDENCE:.0%} confidence interval of the mean over the {seeds} replicates: "
                    f"Student t, {seeds - 1} degrees of freedom",
        "metrics": summary_intervals(summaries, CONFIDENCE),
    }
    summary = {**summaries[0], "replicates": replicates}
    per_replicate = {"seeds": list(seed_list),
                     "summaries": [{"seed": s, "summary": m} for s, m in zip(seed_list, summaries, strict=True)]}
    text = json.dumps(per_replicate, indent=2, allow_nan=False) + "\n"
    return SimulationResult(scenario, first.requests, first.steps, summary), {"replicates.json": text}


def replicates_layout(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The table of `run --seeds N`: every summary metric as 'mean [lo, hi]'."""
    replicates = summary["replicates"]
    rows = [{"metric": path, f"mean [{replicates['confidence']:.0%} interval]": interval_text(path, m)}
            for path, m in replicates["metrics"].items()]
    return {
        "replicates": replicates["n"],
        "seeds": seed_text(replicates["seeds"]),
        "interval": f"{replicates['confidence']:.0%} confidence interval of the mean, Student t over the "
                    f"{replicates['n']} replicate values",
        f"every metric over {replicates['n']} seeds": rows,
    }


def interval_text(path: str, metric: Mapping[str, Any]) -> str:
    """'0.267 [0.205, 0.329] s' style: a mean and its interval in one unit (times scaled by the mean)."""
    from infersim.tables import human

    mean, lo, hi = metric["mean"], metric["lo"], metric["hi"]
    if mean is None:
        return "-"
    key = unit_key(path)
    if lo is None or hi is None:
        return human(key, mean)
    if key.endswith("_s") and "_per_s" not in key:  # one unit for all three, chosen by the mean
        scale, unit = (1e6, "µs") if abs(mean) < 1e-2 else (1e3, "ms") if abs(mean) < 1 else (1.0, "s")
        return f"{mean * scale:,.3f} [{lo * scale:,.3f}, {hi * scale:,.3f}] {unit}"
    return f"{human(key, mean)} [{human(key, lo)}, {human(key, hi)}]"


def unit_key(path: str) -> str:
    """The key whose suffix names a dotted metric's unit: a percentile's or mean's parent (`ttft_s.p90`)."""
    parts = path.split(".")
    if len(parts) > 1 and (parts[-1] == "mean" or (parts[-1].startswith("p") and parts[-1][1:].isdigit())):
        return parts[-2]
    return parts[-1]


def seed_text(seeds: Sequence[int]) -> str:
    """'0-9' for a run of consecutive seeds, else the list."""
    if len(seeds) > 2 and list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(str(s) for s in seeds)
