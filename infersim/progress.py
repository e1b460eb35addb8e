"""A rich progress bar on stderr for serving runs: requests done and simulated seconds, updated a few times a second."""

from __future__ import annotations

import sys
import time

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
