"""Readable tables of CLI results (rich), with SI values shown in human units chosen by the key's suffix."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def human(key: str, value: Any) -> str:
    """A value in the unit a performance engineer reads: µs, GB/s, TFLOP/s, GiB."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if key.endswith("_bytes_per_s"):
        return f"{value / 1e9:,.1f} GB/s"
    if key.endswith("_flop_per_s"):
        return f"{value / 1e12:,.1f} TFLOP/s"
    if "_per_s" in key:
        return f"{value:,.1f}"  # a rate whose unit the key spells (tok/s, tok/s per GPU)
    if key.endswith("_s"):
        if value < 1e-2:
            return f"{value * 1e6:,.2f} µs"
        return f"{value * 1e3:,.3f} ms" if value < 1 else f"{value:,.2f} s"
    if key.endswith("bytes"):
        if value < 2**20:
            return f"{value:,.0f} B"
        return f"{value / 2**20:,.2f} MiB" if value < 1e9 else f"{value / 1e9:,.1f} GB"
    if key == "params" or key.endswith("_params"):
        return f"{value / 1e12:,.3f} T" if value >= 1e12 else f"{value / 1e9:,.2f} B"
    if key == "flop" or key.endswith("_flop"):
        return f"{value / 1e9:,.3f} GFLOP"
    if isinstance(value, float):
        return f"{value:,.4g}"
    return f"{value:,}"


def print_result(title: str, result: Mapping[str, Any]) -> None:
    """Scalars as a two-column table; lists of records and the sources as tables of their own."""
    from rich.table import Table

    console = _console()
    main = Table(title=title, show_header=False)
    main.add_column("key", style="bold")
    main.add_column("value", justify="right")
    nested: list[tuple[str, Any]] = []
    for key, value in result.items():
        if isinstance(value, Mapping | list):
            nested.append((key, value))
        else:
            main.add_row(key, human(key, value))
    if main.row_count:
        console.print(main)
    for key, value in nested:
        if isinstance(value, list) and value and isinstance(value[0], Mapping):
            console.print(_records_table(key, value))
        elif isinstance(value, Mapping):
            table = Table(title=key, show_header=False)
            table.add_column("key", style="bold")
            table.add_column("value")
            records = []  # a list of records inside the mapping (a held-out grid's families) gets its own table
            for sub_key, sub_value in value.items():
                if isinstance(sub_value, list) and sub_value and isinstance(sub_value[0], Mapping):
                    records.append((f"{key}: {sub_key}", sub_value))
                    continue
                # a value's unit is its own key's, except in a by-datatype table, which shares its parent's
                unit_key = key.removesuffix("_by_dtype") if key.endswith("_by_dtype") else str(sub_key)
                shown = human(unit_key, sub_value) if key != "sources" else str(sub_value)
                table.add_row(str(sub_key), shown)
            console.print(table)
            for title, rows in records:
                console.print(_records_table(title, rows))


def _records_table(title: str, rows: Sequence[Mapping[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(title=title)
    columns = [c for c in rows[0] if c != "description"]  # long prose; `show` prints it
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*(_cell(c, row.get(c)) for c in columns))
    return table


def _cell(key: str, value: Any) -> str:
    """One cell of a records table: a mapping as one `key value` line per entry (each in its own key's unit), a
    list as its items joined, anything else as `human` shows it."""
    if isinstance(value, Mapping):
        return "\n".join(f"{k} {human(str(k), v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(human(key, v) for v in value)
    return human(key, value)


def print_sweep(title: str, sweep: Mapping[str, Any]) -> None:
    """A sweep as one row per size: the ring's time, then each variant's speedup over it."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("size", justify="right")
    table.add_column("ring", justify="right")
    others = [v for v in sweep["variants"] if v != "ring"]
    for variant in others:
        table.add_column(variant.replace("quickreduce-", "qr-"), justify="right")
    for row in sweep["rows"]:
        size = row["bytes"]
        label = _size_label(size)
        cells = [label, human("ring_time_s", row["ring_time_s"])]
        cells += [f"{row[f'{v}_speedup']:.2f}x" for v in others]
        table.add_row(*cells)
    console = _console()
    console.print(table)
    if "chart" in sweep:
        console.print(f"chart: {sweep['chart']}")


def _size_label(size: int) -> str:
    if size >= 2**30:
        return f"{size / 2**30:g} GiB"
    return f"{size / 2**20:g} MiB" if size >= 2**20 else f"{size / 1024:g} KiB"


def _console() -> Any:
    """A console as wide as the terminal, or 160 columns when writing to a pipe or file."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=160)
