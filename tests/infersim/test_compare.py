"""`infersim compare`: every shipped overlay loads, deltas point the way the model requires, errors are one line."""

from __future__ import annotations

import json

import pytest

from infersim.cli import main
from infersim.compare import METRICS, compare, delta_pct, load_changes
from simulator.scenario import SCENARIO_DIR, ScenarioError, load_scenario
from simulator.simulate import acceptance_of

CHANGES = SCENARIO_DIR / "changes"
OVERLAYS = sorted(CHANGES.glob("*.yaml"))
QUICK = ["workload.sessions=3", "workload.turns_mean=3"]
QUICK_ARGS = [arg for item in QUICK for arg in ("--set", item)]


def test_every_overlay_loads_onto_the_default_and_changes_it():
    assert len(OVERLAYS) == 15
    base, changes = load_changes("default", [str(p) for p in OVERLAYS], QUICK)
    for (name, scenario), path in zip(changes, OVERLAYS, strict=True):
        assert name == path.stem
        assert scenario != base, f"{path.name} changes nothing"
        assert path.read_text().startswith("# "), f"{path.name} needs a header comment"


def test_the_readme_lists_every_overlay():
    readme = (CHANGES / "README.md").read_text()
    for path in OVERLAYS:
        assert f"`{path.name}`" in readme


def test_draft_overlays_reproduce_the_kimi_k3_study_tokens_per_cycle():
    expected = {"drafts3": 3.00, "drafts4": 3.36}
    for name, tokens in expected.items():
        acceptance = acceptance_of(load_scenario(None, [CHANGES / f"{name}.yaml"]))
        assert acceptance.expected_tokens_per_cycle == pytest.approx(tokens)


def test_delta_pct_is_relative_and_undefined_without_a_base():
    assert delta_pct(2.0, 3.0) == pytest.approx(50.0)
    assert delta_pct(0.0, 0.0) == 0.0
    assert delta_pct(0.0, 1.0) is None
    assert delta_pct(None, 1.0) is None


def test_fusion_never_raises_tpot_and_dcp_never_lowers_kv_capacity():
    base, changes = load_changes("default", [str(CHANGES / "fusion-and-copies.yaml"), str(CHANGES / "dcp8.yaml")],
                                 QUICK)
    result = compare(base, changes)
    assert result["metrics"] == list(METRICS)
    before = result["base"]["values"]
    fusion, dcp = result["changes"]
    assert fusion["values"]["tpot_s.p50"] <= before["tpot_s.p50"] * (1 + 1e-9)
    assert dcp["values"]["kv_capacity_tokens"] >= before["kv_capacity_tokens"]
    assert dcp["delta_pct"]["kv_capacity_tokens"] > 0


def test_json_output_parses(capsys):
    assert main(["compare", "default", str(CHANGES / "no-dispatcher-copies.yaml"), *QUICK_ARGS, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["base"]["name"] == "default" and result["sets"] == QUICK
    (change,) = result["changes"]
    assert change["name"] == "no-dispatcher-copies"
    assert set(change["values"]) == set(change["delta_pct"]) == set(METRICS)


@pytest.mark.parametrize(("overlay", "message"), [
    (None, "missing.yaml: cannot read"),
    ("kernels:\n  kda_decode_fuse: true\n", "bad.yaml: kernels: unknown key 'kda_decode_fuse' (valid keys:"),
])
def test_bad_overlays_get_one_line_errors(capsys, tmp_path, overlay, message):
    path = tmp_path / ("missing.yaml" if overlay is None else "bad.yaml")
    if overlay is not None:
        path.write_text(overlay)
    assert main(["compare", "default", str(path), *QUICK_ARGS]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_compare_needs_a_change():
    with pytest.raises(ScenarioError, match=r"at least one CHANGE\.yaml"):
        load_changes("default", [])


def test_a_change_that_cannot_serve_the_workload_is_reported_not_fatal():
    # aligned KDA checkpoints cost a 54 MB state per 128-token block: under this budget (68.18 % of the MI355X's
    # 309 GB) the KV cache no longer holds a request of the max_model_len asked for, which vLLM refuses at start-up
    sets = ["workload.sessions=4", "workload.turns_mean=2", "serving.gpu_memory_utilization=0.6818",
            "serving.max_model_len=32768"]
    changes = [SCENARIO_DIR / "changes" / "align-kda-checkpoints.yaml", SCENARIO_DIR / "changes" / "drafts3.yaml"]
    base, loaded = load_changes("default", changes, sets)
    result = compare(base, loaded)
    aligned, drafts = result["changes"]
    assert "serving.max_model_len: 32768 tokens do not fit in the KV cache" in aligned["error"]
    assert aligned["values"]["total_tok_per_s_per_gpu"] is None
    assert "error" not in drafts and drafts["values"]["spec_tokens_per_cycle"] > 2.9
