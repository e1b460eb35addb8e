"""Short rows' pieces through the H200's L2: the rate is refitted from the tiles probe, and tested on other rows."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import numpy as np
import pytest

from hwmodels.program import Program
from hwmodels.spec import load_gpu

TILES = Path(__file__).parents[2] / "validation" / "data" / "h200" / "probe_tiles.csv"
FIT_TILES, FIT_FOOTPRINTS = (4, 16), (16 << 20, 32 << 20)  # stores that stay in L2; every other row tests


def _is_fit(tile: int, footprint: int) -> bool:
    return tile in FIT_TILES and footprint in FIT_FOOTPRINTS


def test_the_h200_rate_is_one_line_through_the_4_and_16_byte_tiles_in_l2():
    with TILES.open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if _is_fit(int(r["tile_bytes"]), int(r["footprint_bytes"]))]
    assert len(rows) == 4
    pieces = np.array([int(r["footprint_bytes"]) / int(r["tile_bytes"]) for r in rows])
    times = np.array([float(r["time_s_median"]) for r in rows])
    (slope, intercept), *_ = np.linalg.lstsq(np.vstack([pieces, np.ones_like(pieces)]).T, times, rcond=None)
    assert load_gpu("h200").l2_short_row_s == pytest.approx(slope, rel=0.01)
    # one line whatever the piece's bytes: a 4-byte and a 16-byte piece cost the L2 the same
    assert np.max(np.abs((slope * pieces + intercept) / times - 1)) < 0.03


def test_only_rows_shorter_than_a_sector_and_gpus_that_measured_it_pay_pieces():
    h200, b200 = load_gpu("h200"), load_gpu("b200")  # the B200 has measured neither
    narrow = Program(trips=4, trip_store_bytes=128 * 16, setup_load_bytes=128 * 16, row_run_bytes=16,
                     store_footprint_bytes=3 << 20)
    assert narrow.short_rows_s(h200, 1000) == pytest.approx(5 * 128 * 1000 * h200.l2_short_row_s)
    assert narrow.short_rows_s(b200, 1000) == 0.0
    whole = Program(trips=4, trip_store_bytes=128 * 32, setup_load_bytes=128 * 32, row_run_bytes=32)
    assert whole.short_rows_s(h200, 1000) == 0.0
    # merged in the H200's L2 while the launch's stores fit there; past it, partial sectors at HBM as well
    assert narrow.sector_factor(h200) == 1.0 < narrow.sector_factor(b200)
    big = Program(trips=4, trip_store_bytes=128 * 16, row_run_bytes=16, store_footprint_bytes=200 << 20)
    assert big.sector_factor(h200) > 1.0


def test_the_rows_the_rate_was_not_fitted_on():
    """4-byte tiles at every other footprint stay within 10 %; 16-byte tiles past L2 stay fast as before (the
    partial-sector model at HBM, a known gap) and never turn slow."""
    from validation.probe_checks import store_tile_rows

    held = [r for r in store_tile_rows()
            if not any(r.label == f"store {t} B tiles, {f >> 20} MiB" for t in FIT_TILES for f in FIT_FOOTPRINTS)]
    four = [r for r in held if r.label.startswith("store 4 B")]
    assert len(four) == 6 and all(abs(r.error) < 0.10 for r in four)
    sixteen = [r for r in held if r.label.startswith("store 16 B") and not r.label.endswith((" 1 MiB", " 4 MiB"))]
    assert len(sixteen) == 4 and all(-0.25 < r.error < 0.05 for r in sixteen)
    assert statistics.median(abs(r.error) for r in four) < 0.03
