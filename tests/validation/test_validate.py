"""`infersim validate` and the generated REPORT.md: every recorded row compared, the report matches the data."""

from __future__ import annotations

import json

import pytest

from infersim.cli import main
from validation.report import compare_all, error_summary
from validation.report_document import render_markdown


def test_validate_json_reports_median_and_p90_per_family(capsys):
    assert main(["validate", "--hw", "h200", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    families = {f["family"]: f for f in result["families"]}
    assert result["rows"] >= 400 and result["held_out_rows"] + result["fitted_rows"] == result["rows"]
    assert len(families) >= 6
    for name in ("gemm bf16 prefill", "mla decode", "kda verify", "codec quantize", "allreduce quickreduce int4"):
        assert families[name]["median_abs_pct"] <= families[name]["p90_abs_pct"], name
    # the NCCL fit's training rows are counted apart from its held-out rows
    assert families["allreduce nccl"]["fitted_rows"] == 10 and families["allreduce nccl"]["held_out_rows"] == 9


def test_an_unknown_gpu_is_a_one_line_error(capsys):
    assert main(["validate", "--hw", "h300"]) == 2
    err = capsys.readouterr().err
    assert "h300" in err and "h200" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("hw", ["h200", "h100"])
def test_the_committed_report_is_what_the_data_and_model_give_now(hw):
    # the reports are generated; regenerate with `infersim validate --hw <hw> --write-report` after any change
    from validation.report_document import report_paths

    markdown, _ = report_paths(hw)
    assert markdown.name == ("REPORT.md" if hw == "h200" else f"REPORT_{hw}.md")  # one GPU never overwrites another
    assert markdown.read_text() == render_markdown(hw, compare_all(hw))


def test_fitted_rows_are_summarized_apart():
    rows = compare_all("h200")
    summary = error_summary(rows)
    fitted = [r for r in rows if r.fitted]
    assert fitted and all(r.group in ("allreduce nccl", "occupancy waves ratio") for r in fitted)
    assert summary["allreduce nccl"]["fitted_median_abs_pct"] < summary["allreduce quickreduce int4"]["median_abs_pct"]


def test_rows_lists_every_compared_row(capsys):
    assert main(["validate", "--hw", "h200", "--rows", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert len(result["every_row"]) == result["rows"]
    assert {r["family"] for r in result["every_row"]} == {f["family"] for f in result["families"]}


def test_links_reports_the_calibration_on_train_and_held_out_rows(capsys):
    assert main(["validate", "--links", "h200-2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    groups = {g["group"]: g for g in result["groups"]}
    assert groups["allreduce train"]["rows"] == 10 and groups["allreduce held-out"]["rows"] == 9
    assert groups["allreduce train"]["median_abs_pct"] < 5
    assert "written" not in result  # a check writes nothing


def test_published_compares_each_series_of_the_mi300x_table(capsys):
    assert main(["validate", "--published", "--rows", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    series = {s["series"]: s for s in result["series"]}
    assert {"RCCL", "QR-FP16", "QR-Q8", "QR-Q6", "QR-Q4"} <= set(series)
    assert len(result["every_row"]) == sum(s["rows"] for s in result["series"])
    # the rccl-tests runs, each source a series; the graph-captured MI300X run is priced as graph nodes
    assert series["S-NCCLT-2 mi300x x8 allreduce graph"]["rows"] == 32
    assert series["S-NCCLT-1 mi300x x8 allreduce eager"]["median_abs_pct"] < 25
    assert main(["validate", "--published", "--json"]) == 0
    summary_only = json.loads(capsys.readouterr().out)
    assert summary_only["series"] == result["series"] and "every_row" not in summary_only


@pytest.mark.parametrize(("args", "names"), [
    (["--links", "h200-9"], ("h200-9", "h200-2")),
    ([], ("--hw", "--links", "--published")),
    (["--hw", "h200", "--published"], ("--hw", "--links", "--published")),
    (["--links", "h200-2", "--rows"], ("--rows", "--hw")),
    (["--hw", "h200", "--refit"], ("--refit", "--links")),
])
def test_a_bad_validate_option_is_a_one_line_error(capsys, args, names):
    assert main(["validate", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert all(name in err for name in names), err
