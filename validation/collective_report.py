"""Predicted against measured for the two-GPU all-reduce sweeps: NCCL (ring) and the QuickReduce kernels.

NCCL's library protocols were fitted on the all-reduce's even powers of two (`traces.calibrate_links`),
so those rows are marked fitted; its odd powers, its all-gather and reduce-scatter, and every QuickReduce
row (our Triton two-shot kernels, each codec) are held out: nothing of the model was fitted to them.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from hwmodels.calibration import load_calibration
from hwmodels.interconnect import build_fabric
from hwmodels.roofline import LaunchMode
from hwmodels.spec import load_gpu, load_platform
from simulator.cost.collective_algorithms import Algorithm
from simulator.cost.collective_policy import collective_time
from validation.collective_sweep import NCCL_CSV, QUICKREDUCE_CSV
from validation.comparison import Comparison
from workloads.codecs import Codec
from workloads.collectives import Collective, CollectiveOp

DATA_DIR = Path(__file__).parent / "data"
FILES = (NCCL_CSV, QUICKREDUCE_CSV)
NCCL_OPS = {"nccl_all_reduce": CollectiveOp.ALL_REDUCE, "nccl_all_gather": CollectiveOp.ALL_GATHER,
            "nccl_reduce_scatter": CollectiveOp.REDUCE_SCATTER}
PLATFORMS = {"h200x2": "h200-2"}  # data folder -> platform spec


def _size_label(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size // scale} {unit}"
    return f"{size} B"


def _row(row: dict[str, str], platform: str, seen: set[tuple]) -> Comparison | None:
    kernel, size, world = row["kernel"], int(row["size_bytes"]), int(row["world_size"])
    if row["launch_mode"] != "graph" or (kernel, size) in seen:  # NCCL rows recur in the QuickReduce file
        return None
    seen.add((kernel, size))
    gpu = load_gpu(load_platform(platform).gpu)
    fabric, calib = build_fabric(load_platform(platform), gpu), load_calibration(gpu.name)
    if kernel in NCCL_OPS:
        op = NCCL_OPS[kernel]
        collective = Collective(op, size, world, "measured")
        result = collective_time(collective, fabric, gpu, calib, mode=LaunchMode.GRAPH, algorithm=Algorithm.RING)
        fitted = op is CollectiveOp.ALL_REDUCE and int(math.log2(size)) % 2 == 0
        group = f"{op.value} nccl"
    else:  # quickreduce_<codec>_all_reduce
        codec = Codec.parse(kernel.split("_")[1])
        collective = Collective(CollectiveOp.ALL_REDUCE, size, world, "measured")
        # on an NVIDIA node the product's QuickReduce is the Triton port's kernels, timed from their compiled code
        result = collective_time(collective, fabric, gpu, calib, mode=LaunchMode.GRAPH,
                                 algorithm=Algorithm.QUICKREDUCE, codec=codec)
        fitted = False
        group = f"allreduce quickreduce {codec.value}"
    return Comparison(label=f"{kernel} {_size_label(size)}", group=group, launch_mode="graph",
                      measured_s=float(row["time_s_median"]), predicted_s=result.time_s, bound="link",
                      fitted=fitted)


def compare_collectives(folder: str) -> list[Comparison]:
    """Every graph-mode row of a two-GPU data folder beside the model's prediction."""
    platform = PLATFORMS.get(folder)
    if platform is None:
        return []
    seen: set[tuple] = set()
    rows: list[Comparison] = []
    for name in FILES:
        path = DATA_DIR / folder / name
        if path.exists():
            with path.open(newline="") as handle:
                rows += [c for r in csv.DictReader(handle) if (c := _row(r, platform, seen)) is not None]
    return rows
