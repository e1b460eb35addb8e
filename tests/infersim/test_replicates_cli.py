"""`infersim run --seeds N` and `infersim compare --seeds N`: intervals, common random numbers, --jobs, bad counts."""

from __future__ import annotations

import json
import math

import pytest

from infersim.cli import main
from infersim.compare import DEFAULT_SEEDS, METRICS
from simulator.scenario import SCENARIO_DIR

QUICK = ["--set", "workload.sessions=3", "--set", "workload.turns_mean=3"]
DCP8 = str(SCENARIO_DIR / "changes" / "dcp8.yaml")
HOST_TIMING = {"wall_s", "sim_speedup", "cycle_cost.miss_wall_s"}  # seconds of this machine, not of the model


def run_json(capsys, *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def model_values(summary: dict, prefix: str = "") -> dict:
    """The summary's values by dotted path, less the host's timing."""
    flat = {}
    for key, value in summary.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(model_values(value, f"{path}."))
        elif path not in HOST_TIMING:
            flat[path] = value
    return flat


def test_seeds_1_is_the_plain_run(capsys, tmp_path):
    plain = run_json(capsys, "run", *QUICK, "--out", str(tmp_path / "plain"))
    one = run_json(capsys, "run", *QUICK, "--seeds", "1", "--jobs", "2", "--out", str(tmp_path / "one"))
    assert "replicates" not in one and model_values(one) == model_values(plain)
    names = [sorted(p.name for p in (tmp_path / d).iterdir()) for d in ("one", "plain")]
    assert names[0] == names[1]
    for name in ("requests.csv", "steps.csv", "scenario.yaml"):
        assert (tmp_path / "one" / name).read_text() == (tmp_path / "plain" / name).read_text()


def test_run_seeds_reports_each_metric_with_its_interval_and_writes_every_replicate(capsys, tmp_path):
    result = run_json(capsys, "run", *QUICK, "--set", "workload.seed=4", "--seeds", "3", "--out", str(tmp_path))
    plain = run_json(capsys, "run", *QUICK, "--set", "workload.seed=4")
    assert model_values({k: v for k, v in result.items() if k != "replicates"}) == model_values(plain)
    replicates = result["replicates"]
    assert (replicates["n"], replicates["seeds"], replicates["confidence"]) == (3, [4, 5, 6], 0.95)
    assert "Student t" in replicates["interval"]
    tok = replicates["metrics"]["total_tok_per_s_per_gpu"]
    assert tok["values"][0] == plain["total_tok_per_s_per_gpu"]
    seed_6 = run_json(capsys, "run", *QUICK, "--set", "workload.seed=6")
    assert tok["values"][2] == seed_6["total_tok_per_s_per_gpu"]
    assert tok["mean"] == pytest.approx(math.fsum(tok["values"]) / 3) and tok["lo"] < tok["mean"] < tok["hi"]
    assert set(replicates["metrics"]) >= {"ttft_s.p90", "tpot_s.p50", "prefix_hit_rate", "requests_completed"}
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [".infersim", "replicates.json",
                     "report.html", "requests.csv", "scenario.yaml", "steps.csv", "summary.json"]
    written = json.loads((tmp_path / "replicates.json").read_text())
    assert [r["seed"] for r in written["summaries"]] == [4, 5, 6]
    assert written["summaries"][2]["summary"]["total_tok_per_s_per_gpu"] == seed_6["total_tok_per_s_per_gpu"]
    assert json.loads((tmp_path / "summary.json").read_text())["replicates"]["seeds"] == [4, 5, 6]


def test_the_run_table_shows_mean_and_interval(capsys):
    assert main(["run", *QUICK, "--seeds", "2"]) == 0
    out = capsys.readouterr().out
    assert "mean [95% interval]" in out and "Student t over the 2 replicate values" in out
    assert "ttft_s.p90" in out and " ms" in out


def test_results_do_not_depend_on_jobs(capsys):
    one = run_json(capsys, "run", *QUICK, "--seeds", "3", "--jobs", "1")
    three = run_json(capsys, "run", *QUICK, "--seeds", "3", "--jobs", "3")
    for result in (one, three):
        for metric in HOST_TIMING:
            result["replicates"]["metrics"].pop(metric, None)
    assert model_values(one) == model_values(three)
    argv = ["compare", "default", DCP8, *QUICK, "--seeds", "2"]
    first, second = run_json(capsys, *argv, "--jobs", "1"), run_json(capsys, *argv, "--jobs", "2")
    for result in (first, second):
        result["base"]["values"].pop("wall_s")
        result["base"]["per_seed"].pop("wall_s")
        for change in result["changes"]:
            for part in ("values", "delta_pct", "delta_ci"):
                change[part].pop("wall_s")
    assert first == second


def test_a_change_that_changes_nothing_has_zero_deltas_not_significant(capsys, tmp_path):
    same = tmp_path / "same.yaml"
    same.write_text("# sets the default's own value\nserving:\n  max_num_seqs: 64\n")
    result = run_json(capsys, "compare", "default", str(same), *QUICK, "--seeds", "3")
    assert result["seeds"] == [0, 1, 2]
    (change,) = result["changes"]
    for metric in METRICS:
        if metric == "wall_s":
            continue
        ci = change["delta_ci"][metric]
        assert ci["per_seed_pct"] == [0.0, 0.0, 0.0], metric
        assert (ci["mean_pct"], ci["lo_pct"], ci["hi_pct"], ci["significant"]) == (0.0, 0.0, 0.0, False), metric
        assert change["values"][metric] == result["base"]["values"][metric]
    assert main(["compare", "default", str(same), *QUICK, "--seeds", "3"]) == 0
    assert "+0.0% [+0.0, +0.0] n.s." in capsys.readouterr().out


def test_compare_pairs_the_seeds(capsys):
    result = run_json(capsys, "compare", "default", DCP8, *QUICK, "--seeds", "3")
    (change,) = result["changes"]
    base = result["base"]["per_seed"]
    for metric in ("total_tok_per_s_per_gpu", "ttft_s.p90", "kv_capacity_tokens"):
        ci = change["delta_ci"][metric]
        assert len(ci["per_seed_pct"]) == 3 and len(base[metric]) == 3
        assert ci["mean_pct"] == pytest.approx(sum(ci["per_seed_pct"]) / 3)
        assert change["delta_pct"][metric] == ci["mean_pct"]
        assert ci["lo_pct"] <= ci["mean_pct"] <= ci["hi_pct"]
    # the same requests and the same acceptance draws on a seed: tokens per cycle do not move with DCP
    assert change["delta_ci"]["spec_tokens_per_cycle"]["per_seed_pct"] == [0.0, 0.0, 0.0]
    kv = change["delta_ci"]["kv_capacity_tokens"]
    assert kv["significant"] is True and kv["lo_pct"] == pytest.approx(kv["hi_pct"])


def test_compare_adds_seeds_until_the_throughput_delta_settles_unless_told(capsys):
    small = ["--set", "workload.sessions=2", "--set", "workload.turns_mean=2"]
    result = run_json(capsys, "compare", "default", DCP8, *small)
    ci = result["changes"][0]["delta_ci"]["total_tok_per_s_per_gpu"]
    assert len(result["seeds"]) >= 2 and result["changes"][0]["seeds"] == len(ci["per_seed_pct"])
    assert result["seeds_rule"].startswith("adaptive: every change's total_tok_per_s_per_gpu delta within")
    assert ci["hi_pct"] - ci["mean_pct"] <= 3.0
    # a target no workload noise reaches: seeds grow round by round to the cap, which the rule names
    capped = run_json(capsys, "compare", "default", DCP8, *small, "--target-pct", "0.01", "--max-seeds", "4")
    assert capped["seeds"] == [0, 1, 2, 3] and capped["changes"][0]["seeds"] == 4
    assert capped["seeds_rule"].startswith("adaptive: the seed cap (4) reached with 1 change(s)'")
    fixed = run_json(capsys, "compare", "default", DCP8, *small, "--seeds", str(DEFAULT_SEEDS))
    assert fixed["seeds"] == list(range(DEFAULT_SEEDS)) and fixed["seeds_rule"] == f"fixed: {DEFAULT_SEEDS} seed(s)"
    one = run_json(capsys, "compare", "default", DCP8, *QUICK, "--seeds", "1")
    assert "seeds" not in one and "delta_ci" not in one["changes"][0]


@pytest.mark.parametrize(("argv", "message"), [
    (["run", "--seeds", "0"], "--seeds: 0 is out of range (valid: 1..1000"),
    (["run", "--seeds", "-3"], "--seeds: -3 is out of range (valid: 1..1000"),
    (["run", "--seeds", "two"], "--seeds: expected a whole number, got 'two'"),
    (["run", "--jobs", "0"], "--jobs: 0 is out of range (valid: 1..1024"),
    (["run", "--seeds", "3", "--jobs", "0"], "--jobs: 0 is out of range (valid: 1..1024"),
    (["compare", "default", DCP8, "--seeds", "0"], "--seeds: 0 is out of range (valid: 1..1000"),
    (["compare", "default", DCP8, "--seeds", "-3"], "--seeds: -3 is out of range (valid: 1..1000"),
    (["compare", "default", DCP8, "--jobs", "0"], "--jobs: 0 is out of range (valid: 1..1024"),
    (["compare", "default", DCP8, "--seeds", "many"], "--seeds: expected a whole number, got 'many'"),
    (["run", "--seeds", "2", "--format", "vllm"],
     "--format vllm and --save-result are one run's result: leave out --seeds"),
])
def test_bad_counts_are_one_line_errors(capsys, tmp_path, argv, message):
    out = ["--out", str(tmp_path / "out")] if argv[0] == "run" else []
    assert main([*argv, *QUICK, *out]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("infersim: error: ")
    assert message in captured.err and captured.err.count("\n") == 1
    assert not (tmp_path / "out").exists()
