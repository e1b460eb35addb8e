"""AITER's block-scaled FP8 GEMM times on the MI300X and MI355X against the product's GEMM
(validation/published_gemm.py)."""

from __future__ import annotations

import csv
import json

from validation import published_gemm


def test_the_table_holds_both_gpus_with_their_split_as_partial_sums():
    with published_gemm.TABLE.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["gpu"]: r["cu_num"] for r in rows} == {"mi300x": "304", "mi355x": "256"}
    assert len(rows) == 1468
    for r in rows:
        split = int(r["split_k"])
        assert float(r["us"]) > 0 and split >= 1 and split & (split - 1) == 0
        assert int(r["m"]) >= 1 and r["dtype"] == "fp8"


def test_a_row_is_priced_as_infersim_kernel_prices_it(capsys):
    from infersim.cli import main

    rows = published_gemm.compare()
    row = next(r for r in rows if (r.gpu, r.m, r.n, r.k) == ("mi355x", 16, 7168, 2048))
    assert main(["kernel", "--hw", "mi355x", "gemm", "--param", "m=16", "--param", "n=7168", "--param", "k=2048",
                 "--param", "dtype=fp8", "--launch", "graph", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["time_s"] - sum(launch["launch_s"] for launch in out["launches"]) == row.predicted_s
    assert row.error == row.predicted_s / row.measured_s - 1


def test_the_summary_covers_every_row_by_gpu_and_token_band():
    with published_gemm.TABLE.open(newline="") as f:
        table = list(csv.DictReader(f))
    expected: dict[tuple[str, str], int] = {}
    for r in table:
        m = int(r["m"])
        tokens = "m <= 64" if m <= 64 else "64 < m <= 1024" if m <= 1024 else "m > 1024"
        expected[(r["gpu"], tokens)] = expected.get((r["gpu"], tokens), 0) + 1
    groups = published_gemm.summary(published_gemm.compare())
    assert {(g["gpu"], g["tokens"]): g["rows"] for g in groups} == expected
    assert [(g["gpu"], g["tokens"]) for g in groups][:3] == [
        ("mi300x", "m <= 64"), ("mi300x", "64 < m <= 1024"), ("mi300x", "m > 1024")]


def test_the_published_query_reports_the_gemm_rows():
    from infersim.validation_queries import published_query

    result = published_query(rows=True)
    assert "validation/published/aiter_gemm.csv" in result["tables"]
    assert len(result["gemm_every_row"]) == 1468
    assert {g["gpu"] for g in result["gemm_kernels"]} == {"mi300x", "mi355x"}
