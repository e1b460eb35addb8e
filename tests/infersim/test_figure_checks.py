"""`infersim.figure_checks`: what a reader would be misled by is found, and infersim's own charts have none of it."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest

from infersim.figure_checks import figure_problems


def _clean() -> go.Figure:
    figure = go.Figure()
    for i, colour in enumerate(("#1f77b4", "#ff7f0e")):
        figure.add_scatter(x=[1, 2, 3], y=[10 + i, 12 + i, 11 + i], name=f"series {i}", marker={"color": colour},
                           error_y={"type": "data", "array": [1.0, 0.5, 2.0], "visible": True})
    figure.update_layout(xaxis={"title": "batch (sequences)"}, yaxis={"title": "throughput (tok/s)"})
    return figure


def test_a_clean_figure_has_no_problem():
    assert figure_problems(_clean()) == []


def test_an_axis_without_a_title_is_found():
    figure = _clean()
    figure.update_layout(xaxis={"title": None})
    assert figure_problems(figure) == ["xaxis: an axis with data has no title"]


def test_byte_sizes_on_plotlys_own_log_labels_and_mismatched_tick_text_are_found():
    figure = _clean()
    figure.update_layout(xaxis={"title": "message size (bytes)", "type": "log"})
    (problem,) = figure_problems(figure)
    assert "log axis of byte sizes" in problem and '"1B"' in problem
    figure.update_layout(xaxis={"tickvals": [1, 2, 3], "ticktext": ["1 KiB", "2 KiB"]})
    assert figure_problems(figure) == ["xaxis (message size (bytes)): 2 tick labels for 3 tick values"]


def test_legend_entries_that_look_the_same_or_repeat_the_default_colours_are_found():
    figure = _clean()
    figure.add_scatter(x=[1], y=[5], name="twin", marker={"color": "#1f77b4"})
    assert figure_problems(figure) == ["legend entries 'series 0' and 'twin' look the same (colour #1f77b4, "
                                       "symbol None, dash None)"]
    crowded = go.Figure()
    for i in range(11):
        crowded.add_scatter(x=[1, 2], y=[i + 1, i + 2], name=f"family {i}")
    crowded.update_layout(xaxis={"title": "measured (us)"}, yaxis={"title": "predicted (us)"})
    assert figure_problems(crowded) == ["11 legend entries take plotly's 10 default colours in turn, so colours "
                                        "repeat (first repeat: 'family 10')"]


@pytest.mark.parametrize(("array", "title", "found"), [
    ([1.0, -0.5, 2.0], "throughput (tok/s)", "negative or not finite"),
    ([1.0, float("nan"), 2.0], "throughput (tok/s)", "negative or not finite"),
    ([1.0, 30.0, 2.0], "throughput (tok/s)", "reach below zero"),
    ([1.0, 30.0, 2.0], "throughput vs DCP1 (%)", None),  # a difference may cross zero: that is its verdict
])
def test_intervals_that_cannot_be_right_are_found(array, title, found):
    figure = _clean()
    figure.data[0].error_y.array = array
    figure.update_layout(yaxis={"title": title})
    problems = figure_problems(figure)
    assert (problems == []) if found is None else (len(problems) == 1 and found in problems[0])


def test_the_collective_chart_labels_sizes_in_binary_units(capsys):
    from infersim.collective_queries import collective_sweep, sweep_figure, sweep_sizes

    figure = sweep_figure(collective_sweep("mi355x", tp=8, op="allreduce", sizes=sweep_sizes("1MiB:1GiB")))
    assert figure_problems(figure) == []
    ticks = list(figure.layout.xaxis.ticktext)
    assert ticks[0] == "1 MiB" and ticks[-1] == "1 GiB" and not any(t.endswith("B") and " " not in t for t in ticks)


def test_the_validation_page_gives_every_family_its_own_look_and_the_median():
    from validation.report import compare_all
    from validation.report_document import figure

    rows = compare_all("h200")
    page = figure("h200", rows)
    assert len({r.group for r in rows}) > 10 and figure_problems(page) == []
    assert "median |error|" in page.layout.title.text


def test_a_run_page_and_a_sweep_page_pass(tmp_path, monkeypatch):
    from infersim import sweep_page
    from infersim.outputs import report_figure
    from infersim.sweep import run_sweep
    from simulator.scenario import load_scenario
    from simulator.simulate import simulate

    small = ["workload.sessions=3", "workload.turns_mean=2"]
    result = simulate(load_scenario(None, [], small))
    page = report_figure(result)
    assert figure_problems(page) == [] and "tok/s/GPU" in page.layout.title.text
    written = []
    monkeypatch.setattr(sweep_page, "write_page", lambda figure, path: written.append(figure) or path)
    sweep = run_sweep("default", ["spec_decode.drafts=0,2", "parallel.dcp=1,8"], tmp_path / "sweep", sets=small,
                      seeds=2, jobs=1)
    assert sweep["deltas"] and written
    assert figure_problems(written[-1]) == []
