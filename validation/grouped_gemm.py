"""The constants of CUTLASS's grouped GEMM as `torch._grouped_mm` runs it (`workloads.kernels.GroupedMm`), from
the grouped probe (`python -m companion.bench probes --only grouped`, validation/data/<gpu>/probe_grouped.csv).

- The descriptor switch (`workloads.kernels.GROUPED_SWITCH_ROUND_TRIPS`): the same tiles as one group (`same`)
  and as 1,023 one-cluster groups (`switch`, every tile another group's) read the same bytes; the extra time of
  `switch` per tile a SM, the median over the probe's depths, in the GPU's idle DRAM round trips.
- The set-up (`Calibration.library_grouped_setup_s`): the one-tile call (`one`) measured, less the model's time
  of it without the set-up: what the persistent kernel spends before its first tile and after its last that the
  model does not count otherwise.
- The walk past empty groups (`Calibration.library_grouped_scan_s`): 66 one-row groups followed by 957 empty ones
  (`tail1`) over the 66 alone (`few1`), per empty group: after its last tile each CTA reads the remaining groups'
  problem sizes to the end of the list.

- A group's rows of A read by many clusters at once (`workloads.kernels.GROUPED_SHARED_A_ROUND_TRIPS`): the wide
  layouts (`wide1t`, `wide{C}x{r}`: about 1,023 cluster tiles as groups of C column tiles and r rows) over
  `distinct1t` (the same bytes as one-column-tile groups) at the same k, per trip of one CTA's tile, in the GPU's
  idle L2 round trips, over `grouped_shared_a_round_trips`' readers term; median over the layouts and k.

Test data for all of them is the `moe` suite's `torch_grouped_mm` rows (the catalog's expert GEMMs), never fitted.
`python -m validation.grouped_gemm h200` prints them.
"""

from __future__ import annotations

import csv
import dataclasses
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"


def _rows(gpu_name: str) -> list[dict[str, str]]:
    with open(DATA_DIR / gpu_name / "probe_grouped.csv", newline="") as f:
        return list(csv.DictReader(f))


def _extra_s(gpu_name: str, layout: str, against: str, per: Callable[[dict[str, str]], float]) -> float:
    """Median over the probe's k of `layout`'s time less `against`'s at the same k, over `per` of the row."""
    by = {(r["layout"], r["k"]): r for r in _rows(gpu_name)}
    return statistics.median((float(row["time_s_median"]) - float(by[(against, k)]["time_s_median"])) / per(row)
                             for (name, k), row in by.items() if name == layout and (against, k) in by)


def switch_s(gpu_name: str) -> float:
    """Seconds a tile of another group costs a CTA beyond one of the same group: median over the probe's k."""
    return _extra_s(gpu_name, "switch", "same", lambda row: int(row["cta_tiles"]) / int(row["sm_count"]))


def scan_s(gpu_name: str) -> float:
    """Seconds an empty group after the last with rows costs the call: `tail1` (1,023 groups, the first 66 with one
    row each) over `few1` (the same 66 groups alone), per empty group; median over the probe's k."""
    return _extra_s(gpu_name, "tail1", "few1", lambda row: int(row["groups"]) - int(row["active_groups"]))


def _wide(row: dict[str, str]) -> tuple[int, int] | None:
    """(column tiles a group, rows a group) of a wide layout's row; None for the others."""
    from workloads.kernels import GROUPED_SMALL_TILE

    if not row["layout"].startswith("wide"):
        return None
    return -(-int(row["n"]) // GROUPED_SMALL_TILE[1]), int(row["rows_per_group"])


def shared_a_trip_s(gpu_name: str) -> list[tuple[str, int, float]]:
    """(layout, k, seconds) a trip of one CTA's tile takes in each wide layout beyond `distinct1t` at the same k.
    The probe's `s_per_tile_per_sm` counts a cluster tile (two CTAs, on two SMs) as one tile a SM, so a CTA's tile
    takes half of it; a tile makes k / tile_k trips."""
    from workloads.kernels import GROUPED_SMALL_TILE

    by = {(r["layout"], r["k"]): r for r in _rows(gpu_name)}
    out = []
    for (layout, k), row in sorted(by.items()):
        narrow = by.get(("distinct1t", k))
        if _wide(row) is None or narrow is None:
            continue
        extra = (float(row["s_per_tile_per_sm"]) - float(narrow["s_per_tile_per_sm"])) / 2
        out.append((layout, int(k), extra / (int(k) / GROUPED_SMALL_TILE[2])))
    return out


def shared_a_round_trips(gpu_name: str) -> float:
    """`GROUPED_SHARED_A_ROUND_TRIPS`: the median over the wide layouts and k of `shared_a_trip_s` in idle L2 round
    trips, over the readers term of `grouped_shared_a_round_trips` at that layout's column tiles and rows."""
    from hwmodels.spec import load_gpu
    from workloads.kernels import GROUPED_SHARED_A_ROUND_TRIPS, grouped_shared_a_round_trips

    l2 = load_gpu(gpu_name).l2_latency_s
    by_layout = {r["layout"]: _wide(r) for r in _rows(gpu_name) if _wide(r)}
    return statistics.median(
        trip / l2 / (grouped_shared_a_round_trips(*by_layout[layout]) / GROUPED_SHARED_A_ROUND_TRIPS)
        for layout, _, trip in shared_a_trip_s(gpu_name))


def switch_round_trips(gpu_name: str) -> float:
    """`switch_s` in the GPU's idle DRAM round trips (the latency the model prices a chain's round trips at)."""
    from hwmodels.spec import load_gpu

    return switch_s(gpu_name) / load_gpu(gpu_name).dram_latency_s


def setup_s(gpu_name: str) -> float:
    """The one-tile call measured, less the model's time of it with no set-up (`library_grouped_setup_s` 0)."""
    from compiled.launch_time import launch_times
    from hwmodels.calibration import load_calibration
    from hwmodels.roofline import LaunchMode
    from hwmodels.spec import load_gpu
    from workloads.kernels import GroupedMm

    gpu = load_gpu(gpu_name)
    calib = dataclasses.replace(load_calibration(gpu.name), library_grouped_setup_s=0.0)
    (one,) = [r for r in _rows(gpu_name) if r["layout"] == "one"]
    kernel = GroupedMm(experts=int(one["groups"]), tokens_per_expert=int(one["rows_per_group"]), n=int(one["n"]),
                       k=int(one["k"]))
    predicted = sum(t.time_s for t in launch_times(kernel, gpu, calib, LaunchMode(one["launch_mode"])))
    return float(one["time_s_median"]) - predicted


if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else "h200"
    print(f"switch: {switch_s(name) * 1e6:.3f} us a tile, {switch_round_trips(name):.2f} DRAM round trips")
    print(f"library_grouped_setup_us: {setup_s(name) * 1e6:.3f}")
    print(f"library_grouped_scan_ns: {scan_s(name) * 1e9:.2f}")
    print(f"shared A: {shared_a_round_trips(name):.3f} L2 round trips x sqrt(readers - 1) / rows a trip")
    for layout, k, trip in shared_a_trip_s(name):
        print(f"  {layout:10} k={k:5}: {trip * 1e6:6.3f} us a trip beyond distinct1t")
