"""Workgroup-level discrete-event simulation of one irregular launch: workgroups dispatched to CU slots in order.

A GPU's dispatcher hands workgroups to CUs in grid order as slots free up (one slot per resident workgroup:
CUs x the occupancy limit). For a uniform grid this is the analytic wave count (`hwmodels.cycle_time.waves_s`);
for a grid whose workgroups differ in length (split-KV over uneven histories, expert tiles over uneven token
counts) the order and the lengths decide when the last one ends, and a long workgroup dispatched late sets the
launch's time. Each workgroup's duration comes from its program (`hwmodels.cycle_time.workgroup_s`).

The only events are slots freeing up, so the simulation is a heap of the slots' free times: the next workgroup
in grid order takes the slot that frees first, at that time (the heap's least element never decreases, so the
order of dispatch is the grid order). A process-per-workgroup simulation in simpy gives the same floats (a test
holds the two equal) at a hundredth of the speed; the serving loop runs this for every irregular launch it prices.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence


def dispatch_s(durations: Sequence[float], slots: int) -> float:
    """Seconds from the first dispatch until the last workgroup ends, `slots` running at once, in grid order."""
    if slots < 1:
        raise ValueError(f"slots must be at least 1, got {slots}")
    if not durations:
        return 0.0
    if len(durations) <= slots:  # one partial wave: every workgroup starts at once
        return max(durations)
    free = list(durations[:slots])  # the first wave starts at 0 and frees its slots at these times
    heapq.heapify(free)
    last = max(free)
    for duration in durations[slots:]:
        end = free[0] + duration  # the slot that frees first takes the next workgroup
        heapq.heapreplace(free, end)
        if end > last:
            last = end
    return last
