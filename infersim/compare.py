"""`infersim compare`: simulate a base scenario and each design-change overlay on it, and report the deltas in %.

A design change is predicted by running the same workload (same seed) on the base and on the base with the
overlay merged in, so every difference in the summary comes from the change itself. With `seeds` > 1 every
configuration runs seeds `workload.seed + k`; the base and a change meet the same requests and acceptance draws on
a seed (common random numbers), so each metric's per-seed % deltas are paired samples: their mean, a paired
Student t interval and whether it excludes zero (`significant`). By default the seeds are adaptive: two, then more
until the throughput-per-GPU delta of every change is within a target half-width or a seed cap is reached.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from infersim.sweep_deltas import MAX_AUTO_SEEDS, METRIC, START_SEEDS, TARGET_PCT, adaptive_problem
from simulator.replicates import CONFIDENCE, MAX_REPLICATES, replicate_seeds, t_interval, with_seed
from simulator.scenario import Scenario, ScenarioError, load_scenario
from simulator.simulate import SimulationResult, check_scenario, simulate

# The summary keys a design change is judged by, as paths into `SimulationResult.summary`.
METRICS: tuple[str, ...] = (
    "total_tok_per_s_per_gpu",
    "output_tok_per_s_per_gpu",
    "ttft_s.p50",
    "ttft_s.p90",
    "tpot_s.p50",
    "tpot_s.p90",
    "interactivity_tok_per_s_per_user.p90",
    "tokens_per_dollar",
    "prefix_hit_rate",
    "spec_tokens_per_cycle",
    "kv_capacity_tokens",
    "wall_s",
)
DEFAULT_BASE = "default"  # the word that names the built-in default scenario as the base
CHANGES_PER_TABLE = 5  # change columns per printed table, so a table fits 160 columns
SEEDED_CHANGES_PER_TABLE = 3  # the same with an interval in every cell
# Seeds per configuration of `infersim compare`, measured on `infersim compare default
# simulator/scenarios/changes/dcp8.yaml --seeds N --json` (2 cores shared with other work, 2 jobs). 95% half-width
# of the TTFT p90 delta: 14.7 points at N = 3, 5.3 at 5, 2.9 at 8, 3.9 at 10 (its 9th seed, +9%, widens it); of the
# tok/s/GPU delta: 36, 14, 8.0 and 6.8 points. Cost: 8.5, 12, 19 and 21 CPU-seconds (2.7 for one seed), 5-10, 6-15,
# 16-18 and 16-24 s of wall time here. At 3 seeds only the TPOT delta is significant; at 8 the TTFT, TPOT and
# throughput deltas are, to a few points; 10 narrows them little more for a quarter more runs.
DEFAULT_SEEDS = 8  # --seeds N's count when a fixed number is wanted; the flag's default is adaptive (auto)
AUTO = "auto"
DECIDING_METRIC = METRIC  # the delta adaptive seeds settle: throughput per GPU, as a sweep's deltas


def metric_value(summary: Mapping[str, Any], metric: str) -> float | int | None:
    """One metric from a summary by its dotted path; None where the summary leaves it undefined."""
    node: Any = summary
    for part in metric.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    if node is None or (isinstance(node, int) and not isinstance(node, bool)):
        return node
    return float(node)


def delta_pct(base: float | int | None, value: float | int | None) -> float | None:
    """Change of `value` over `base` in %; None where it is undefined (a missing value, or 0 -> nonzero)."""
    if base is None or value is None:
        return None
    if base == 0:
        return 0.0 if value == 0 else None
    return (value - base) / abs(base) * 100.0


def compare(base: Scenario, changes: Sequence[tuple[str, Scenario]],
            run: Callable[[Scenario], SimulationResult] = simulate, *, seeds: int | None = 1,
            jobs: int | None = None, target_pct: float = TARGET_PCT, max_seeds: int = MAX_AUTO_SEEDS
            ) -> dict[str, Any]:
    """Each change's metrics and their % delta versus the base; `run` (one seed, no `jobs`) lets the CLI show
    progress.

    With `seeds` > 1 (or `jobs` given) the runs go through a process pool (`jobs` processes, default: the CPUs,
    capped by the runs; progress from `infersim.progress`), values are means over the seeds, `delta_pct` the mean
    of the per-seed paired deltas, and `delta_ci` has per metric the per-seed deltas, their mean, the paired t
    interval and `significant`. `seeds` None: adaptive, as `infersim sweep --seeds auto`: `START_SEEDS` seeds, then
    one more seed a round for the base and every change whose headline delta (`DECIDING_METRIC`) has a 95 %
    half-width above `target_pct` %, until none has or `max_seeds` is reached (`seeds_rule` says which)."""
    if seeds == 1 and jobs is None:
        return _compare_one_seed(base, changes, run)
    from infersim.replicates import default_jobs, run_all

    adaptive = seeds is None
    problem = adaptive_problem(max_seeds if adaptive else START_SEEDS, target_pct, MAX_REPLICATES)
    if problem:
        raise ValueError(problem)
    n = START_SEEDS if adaptive else seeds
    configs = [base, *(scenario for _, scenario in changes)]
    outcomes: list[list[Any]] = [[] for _ in configs]  # each configuration's outcomes, seed by seed
    wanted = range(len(configs))
    while True:
        seed_list = replicate_seeds(base, n)
        runs, owners = [], []
        for i in wanted:
            for k in range(len(outcomes[i]), n):
                runs.append(with_seed(configs[i], configs[i].workload.seed + k))
                owners.append(i)
        for i, outcome in zip(owners, run_all(runs, jobs or default_jobs(len(runs))), strict=True):
            outcomes[i].append(outcome)
        for seed, outcome in zip(seed_list, outcomes[0], strict=True):
            if outcome.error is not None:  # the base must run: every delta is against it
                raise ValueError(f"seed {seed}: {outcome.error}")
        results = [_change_result(name, outcomes[0], outcomes[i + 1], seed_list)
                   for i, (name, _) in enumerate(changes)]
        wide = [i + 1 for i, r in enumerate(results) if _wide(r, target_pct)]
        if not adaptive or not wide or n >= max_seeds:
            break
        n += 1
        wanted = [0, *wide]
    base_runs = [_values(o.summary) for o in outcomes[0]]
    result = {"base": {"name": base.name, "values": _means(base_runs),
                       "per_seed": {m: [r[m] for r in base_runs] for m in METRICS}},
              "metrics": list(METRICS), "seeds": list(seed_list), "confidence": CONFIDENCE,
              "interval": f"per-seed paired % deltas (change minus base on the same seed): mean and "
                          f"{CONFIDENCE:.0%} paired Student t interval, n - 1 degrees of freedom for n seeds",
              "changes": results}
    if adaptive:
        result["target_pct"] = target_pct
        result["seeds_rule"] = (
            f"adaptive: every change's {DECIDING_METRIC} delta within +-{target_pct:g} % (95 %)" if not wide else
            f"adaptive: the seed cap ({max_seeds}) reached with {len(wide)} change(s)' {DECIDING_METRIC} delta "
            f"wider than +-{target_pct:g} %")
    else:
        result["seeds_rule"] = f"fixed: {n} seed(s)"
    return result


def _change_result(name: str, base: Sequence[Any], mine: Sequence[Any], seed_list: Sequence[int]) -> dict[str, Any]:
    """One change's means and paired deltas over the seeds it ran (the first of the base's), or its error."""
    failed = next(((s, o.error) for s, o in zip(seed_list, mine, strict=False)
                   if o.error is not None), None)
    if failed is not None:  # the change cannot serve this workload on some seed: a result, as on one seed
        return {"name": name, "error": f"seed {failed[0]}: {failed[1]}", "values": dict.fromkeys(METRICS),
                "delta_pct": dict.fromkeys(METRICS), "delta_ci": dict.fromkeys(METRICS), "seeds": len(mine)}
    base_runs = [_values(o.summary) for o in base[:len(mine)]]
    change_runs = [_values(o.summary) for o in mine]
    cis = {m: paired_delta([b[m] for b in base_runs], [c[m] for c in change_runs]) for m in METRICS}
    return {"name": name, "values": _means(change_runs), "seeds": len(mine),
            "delta_pct": {m: None if ci is None else ci["mean_pct"] for m, ci in cis.items()}, "delta_ci": cis}


def _wide(change: Mapping[str, Any], target_pct: float) -> bool:
    """Whether a change's headline delta still has a 95 % half-width above the target (a failed change never
    settles by more seeds: it is left as it is)."""
    if "error" in change:
        return False
    ci = change["delta_ci"][DECIDING_METRIC]
    return ci is not None and (ci["hi_pct"] is None or ci["hi_pct"] - ci["mean_pct"] > target_pct)


def _compare_one_seed(base: Scenario, changes: Sequence[tuple[str, Scenario]],
                      run: Callable[[Scenario], SimulationResult]) -> dict[str, Any]:
    base_values = _values(run(base).summary)
    results = []
    for name, scenario in changes:
        try:
            values = _values(run(scenario).summary)
        except ValueError as err:  # the change cannot serve this workload (say, prompts no longer fit): a result
            results.append({"name": name, "error": str(err), "values": dict.fromkeys(METRICS),
                            "delta_pct": dict.fromkeys(METRICS)})
            continue
        results.append({"name": name, "values": values,
                        "delta_pct": {m: delta_pct(base_values[m], values[m]) for m in METRICS}})
    return {"base": {"name": base.name, "values": base_values}, "metrics": list(METRICS), "changes": results}


def paired_delta(base: Sequence[float | int | None], change: Sequence[float | int | None]) -> dict[str, Any] | None:
    """Per-seed % deltas of a change over the base on the same seeds, their mean, paired t interval and whether it
    excludes zero (`significant`: None for one seed); None where a seed leaves the delta undefined."""
    deltas = [delta_pct(b, c) for b, c in zip(base, change, strict=True)]
    if any(d is None for d in deltas):
        return None
    interval = t_interval([float(d) for d in deltas if d is not None])
    return {"per_seed_pct": deltas, "mean_pct": interval.mean, "lo_pct": interval.lo, "hi_pct": interval.hi,
            "significant": interval.significant}


def _means(runs: Sequence[Mapping[str, float | int | None]]) -> dict[str, float | int | None]:
    """Each metric's mean over the runs (the value itself for one run); None where a run leaves it undefined."""
    means: dict[str, float | int | None] = {}
    for m in METRICS:
        values = [r[m] for r in runs]
        means[m] = (None if any(v is None for v in values) else values[0] if len(values) == 1
                    else math.fsum(values) / len(values))
    return means


def _values(summary: Mapping[str, Any]) -> dict[str, float | int | None]:
    return {metric: metric_value(summary, metric) for metric in METRICS}


def load_changes(base: str, changes: Sequence[str | Path],
                 sets: Sequence[str] = ()) -> tuple[Scenario, list[tuple[str, Scenario]]]:
    """The base (a path, or the word `default`) and each change overlaid on it, all with `sets` on top."""
    if not changes:
        raise ScenarioError("compare needs at least one CHANGE.yaml overlay after the base")
    base_path = None if base == DEFAULT_BASE else base
    base_scenario = load_scenario(base_path, [], list(sets))
    check_scenario(base_scenario)
    names = _names(changes)
    loaded = []
    for name, path in zip(names, changes, strict=True):
        try:  # every change is checked before anything runs, so a bad overlay fails at once
            loaded.append((name, load_scenario(base_path, [path], list(sets))))
            check_scenario(loaded[-1][1])
        except ScenarioError as err:
            message = str(err)
            raise ScenarioError(message if message.startswith(str(path)) else f"{path}: {message}") from None
    return base_scenario, loaded


def _names(paths: Sequence[str | Path]) -> list[str]:
    """File stems as column names, or the paths themselves where two stems collide."""
    stems = [Path(p).stem for p in paths]
    return [stem if stems.count(stem) == 1 else str(path) for stem, path in zip(stems, paths, strict=True)]


def compare_command(base: str, changes: Sequence[str | Path], sets: Sequence[str], *, table: bool,
                    seeds: str | int | None = None, jobs: str | int | None = None, target_pct: float = TARGET_PCT,
                    max_seeds: int = MAX_AUTO_SEEDS) -> tuple[dict[str, Any], str]:
    """The CLI's (result, title): the JSON comparison, or with `table` the same laid out for print_result.

    `seeds` and `jobs` are the flags' text (None or "auto": adaptive seeds); bad values are one-line ValueErrors."""
    from infersim.progress import run_with_progress
    from infersim.replicates import count_flag

    adaptive = seeds is None or str(seeds).strip().lower() == AUTO
    n = None if adaptive else count_flag("--seeds", seeds, DEFAULT_SEEDS)
    workers = None if jobs is None else count_flag("--jobs", jobs, 1)
    base_scenario, loaded = load_changes(base, changes, sets)
    result = compare(base_scenario, loaded, run=run_with_progress, seeds=n, jobs=workers, target_pct=target_pct,
                     max_seeds=max_seeds)
    result["sets"] = list(sets)
    title = f"infersim compare: {len(loaded)} change(s) on {base}"
    if "seeds" in result:
        title += f", {len(result['seeds'])} seed(s) for the base" if adaptive else f", {n} seed(s) each"
    return (table_layout(result) if table else result), title


def table_layout(result: Mapping[str, Any]) -> dict[str, Any]:
    """Tables of one row per metric and one column per change ('value (+d%)', with seeds 'value (+d% [lo, hi])'
    and 'n.s.' where the interval covers zero), a few changes per table."""
    base_values = result["base"]["values"]
    layout: dict[str, Any] = {"base": result["base"]["name"], "sets": " ".join(result.get("sets", [])) or "-"}
    seeded = "seeds" in result
    if seeded:
        from infersim.replicates import seed_text

        layout["seeds"] = f"{seed_text(result['seeds'])} ({len(result['seeds'])} for the base, paired)"
        layout["seeds rule"] = result.get("seeds_rule", "-")
        layout["delta"] = (f"mean of the per-seed % deltas [{result['confidence']:.0%} paired t interval]; n.s.: "
                           "not significant, the interval covers 0")
    per_table = SEEDED_CHANGES_PER_TABLE if seeded else CHANGES_PER_TABLE
    changes = result["changes"]
    for start in range(0, len(changes), per_table):
        group = changes[start:start + per_table]
        rows = []
        for metric in result["metrics"]:
            row = {"metric": metric, "base": _shown(metric, base_values[metric])}
            for change in group:
                shown = _shown(metric, change["values"][metric])
                delta = (_signed_ci(change["delta_ci"][metric]) if seeded and "error" not in change
                         else _signed(change["delta_pct"][metric]))
                row[change["name"]] = "cannot run" if "error" in change else f"{shown} ({delta})"
            rows.append(row)
        failed = [change for change in group if "error" in change]
        if failed:
            rows.append({"metric": "error", "base": "-",
                         **{c["name"]: c.get("error", "-") for c in group}})
        last = min(start + per_table, len(changes))
        what = "mean value (delta vs base)" if seeded else "value (delta vs base)"
        layout[f"changes {start + 1}-{last} of {len(changes)}: {what}"] = rows
    return layout


def _signed_ci(ci: Mapping[str, Any] | None) -> str:
    """'+5.9% [-8.1, +19.9] n.s.', '-3.2% [-4.0, -2.4]'; without an interval (one seed) the mean delta alone."""
    if ci is None:
        return "-"
    if ci["lo_pct"] is None:
        return f"{ci['mean_pct']:+.1f}%"
    verdict = "" if ci["significant"] else " n.s."
    return f"{ci['mean_pct']:+.1f}% [{ci['lo_pct']:+.1f}, {ci['hi_pct']:+.1f}]{verdict}"


def _shown(metric: str, value: float | int | None) -> str:
    """A metric in human units (tables.human by the key's suffix); large unitless counts with separators."""
    from infersim.tables import human

    key = metric.split(".")[0]
    if value is not None and not key.endswith("_s") and "_per_s" not in key and abs(value) >= 1e4:
        return f"{value:,.0f}"
    return human(key, value)


def _signed(pct: float | None) -> str:
    return "-" if pct is None else f"{pct:+.2f}%"
