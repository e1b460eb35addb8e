"""`suites`: time each suite's planned cases on a CUDA GPU and write one CSV per suite.

    python -m companion.bench suites --suite all --out DIR      # DIR defaults to $OUT
    python -m companion.bench suites --suite gemm --list        # the planned cases, no GPU needed
    python -m companion.bench suites --suite all --grid heldout --out DIR   # <suite>_heldout.csv
    python -m companion.bench suites --suite kda --grid residency --out DIR   # kda_residency.csv
    python -m companion.bench suites --suite kda --grid generations --out DIR   # kda_generations.csv
    python -m companion.bench suites --suite mla_decode --grid splits --out DIR   # mla_decode_splits.csv

`--grid heldout` times the held-out grid (`validation.heldout`: a seeded draw over the catalog's shapes) of the
suites that have one, instead of the planned cases. `--grid residency` times the KDA verify launches of one to ten
workgroups a SM (`validation.suites.kda.residency_cases`); `--grid generations` those of 4 to 21 a SM, around the
slots a SM holds (`generations_cases`). `--grid splits` times MLA decode at 1, 4 and 16 KV partitions on 16 seeded
shapes no planned row has (`validation.suites.mla_decode.splits_cases`).

The cases, their exact FLOP and minimal HBM byte counts (counted before anything is timed) and the CSV
columns come from the product side (`validation.suites`). Each suite's timing and correctness checks are
in `companion.bench.suites.<name>` (`run(cases, env) -> (rows, failures)`), imported only when a
GPU run starts: they import torch and triton, so `--list` works without either.
"""

from __future__ import annotations

import argparse
import importlib
import traceback
from collections.abc import Sequence
from pathlib import Path

from companion.bench.output import report_failures, start_timing
from validation import suites
from validation.measure_output import write_csv_atomic


def run_suite(suite: str, cases: Sequence, env: dict) -> tuple[list[dict], list[str]]:
    """Rows of every case that passed its check and was timed, and a line per failed case."""
    try:
        return importlib.import_module(f"companion.bench.suites.{suite}").run(cases, env)
    except Exception as e:
        traceback.print_exc()
        return [], [f"suite aborted: {e}"]


def _shape_text(row: dict[str, object], suite: str) -> str:
    return " ".join(f"{c}={row[c]}" for c in suites.shape_columns(suite) if row.get(c) not in (None, ""))


def format_table(suite: str, rows: Sequence[dict[str, object]]) -> str:
    """Short human table: median time per op and the achieved FLOP and byte rates."""
    lines = [f"== {suite} ({len(rows)} rows)"]
    lines.append(
        f"{'kernel':24} {'shape':34} {'dtype':14} {'mode':5} {'median_us':>10} {'TFLOP/s':>8} {'GB/s':>8}"
    )
    for row in rows:
        t = float(row["time_s_median"])
        flop_rate = int(row["flop"]) / t / 1e12
        byte_rate = int(row["bytes"]) / t / 1e9
        lines.append(
            f"{row['kernel']!s:24} {_shape_text(row, suite):34} {row['dtype']!s:14} {row['launch_mode']!s:5} "
            f"{t * 1e6:10.2f} {flop_rate:8.1f} {byte_rate:8.0f}"
        )
    return "\n".join(lines)

EXTRA_GRIDS = suites.EXTRA_GRIDS  # a suite's grids of its own, `<grid>_cases()`, written to `<suite>_<grid>.csv`


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite", action="append", required=True, choices=[*suites.NAMES, "all"], help="repeatable")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: $OUT)")
    parser.add_argument("--list", action="store_true", help="print the planned cases and their counts; no GPU")
    parser.add_argument("--grid", choices=["planned", "heldout", *EXTRA_GRIDS], default="planned",
                        help="planned: each suite's own cases (default); heldout: its held-out draw; residency: "
                             "the suites that have one (kda), launches of 1 to 10 workgroups a SM; generations: "
                             "4 to 21 a SM, around the workgroups a SM holds at once; splits (mla_decode): 1, 4 "
                             "and 16 KV partitions at 16 seeded shapes")
    parser.add_argument("--draw", type=int, default=1, help="with --grid heldout: which draw (validation.heldout)")


def _cases(suite: str, grid: str, draw: int = 1) -> list:
    from validation import heldout

    if grid in EXTRA_GRIDS:
        return list(getattr(suites.load(suite), f"{grid}_cases")())
    return heldout.cases(suite, draw=draw) if grid == "heldout" else list(suites.cases(suite))


def _csv_name(suite: str, grid: str, draw: int) -> str:
    from validation import heldout

    if grid in EXTRA_GRIDS:
        return f"{suite}_{grid}.csv"
    return heldout.csv_name(suite, draw) if grid == "heldout" else f"{suite}.csv"


def run(args: argparse.Namespace) -> int:
    from validation import heldout

    names = suites.expand(args.suite)
    if args.grid == "heldout":
        names = [n for n in names if n in heldout.SUITES]
    elif args.grid in EXTRA_GRIDS:
        names = [n for n in names if hasattr(suites.load(n), f"{args.grid}_cases")]
    if args.list:
        for suite in names:
            for case in _cases(suite, args.grid, args.draw):
                print(suite, suites.case_row(case))
        return 0
    started = start_timing(args.out, "bench suites")
    if isinstance(started, int):
        return started
    out, env = started
    from companion.bench import timing

    failures: list[str] = []
    tables = []
    for suite in names:
        rows, suite_failures = run_suite(suite, _cases(suite, args.grid, args.draw), env)
        failures += [f"{suite}: {f}" for f in suite_failures]
        path = out / _csv_name(suite, args.grid, args.draw)
        write_csv_atomic(path, suites.columns(suite), rows)
        print(f"wrote {path} ({len(rows)} rows); nvidia-smi: {timing.smi_clocks()}", flush=True)
        tables.append(format_table(suite, rows))
    print("\n\n".join(tables))
    return report_failures("bench suites", failures)
