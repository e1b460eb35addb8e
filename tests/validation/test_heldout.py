"""The held-out grid: a fixed draw over the catalog's shapes, disjoint from the planned grids, and its CSVs are that
draw measured (so the rows validate reports apart are the ones the sampler chose, not picked by hand)."""

from __future__ import annotations

import csv

import pytest

from validation import heldout, suites
from validation.report import DATA_DIR


@pytest.mark.parametrize("suite", heldout.SUITES)
def test_the_draw_is_fixed_and_held_out(suite):
    drawn = heldout.cases(suite)
    assert drawn == heldout.cases(suite) and len(drawn) >= heldout.COUNTS[suite] - 2
    assert heldout.planned_overlap(suite, drawn) == []
    assert heldout.cases(suite, seed=heldout.SEED + 1) != drawn  # the seed, not a list, chose them


@pytest.mark.parametrize(("gpu", "suite", "draw"),
                         [(g, s, d) for g, draws in heldout.RECORDED.items() for d, ss in draws.items() for s in ss])
def test_the_recorded_csv_is_the_draw(gpu, suite, draw):
    assert draw in heldout.DRAWS
    path = DATA_DIR / gpu / heldout.csv_name(suite, draw)
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    shape = suites.shape_columns(suite)
    planned = {tuple("" if suites.case_row(c)[k] is None else str(suites.case_row(c)[k]) for k in ("kernel", *shape))
               for c in heldout.cases(suite, draw=draw)}
    recorded = {tuple(str(r[k]) for k in ("kernel", *shape)) for r in rows}
    assert recorded == planned


def test_gemm_shapes_come_from_the_catalog_projections():
    shapes = {(n, k) for _, n, k, _ in heldout._gemm_shapes()}
    assert all((c.n, c.k) in shapes for c in heldout.cases("gemm"))
    # the drawn shapes are the builder's of their day: today's catalog differs only where the builder changed since
    # (MLA's q and latent-KV down-projections as one GEMM, the router in bf16)
    now, then = set(heldout.catalog_gemm_shapes()), set(heldout._gemm_shapes())
    assert len(now & then) >= 0.8 * len(then) and len(then) >= 150
    assert {c.launch_mode for c in heldout.cases("gemm")} == {"graph", "eager"}


def test_the_drawn_catalog_is_still_in_the_catalog():
    from workloads.model import model_names

    assert set(heldout.DRAWN_MODELS) <= set(model_names())
