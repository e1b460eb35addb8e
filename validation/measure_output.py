"""Statistics of timed samples, and the atomic CSV writer of measurement files (no torch needed; text files go
through `hwmodels.output_files.write_text_atomic`)."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path

from hwmodels.output_files import write_text_atomic


def percentile(values: Sequence[float], q: float) -> float:
    """q-th percentile (0..100) with linear interpolation between order statistics (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(times_s: Sequence[float]) -> dict[str, object]:
    """Median, p10 and p90 of per-op times in seconds, and how many samples they came from."""
    bad = [t for t in times_s if not (math.isfinite(t) and t > 0)]
    if bad:
        raise ValueError(f"non-positive or non-finite times: {bad[:3]}")
    return {
        "time_s_median": percentile(times_s, 50),
        "time_s_p10": percentile(times_s, 10),
        "time_s_p90": percentile(times_s, 90),
        "repeats": len(times_s),
    }



def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6e}"
    return str(value)


def write_csv_atomic(path: Path, header: Sequence[str], rows: Sequence[dict[str, object]]) -> None:
    """Write rows to path through a temporary file in the same folder, then rename it into place."""
    path = Path(path)
    unknown = sorted({key for row in rows for key in row} - set(header))
    if unknown:
        raise ValueError(f"row keys not in the {path.name} header: {unknown}")
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    writer.writerows([_cell(row.get(col)) for col in header] for row in rows)
    write_text_atomic(path, buf.getvalue())
