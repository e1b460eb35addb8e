"""`infersim validate`: every recorded measurement of a GPU beside the model's prediction, summarized per family.

    infersim validate --hw h200 [--rows] [--write-report]   # kernel suites and collective sweeps of a GPU
    infersim validate --links h200-2 [--refit]               # the collective-library calibration (NCCL sweep)
    infersim validate --published [--rows]                   # published all-reduce, fused-MoE and FP8 GEMM tables
    infersim validate --serving [--platform GPU] [--html FILE] # published end-to-end serving results
"""

from __future__ import annotations

import argparse
from typing import Any

_FAMILY_KEYS = ("rows", "held_out_rows", "median_abs_pct", "p90_abs_pct", "median_signed_pct", "fitted_rows",
                "fitted_median_abs_pct")
# Columns of the same families under the roofline model (before the cycle-level terms), and with each family
# left out of every fit (leave one family out).
_BEFORE_KEYS = {"median_abs_pct": "roofline_median_abs_pct", "median_signed_pct": "roofline_median_signed_pct"}


def validate_command(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """(JSON result, table title) of `infersim validate`; a wrong combination of options is a ValueError."""
    given = [name for name, value in (("--hw", args.hw), ("--links", args.links), ("--published", args.published),
                                      ("--serving", args.serving)) if value]
    if len(given) != 1:
        raise ValueError(f"give exactly one of --hw GPU, --links PLATFORM, --published or --serving (got {len(given)})")
    if (args.platform or args.html) and not args.serving:
        raise ValueError("--platform and --html go with --serving")
    if args.rows and not (args.hw or args.published):
        raise ValueError("--rows goes with --hw GPU or --published")
    if args.write_report and not (args.hw or args.serving):
        raise ValueError("--write-report goes with --hw GPU or --serving")
    if args.write_report and args.serving and args.platform:
        raise ValueError("--write-report with --serving summarizes every platform: leave out --platform")
    if args.refit and not args.links:
        raise ValueError("--refit goes with --links PLATFORM")
    if args.links:
        from traces.calibrate_links import check
        from validation.collective_sweep import NCCL_SWEEPS

        return (check(args.links, NCCL_SWEEPS, refit=args.refit),
                f"NCCL sweep against the {args.links} library calibration")
    if args.published:
        return published_query(rows=args.rows), "Predicted vs the published all-reduce, fused-MoE and FP8 GEMM tables"
    if args.serving:
        return (serving_query(args.platform, args.html, args.write_report),
                "Predicted vs published end-to-end serving results")
    return validate_query(args.hw, args.write_report, rows=args.rows), f"Predicted vs measured on {args.hw}"


def validate_query(hw: str, write_report: bool = False, rows: bool = False) -> dict[str, Any]:
    """Median and p90 absolute % error per kernel family, held-out rows apart from the fitted ones."""
    from hwmodels.spec import spec_names
    from validation.report import DATA_DIR, compare_all, error_summary

    recorded = sorted(p.name for p in DATA_DIR.iterdir() if p.is_dir() and p.name in spec_names("gpus"))
    if hw not in recorded:
        raise ValueError(f"no measurements for --hw {hw!r}; recorded: {', '.join(recorded) or 'none'}")
    from validation.report import leave_one_family_out, overall_summary, roofline_summary

    compared = compare_all(hw)
    before = roofline_summary(hw)
    left_out = leave_one_family_out(hw, compared)
    result: dict[str, Any] = {
        "hw": hw,
        "rows": len(compared),
        "held_out_rows": sum(1 for r in compared if not r.fitted),
        "fitted_rows": sum(1 for r in compared if r.fitted),
        **overall_summary(compared),
        "families": [
            {"family": name, **{key: summary.get(key) for key in _FAMILY_KEYS},
             **{new: before.get(name, {}).get(key) for key, new in _BEFORE_KEYS.items()},
             "left_out_median_abs_pct": left_out.get(name)}
            for name, summary in error_summary(compared).items()
        ],
    }
    from validation import design_changes
    from validation.report import heldout_summary

    result["held_out_grid"] = heldout_summary(hw)
    result["design_changes"] = design_changes.summary(design_changes.pairs(compared))
    if rows:
        result["every_row"] = [
            {"family": r.group, "row": r.label, "launch_mode": r.launch_mode, "measured_s": r.measured_s,
             "predicted_s": r.predicted_s, "error_pct": r.error * 100, "bound": r.bound, "fitted": r.fitted}
            for r in compared
        ]
    if write_report:
        from validation.report_document import write_report as write

        result["written"] = [str(p) for p in write(hw, compared)]
    return result


def published_query(rows: bool = False) -> dict[str, Any]:
    """Each series' error on the published all-reduce tables, and each group's on the published fused-MoE and
    block-scaled FP8 GEMM kernel times; with `rows`, also every row beside its prediction."""
    from validation import published_gemm, published_moe
    from validation.published_collectives import NCCL_TESTS, TABLE, compare_mi300x, compare_nccl_tests, summary

    compared = compare_mi300x() + compare_nccl_tests()
    moe = published_moe.compare()
    gemm = published_gemm.compare()
    result: dict[str, Any] = {
        "tables": [f"validation/published/{TABLE.name}", f"validation/published/{NCCL_TESTS.name}",
                   f"validation/published/{published_moe.TABLE.name}",
                   f"validation/published/{published_gemm.TABLE.name}"],
        "series": summary(compared),
        "moe_kernels": published_moe.summary(moe),
        "gemm_kernels": published_gemm.summary(gemm),
    }
    if rows:
        result["every_row"] = [{"series": r.label, "size_bytes": r.size_bytes, "published_s": r.measured_s,
                                "predicted_s": r.predicted_s, "error_pct": r.error * 100} for r in compared]
        result["moe_every_row"] = [{"row": r.label, "tokens": r.tokens, "published_s": r.measured_s,
                                    "predicted_s": r.predicted_s, "error_pct": r.error * 100} for r in moe]
        result["gemm_every_row"] = [{"row": r.label, "published_s": r.measured_s, "predicted_s": r.predicted_s,
                                     "error_pct": r.error * 100} for r in gemm]
    return result


def serving_query(platforms: list[str] | None = None, html: str | None = None, write_summary: bool = False
                  ) -> dict[str, Any]:
    """Every published serving configuration the simulator stands for, simulated (a progress line on stderr), with
    the error of throughput per GPU, median TPOT and median TTFT per platform; the rows left out, with why.
    `write_summary`: also rewrite `validation/published/serving_summary.json`, the per-platform errors that
    `infersim run` shows for its GPU."""
    from infersim.output_paths import write_target
    from infersim.progress import CountProgress
    from validation import serving

    kept, _ = serving.points()
    known = sorted({p.platform for p in kept})
    for name in platforms or ():
        if name not in known:
            raise ValueError(f"--platform {name!r}: no published serving rows (valid: {', '.join(known)})")
    selected = [p for p in kept if not platforms or p.platform in platforms]
    target = write_target(html, "--html") if html else None  # fail before simulating, not after
    with CountProgress(len(selected), "configurations", "simulating") as bar:
        compared, left = serving.compare(selected, progress=bar.advance)
    result: dict[str, Any] = {
        "table": str(serving.TABLE.relative_to(serving.TABLE.parents[2])),
        "platforms": serving.summary(compared),
        "every_row": [{"row": r.point.index, "source": r.point.source_id, "configuration": r.point.label,
                       **{f"published_{m}": r.point.published.get(m) for m in serving.METRICS},
                       **{f"predicted_{m}": r.predicted.get(m) for m in serving.METRICS},
                       **{f"error_pct_{m}": r.errors[m] * 100 for m in r.errors}} for r in compared],
        "left_out": [{"row": index, "configuration": label, "why": why} for index, label, why in left
                     if not platforms or label.split()[0] in platforms],
    }
    from hwmodels.output_files import write_text_atomic

    written = []
    if target is not None:
        write_text_atomic(target, serving.figure_html(compared))
        written.append(str(target))
    if write_summary:
        write_text_atomic(serving.SUMMARY, serving.summary_json(compared))
        written.append(str(serving.SUMMARY.relative_to(serving.SUMMARY.parents[2])))
    if written:
        result["written"] = written
    return result
