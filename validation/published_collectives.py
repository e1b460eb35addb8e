"""Predicted collective latency against published tables (test only): the 8x MI300X RCCL and QuickReduce table,
and the rccl-tests/nccl-tests runs of `published/nccl_tests.csv` (8x MI300X, MI325X, MI355X and H100 all-reduce,
8 B to 16 GiB, eager launches or a captured graph as each run states).

`infersim validate --published` prints each series' error, and with `--rows` every row.
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path

from hwmodels.calibration import load_calibration
from hwmodels.interconnect import build_fabric
from hwmodels.roofline import LaunchMode
from hwmodels.spec import load_gpu, load_platform
from simulator.cost.collective_algorithms import Algorithm
from simulator.cost.collective_policy import collective_time
from workloads.codecs import Codec
from workloads.collectives import Collective, CollectiveOp

TABLE = Path(__file__).parent / "published" / "mi300x-8_allreduce_mk1.csv"
NCCL_TESTS = Path(__file__).parent / "published" / "nccl_tests.csv"
_OPS = {"allreduce": CollectiveOp.ALL_REDUCE, "allgather": CollectiveOp.ALL_GATHER,
        "reducescatter": CollectiveOp.REDUCE_SCATTER}


@dataclass(frozen=True)
class PublishedRow:
    """One published latency beside the model's prediction for it."""

    label: str
    size_bytes: int
    measured_s: float
    predicted_s: float

    @property
    def error(self) -> float:
        return (self.predicted_s - self.measured_s) / self.measured_s


def compare_mi300x(path: Path = TABLE, mode: LaunchMode = LaunchMode.EAGER) -> list[PublishedRow]:
    """Each row of the MK1 table predicted on the mi300x-8 platform (the benchmark launched eagerly)."""
    platform = load_platform("mi300x-8")
    gpu = load_gpu(platform.gpu)
    fabric, calib = build_fabric(platform, gpu), load_calibration(gpu.name)
    rows = []
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            algorithm = Algorithm(row["algorithm"])
            codec = Codec.parse(row["codec"]) if row["codec"] else None
            size = int(row["size_bytes"])
            coll = Collective(CollectiveOp.ALL_REDUCE, size, int(row["world_size"]), "published")
            predicted = collective_time(coll, fabric, gpu, calib, mode=mode, algorithm=algorithm, codec=codec)
            rows.append(PublishedRow(row["label"], size, float(row["time_s"]), predicted.time_s))
    return rows


def compare_nccl_tests(path: Path = NCCL_TESTS) -> list[PublishedRow]:
    """Each published nccl-tests/rccl-tests row predicted on its platform: eager launches back to back, or graph
    nodes where the run captured a graph (`-G 1`); series by source. An NCCL run is priced as the collective
    library's ring (`Algorithm.RING`): NCCL has no one-shot kernel of the engines' kind, and its tree, LL128 and
    NVLS algorithms are not modelled. An RCCL run keeps the engine's choice (`select_allreduce`), as these series
    were first compared."""
    rows = []
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            platform = load_platform(f"{row['platform']}-8")
            gpu = load_gpu(platform.gpu)
            fabric, calib = build_fabric(platform, gpu), load_calibration(gpu.name)
            graph = "-G 1" in row["notes"]
            gpus, size = int(row["gpus"]), int(row["size_bytes"])
            coll = Collective(_OPS[row["op"]], size, gpus, "published")
            algorithm = Algorithm.RING if row["library"] == "nccl" else None
            predicted = collective_time(coll, fabric, gpu, calib, mode=LaunchMode.GRAPH if graph else LaunchMode.EAGER,
                                        algorithm=algorithm)
            label = f"{row['source_id']} {row['platform']} x{gpus} {row['op']} {'graph' if graph else 'eager'}"
            rows.append(PublishedRow(label, size, float(row["time_us"]) * 1e-6, predicted.time_s))
    return rows


def summary(rows: list[PublishedRow]) -> list[dict[str, object]]:
    """Median and largest absolute % error of each published series."""
    groups: dict[str, list[float]] = {}
    for row in rows:
        groups.setdefault(row.label, []).append(abs(row.error) * 100)
    return [{"series": label, "rows": len(errors), "median_abs_pct": statistics.median(errors),
             "max_abs_pct": max(errors)} for label, errors in groups.items()]
