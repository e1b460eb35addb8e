"""`infersim compare`: simulate a base scenario and each design-change overlay on it, and report the deltas in %.

A design change is predicted by running the same workload (same seed) on the base and on the base with the
overlay merged in, so every difference in the summary comes from the change itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

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
            run: Callable[[Scenario], SimulationResult] = simulate) -> dict[str, Any]:
    """Each change's metrics and their % delta versus the base; `run` lets the CLI show progress."""
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


def compare_command(base: str, changes: Sequence[str | Path], sets: Sequence[str], *,
                    table: bool) -> tuple[dict[str, Any], str]:
    """The CLI's (result, title): the JSON comparison, or with `table` the same laid out for print_result."""
    from infersim.progress import run_with_progress

    base_scenario, loaded = load_changes(base, changes, sets)
    result = compare(base_scenario, loaded, run=run_with_progress)
    result["sets"] = list(sets)
    title = f"infersim compare: {len(loaded)} change(s) on {base}"
    return (table_layout(result) if table else result), title


def table_layout(result: Mapping[str, Any]) -> dict[str, Any]:
    """Tables of one row per metric and one column per change ('value (+d%)'), a few changes per table."""
    base_values = result["base"]["values"]
    layout: dict[str, Any] = {"base": result["base"]["name"], "sets": " ".join(result.get("sets", [])) or "-"}
    changes = result["changes"]
    for start in range(0, len(changes), CHANGES_PER_TABLE):
        group = changes[start:start + CHANGES_PER_TABLE]
        rows = []
        for metric in result["metrics"]:
            row = {"metric": metric, "base": _shown(metric, base_values[metric])}
            for change in group:
                shown = _shown(metric, change["values"][metric])
                row[change["name"]] = ("cannot run" if "error" in change
                                       else f"{shown} ({_signed(change['delta_pct'][metric])})")
            rows.append(row)
        failed = [change for change in group if "error" in change]
        if failed:
            rows.append({"metric": "error", "base": "-",
                         **{c["name"]: c.get("error", "-") for c in group}})
        last = min(start + CHANGES_PER_TABLE, len(changes))
        layout[f"changes {start + 1}-{last} of {len(changes)}: value (delta vs base)"] = rows
    return layout


def _shown(metric: str, value: float | int | None) -> str:
    """A metric in human units (tables.human by the key's suffix); large unitless counts with separators."""
    from infersim.tables import human

    key = metric.split(".")[0]
    if value is not None and not key.endswith("_s") and "_per_s" not in key and abs(value) >= 1e4:
        return f"{value:,.0f}"
    return human(key, value)


def _signed(pct: float | None) -> str:
    return "-" if pct is None else f"{pct:+.2f}%"
