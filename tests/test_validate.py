"""`infersim validate` and the generated REPORT.md: every recorded row compared, the report matches the data."""

from __future__ import annotations

import json

from infersim.cli import main
from validation.report import compare_all, error_summary
from validation.report_document import REPORT_DIR, render_markdown


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


def test_the_committed_report_is_what_the_data_and_model_give_now():
    # REPORT.md is generated; regenerate it with `infersim validate --hw h200 --write-report` after any change
    committed = (REPORT_DIR / "REPORT.md").read_text()
    assert committed == render_markdown("h200", compare_all("h200"))


def test_fitted_rows_are_summarized_apart():
    rows = compare_all("h200")
    summary = error_summary(rows)
    fitted = [r for r in rows if r.fitted]
    assert fitted and all(r.group in ("allreduce nccl", "occupancy waves ratio") for r in fitted)
    assert summary["allreduce nccl"]["fitted_median_abs_pct"] < summary["allreduce quickreduce int4"]["median_abs_pct"]
