"""`infersim sweep`: a scenario over a grid of scenario keys, run in parallel, kept as one resumable table.

Each point is the base scenario (SCENARIO, `--overlay`, `--set`) with its grid values applied through the one
converter, as `--set` applies them (`simulator/scenario.py: build`). Every point is built and checked before anything
runs: a grid value that no point can use (an unknown key, a bad value, a value the base refuses) is the one-line
error `infersim run --set KEY=VALUE` gives; a combination of usable values that the scenario refuses (say, a DCP that
does not divide one of the gridded TPs) is a row with status "skipped" and the reason. A point that fails while
simulating is a row with status "error" (run again by a rerun).

Points run on a local process pool (`--jobs`) or a Dask cluster (`--executor dask`), whose workers live across
points (`infersim/sweep_executors.py`). The table (`infersim/sweep_table.py`) is matched on rerun by the grid values
and seed within one base scenario, identified by a hash of the resolved base (its name and `workload.seed` aside:
seeds are matched per row).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hwmodels.input_files import read_regular
from hwmodels.specfile import YAML_MAX_BYTES, shown
from infersim import sweep_deltas, sweep_table
from infersim.sweep_executors import SweepError, check_installed, start
from infersim.sweep_grid import Axis, parse_grid, points
from infersim.sweep_worker import Task
from infersim.worker_pool import MAX_JOBS, usable_cpus
from simulator.replicates import MAX_REPLICATES, replicate_seeds
from simulator.scenario import (
    DEFAULT_SCENARIO,
    Scenario,
    ScenarioError,
    build,
    deep_merge,
    load_scenario,
    parse_set,
    read_scenario_file,
    to_mapping,
)
from simulator.simulate import check_scenario

DEFAULT_BASE = "default"  # the word that names the built-in default scenario, as for `infersim compare`
AUTO = "auto"  # --seeds auto (the default): seeds added until the paired deltas settle
START_SEEDS, MAX_AUTO_SEEDS, TARGET_PCT = sweep_deltas.START_SEEDS, sweep_deltas.MAX_AUTO_SEEDS, sweep_deltas.TARGET_PCT
FLUSH_S = 5.0  # the table is rewritten this often while points finish (and at the end)
PAGE, SCENARIO_FILE = "sweep.html", "scenario.yaml"
FILES = (sweep_table.PARQUET, sweep_table.CSV, sweep_table.JOURNAL, PAGE, SCENARIO_FILE)  # what a sweep writes


@dataclass(frozen=True)
class Point:
    """One combination of grid values: the scenario to run as plain values, or the reason it is skipped."""

    index: int
    grid: Mapping[str, Any]  # each grid key's value as the scenario resolved it (as --set read it, if refused)
    scenario: Mapping[str, Any] | None  # `to_mapping` of the point's scenario; None when refused
    reason: str = ""


def sweep_command(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """The CLI's (result, title) for `infersim sweep`."""
    sets = list(args.sets)
    if args.cost_model is not None:
        sets.append(f"cost.model={args.cost_model}")
    seeds = None if str(args.seeds).strip().lower() == AUTO else _seed_count(args.seeds)
    result = run_sweep(args.scenario, args.grid, args.out, overlays=args.overlay, sets=sets, seeds=seeds,
                       jobs=args.jobs, executor=args.executor, scheduler=args.scheduler,
                       calibration=args.calibration, at_interactivity=args.at_interactivity,
                       baseline=args.baseline, target_pct=args.target_pct, max_seeds=args.max_seeds)
    title = f"infersim sweep: {result['points']} points x {result['seeds']} seed(s) on {args.scenario}"
    return (result if args.json else table_layout(result)), title


def _seed_count(text: Any) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise SweepError(f"--seeds {text}: expected a whole number or {AUTO}") from None


def run_sweep(base: str, grid: Sequence[str], out: str | Path, *, overlays: Sequence[str | Path] = (),
              sets: Sequence[str] = (), seeds: int | None = 1, jobs: int | None = None, executor: str = "process",
              scheduler: str | None = None, calibration: str | Path | None = None,
              at_interactivity: float | None = None, baseline: str | None = None,
              target_pct: float = TARGET_PCT, max_seeds: int = MAX_AUTO_SEEDS) -> dict[str, Any]:
    """Run what the folder `out` lacks of the grid, write the table and the page, and report.

    `seeds` None: seeds are added round by round (from `START_SEEDS`) to the points whose paired delta against
    their baseline point (`infersim.sweep_deltas`) has a 95 % half-width above `target_pct` % of the baseline, and
    to those baseline points, until none has or `max_seeds` is reached."""
    started = time.monotonic()
    adaptive = seeds is None
    problem = sweep_deltas.adaptive_problem(max_seeds if adaptive else START_SEEDS, target_pct, MAX_REPLICATES)
    if problem:
        raise SweepError(problem)
    seeds = START_SEEDS if adaptive else seeds
    _check_flags(seeds, jobs, executor, scheduler, at_interactivity)
    check_installed(executor)
    axes = parse_grid(grid, seeds)
    _check_keys(axes, sets)
    from infersim.output_paths import claim_sweep_folder

    folder = claim_sweep_folder(out, FILES, check_only=True)
    base_raw = read_scenario_file(DEFAULT_SCENARIO if base == DEFAULT_BASE else base)
    for overlay in overlays:  # as load_scenario composes them, read once for every point
        base_raw = deep_merge(base_raw, read_scenario_file(overlay))
    base_raw = deep_merge(base_raw, parse_set(list(sets)))
    base_scenario = build(Scenario, base_raw)
    calibration = None if calibration is None else str(Path(calibration).resolve())
    planned = plan(base_raw, axes)
    _check_calibration(calibration, planned)
    digest = base_hash(base_scenario, calibration)
    keys = [axis.key for axis in axes]
    work = schedule(planned, keys, _existing_rows(folder, base_scenario, digest), to_mapping(base_scenario),
                    replicate_seeds(base_scenario, seeds), digest, calibration)
    chosen = _baseline(baseline, work)
    title = f"infersim sweep of {base_scenario.name}: {' x '.join(axis.key for axis in axes)}"
    finished: list[dict[str, Any]] = []
    ran = 0
    reused = len(work.kept)
    with contextlib.ExitStack() as stack:  # a Dask client and cluster, closed however the sweep ends
        claimed = False
        while True:
            results = start(work.tasks, executor, jobs, scheduler, stack)
            if not claimed:
                claim_sweep_folder(folder, FILES)
                _write_base(folder / SCENARIO_FILE, base_scenario)
                claimed = True
            output = _Output(folder, work, title, seeds, at_interactivity, chosen, adaptive)
            _collect(results, output, digest, "points" if seeds == 1 else "runs")
            finished += output.finished
            ran += len(work.tasks)
            records = _deltas(output, chosen)
            unsettled = sweep_deltas.unsettled(records, target_pct) if adaptive else set()
            if not unsettled or seeds >= max_seeds:
                break
            seeds += 1  # one more seed for the points whose deltas are still wide, and their baselines
            work = schedule(planned, keys, _existing_rows(folder, base_scenario, digest), to_mapping(base_scenario),
                            replicate_seeds(base_scenario, seeds), digest, calibration)
            work.tasks[:] = [task for task in work.tasks if task.point in unsettled]
        output.seeds = seeds
        written, table, stats = output.write(final=True)
    written += [folder / SCENARIO_FILE, folder / sweep_table.JOURNAL]
    print(f"infersim: wrote {', '.join(str(p) for p in written)}", file=sys.stderr)
    seeds_run = _seeds_per_point(table)
    result = {"out": str(folder), "files": [str(p) for p in written], "points": len(planned), "seeds": seeds,
              "seeds_per_point": seeds_run,
              "runs": sum(int(s) * n for s, n in seeds_run.items()) if adaptive else len(planned) * seeds,
              "ran": ran, "reused": reused,
              "skipped": len(work.skipped), "errors": sum(row["status"] == "error" for row in finished),
              "rows": len(table),
              "executor": f"dask at {scheduler}" if scheduler else f"{executor} ({jobs or usable_cpus()} jobs)",
              "wall_s": time.monotonic() - started,
              "run_mean_wall_s": (sum(row["wall_s"] for row in finished) / len(finished)) if finished else None}
    result["runs_per_s"] = len(finished) / result["wall_s"] if finished else None
    if chosen is not None:
        records = _deltas(output, chosen)
        wide = sweep_deltas.unsettled(records, target_pct)
        result["baseline"] = chosen.label
        result["target_pct"] = target_pct
        result["seeds_rule"] = (("adaptive: every delta's 95 % half-width within the target" if not wide else
                                 f"adaptive: the seed cap ({max_seeds}) reached with {len(wide)} points' deltas "
                                 "wider than the target") if adaptive else f"fixed: {seeds} seed(s)")
        result["deltas"] = [{**r["grid"], "point": r["point"], "baseline_point": r["baseline_point"],
                             "seeds": r["seeds"], "delta_pct": r["delta_pct"], "half_width_pct": r["half_width_pct"],
                             "verdict": r["verdict"]} for r in records]
    return {**result, **_frontier_report(stats, at_interactivity), **_first_error(finished)}


def _baseline(text: str | None, work: Schedule) -> sweep_deltas.Baseline | None:
    try:
        if text is not None:
            return sweep_deltas.parse_baseline(text, work.grid_keys, work.grids)
    except ValueError as err:
        raise SweepError(str(err)) from None
    return sweep_deltas.default_baseline(work.grid_keys, work.grids)


def _deltas(output: _Output, baseline: sweep_deltas.Baseline | None) -> list[dict[str, Any]]:
    if baseline is None:
        return []
    return sweep_deltas.paired(output.ok_rows(), output.work.grid_keys, baseline)


def _seeds_per_point(table: Any) -> dict[str, int]:
    """How many points ran how many seeds ({"2": 20, "10": 12}): what an adaptive sweep settled on."""
    if not len(table):
        return {}
    counts = table[table["status"] == "ok"].groupby("point").size().value_counts().sort_index()
    return {str(int(seeds)): int(points) for seeds, points in counts.items()}


@dataclass(frozen=True)
class Schedule:
    """What a sweep runs now and what it keeps: rows as `sweep_table` describes them."""

    grid_keys: list[str]  # this grid's keys, then those only earlier rows of the folder have
    grids: dict[int, dict[str, Any]]  # each point's values of every grid key
    tasks: list[Task]  # (point, seed) the folder lacks, or holds as an error
    kept: list[dict[str, Any]]  # rows the folder holds for this grid, renumbered to its points
    skipped: list[dict[str, Any]]  # refused points, a row per seed
    others: list[dict[str, Any]]  # rows of earlier points outside this grid, numbered after its points


def schedule(planned: Sequence[Point], keys: Sequence[str], existing: Sequence[dict[str, Any]],
             base_values: Mapping[str, Any], seeds: Sequence[int], digest: str, calibration: str | None) -> Schedule:
    """Match the folder's rows to this grid's (point, seed) by their grid values and seed, within one base.

    A key gridded before but not now (or now but not before) stands at the base's value in the rows that lack it,
    since that is the value they ran with."""
    grid_keys = list(dict.fromkeys([*keys, *(k for row in existing for k in row["grid"])]))

    def full(grid: Mapping[str, Any]) -> dict[str, Any]:
        return {k: grid[k] if k in grid else resolved(base_values, k) for k in grid_keys}

    done = {}
    for row in existing:
        row = {**row, "grid": full(row["grid"])}
        done[sweep_table.row_key(row["seed"], row["grid"], grid_keys)] = row
    grids = {point.index: full(point.grid) for point in planned}
    tasks, kept, skipped = [], [], []
    for point in planned:
        for seed in seeds:
            if point.scenario is None:
                skipped.append(_row(point.index, seed, grids[point.index], "skipped", point.reason, {}, None, digest))
                continue
            row = done.pop(sweep_table.row_key(seed, grids[point.index], grid_keys), None)
            if row is not None and row["status"] == "ok":
                kept.append({**row, "point": point.index})
                continue
            scenario = {**point.scenario, "workload": {**point.scenario["workload"], "seed": seed}}
            tasks.append(Task(point.index, seed, scenario, calibration))
    others = sorted(done.values(), key=lambda row: (row["point"], row["seed"]))
    numbers: dict[tuple, int] = {}
    for row in others:
        at = sweep_table.row_key(0, row["grid"], grid_keys)[1:]  # the point's values, whatever the seed
        row["point"] = numbers.setdefault(at, len(planned) + len(numbers))
    return Schedule(grid_keys, grids, tasks, kept, skipped, others)


@dataclass
class _Output:
    """The folder's table and page, written from the rows kept, skipped and finished so far."""

    folder: Path
    work: Schedule
    title: str
    seeds: int
    at_interactivity: float | None
    baseline: sweep_deltas.Baseline | None = None
    adaptive: bool = False
    finished: list[dict[str, Any]] = field(default_factory=list)

    def ok_rows(self) -> list[dict[str, Any]]:
        """This grid's rows that ran: kept from the folder and finished now."""
        return [row for row in [*self.work.kept, *self.finished] if row["status"] == "ok"]

    def write(self, final: bool) -> tuple[list[Path], Any, list[dict[str, Any]]]:
        """sweep.parquet and sweep.csv (and at the end sweep.html): (files, table, per-point stats)."""
        work = self.work
        rows = sorted([*work.kept, *work.skipped, *self.finished], key=lambda row: (row["point"], row["seed"]))
        table = sweep_table.frame([*rows, *work.others], work.grid_keys)
        written = sweep_table.write_table(self.folder, table, work.grid_keys)
        stats: list[dict[str, Any]] = []
        if final:
            from infersim import sweep_page

            stats = sweep_page.point_stats(table, work.grid_keys)
            title = _page_title(self.title, len(stats), self.seeds, self.adaptive)
            deltas = _deltas(self, self.baseline)
            figure = sweep_page.sweep_figure(stats, work.grid_keys, title, self.at_interactivity,
                                             (deltas, self.baseline) if deltas else None)
            written.append(sweep_page.write_page(figure, self.folder / PAGE))
        return written, table, stats


def _collect(results: Iterator[dict[str, Any]], output: _Output, digest: str, unit: str) -> None:
    """Journal each row as it finishes, rewrite the table every FLUSH_S, and on Ctrl-C keep what finished."""
    from infersim.progress import CountProgress

    work = output.work
    with sweep_table.open_journal(output.folder) as journal, CountProgress(len(work.tasks), unit, "sweep") as progress:
        flushed = time.monotonic()
        try:
            for result in results:
                row = _row(result["point"], result["seed"], work.grids[result["point"]], result["status"],
                           result["error"], result["metrics"], result["wall_s"], digest)
                sweep_table.append(journal, row)
                output.finished.append(row)
                progress.advance()
                if time.monotonic() - flushed >= FLUSH_S:
                    output.write(final=False)
                    flushed = time.monotonic()
        except KeyboardInterrupt:
            output.write(final=True)
            print(f"infersim: sweep interrupted: {len(output.finished)} of {len(work.tasks)} {unit} done and kept "
                  f"in {output.folder} (run the same command again to resume)", file=sys.stderr)
            raise SystemExit(130) from None
        except SweepError:
            output.write(final=True)
            raise


def _check_flags(seeds: int, jobs: int | None, executor: str, scheduler: str | None,
                 at_interactivity: float | None) -> None:
    if not 1 <= seeds <= MAX_REPLICATES:
        raise SweepError(f"--seeds must lie in 1..{MAX_REPLICATES}, got {shown(seeds)}")
    if executor not in ("process", "dask"):
        raise SweepError(f"--executor {executor!r}: expected process or dask")
    if scheduler is not None and executor != "dask":
        raise SweepError("--scheduler names a Dask scheduler: give --executor dask too")
    if scheduler is not None and jobs is not None:
        raise SweepError("--jobs sizes a local pool or LocalCluster; with --scheduler the cluster's workers run the "
                         "points: drop one")
    if jobs is not None and not 1 <= jobs <= MAX_JOBS:
        raise SweepError(f"--jobs must lie in 1..{MAX_JOBS}, got {shown(jobs)}")
    if at_interactivity is not None and not (math.isfinite(at_interactivity) and at_interactivity > 0):
        raise SweepError(f"--at-interactivity must be a finite, positive tok/s/user, got {at_interactivity}")


def _check_calibration(calibration: str | None, planned: Sequence[Point]) -> None:
    """The calibration file loaded for every GPU the points run on, before any point runs: a bad file is the one-line
    error the other commands give, not a row of errors per point."""
    if calibration is None:
        return
    from hwmodels.calibration import load_calibration
    from hwmodels.spec import load_platform

    platforms = {point.scenario["hardware"]["platform"] for point in planned if point.scenario is not None}
    for gpu in sorted({load_platform(platform).gpu for platform in platforms}):
        load_calibration(gpu, calibration)


def _check_keys(axes: Sequence[Axis], sets: Sequence[str]) -> None:
    set_keys = {item.partition("=")[0].strip() for item in sets}
    for axis in axes:
        if axis.key == "workload.seed":
            raise SweepError("--grid workload.seed: seeds are swept with --seeds N (workload.seed + 0..N-1)")
        if axis.key in set_keys:
            raise SweepError(f"--grid {axis.key}: also given with --set; the grid sets it for every point")


def plan(base_raw: Mapping[str, Any], axes: Sequence[Axis]) -> list[Point]:
    """Every point built and checked; a value that no point can use is the error `run --set` gives for it."""
    planned = []
    usable: list[set[str]] = [set() for _ in axes]
    first_reason: dict[tuple[int, str], str] = {}
    for index, texts in enumerate(points(axes)):
        pairs = [f"{axis.key}={text}" for axis, text in zip(axes, texts, strict=True)]
        overlay = parse_set(pairs)
        try:
            scenario = build(Scenario, deep_merge(base_raw, overlay))
            check_scenario(scenario)
        except ScenarioError as err:
            reason = str(err)
            for a, text in enumerate(texts):
                first_reason.setdefault((a, text), reason)
            planned.append(Point(index, {a.key: resolved(overlay, a.key) for a in axes}, None, reason))
            continue
        for a, text in enumerate(texts):
            usable[a].add(text)
        mapping = to_mapping(scenario)
        planned.append(Point(index, {a.key: resolved(mapping, a.key) for a in axes}, mapping))
    for a, axis in enumerate(axes):
        for text in axis.texts:
            if text not in usable[a]:
                raise ScenarioError(first_reason[(a, text)])
    return planned


def resolved(mapping: Mapping[str, Any], key: str) -> Any:
    """The value of a dotted key in a scenario's plain mapping; a value that is not a scalar as its JSON text."""
    node: Any = mapping
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    if isinstance(node, Mapping | list | tuple):
        return json.dumps(node, sort_keys=True)
    return node


def base_hash(scenario: Scenario, calibration: str | None) -> str:
    """What identifies a sweep's base: the resolved scenario (its name and seed aside) and the calibration file."""
    mapping = to_mapping(scenario)
    mapping.pop("name", None)
    mapping["workload"].pop("seed", None)
    calib = hashlib.sha256(read_regular(calibration, YAML_MAX_BYTES)).hexdigest() if calibration else None
    text = json.dumps({"scenario": mapping, "calibration": calib}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _existing_rows(folder: Path, base: Scenario, digest: str) -> list[dict[str, Any]]:
    """The rows the folder holds for this base; a folder of another base is an error, never a silent mix."""
    if not folder.is_dir():
        return []
    scenario_file = folder / SCENARIO_FILE
    if scenario_file.exists():
        try:
            held = load_scenario(scenario_file)
        except ScenarioError as err:
            raise SweepError(f"--out {folder}: its {SCENARIO_FILE} cannot be read: {err}") from None
        if base_hash(held, None) != base_hash(base, None):
            raise SweepError(f"--out {folder} holds a sweep of another base scenario ({SCENARIO_FILE} differs): "
                             "give another --out")
    rows = sweep_table.read_rows(folder)
    others = sorted({row["base_hash"] for row in rows} - {digest})
    if others:
        raise SweepError(f"--out {folder} holds rows of another base scenario (hash {others[0]}, this one {digest}): "
                         "give another --out")
    return rows


def _write_base(path: Path, scenario: Scenario) -> None:
    from infersim.output_paths import atomic_write

    text = ("# The resolved base scenario of an infersim sweep (overlays and --set applied, no grid values).\n"
            "# Its hash, name and workload.seed aside, identifies the sweep's rows (base_hash).\n"
            + yaml.safe_dump(to_mapping(scenario), sort_keys=False, allow_unicode=True))
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def _row(point: int, seed: int, grid: Mapping[str, Any], status: str, error: str, metrics: Mapping[str, Any],
         wall_s: float | None, digest: str) -> dict[str, Any]:
    return {"point": point, "seed": seed, "grid": dict(grid), "status": status, "error": error,
            "metrics": dict(metrics), "wall_s": wall_s, "base_hash": digest}


def _page_title(title: str, ran: int, seeds: int, adaptive: bool = False) -> str:
    seeds_text = (f", mean and 95 % interval of {START_SEEDS}-{seeds} seeds (added where a paired delta was wide)"
                  if adaptive else f", mean and 95 % interval of {seeds} seeds" if seeds > 1 else "")
    return (f"{title}<br><sup>{ran} points ran{seeds_text}; P90 interactivity = 1 / P90 TPOT of the run summary; "
            "frontier: no other point is both more interactive and higher</sup>")


def _frontier_report(stats: Sequence[Mapping[str, Any]], at: float | None) -> dict[str, Any]:
    """The throughput frontier's points and, with `at`, both frontiers read at that interactivity."""
    from infersim import sweep_page

    report: dict[str, Any] = {
        "frontier": [_frontier_record(s) for s in sweep_page.frontier_records(stats, sweep_page.PER_GPU)]}
    if at is not None:
        report["at_interactivity"] = {"interactivity_tok_per_s_per_user": at,
                                      **{metric: sweep_page.reading(stats, metric, at)
                                         for metric in (sweep_page.PER_GPU, sweep_page.PER_DOLLAR)}}
    return report


def _first_error(finished: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    errors = [row["error"] for row in finished if row["status"] == "error"]
    return {"first_error": errors[0]} if errors else {}


def _frontier_record(stat: Mapping[str, Any]) -> dict[str, Any]:
    from infersim import sweep_page

    return {"point": stat["point"], **stat["grid"],
            "interactivity_p90_tok_per_s_per_user": stat[sweep_page.INTERACTIVITY],
            sweep_page.PER_GPU: stat[sweep_page.PER_GPU], sweep_page.PER_DOLLAR: stat[sweep_page.PER_DOLLAR]}


def table_layout(result: Mapping[str, Any]) -> dict[str, Any]:
    """The result for print_result: each frontier reading a table of its own, configurations as KEY=VALUE text."""
    layout = {k: v for k, v in result.items() if k != "at_interactivity"}
    layout["files"] = ", ".join(result["files"])
    at = result.get("at_interactivity")
    if at is not None:
        x = at["interactivity_tok_per_s_per_user"]
        for metric in (k for k in at if k != "interactivity_tok_per_s_per_user"):
            found = at[metric]
            layout[f"{metric} at {x:g} tok/s/user"] = {
                metric: found["value"],
                "configuration": (" ".join(f"{k}={v}" for k, v in found["configuration"].items())
                                  if found["configuration"] else "-"),
                "point": found["point"],
                "point P90 interactivity (tok/s/user)": found.get("point_interactivity_tok_per_s_per_user"),
                f"point {metric}": found.get("point_value"),
                "note": found["note"]}
    return layout
