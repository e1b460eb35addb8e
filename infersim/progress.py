"""Progress on stderr: a rich bar for serving runs (requests done, simulated seconds), and done/total, rate and ETA
for long loops of runs (`infersim sweep`)."""

from __future__ import annotations

import sys
import time
from typing import Any

from simulator.scenario import Scenario
from simulator.simulate import SimulationResult, simulate


def run_with_progress(scenario: Scenario) -> SimulationResult:
    """`simulate(scenario)` with a transient progress bar when stderr is a terminal."""
    if not sys.stderr.isatty():
        return simulate(scenario)
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]simulating"), BarColumn(), TextColumn("{task.fields[done]} requests"),
                  TextColumn("{task.fields[sim]:.0f} s simulated"), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("run", total=None, done=0, sim=0.0)
        last = [0.0]

        def update(done: int, simulated_s: float) -> None:
            now = time.monotonic()
            if now - last[0] > 0.2:
                bar.update(task, done=done, sim=simulated_s)
                last[0] = now

        return simulate(scenario, progress=update)


LINE_EVERY_S = 10.0  # without a terminal, a progress line this often (a log, not a redrawn bar)


def duration_text(seconds: float) -> str:
    """A duration as a person reads an ETA: 42s, 6m58s, 1h02m."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class CountProgress:
    """Done/total, rate and ETA of a long loop on stderr: a rich bar on a terminal, else a line every LINE_EVERY_S."""

    def __init__(self, total: int, unit: str, label: str):
        self.total, self.unit, self.label = total, unit, label
        self.done = 0
        self._start = self._last_line = time.monotonic()
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> CountProgress:
        self._start = self._last_line = time.monotonic()
        if sys.stderr.isatty() and self.total:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn(f"[bold]{self.label}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn(self.unit), TextColumn("{task.fields[rate]}"),
                                 TextColumn("ETA {task.fields[eta]}"), TimeElapsedColumn(),
                                 console=Console(stderr=True), transient=True)
            self._bar.start()
            self._task = self._bar.add_task(self.label, total=self.total, rate="", eta="-")
        return self

    def advance(self, count: int = 1) -> None:
        """Count `count` more done and redraw (the bar) or, now and then, print a line."""
        self.done += count
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, rate=self._rate_text(), eta=self._eta_text())
        elif time.monotonic() - self._last_line >= LINE_EVERY_S:
            self._last_line = time.monotonic()
            print(f"infersim: {self.line()}", file=sys.stderr, flush=True)

    def line(self) -> str:
        """'sweep 120/1000 points, 2.10 points/s, ETA 6m58s'."""
        return f"{self.label} {self.done}/{self.total} {self.unit}, {self._rate_text()}, ETA {self._eta_text()}"

    def rate_per_s(self) -> float:
        return self.done / max(time.monotonic() - self._start, 1e-9)

    def _rate_text(self) -> str:
        return f"{self.rate_per_s():.2f} {self.unit}/s"

    def _eta_text(self) -> str:
        rate = self.rate_per_s()
        return duration_text((self.total - self.done) / rate) if self.done and rate > 0 else "-"

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
