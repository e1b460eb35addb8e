"""What a reader of a figure could be misled by, checked on the plotly figure before it is written.

Every chart infersim writes (the sweep page, the collective chart, `report.html`, the validation and trace pages,
the notebooks' figures) passes `figure_problems` in the tests. It finds:

- an axis with data but no title;
- tick labels that are not what they say: `ticktext` of another length than `tickvals`, or a log axis of byte
  sizes left to plotly's own labels (which write 10^9 bytes as "1B", a billion, not a gibibyte);
- legend entries a reader cannot tell apart: two entries with the same colour, symbol and dash, or more entries
  left to plotly's default colour cycle than it has colours (it repeats them);
- intervals that cannot be right: an error bar that is negative or not finite, or one that reaches below zero on
  a trace of positive values that is not a difference (an axis titled with "%", "delta", "vs" or "difference").
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

DEFAULT_COLOURS = 10  # plotly's default colorway (plotly.colors.qualitative.Plotly)
_DIFFERENCE_WORDS = ("%", "delta", " vs ", "difference", "ratio", "error")


def figure_problems(figure: Any) -> list[str]:
    """Each problem of the figure, one line each; empty when a reader can trust it."""
    layout = figure.layout
    problems = []
    problems += _axis_problems(figure, layout)
    problems += _legend_problems(figure)
    problems += _interval_problems(figure, layout)
    return problems


def _axes_of(trace: Any) -> tuple[str, str]:
    """The layout keys of a trace's x and y axes ("xaxis", "yaxis2", ...)."""
    x = getattr(trace, "xaxis", None) or "x"
    y = getattr(trace, "yaxis", None) or "y"
    return "xaxis" + x[1:], "yaxis" + y[1:]


def _title(axis: Any) -> str:
    title = getattr(axis, "title", None)
    text = getattr(title, "text", None) if title is not None else None
    return text or ""


def _axis_problems(figure: Any, layout: Any) -> list[str]:
    problems = []
    used = {key for trace in figure.data if trace.type not in ("pie", "table", "indicator")
            for key in _axes_of(trace)}
    for key in sorted(used):
        axis = getattr(layout, key, None)
        if axis is None:
            continue
        title = _title(axis)
        shared = axis.matches is not None or axis.showticklabels is False  # a subplot sharing its neighbour's axis
        if not title and not shared:
            problems.append(f"{key}: an axis with data has no title")
        ticktext, tickvals = axis.ticktext, axis.tickvals
        if ticktext is not None and (tickvals is None or len(ticktext) != len(tickvals)):
            problems.append(f"{key} ({title}): {len(ticktext)} tick labels for "
                            f"{0 if tickvals is None else len(tickvals)} tick values")
        lowered = title.lower()
        if axis.type == "log" and ("bytes" in lowered or "size" in lowered) and ticktext is None:
            problems.append(f"{key} ({title}): a log axis of byte sizes with plotly's own tick labels "
                            "(10^9 reads \"1B\"): give tickvals and ticktext in KiB, MiB, GiB")
    return problems


def _legend_entries(figure: Any) -> Iterable[Any]:
    seen_groups = set()
    for trace in figure.data:
        if trace.showlegend is False or not trace.name:
            continue
        group = trace.legendgroup
        if group and group in seen_groups:
            continue
        if group:
            seen_groups.add(group)
        yield trace


def _style(trace: Any) -> tuple[Any, Any, Any] | None:
    """(colour, symbol, dash) the legend shows for a trace; None where plotly picks the colour itself."""
    marker = getattr(trace, "marker", None)
    line = getattr(trace, "line", None)
    colour = getattr(marker, "color", None) if marker is not None else None
    if colour is None and line is not None:
        colour = getattr(line, "color", None)
    if colour is None:
        return None
    if not isinstance(colour, str):
        colour = ("per point", id(trace))  # a colour per point: the legend cannot stand for them
    symbol = getattr(marker, "symbol", None) if marker is not None else None
    symbol = tuple(symbol) if isinstance(symbol, list | tuple) else symbol
    dash = getattr(line, "dash", None) if line is not None else None
    return colour, symbol, dash


def _legend_problems(figure: Any) -> list[str]:
    problems = []
    styles: dict[tuple, str] = {}
    unstyled = []
    for trace in _legend_entries(figure):
        style = _style(trace)
        if style is None:
            unstyled.append(trace.name)
            continue
        if isinstance(style[0], tuple):
            problems.append(f"legend entry {trace.name!r}: its markers take a colour each, which one legend "
                            "swatch cannot show")
            continue
        if style in styles:
            problems.append(f"legend entries {styles[style]!r} and {trace.name!r} look the same "
                            f"(colour {style[0]}, symbol {style[1]}, dash {style[2]})")
        styles.setdefault(style, trace.name)
    colourway = figure.layout.colorway
    available = len(colourway) if colourway else DEFAULT_COLOURS
    if len(unstyled) > available:
        problems.append(f"{len(unstyled)} legend entries take plotly's {available} default colours in turn, so "
                        f"colours repeat (first repeat: {unstyled[available]!r})")
    return problems


def _numbers(values: Any) -> list[float]:
    if values is None:
        return []
    return [float(v) for v in values if v is not None]


def _interval_problems(figure: Any, layout: Any) -> list[str]:
    problems = []
    for trace in figure.data:
        for axis_letter, bars in (("x", getattr(trace, "error_x", None)), ("y", getattr(trace, "error_y", None))):
            if bars is None or bars.array is None or bars.visible is False:
                continue
            plus = _numbers(bars.array)
            minus = _numbers(bars.arrayminus) if bars.arrayminus is not None else plus
            name = trace.name or trace.type
            if any(not math.isfinite(v) or v < 0 for v in plus + minus):
                problems.append(f"{name!r}: an error bar on {axis_letter} is negative or not finite")
                continue
            values = _numbers(getattr(trace, axis_letter, None))
            key = _axes_of(trace)[0 if axis_letter == "x" else 1]
            axis = getattr(layout, key, None)
            title = _title(axis).lower() if axis is not None else ""
            if any(word in title for word in _DIFFERENCE_WORDS) or not values or min(values) <= 0:
                continue
            below = [v - m for v, m in zip(values, minus, strict=False) if v - m < 0]
            if below:
                problems.append(f"{name!r}: {len(below)} interval(s) on {axis_letter} reach below zero on an axis "
                                f"of positive values ({title or 'untitled'}): the interval is too wide to read")
    return problems
