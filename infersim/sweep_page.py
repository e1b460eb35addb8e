"""The Pareto page of `infersim sweep` (sweep.html): throughput per GPU and tokens per dollar against P90
interactivity, every point with its grid values on hover and the frontier drawn, InferenceX style.

With several seeds a point is the mean over its seeds, and its 95 % Student t interval (`simulator/replicates.py`)
is drawn as error bars.
P90 interactivity is the run summary's (1 / P90 TPOT, `simulator/metrics.py`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from infersim.pareto import frontier, read_frontier
from simulator.replicates import t_interval

INTERACTIVITY = "interactivity_tok_per_s_per_user.p90"
PER_GPU = "total_tok_per_s_per_gpu"
PER_DOLLAR = "tokens_per_dollar"
# (summary metric on the y axis, its axis title with its unit, its panel's title)
PANELS = ((PER_GPU, "throughput per GPU (tok/s/GPU)", "throughput per GPU"),
          (PER_DOLLAR, "tokens per dollar (tokens/USD)", "tokens per dollar"))
X_TITLE = "P90 interactivity (tok/s/user)"
MAX_COLOURED = 10  # points coloured by the first grid key's value when it has at most this many values


def point_stats(table: Any, grid_keys: Sequence[str]) -> list[dict[str, Any]]:
    """One record per point that ran: its grid values, seed count, and each metric's mean and interval half-width."""
    if not len(table):
        return []
    ok = table[table["status"] == "ok"]
    stats = []
    for point, group in ok.groupby("point", sort=True):
        record: dict[str, Any] = {"point": int(point), "grid": {k: _plain(group[k].iloc[0]) for k in grid_keys},
                                  "seeds": len(group)}
        for metric in (INTERACTIVITY, PER_GPU, PER_DOLLAR):
            values = [v for v in map(_plain, group.get(metric, [])) if v is not None]
            interval = t_interval(values) if values else None
            record[metric] = None if interval is None else interval.mean
            record[f"{metric}_ci"] = None if interval is None or interval.hi is None else interval.hi - interval.mean
        stats.append(record)
    return stats


def frontier_records(stats: Sequence[Mapping[str, Any]], metric: str) -> list[Mapping[str, Any]]:
    """The points on the frontier of `metric` against P90 interactivity, by interactivity ascending."""
    return [stats[i] for i in frontier([s[INTERACTIVITY] for s in stats], [s[metric] for s in stats])]


def reading(stats: Sequence[Mapping[str, Any]], metric: str, at: float) -> dict[str, Any]:
    """The frontier of `metric` read at P90 interactivity `at`: the interpolated value and the configuration of
    the nearest frontier point at or above `at`."""
    found = read_frontier([s[INTERACTIVITY] for s in stats], [s[metric] for s in stats], at)
    if found is None:
        reached = [s[INTERACTIVITY] for s in stats if s[INTERACTIVITY] is not None]
        return {"value": None, "point": None, "configuration": None,
                "note": (f"no point reaches {at:g} tok/s/user (the most interactive: {max(reached):.4g})" if reached
                         else "no point has a P90 interactivity")}
    best = stats[found.point]
    note = (f"interpolated between points {stats[found.below]['point']} and {best['point']}" if found.below is not None
            else "at a frontier point" if best[INTERACTIVITY] == at else
            "below the frontier's range: its least interactive point")
    return {"value": found.value, "point": best["point"], "configuration": best["grid"],
            "point_interactivity_tok_per_s_per_user": best[INTERACTIVITY], "point_value": best[metric], "note": note}


def sweep_figure(stats: Sequence[Mapping[str, Any]], grid_keys: Sequence[str], title: str,
                 at: float | None = None, deltas: tuple[Sequence[Mapping[str, Any]], Any] | None = None) -> Any:
    """Two panels against P90 interactivity: throughput per GPU and tokens per dollar, points and frontier; with
    `deltas` ((records, baseline) of `infersim.sweep_deltas`), below them each point's paired delta against its
    baseline point, whether it beats it, loses to it or cannot be told apart."""
    from plotly.colors import qualitative
    from plotly.subplots import make_subplots

    titles = [f"{name} against P90 interactivity" for _, _, name in PANELS]
    if deltas is None:
        figure = make_subplots(rows=1, cols=2, subplot_titles=titles)
    else:
        records, baseline = deltas
        counts = {v: sum(r["verdict"] == v for r in records) for v in ("beats", "loses", "n.s.")}
        titles.append(f"throughput per GPU against {baseline.label}, seed by seed (95 % intervals): "
                      f"{counts['beats']} beat it, {counts['loses']} lose, {counts['n.s.']} n.s.")
        figure = make_subplots(rows=2, cols=2, subplot_titles=titles, specs=[[{}, {}], [{"colspan": 2}, None]],
                               vertical_spacing=0.14)
    groups = _groups(stats, grid_keys)
    for col, (metric, y_title, _) in enumerate(PANELS, start=1):
        for g, (name, members) in enumerate(groups):  # one colour per group in both panels
            colour = qualitative.Plotly[g % len(qualitative.Plotly)]
            figure.add_scatter(
                x=[s[INTERACTIVITY] for s in members], y=[s[metric] for s in members], mode="markers", name=name,
                legendgroup=name, showlegend=col == 1, marker={"size": 7, "opacity": 0.75, "color": colour},
                text=[_hover(s, grid_keys) + _interval_text(s, metric) for s in members],
                hovertemplate=f"%{{text}}<br>{X_TITLE}: %{{x:.4g}}<br>{y_title}: %{{y:.4g}}<extra></extra>",
                error_x=_error_bars([s[f"{INTERACTIVITY}_ci"] for s in members],
                                    [s[INTERACTIVITY] for s in members]),
                error_y=_error_bars([s[f"{metric}_ci"] for s in members], [s[metric] for s in members]),
                row=1, col=col)
        front = frontier_records(stats, metric)
        figure.add_scatter(x=[s[INTERACTIVITY] for s in front], y=[s[metric] for s in front], mode="lines+markers",
                           name="Pareto frontier", legendgroup="frontier", showlegend=col == 1,
                           line={"color": "black", "width": 2}, marker={"color": "black", "size": 8},
                           text=[_hover(s, grid_keys) for s in front],
                           hovertemplate=f"frontier<br>%{{text}}<br>{X_TITLE}: %{{x:.4g}}<br>{y_title}: %{{y:.4g}}"
                                         "<extra></extra>", row=1, col=col)
        if at is not None:
            figure.add_vline(x=at, line_dash="dash", line_color="grey", row=1, col=col)
            value = reading(stats, metric, at)["value"]
            if value is not None:
                figure.add_scatter(x=[at], y=[value], mode="markers", name=f"frontier at {at:g} tok/s/user",
                                   legendgroup="at", showlegend=col == 1,
                                   marker={"symbol": "star", "size": 14, "color": "crimson"},
                                   hovertemplate=f"frontier at {at:g} tok/s/user: %{{y:.4g}}<extra></extra>",
                                   row=1, col=col)
        figure.update_xaxes(title_text=X_TITLE, row=1, col=col)
        figure.update_yaxes(title_text=y_title, row=1, col=col)
    if deltas is not None:
        from infersim.sweep_deltas import add_panel

        add_panel(figure, deltas[0], grid_keys, deltas[1], row=2, col=1)
    figure.update_layout(title=title, height=650 if deltas is None else 1100, hovermode="closest")
    return figure


def write_page(figure: Any, path: Path) -> Path:
    """The figure as one offline HTML page (plotly.js inlined), atomically."""
    from infersim.output_paths import atomic_write

    html = figure.to_html(include_plotlyjs=True, full_html=True)
    atomic_write(path, lambda tmp: Path(tmp).write_text(html, encoding="utf-8"))
    return path


def _groups(stats: Sequence[Mapping[str, Any]], grid_keys: Sequence[str]) -> list[tuple[str, list]]:
    """Points by the first grid key's value when it has few values (a colour each), else one group."""
    if not stats:
        return [("points", [])]
    first = grid_keys[0]
    values = list(dict.fromkeys(s["grid"][first] for s in stats))
    if len(values) > MAX_COLOURED:
        return [("points", list(stats))]
    return [(f"{first}={v}", [s for s in stats if s["grid"][first] == v]) for v in values]


def _hover(stat: Mapping[str, Any], grid_keys: Sequence[str]) -> str:
    lines = [f"{k}={stat['grid'][k]}" for k in grid_keys]
    lines.append(f"point {stat['point']}" + (f", mean of {stat['seeds']} seeds" if stat["seeds"] > 1 else ""))
    return "<br>".join(lines)


def _error_bars(halves: Sequence[float | None], values: Sequence[float | None] | None = None) -> dict[str, Any]:
    """95 % half-widths as error bars; with `values` (a quantity that cannot be negative: throughput, tokens per
    dollar, interactivity), the lower bar stops at zero, where a few seeds' Student t interval would reach past it
    (the hover gives the interval as computed)."""
    if all(h is None for h in halves):
        return {"visible": False}
    upper = [0.0 if h is None else h for h in halves]
    bars: dict[str, Any] = {"type": "data", "array": upper, "visible": True}
    if values is not None:
        bars["symmetric"] = False
        bars["arrayminus"] = [h if v is None or v <= 0 else min(h, v) for h, v in zip(upper, values, strict=True)]
    return bars


def _interval_text(stat: Mapping[str, Any], key: str) -> str:
    """'95 % interval [lo, hi]' of a point's metric, as computed (negative lower ends included)."""
    half, value = stat.get(f"{key}_ci"), stat.get(key)
    if half is None or value is None:
        return ""
    return f"<br>95 % interval of {key}: [{value - half:.4g}, {value + half:.4g}]"


def _plain(value: Any) -> Any:
    """A table cell as a Python value: numpy scalars unwrapped, NaN as None."""
    value = value.item() if hasattr(value, "item") else value
    return None if isinstance(value, float) and not math.isfinite(value) else value
