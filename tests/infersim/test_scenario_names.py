"""Built-in scenarios and overlays by name: `infersim scenarios` lists them, and a name works wherever a scenario or
overlay file does, so that the README's commands need no path into the package."""

from __future__ import annotations

import json

import pytest

from infersim.cli import main
from simulator.scenario import SCENARIO_DIR, ScenarioError, builtin_scenarios, load_scenario, scenario_path

QUICK = ["--set", "workload.sessions=3", "--set", "workload.turns_mean=3"]


def test_every_built_in_file_has_one_name_and_the_list_shows_each(capsys):
    files = sorted(SCENARIO_DIR.rglob("*.yaml"))
    names = builtin_scenarios()
    assert sorted(names.values()) == files  # no file shadowed by another of the same stem
    assert main(["scenarios", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["scenarios"]
    assert [r["name"] for r in rows] == list(names)
    kinds = {r["name"]: r["kind"] for r in rows}
    assert kinds["default"] == "scenario" and kinds["dcp8"] == "overlay" and kinds["kimi-k3-b300"] == "study scenario"
    about = {r["name"]: r["about"] for r in rows}
    assert about["dcp8"] == "Decode context parallel over all 8 TP ranks (Kimi K3 study, mechanism 1)."
    assert all(r["about"] and r["file"].startswith("simulator/scenarios/") for r in rows)


def test_a_name_loads_what_its_file_does():
    assert scenario_path("dcp8") == SCENARIO_DIR / "changes" / "dcp8.yaml"
    by_name = load_scenario("kimi-k3-b300", ["dcp8"])
    by_path = load_scenario(SCENARIO_DIR / "study" / "kimi-k3-b300.yaml", [SCENARIO_DIR / "changes" / "dcp8.yaml"])
    assert by_name == by_path and by_name.parallel.dcp == 8


def test_an_overlay_by_name_on_the_command_line(capsys, tmp_path):
    assert main(["run", "--overlay", "dcp8", *QUICK, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kv_capacity_tokens"] > 0
    assert main(["compare", "default", "dcp8", *QUICK, "--json"]) == 0
    compared = json.loads(capsys.readouterr().out)
    assert "dcp8" in json.dumps(compared)


def test_an_unknown_name_lists_the_built_in_ones(capsys):
    with pytest.raises(ScenarioError, match=r"'dcp9': no such file, and no built-in .*dcp8, drafts3"):
        scenario_path("dcp9")
    assert main(["run", "--overlay", "dcp9", *QUICK]) == 2
    err = capsys.readouterr().err
    assert "dcp9" in err and "kimi-k3-mi355x" in err and "Traceback" not in err
    # a path that is not there keeps the file's own error
    assert main(["run", "missing/dcp8.yaml", *QUICK]) == 2
    assert "missing/dcp8.yaml" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["default", "bench-agentic-1h", "kimi-k3-mi355x", "kimi-k3-b300"])
def test_every_built_in_scenario_takes_any_draft_depth(name):
    # acceptance per position is the built-ins' default, so a draft-depth sweep is valid on each
    from simulator.simulate import acceptance_of

    path = scenario_path(name)
    assert load_scenario(path).spec_decode.mean_tokens_per_cycle == 0
    means = []
    for drafts in range(8):
        acceptance = acceptance_of(load_scenario(path, sets=[f"spec_decode.drafts={drafts}"]))
        means.append(1.0 if acceptance is None else acceptance.expected_tokens_per_cycle)
    assert means[2] == pytest.approx(2.51, abs=1e-4)  # the recipe's tokens per cycle at two drafts
    assert means == sorted(means) and means[0] == 1.0  # a deeper draft never commits fewer tokens
