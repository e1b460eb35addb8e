"""`infersim validate`: every recorded measurement of a GPU beside the model's prediction, summarized per family."""

from __future__ import annotations

from typing import Any

_FAMILY_KEYS = ("rows", "held_out_rows", "median_abs_pct", "p90_abs_pct", "median_signed_pct", "fitted_rows",
                "fitted_median_abs_pct")


def validate_query(hw: str, write_report: bool = False) -> dict[str, Any]:
    """Median and p90 absolute % error per kernel family, held-out rows apart from the fitted ones."""
    from hwmodels.spec import spec_names
    from validation.report import DATA_DIR, compare_all, error_summary

    recorded = sorted(p.name for p in DATA_DIR.iterdir() if p.is_dir() and p.name in spec_names("gpus"))
    if hw not in recorded:
        raise ValueError(f"no measurements for --hw {hw!r}; recorded: {', '.join(recorded) or 'none'}")
    rows = compare_all(hw)
    result: dict[str, Any] = {
        "hw": hw,
        "rows": len(rows),
        "held_out_rows": sum(1 for r in rows if not r.fitted),
        "fitted_rows": sum(1 for r in rows if r.fitted),
        "families": [
            {"family": name, **{key: summary.get(key) for key in _FAMILY_KEYS}}
            for name, summary in error_summary(rows).items()
        ],
    }
    if write_report:
        from validation.report_document import write_report as write

        result["written"] = [str(p) for p in write(hw, rows)]
    return result
