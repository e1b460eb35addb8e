"""Workgroup-level discrete-event simulation of one irregular launch: workgroups dispatched to CU slots in order.

A GPU's dispatcher hands workgroups to CUs in grid order as slots free up (one slot per resident workgroup:
CUs x the occupancy limit). For a uniform grid this is the analytic wave count (`hwmodels.cycle_time.waves_s`);
for a grid whose workgroups differ in length (split-KV over uneven histories, expert tiles over uneven token
counts) the order and the lengths decide when the last one ends, and a long workgroup dispatched late sets the
launch's time. Each workgroup's duration comes from its program (`hwmodels.cycle_time.workgroup_s`).
"""

from __future__ import annotations

from collections.abc import Sequence

import simpy


def dispatch_s(durations: Sequence[float], slots: int) -> float:
    """Seconds from the first dispatch until the last workgroup ends, `slots` running at once, in grid order."""
    if slots < 1:
        raise ValueError(f"slots must be at least 1, got {slots}")
    if not durations:
        return 0.0
    if len(durations) <= slots:  # one partial wave: every workgroup starts at once
        return max(durations)
    env = simpy.Environment()
    cus = simpy.Resource(env, capacity=slots)

    def workgroup(duration: float):
        with cus.request() as slot:
            yield slot
            yield env.timeout(duration)

    def dispatcher():
        for duration in durations:  # grid order: a workgroup is handed out only when a slot is free
            with cus.request() as slot:
                yield slot
            env.process(workgroup(duration))
            yield env.timeout(0)

    env.process(dispatcher())
    env.run()
    return env.now
