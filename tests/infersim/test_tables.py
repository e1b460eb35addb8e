"""The CLI's readable tables: units by key suffix, and nested results as tables of their own."""

from __future__ import annotations

from infersim.tables import human, print_result


def test_units_follow_the_key():
    assert human("time_s", 12e-6) == "12.00 µs"
    assert human("read_bytes_per_s", 4.32e12) == "4,320.0 GB/s"
    assert human("bytes", 3 * 2**20) == "3.00 MiB"


def test_records_inside_a_mapping_print_as_a_table(capsys):
    result = {"hw": "h100", "held_out_grid": {
        "rows": 2, "all_rows_median_abs_pct": 7.8,
        "families": [{"family": "mla decode", "rows": 1, "median_abs_pct": 5.94},
                     {"family": "kda verify", "rows": 1, "median_abs_pct": 8.4}]}}
    print_result("Predicted vs measured", result)
    out = capsys.readouterr().out
    assert "held_out_grid: families" in out and "median_abs_pct" in out
    assert "mla decode" in out and "kda verify" in out
    assert "{'family'" not in out  # not the list's repr in one cell


def test_a_mapping_inside_a_record_prints_one_line_per_entry(capsys):
    result = {"platforms": [{"platform": "mi300x", "points": 25, "models": ["deepseek-r1"],
                             "tpot_ms_median": {"points": 25, "median_abs_pct": 20.798416260670514,
                                                "median_signed_pct": -20.798416260670514}}]}
    print_result("Predicted vs published", result)
    out = capsys.readouterr().out
    assert "median_abs_pct 20.8" in out and "median_signed_pct -20.8" in out
    assert "{'points'" not in out and "['deepseek-r1']" not in out and "deepseek-r1" in out
