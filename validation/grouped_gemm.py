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

Test data for both is the `moe` suite's `torch_grouped_mm` rows (the catalog's expert GEMMs), never fitted.
`python -m validation.grouped_gemm h200` prints both.
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
