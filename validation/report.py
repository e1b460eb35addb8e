"""Predicted against measured for recorded kernel rows: per-row error and per-group median and p90.

Covers every suite of `validation.suites` (the library kernels `gemm`, `copy_grid`, `launch` and the
companion kernels') and the two-GPU collective sweeps (`validation.collective_report`). GEMM
efficiencies and launch overheads come from published figures or stated assumptions
(hwmodels/specs, hwmodels/calibrations), so those rows are held out; rows that fitted a constant
(the NCCL library protocols, the occupancy probe's anchor row) carry `fitted` and are summarized apart.
`infersim validate --hw h200` prints the summary (`--rows` every row); `validation.report_document`
writes REPORT.md and its figure.
"""

from __future__ import annotations

import csv
import itertools
import statistics
from dataclasses import replace
from pathlib import Path

from validation import suites
from validation.collective_report import compare_collectives
from validation.comparison import Comparison

DATA_DIR = Path(__file__).parent / "data"


def compare_suite(path: Path, gpu_name: str, suite: str | None = None) -> list[Comparison]:
    """Every row of one suite's CSV (the suite named by the file, or `suite`) beside the model's prediction for the
    same shape and launch mode."""
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    one = suites.load(suite or path.stem).compare
    return [one(row, gpu_name) for row in rows]


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1] if len(values) > 1 else values[0]


def error_summary(rows: list[Comparison]) -> dict[str, dict[str, float]]:
    """Per group: row counts, and the median and p90 absolute % error of its held-out rows.

    Rows used to fit a constant (`fitted`) are counted apart and summarized apart; a group whose rows
    were all fitted reports their errors under `fitted_median_abs_pct` only.
    """
    groups: dict[str, list[Comparison]] = {}
    for row in rows:
        groups.setdefault(row.group, []).append(row)
    out: dict[str, dict[str, float]] = {}
    for name, members in sorted(groups.items()):
        held = [abs(r.error) * 100 for r in members if not r.fitted]
        fitted = [abs(r.error) * 100 for r in members if r.fitted]
        entry: dict[str, float] = {"rows": len(members), "held_out_rows": len(held), "fitted_rows": len(fitted)}
        if held:
            signed = statistics.median(r.error * 100 for r in members if not r.fitted)
            entry |= {"median_abs_pct": statistics.median(held), "p90_abs_pct": _p90(held),
                      "median_signed_pct": signed}  # < 0: the model predicts faster than measured
        if fitted:
            entry |= {"fitted_median_abs_pct": statistics.median(fitted), "fitted_p90_abs_pct": _p90(fitted)}
        out[name] = entry
    return out


def compare_all(hw: str) -> list[Comparison]:
    """Every recorded row of a GPU: its kernel suites, their grids of their own (`suites.EXTRA_GRIDS`, each row's
    group followed by the grid's name), and its two-GPU collective sweeps if any."""
    paths = [DATA_DIR / hw / f"{suite}.csv" for suite in suites.NAMES]
    rows = [row for path in paths if path.exists() for row in compare_suite(path, hw)]
    for suite, grid in itertools.product(suites.NAMES, suites.EXTRA_GRIDS):
        path = DATA_DIR / hw / f"{suite}_{grid}.csv"
        if path.exists():
            rows += [replace(row, group=f"{row.group} {grid}") for row in compare_suite(path, hw, suite)]
    return rows + compare_collectives(f"{hw}x2")


def compare_heldout(hw: str) -> list[Comparison]:
    """Every row of a GPU's held-out grid (`validation.heldout`: `<suite>_heldout.csv`), priced as the planned rows
    are; none fitted anything."""
    from validation import heldout

    rows = []
    for draw, recorded in heldout.RECORDED.get(hw, {}).items():
        for suite in recorded:
            path = DATA_DIR / hw / heldout.csv_name(suite, draw)
            if path.exists():
                rows += compare_suite(path, hw, suite)
    return rows


def heldout_summary(hw: str) -> dict[str, object]:
    """The held-out grid's rows, overall median and p90 |error|, and per family (with the signed median)."""
    rows = compare_heldout(hw)
    return {"rows": len(rows), **overall_summary(rows),
            "families": [{"family": name, **{k: s.get(k) for k in ("rows", "median_abs_pct", "p90_abs_pct",
                                                                      "median_signed_pct")}}
                         for name, s in error_summary(rows).items()]}


def roofline_summary(hw: str) -> dict[str, dict[str, float]]:
    """`error_summary` of every row of a GPU under the roofline cost model (the before column)."""
    from hwmodels.calibration import cost_model_chosen

    with cost_model_chosen("roofline"):
        return error_summary(compare_all(hw))


def overall_summary(rows: list[Comparison]) -> dict[str, float]:
    """Median and p90 absolute % error over every held-out row, whatever its family."""
    held = [abs(r.error) * 100 for r in rows if not r.fitted]
    if not held:
        return {}
    return {"all_rows_median_abs_pct": statistics.median(held), "all_rows_p90_abs_pct": _p90(held)}


def leave_one_family_out(hw: str, rows: list[Comparison]) -> dict[str, float]:
    """Per family: its median absolute % error when none of its rows fitted any constant.

    The kernel model fits nothing to these rows (its constants come from the probes, published figures and
    stated assumptions), so a family without fitted rows keeps its held-out error. The collective library's
    protocols are fitted on all-reduce rows: leaving the all-reduce family out, they are fitted on the
    all-gather and reduce-scatter rows instead and every all-reduce row is predicted with that fit.
    """
    out: dict[str, float] = {}
    by_group: dict[str, list[Comparison]] = {}
    for row in rows:
        by_group.setdefault(row.group, []).append(row)
    for name, members in by_group.items():
        if not any(r.fitted for r in members):
            out[name] = statistics.median(abs(r.error) * 100 for r in members)
    out.update(refit_collectives_without(f"{hw}x2"))
    return out


def refit_collectives_without(folder: str) -> dict[str, float]:
    """{'allreduce nccl': median |error| of every all-reduce row, the library fitted on the other ops only}."""
    from traces.calibrate_links import errors, fit, read_rows
    from validation.collective_sweep import NCCL_SWEEPS

    platform = {"h200x2": "h200-2"}.get(folder)
    if platform is None or platform not in NCCL_SWEEPS:
        return {}
    rows = read_rows(NCCL_SWEEPS[platform])
    library = fit(rows, platform, train=lambda r: r.op.value != "allreduce")
    held = [abs(e["error_pct"]) for e in errors(rows, library, platform) if e["op"] == "allreduce"]
    return {"allreduce nccl": statistics.median(held)} if held else {}
