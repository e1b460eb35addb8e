"""`infersim run` in `vllm bench serve`'s terms: its flag names as aliases of scenario keys, and `--format vllm`,
the result in the key names and units of `vllm bench serve --save-result`."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from infersim import vllm_bench
from infersim.cli import main

# The shape of a --save-result file, built from vLLM's source (data/README.md says which file and commit).
SAMPLE = json.loads((Path(__file__).parent / "data" / "vllm_bench_serve_result.json").read_text())

QUICK = ["--set", "hardware.platform=h200-8", "--set", "model.name=qwen3-32b", "--set", "spec_decode.drafts=0",
         "--set", "precision={}", "--set", "workload.kind=random"]
ALIASES = ["--num-prompts", "60", "--request-rate", "30", "--max-concurrency", "8", "--random-input-len", "512",
           "--random-output-len", "24", "--random-range-ratio", "0.5", "--burstiness", "0.5", "--seed", "3"]
SETS = ["workload.num_prompts=60", "workload.arrival=poisson", "workload.rate_per_s=30", "serving.max_concurrency=8",
        "workload.input_len=512", "workload.output_len=24", "workload.range_ratio=0.5", "workload.burstiness=0.5",
        "workload.seed=3"]


def _vllm_unit(key: str) -> str:
    """The unit of a --save-result key, as vllm/benchmarks/serve.py computes it."""
    if key.endswith("_ms"):
        return "ms"  # process_one_metric: `np.mean(...) * 1000` of seconds
    return {
        "duration": "s",  # time.perf_counter() difference
        "num_prompts": "requests", "completed": "requests", "failed": "requests",
        "max_concurrency": "requests", "max_concurrent_requests": "requests",  # peak of [start, start + latency)
        "total_input_tokens": "tokens", "total_output_tokens": "tokens",
        "request_throughput": "requests/s", "request_goodput": "requests/s",  # completed / dur_s
        "request_rate": "requests/s",
        "output_throughput": "tokens/s", "total_token_throughput": "tokens/s",  # tokens / dur_s
        "max_output_tokens_per_s": "tokens/s",  # most tokens in one 1-second bucket
        "burstiness": "gamma shape",  # np.random.gamma(shape=burstiness, ...)
        "rtfx": "audio s/s",  # calculate_metrics: audio seconds over dur_s
    }[key]


def _without_timing(summary: dict) -> dict:
    """A summary less what depends on the host's clock."""
    out = {k: v for k, v in summary.items() if k not in ("wall_s", "sim_speedup")}
    out["cycle_cost"] = {k: v for k, v in summary["cycle_cost"].items() if k != "miss_wall_s"}
    return out


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory):
    """One capped run at a finite rate with --format vllm: (printed object, written files' folder)."""
    out = tmp_path_factory.mktemp("vllm")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
        assert main(["run", *QUICK, *ALIASES, "--format", "vllm", "--out", str(out)]) == 0
    return json.loads(stdout.getvalue()), out


def test_every_key_is_a_save_result_key_with_the_same_unit(vllm_run):
    printed, out = vllm_run
    assert json.loads((out / "vllm_result.json").read_text()) == printed
    assert sorted(p.name for p in out.iterdir()) == [".infersim", "report.html",
                                                     "requests.csv", "scenario.yaml", "steps.csv",
                                                     "summary.json", "vllm_result.json"]
    assert list(printed) == list(SAMPLE)  # every key of the result file, in its order
    numeric = [k for k, v in printed.items() if isinstance(v, int | float) and not isinstance(v, bool)]
    assert len(numeric) >= 50
    for key in numeric:
        assert isinstance(SAMPLE[key], int | float), key
        assert vllm_bench.unit_of(key) == _vllm_unit(key), key
    for key, value in printed.items():
        assert value is not None or key in vllm_bench.NULL_REASONS or key == "label", key
    assert len(printed["latencies"]) == len(printed["queue_times"]) == printed["completed"] == 60
    assert np.mean(printed["latencies"]) * 1e3 == pytest.approx(printed["mean_e2el_ms"])
    # the keys a capped run at a finite rate writes: every statistic of every metric
    for metric in vllm_bench.METRICS:
        for stat in ("mean", "median", "std", "p50", "p90", "p99"):
            assert f"{stat}_{metric}_ms" in printed
    assert printed["request_goodput"] is None and printed["max_concurrency"] == 8
    assert printed["request_rate"] == 30.0 and printed["burstiness"] == 0.5 and printed["num_prompts"] == 60


def test_values_agree_with_the_summary_in_ms(vllm_run):
    printed, out = vllm_run
    summary = json.loads((out / "summary.json").read_text())
    requests = pd.read_csv(out / "requests.csv")
    assert printed["duration"] == summary["simulated_s"]
    assert printed["completed"] == summary["requests_completed"] == len(requests) == 60
    assert printed["failed"] == 0
    assert printed["total_input_tokens"] == requests["prompt_tokens"].sum()
    assert printed["total_output_tokens"] == requests["output_tokens"].sum()
    assert printed["request_throughput"] == pytest.approx(60 / summary["simulated_s"], rel=1e-12)
    assert printed["output_throughput"] == summary["output_tok_per_s"]
    assert printed["total_token_throughput"] == summary["total_tok_per_s"]
    for metric, key in (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("itl", "itl_s"), ("e2el", "e2el_s"),
                        ("client_queue_time", "queue_wait_s")):
        stats = summary[key]
        assert printed[f"median_{metric}_ms"] == pytest.approx(1e3 * stats["p50"], rel=1e-12), metric
        for stat in ("mean", "p50", "p90", "p99"):
            assert printed[f"{stat}_{metric}_ms"] == pytest.approx(1e3 * stats[stat], rel=1e-12), (metric, stat)
    per_request = {
        "ttft": requests["first_token_s"] - requests["sent_s"],
        "e2el": requests["finish_s"] - requests["sent_s"],
        "client_queue_time": requests["sent_s"] - requests["arrival_s"],
        "e2el_including_client_queue": requests["finish_s"] - requests["arrival_s"],
    }
    for metric, values in per_request.items():
        assert printed[f"std_{metric}_ms"] == pytest.approx(1e3 * np.std(values), rel=1e-9), metric
    including = per_request["e2el_including_client_queue"]
    assert printed["mean_e2el_including_client_queue_ms"] == pytest.approx(1e3 * including.mean(), rel=1e-12)
    assert printed["p99_e2el_including_client_queue_ms"] == pytest.approx(1e3 * np.percentile(including, 99),
                                                                          rel=1e-12)
    assert printed["max_concurrent_requests"] == 8  # the cap binds at 30 requests/s
    assert 0 < printed["max_output_tokens_per_s"] <= requests["output_tokens"].sum()


def test_an_uncapped_run_at_rate_inf_has_no_client_queue_keys(capsys):
    assert main(["run", *QUICK, "--num-prompts", "12", "--request-rate", "inf", "--random-output-len", "8",
                 "--format", "vllm"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["request_rate"] == "inf" and printed["max_concurrency"] is None
    assert not any("client_queue" in key for key in printed)
    assert printed["mean_ttft_ms"] > 0
    assert set(printed) <= set(SAMPLE)


def test_format_json_is_the_summary(capsys):
    assert main(["run", *QUICK, "--num-prompts", "6", "--random-output-len", "4", "--format", "json"]) == 0
    assert "ttft_s" in json.loads(capsys.readouterr().out)


def test_the_aliases_are_their_set_forms(tmp_path, capsys):
    by_alias, by_set = tmp_path / "alias", tmp_path / "set"
    assert main(["run", *QUICK, *ALIASES, "--json", "--out", str(by_alias)]) == 0
    aliased = json.loads(capsys.readouterr().out)
    argv = ["run", *QUICK]
    for item in SETS:
        argv += ["--set", item]
    assert main([*argv, "--json", "--out", str(by_set)]) == 0
    assert _without_timing(json.loads(capsys.readouterr().out)) == _without_timing(aliased)
    for name in ("scenario.yaml", "requests.csv", "steps.csv"):
        assert (by_alias / name).read_bytes() == (by_set / name).read_bytes(), name


def test_request_rate_inf_is_infinite_arrivals(tmp_path, capsys):
    assert main(["run", *QUICK, "--request-rate", "inf", "--num-prompts", "5", "--random-output-len", "4",
                 "--json", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    assert "  arrival: infinite\n" in (tmp_path / "scenario.yaml").read_text()
    assert (pd.read_csv(tmp_path / "requests.csv")["arrival_s"] == 0).all()


def test_a_random_workload_defaults_to_vllms_random_dataset():
    from simulator.scenario import ArrivalKind, Workload, WorkloadKind

    w = Workload(kind=WorkloadKind.RANDOM)
    # vllm bench serve: --num-prompts 1000, --random-input-len 1024, --random-output-len 128, --request-rate inf
    assert (w.num_prompts, w.input_len, w.output_len, w.arrival) == (1000, 1024, 128, ArrivalKind.INFINITE)
    assert Workload().arrival is ArrivalKind.POISSON  # an agentic stream's sessions keep arriving over time
    assert Workload(kind=WorkloadKind.RANDOM, arrival=ArrivalKind.POISSON).arrival is ArrivalKind.POISSON


def test_dataset_name_random_sends_everything_at_once_unless_a_rate_is_given(tmp_path, capsys):
    small = ["--set", "hardware.platform=h200-8", "--set", "model.name=qwen3-32b", "--set", "spec_decode.drafts=0",
             "--set", "precision={}", "--num-prompts", "6", "--random-output-len", "4"]
    assert main(["run", *small, "--dataset-name", "random", "--json", "--out", str(tmp_path / "inf")]) == 0
    assert main(["run", *small, "--dataset-name", "random", "--request-rate", "2", "--json",
                 "--out", str(tmp_path / "rate")]) == 0
    capsys.readouterr()
    assert (pd.read_csv(tmp_path / "inf" / "requests.csv")["arrival_s"] == 0).all()
    assert (pd.read_csv(tmp_path / "rate" / "requests.csv")["arrival_s"] > 0).sum() >= 5


def test_the_help_lists_the_flags_in_their_own_group(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = capsys.readouterr().out
    group = text[text.index("vllm bench serve flags:"):]
    for alias in vllm_bench.ALIASES:
        assert alias.flag in group
    assert "--format {json,vllm}" in text


@pytest.mark.parametrize(("argv", "message"), [
    (["--num-prompts", "5", "--set", "workload.num_prompts=6"],
     "--num-prompts and --set workload.num_prompts=6 both set workload.num_prompts"),
    (["--request-rate", "5", "--set", "workload.arrival=fixed"],
     "--request-rate and --set workload.arrival=fixed both set workload.arrival"),
    (["--request-rate", "inf", "--set", "workload.arrival=poisson"], "both set workload.arrival"),
    (["--seed", "1", "--set", "workload={seed: 2}"], "--seed and --set workload={seed: 2} both set workload.seed"),
    (["--max-concurrency", "4", "--set", "serving.max_concurrency=2"], "both set serving.max_concurrency"),
    (["--max-concurrency", "0"], "--max-concurrency 0: must be at least 1"),
    (["--max-concurrency", "many"], "--max-concurrency many: serving.max_concurrency: expected a whole number"),
    (["--num-prompts", "0"], "--num-prompts 0: workload.num_prompts: 0 is out of range (valid: 1..10000000"),
    (["--request-rate", "-2"], "--request-rate -2: workload.rate_per_s: -2 is out of range (valid: 0..1000000000"),
    (["--request-rate", "0"], "--request-rate 0: workload.rate_per_s: must be positive for poisson arrivals"),
    (["--random-input-len", "1.5"], "--random-input-len 1.5: workload.input_len: expected a whole number"),
    (["--random-range-ratio", "1"], "--random-range-ratio 1: workload.range_ratio: 1 is out of range (valid: 0..0.999"),
    (["--burstiness", "0"], "--burstiness 0: workload.burstiness: 0 is out of range (valid: 1e-06..1000000"),
    (["--burstiness", ".inf"], "--burstiness .inf: workload.burstiness: expected a finite number, got inf"),
    (["--json", "--format", "vllm"], "--json prints infersim's summary and --format vllm"),
    (["--dataset-name", "sharegpt"], "--dataset-name sharegpt: infersim simulates vllm bench serve's random dataset"),
    (["--input-len", "64", "--random-input-len", "64"], "--input-len and --random-input-len both set the same length"),
    (["--percentile-metrics", "ttft,goodput"], "--percentile-metrics ttft,goodput: unknown metric goodput (valid:"),
    (["--metric-percentiles", "50,120"], "--metric-percentiles 50,120: each percentile must lie in (0, 100]"),
    (["--metric-percentiles", "p99"], "--metric-percentiles p99: expected comma-separated numbers"),
])
def test_conflicts_and_bad_values_are_one_line_errors(capsys, tmp_path, argv, message):
    assert main(["run", *QUICK, *argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag", [a.flag for a in vllm_bench.ALIASES if a.random_only])
def test_a_random_workload_flag_on_another_workload_is_refused(capsys, flag):
    assert main(["run", flag, "0.5" if flag == "--random-range-ratio" else "1"]) == 2  # the default is agentic
    err = capsys.readouterr().err
    assert f"{flag} sets workload." in err and "only a random workload reads" in err and err.count("\n") == 1


def test_max_concurrency_and_seed_apply_to_any_workload(capsys):
    assert main(["run", "--set", "workload.sessions=3", "--set", "workload.turns_mean=2", "--max-concurrency", "2",
                 "--seed", "4", "--format", "vllm"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["max_concurrency"] == 2 and printed["max_concurrent_requests"] <= 2
    assert printed["request_rate"] is None and printed["num_prompts"] is None  # an agentic rate counts sessions
    assert printed["label"] == "default" and printed["model_id"] == "kimi-k3"


def test_a_drafting_run_writes_vllms_spec_decode_keys(capsys):
    assert main(["run", "--set", "workload.sessions=3", "--set", "workload.turns_mean=2", "--format", "vllm",
                 "--label", "k3-mtp"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["label"] == "k3-mtp"
    assert printed["spec_decode_num_drafts"] > 0
    assert printed["spec_decode_draft_tokens"] == 2 * printed["spec_decode_num_drafts"]  # the default's two drafts
    # realized by the run's keyed draws: near the configured 2.51 tokens a cycle
    assert printed["spec_decode_acceptance_length"] == pytest.approx(2.51, abs=0.15)
    assert printed["spec_decode_acceptance_rate"] == pytest.approx(
        (printed["spec_decode_acceptance_length"] - 1) / 2 * 100)
    assert printed["spec_decode_per_position_acceptance_rates"] == pytest.approx([0.82665, 0.82665**2])


def test_result_flags_choose_the_metrics_and_percentiles_and_save_result_writes_the_file(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", *QUICK[:-2], "--dataset-name", "random", "--num-prompts", "12", "--input-len", "256",
                 "--output-len", "16", "--request-rate", "inf", "--percentile-metrics", "ttft,e2el",
                 "--metric-percentiles", "50,99.9", "--save-result", "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert "requests_completed" in summary  # --json still prints infersim's summary
    saved = json.loads((out / "vllm_result.json").read_text())
    stats = [k for k in saved if k.endswith("_ms")]
    assert stats == ["mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p50_ttft_ms", "p99.9_ttft_ms",
                     "mean_e2el_ms", "median_e2el_ms", "std_e2el_ms", "p50_e2el_ms", "p99.9_e2el_ms"]
    assert saved["num_prompts"] == 12 and saved["total_input_tokens"] == 12 * 256 and saved["request_rate"] == "inf"
