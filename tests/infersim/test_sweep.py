"""`infersim sweep`: grid values, one row per point and seed, resumption, the executors, one-line errors."""

from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd
import pytest

from infersim.cli import main
from infersim.sweep_grid import GridError, parse_axis, parse_grid
from infersim.sweep_table import TableError, open_journal

QUICK = ["--set", "workload.sessions=2", "--set", "workload.turns_mean=2"]
# columns that depend on the machine or the order points ran in, not on the point
TIMING = ["wall_s", "sim_speedup"]


def sweep(capsys, out, *flags: str) -> dict:
    """Run `infersim sweep default` with a small workload (one seed unless `flags` say) and return its JSON result."""
    seeds = [] if "--seeds" in flags else ["--seeds", "1"]
    assert main(["sweep", "default", *QUICK, "--out", str(out), "--json", *seeds, *flags]) == 0, \
        capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def one_line_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(("spec", "texts"), [
    ("parallel.dcp=1,2,4,8", ("1", "2", "4", "8")),
    ("serving.max_concurrency=0..6", tuple(str(v) for v in range(7))),
    ("serving.max_concurrency=4..64:4", tuple(str(v) for v in range(4, 65, 4))),
    ("serving.max_concurrency=4..512*2", ("4", "8", "16", "32", "64", "128", "256", "512")),
    ("serving.max_concurrency=3..100*3", ("3", "9", "27", "81")),
    ("serving.max_concurrency=1,4..8:2,20", ("1", "4", "6", "8", "20")),
    ("collectives.quickreduce=int4, fp8", ("int4", "fp8")),
    ("cache.prefix_caching=true,false", ("true", "false")),
    ("serving.gpu_memory_utilization=0.8,0.9", ("0.8", "0.9")),
    ("workload.sessions=5..5", ("5",)),
])
def test_grid_values_are_lists_ranges_steps_and_factors(spec, texts):
    axis = parse_axis(spec)
    assert axis.key == spec.partition("=")[0] and axis.texts == texts


@pytest.mark.parametrize(("spec", "message"), [
    ("parallel.dcp", "expected KEY=VALUES"),
    ("=1,2", "expected KEY=VALUES"),
    ("parallel.dcp=", "expected KEY=VALUES"),
    ("parallel.dcp=1,,2", "an empty value"),
    ("parallel.dcp=8..1", "the range 8..1 is empty"),
    ("parallel.dcp=1..8:0", "the step of 1..8:0 must be at least 1"),
    ("parallel.dcp=1..8*1", "the factor of 1..8*1 must be at least 2"),
    ("parallel.dcp=0..8*2", "a geometric range starts above 0"),
    ("parallel.dcp=0.5..2", "is not a range of whole numbers"),
    ("parallel.dcp=1..2..3", "is not a range of whole numbers"),
    ("parallel.dcp=1,2,1", "the value 1 is given twice"),
    ("parallel.dcp=1..4,2", "the value 2 is given twice"),
    ("parallel.dcp=0..1000000", "more than 100,000 values"),
])
def test_bad_grid_specs_are_errors_naming_the_flag(spec, message):
    with pytest.raises(GridError, match=r"^--grid ") as err:
        parse_axis(spec)
    assert message in str(err.value)


def test_a_key_gridded_twice_or_too_many_points_is_an_error():
    with pytest.raises(GridError, match=r"--grid parallel\.dcp: given twice"):
        parse_grid(["parallel.dcp=1", "parallel.dcp=2"])
    with pytest.raises(GridError, match="more than 1,000,000 runs"):
        parse_grid(["serving.max_concurrency=1..1000", "workload.sessions=1..1000"], seeds=2)


@pytest.mark.parametrize(("flags", "message"), [
    (["--grid", "parallel.dcp=1..x"], "--grid 'parallel.dcp=1..x': '1..x' is not a range"),
    (["--grid", "serving.max_concurency=1,2"], "serving: unknown key 'max_concurency' (valid keys: max_num_seqs"),
    (["--grid", "parallel.dcp=3,8"], "parallel.dcp: dcp=3 must divide tp=8"),
    (["--grid", "spec_decode.drafts=1,2", "--set", "spec_decode.mean_tokens_per_cycle=2.51"],
     "spec_decode.mean_tokens_per_cycle: must lie in [1.0, 2] at 1 drafts, got 2.51 (a mean holds for one draft"),
    (["--grid", "serving.max_num_seqs=many"], "serving.max_num_seqs: expected a whole number, got 'many'"),
    (["--grid", "workload.seed=1,2"], "--grid workload.seed: seeds are swept with --seeds N"),
    (["--grid", "parallel.dcp=1", "--set", "parallel.dcp=2"], "--grid parallel.dcp: also given with --set"),
    (["--grid", "parallel.dcp=1", "--scheduler", "tcp://127.0.0.1:1"], "--scheduler names a Dask scheduler"),
    (["--grid", "parallel.dcp=1", "--at-interactivity", "0"],
     "--at-interactivity must be a finite, positive tok/s/user, got 0"),
])
def test_bad_sweeps_are_one_line_errors_before_anything_is_written(capsys, tmp_path, flags, message):
    out = tmp_path / "out"
    err = one_line_error(capsys, ["sweep", "default", *QUICK, "--out", str(out), *flags])
    assert message in err
    assert not out.exists()


def test_a_bad_grid_value_is_the_error_run_set_gives(capsys, tmp_path):
    run_err = one_line_error(capsys, ["run", *QUICK, "--set", "parallel.dcp=3"])
    sweep_err = one_line_error(capsys, ["sweep", "default", *QUICK, "--grid", "parallel.dcp=1,3",
                                        "--out", str(tmp_path / "out")])
    assert sweep_err == run_err


def test_the_table_has_one_row_per_point_and_seed_with_the_grid_columns(capsys, tmp_path):
    result = sweep(capsys, tmp_path, "--grid", "serving.max_concurrency=1,2", "--grid", "parallel.dcp=1,8",
                   "--seeds", "2", "--jobs", "2", "--at-interactivity", "50")
    assert (result["points"], result["seeds"], result["ran"], result["reused"], result["rows"]) == (4, 2, 8, 0, 8)
    table = pd.read_parquet(tmp_path / "sweep.parquet")
    assert list(table.columns[:6]) == ["point", "seed", "serving.max_concurrency", "parallel.dcp", "status", "error"]
    assert list(table.columns[-2:]) == ["wall_s", "base_hash"]
    for metric in ("ttft_s.p50", "ttft_s.p90", "tpot_s.p50", "tpot_s.p90", "itl_s.p50", "itl_s.p90",
                   "total_tok_per_s_per_gpu", "tokens_per_dollar", "interactivity_tok_per_s_per_user.p50",
                   "interactivity_tok_per_s_per_user.p90"):
        assert metric in table.columns and table[metric].notna().all(), metric
    assert not any(c.startswith("cycle_cost.") for c in table.columns)
    assert list(zip(table["point"], table["seed"], strict=True)) == [(p, s) for p in range(4) for s in (0, 1)]
    assert list(table["serving.max_concurrency"]) == [1, 1, 1, 1, 2, 2, 2, 2]
    assert list(table["parallel.dcp"]) == [1, 1, 8, 8, 1, 1, 8, 8]
    assert set(table["status"]) == {"ok"} and (table["wall_s"] > 0).all() and table["base_hash"].nunique() == 1
    csv = pd.read_csv(tmp_path / "sweep.csv")
    assert list(csv.columns) == list(table.columns) and len(csv) == 8
    assert sorted(p.name for p in tmp_path.iterdir()) == [".infersim", "scenario.yaml",
                                                          "sweep.csv", "sweep.html", "sweep.parquet",
                                                          "sweep.rows.jsonl"]
    assert "workload:" in (tmp_path / "scenario.yaml").read_text()
    # the frontier and its reading are of the per-point means over the seeds
    assert result["frontier"] and all("interactivity_p90_tok_per_s_per_user" in r for r in result["frontier"])
    at = result["at_interactivity"]
    assert at["interactivity_tok_per_s_per_user"] == 50.0
    best = at["total_tok_per_s_per_gpu"]
    assert set(best["configuration"]) == {"serving.max_concurrency", "parallel.dcp"}
    means = table.groupby("point")[["interactivity_tok_per_s_per_user.p90", "total_tok_per_s_per_gpu"]].mean()
    assert best["point_value"] == pytest.approx(means.loc[best["point"], "total_tok_per_s_per_gpu"])
    assert best["point_interactivity_tok_per_s_per_user"] >= 50.0


def test_a_rerun_runs_only_the_new_points_and_a_different_base_is_refused(capsys, tmp_path):
    first = sweep(capsys, tmp_path, "--grid", "serving.max_concurrency=1,2", "--jobs", "1")
    assert (first["ran"], first["reused"]) == (2, 0)
    before = pd.read_parquet(tmp_path / "sweep.parquet")
    second = sweep(capsys, tmp_path, "--grid", "serving.max_concurrency=1..3", "--jobs", "1")
    assert (second["ran"], second["reused"], second["rows"]) == (1, 2, 3)
    after = pd.read_parquet(tmp_path / "sweep.parquet")
    assert list(after["serving.max_concurrency"]) == [1, 2, 3]
    pd.testing.assert_frame_equal(after.iloc[:2], before)  # kept rows are the rows, bit for bit (timings too)
    assert len((tmp_path / "sweep.rows.jsonl").read_text().splitlines()) == 3
    # a second grid key: earlier rows hold the base's value of it (dcp 1) and match those points
    third = sweep(capsys, tmp_path, "--grid", "serving.max_concurrency=1..3", "--grid", "parallel.dcp=1,8",
                  "--jobs", "1")
    assert (third["ran"], third["reused"], third["rows"]) == (3, 3, 6)
    # more seeds run the new seeds only; fewer keep the others' rows after this grid's
    fourth = sweep(capsys, tmp_path, "--grid", "serving.max_concurrency=2", "--seeds", "2", "--jobs", "1")
    assert (fourth["ran"], fourth["reused"], fourth["rows"]) == (1, 1, 7)
    table = pd.read_parquet(tmp_path / "sweep.parquet")
    assert list(zip(table["point"], table["seed"], strict=True))[:2] == [(0, 0), (0, 1)]
    assert list(table["point"]) == [0, 0, 1, 2, 3, 4, 5]  # every other point once, numbered after
    err = one_line_error(capsys, ["sweep", "default", "--set", "workload.sessions=3", "--grid",
                                  "serving.max_concurrency=1", "--out", str(tmp_path)])
    assert f"--out {tmp_path} holds a sweep of another base scenario" in err
    assert len(pd.read_parquet(tmp_path / "sweep.parquet")) == 7  # untouched


def test_rows_in_the_journal_survive_an_interrupted_write(capsys, tmp_path):
    sweep(capsys, tmp_path, "--grid", "serving.max_concurrency=1,2", "--jobs", "1")
    (tmp_path / "sweep.parquet").unlink()  # as if killed before the table was written
    (tmp_path / "sweep.csv").unlink()
    with (tmp_path / "sweep.rows.jsonl").open("a") as journal:
        journal.write('{"point": 5, "seed"')  # a line cut off mid-write
    again = sweep(capsys, tmp_path, "--grid", "serving.max_concurrency=1,2", "--jobs", "1")
    assert (again["ran"], again["reused"]) == (0, 2)
    assert len(pd.read_csv(tmp_path / "sweep.csv")) == 2


def test_refused_combinations_are_skipped_rows_and_failed_runs_error_rows(capsys, tmp_path):
    result = sweep(capsys, tmp_path, "--grid", "parallel.tp=4,8", "--grid", "parallel.dcp=1,8", "--jobs", "2")
    assert (result["points"], result["ran"], result["skipped"], result["errors"]) == (4, 3, 1, 1)
    table = pd.read_parquet(tmp_path / "sweep.parquet").set_index(["parallel.tp", "parallel.dcp"])
    assert list(table["status"]) == ["error", "skipped", "ok", "ok"]
    assert "dcp=8 must divide tp=4" in table.loc[(4, 8), "error"]  # refused when built: never ran
    assert "kimi-k3 does not fit on mi355x at tp=4" in table.loc[(4, 1), "error"]  # refused while simulating
    assert result["first_error"] == table.loc[(4, 1), "error"]
    assert table.loc[[(4, 1), (4, 8)], "total_tok_per_s_per_gpu"].isna().all()
    again = sweep(capsys, tmp_path, "--grid", "parallel.tp=4,8", "--grid", "parallel.dcp=1,8", "--jobs", "1")
    assert (again["ran"], again["reused"], again["skipped"]) == (1, 2, 1)  # an error row runs again


def test_the_process_pool_and_a_dask_cluster_give_the_same_table(capsys, tmp_path):
    pytest.importorskip("dask.distributed")
    from dask.distributed import LocalCluster

    grid = ["--grid", "serving.max_concurrency=1,2", "--grid", "spec_decode.drafts=0,2"]
    sweep(capsys, tmp_path / "pool", *grid, "--jobs", "2")
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        result = sweep(capsys, tmp_path / "dask", *grid, "--executor", "dask", "--scheduler",
                       cluster.scheduler_address)
    assert result["executor"].startswith("dask at ")
    pool = pd.read_parquet(tmp_path / "pool" / "sweep.parquet").drop(columns=TIMING)
    dask = pd.read_parquet(tmp_path / "dask" / "sweep.parquet").drop(columns=TIMING)
    pd.testing.assert_frame_equal(pool, dask)


def test_a_missing_dask_or_pyarrow_is_one_line_naming_the_extra(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "dask.distributed", None)  # import fails as if not installed
    err = one_line_error(capsys, ["sweep", "default", "--grid", "parallel.dcp=1", "--executor", "dask",
                                  "--out", str(tmp_path / "out")])
    assert "--executor dask needs dask.distributed: pip install 'infersim[sweep]'" in err
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    err = one_line_error(capsys, ["sweep", "default", "--grid", "parallel.dcp=1", "--out", str(tmp_path / "out")])
    assert "needs pyarrow: pip install 'infersim[sweep]'" in err
    assert not (tmp_path / "out").exists()


def test_two_sweeps_cannot_write_one_folder_at_once(tmp_path):
    with open_journal(tmp_path), pytest.raises(TableError, match="another sweep is writing there"):
        open_journal(tmp_path)
    open_journal(tmp_path).close()  # free again once the first is closed


def test_an_unreachable_scheduler_is_one_line_before_anything_is_written(capsys, tmp_path, monkeypatch):
    pytest.importorskip("dask.distributed")
    monkeypatch.setattr("infersim.sweep_executors.DASK_CONNECT_S", 1)
    err = one_line_error(capsys, ["sweep", "default", *QUICK, "--grid", "parallel.dcp=1", "--executor", "dask",
                                  "--scheduler", "tcp://127.0.0.1:9", "--out", str(tmp_path / "out")])
    assert "--scheduler tcp://127.0.0.1:9: cannot connect" in err
    assert not (tmp_path / "out").exists()


def test_paired_deltas_see_a_small_change_that_the_points_own_intervals_hide():
    from infersim.sweep_deltas import Baseline, paired, unsettled

    rng = np.random.default_rng(7)
    workload = rng.normal(1000.0, 80.0, size=6)  # each seed's stream: +-8 % from seed to seed
    rows = []
    for point, (dcp, gain) in enumerate(((1, 1.0), (8, 1.02), (4, 1.0))):
        for seed, base in enumerate(workload):
            # DCP8: a 2 % gain and a little noise of its own; DCP4: the baseline's stream exactly, no change
            value = base * gain * (1 + rng.normal(0.0, 0.002)) if dcp == 8 else base
            rows.append({"point": point, "seed": seed, "grid": {"parallel.dcp": dcp},
                         "metrics": {"total_tok_per_s_per_gpu": value}})
    records = {r["grid"]["parallel.dcp"]: r for r in paired(rows, ["parallel.dcp"], Baseline("parallel.dcp", 1))}
    assert set(records) == {8, 4} and records[8]["baseline_point"] == 0 and records[8]["seeds"] == 6
    assert records[8]["delta_pct"] == pytest.approx(2.0, abs=0.5) and records[8]["verdict"] == "beats"
    assert records[8]["half_width_pct"] < 1.0  # the points' own intervals are about +-8 %: they overlap
    assert records[4]["verdict"] == "n.s." and records[4]["delta_pct"] == 0.0
    assert unsettled(list(records.values()), target_pct=0.01) == {0, 1}  # the wide point and its baseline
    assert unsettled(list(records.values()), target_pct=5.0) == set()


def test_an_adaptive_sweep_adds_seeds_until_the_deltas_settle_and_says_so(capsys, tmp_path):
    result = sweep(capsys, tmp_path / "s", "--grid", "parallel.dcp=1,8", "--seeds", "auto", "--max-seeds", "3",
                   "--target-pct", "50")
    assert result["baseline"] == "parallel.dcp=1" and result["seeds"] == 2  # settled in the first round
    assert result["seeds_rule"].startswith("adaptive: every delta") and result["seeds_per_point"] == {"2": 2}
    (delta,) = result["deltas"]
    assert delta["parallel.dcp"] == 8 and delta["seeds"] == 2 and delta["half_width_pct"] <= 50
    capped = sweep(capsys, tmp_path / "c", "--grid", "parallel.dcp=1,8", "--seeds", "auto", "--max-seeds", "3",
                   "--target-pct", "0.01", "--baseline", "parallel.dcp=8")
    assert capped["seeds"] == 3 and capped["seeds_per_point"] == {"3": 2} and capped["runs"] == 6
    assert "seed cap (3) reached" in capped["seeds_rule"] and capped["deltas"][0]["parallel.dcp"] == 1
    page = (tmp_path / "c" / "sweep.html").read_text()
    assert "throughput per GPU against parallel.dcp=8, seed by seed" in page
