"""`infersim run`: the JSON summary contract, files written atomically, and one-line errors for bad scenarios."""

from __future__ import annotations

import json

import pytest

from infersim.cli import main

SUMMARY_KEYS = {
    "requests_completed", "simulated_s", "wall_s", "sim_speedup", "gpus", "ttft_s", "tpot_s", "itl_s",
    "interactivity_tok_per_s_per_user", "output_tok_per_s", "total_tok_per_s", "output_tok_per_s_per_gpu",
    "total_tok_per_s_per_gpu", "tokens_per_dollar", "prefix_hit_rate", "spec_tokens_per_cycle",
}
QUICK = ["--set", "workload.sessions=4", "--set", "workload.turns_mean=4"]


def test_run_json_reports_every_summary_key_and_writes_its_files(capsys, tmp_path):
    assert main(["run", *QUICK, "--json", "--out", str(tmp_path)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert set(summary) >= SUMMARY_KEYS
    for key in ("ttft_s", "tpot_s", "itl_s"):
        assert set(summary[key]) == {"p50", "p90", "p99", "mean"}
    assert summary["gpus"] == 8 and summary["requests_completed"] > 0
    assert summary["tokens_per_dollar"] == pytest.approx(summary["total_tok_per_s_per_gpu"] * 3600 / 1.50)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["report.html", "requests.csv", "steps.csv", "summary.json"]
    assert json.loads((tmp_path / "summary.json").read_text())["requests_completed"] == summary["requests_completed"]


@pytest.mark.parametrize(("sets", "message"), [
    (["serving.max_num_seq=8"], "serving: unknown key 'max_num_seq' (valid keys: max_num_seqs"),
    (["servings.x=1"], "scenario: unknown key 'servings' (valid keys: name, hardware, model"),
    (["serving.max_num_seqs=many"], "serving.max_num_seqs: expected a whole number, got 'many'"),
    (["parallel.tp=5"], "tp=5 does not divide kimi-k3's 96 mla heads"),
    (["hardware.platform=h100-8"], "kimi-k3 does not fit on h100 at tp=8"),
    (["workload.kind=chat"], "workload.kind: 'chat' is not one of agentic, random, trace"),
    (["parallel.tp=16"], "parallel.tp=16 needs more GPUs than mi355x-8 has (8)"),
    (["precision.experts=fp8"], "precision.experts"),
])
def test_bad_scenarios_get_one_line_errors(capsys, tmp_path, sets, message):
    argv = ["run", *QUICK]
    for item in sets:
        argv += ["--set", item]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing written for a failed run


def test_a_malformed_scenario_file_is_named(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("serving: [1, 2\n")
    assert main(["run", str(bad)]) == 2
    assert "bad.yaml: line" in capsys.readouterr().err
