"""Cycle-level time of a launch: the waves of workgroups, each running its `Program`.

Per trip of a workgroup's loop, with r workgroups resident on a CU of S schedulers, w warps each:

- issue:   ceil(r * w / S) warps share one scheduler, which issues one warp instruction per clock, so a trip
           takes at least max(1, r * w / S) * I cycles for I instructions per warp;
- latency: one warp issues in order, so a trip takes at least I cycles plus its dependent chain (the
           chain's steps times their latencies; Hong and Kim, "An analytical model for a GPU architecture
           with memory-level and thread-level parallelism awareness", ISCA 2009, combine the two the same way);
- memory:  by Little's law a CU with x bytes in flight receives x / L bytes per second, L the DRAM latency,
           up to its share of HBM (the lesser of the CU's own ceiling and the GPU's bandwidth over the CUs
           that stream), or, for loads that hit L2, L2's latency and its bandwidth over the streaming CUs; `mlp_smoothness` n bends the two into one curve, rate = (x/L) / (1 + ((x/L)/cap)^n)^(1/n),
           fitted on the memory-level-parallelism probe. A trip waits for its load unless the load was issued
           `prefetch` trips ahead, in which case only the part of the load time that the pipeline cannot cover.

A workgroup takes its setup chain plus `trips` trips. Workgroups run in waves of (CUs x resident); a last,
partial wave runs with fewer resident per CU. The launch ends when the last workgroup's stores have drained:
`completion_s`, the part of the tiny-kernel floor that is neither the launch nor the load.
"""

from __future__ import annotations

from dataclasses import dataclass

from hwmodels.program import Program
from hwmodels.spec import GPU


@dataclass(frozen=True)
class Residency:
    """How a launch sits on the GPU: workgroups, their warps, and how many fit on one CU at once."""

    workgroups: int
    warps_per_workgroup: int
    resident_per_cu: int


def loaded_rate(in_flight_bytes: float, latency_s: float, cap_bytes_per_s: float, smoothness: float) -> float:
    """Bytes per second one CU receives with `in_flight_bytes` outstanding (Little's law, bent to a cap)."""
    if in_flight_bytes <= 0:
        return cap_bytes_per_s
    little = in_flight_bytes / latency_s
    return little / (1.0 + (little / cap_bytes_per_s) ** smoothness) ** (1.0 / smoothness)


def trip_s(program: Program, gpu: GPU, resident: int, warps: int, cap_bytes_per_s: float,
           smoothness: float) -> float:
    """Seconds one trip of the loop takes with `resident` workgroups of `warps` warps on the CU."""
    per_scheduler = max(1.0, resident * warps / gpu.simds_per_cu)
    issue = per_scheduler * program.trip_instructions / gpu.boost_clock_hz
    latency = program.trip_instructions / gpu.boost_clock_hz + program.trip_chain.seconds(gpu)
    compute = max(issue, latency)
    if program.trip_load_bytes <= 0:
        return compute
    stages = max(1, program.prefetch)
    in_flight = resident * program.trip_load_bytes * stages
    latency = gpu.l2_latency_s if program.l2_hits else gpu.dram_latency_s
    load = in_flight / loaded_rate(in_flight, latency, cap_bytes_per_s, smoothness)
    if program.prefetch == 0:
        return load + compute
    return max(compute, load / stages)


def workgroup_s(program: Program, gpu: GPU, resident: int, warps: int, cap_bytes_per_s: float,
                smoothness: float) -> float:
    """Seconds one workgroup takes from its first instruction to its last, sharing the CU with `resident`."""
    per_scheduler = max(1.0, resident * warps / gpu.simds_per_cu)
    setup = (per_scheduler * program.setup_instructions / gpu.boost_clock_hz
             + program.setup_chain.seconds(gpu))
    if program.trips <= 0:
        return setup
    return setup + program.trips * trip_s(program, gpu, resident, warps, cap_bytes_per_s, smoothness)


def waves_s(program: Program, gpu: GPU, residency: Residency, hbm_bytes_per_s: float,
            smoothness: float) -> float:
    """Seconds the whole grid takes: full waves of CUs x resident workgroups, then a partial one."""
    cus, per_cu = gpu.compute_units, residency.resident_per_cu
    if residency.workgroups <= 0:
        return 0.0

    def wave(resident: int, streaming_cus: int) -> float:
        if program.l2_hits:
            cap = gpu.l2_bandwidth_bytes_per_s / streaming_cus
        else:
            cap = min(gpu.cu_bandwidth_bytes_per_s, hbm_bytes_per_s / streaming_cus)
        return workgroup_s(program, gpu, resident, residency.warps_per_workgroup, cap, smoothness)

    full, rest = divmod(residency.workgroups, cus * per_cu)
    total = full * wave(per_cu, cus) if full else 0.0
    if rest:
        total += wave(-(-rest // cus), min(cus, rest))
    return total


def completion_s(gpu: GPU) -> float:
    """End of a launch after its last workgroup: the tiny-kernel floor less the launch and one load."""
    return max(0.0, gpu.kernel_floor_s - gpu.launch_graph_node_s - gpu.dram_latency_s)
