"""The recorded collective sweeps between the GPUs of one host: their sizes, CSV columns and bandwidth columns.

`collectives_nccl.csv` holds NCCL's all_reduce (size = the tensor each rank holds), all_gather_into_tensor
(size = the gathered output) and reduce_scatter_tensor (size = the input) at every power of two from 4 KiB to
1 GiB, bf16, in two launch modes, and one peer copy GPU0 -> GPU1 (`p2p_copy`); `collectives_quickreduce.csv`
the same columns for NCCL's all_reduce and the companion's quantized all-reduce through each codec. Rank 0's
times are reported; the largest median over the ranks is recorded beside them. Bus bandwidth follows
nccl-tests' convention. The companion's bench (`python -m companion.bench collectives` and
`... quickreduce`) writes these files; `validation.collective_report` compares them with the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from validation.measure_output import percentile, summarize
from workloads.collectives import CollectiveOp

NCCL_CSV = "collectives_nccl.csv"
QUICKREDUCE_CSV = "collectives_quickreduce.csv"
TOPOLOGY_NAME = "topology.txt"
# platform -> its measured NCCL sweep, which the link calibration (`traces.calibrate_links`) fits and checks
NCCL_SWEEPS = {"h200-2": Path(__file__).parent / "data" / "h200x2" / NCCL_CSV}

ENV_COLUMNS = ("NCCL_NVLS_ENABLE", "NCCL_ALGO", "NCCL_PROTO")
OPS = ("all_reduce", "all_gather", "reduce_scatter")
DTYPE = "bfloat16"
ELEMENT_BYTES = 2
MIN_BYTES = 1 << 12  # 4 KiB
MAX_BYTES = 1 << 30  # 1 GiB
P2P_KERNEL = "p2p_copy"
P2P_BYTES = 1 << 30

COLUMNS = (
    "kernel",
    "size_bytes",
    "world_size",
    "dtype",
    "launch_mode",
    "time_s_median",
    "time_s_p10",
    "time_s_p90",
    "time_s_median_max_rank",
    "repeats",
    "ops_per_sample",
    "algbw_bytes_per_s",
    "busbw_bytes_per_s",
    "gpu_name",
    "driver",
    "torch",
    "triton",
    "cuda",
    "nccl",
    "date",
    *ENV_COLUMNS,
)


def sizes(min_bytes: int = MIN_BYTES, max_bytes: int = MAX_BYTES) -> list[int]:
    """Every power of two from min_bytes to max_bytes inclusive (both rounded to powers of two)."""
    lo, hi = (max(1, int(x)).bit_length() - 1 for x in (min_bytes, max_bytes))
    return [1 << k for k in range(lo, hi + 1)]


def busbw_factor(op: str, world_size: int) -> float:
    """nccl-tests' bus-bandwidth factor of a measured op: all_reduce 2(n-1)/n, all_gather and reduce_scatter
    (n-1)/n (`CollectiveOp.bus_factor`); a peer copy 1."""
    if op == P2P_KERNEL:
        return 1.0
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}")
    return CollectiveOp(op.replace("_", "")).bus_factor(world_size)


def kernel_name(backend: str, op: str) -> str:
    """The `kernel` column of an op run by a backend, e.g. nccl_all_reduce."""
    return f"{backend}_{op}"


def size_text(n: int) -> str:
    """A power-of-two size in the largest binary unit that divides it: 4 KiB, 1 GiB."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def build_rows(rank_results: Sequence[Sequence[dict]], world_size: int, backend: str, prov: dict) -> list[dict]:
    """One CSV row per timed (op, size, mode) of rank 0, with the largest median over the ranks."""
    by_key: list[dict[tuple, dict]] = [
        {(r["op"], r["size_bytes"], r["mode"]): r for r in res if r.get("times_s")} for res in rank_results
    ]
    rows = []
    for key, rec in by_key[0].items():
        op, size, mode = key
        stats = summarize(rec["times_s"])
        medians = [percentile(d[key]["times_s"], 50) for d in by_key if key in d]
        t = stats["time_s_median"]
        algbw = size / t
        rows.append(
            {
                "kernel": kernel_name(backend, op),
                "size_bytes": size,
                "world_size": world_size,
                "dtype": DTYPE,
                "launch_mode": mode,
                **stats,
                "time_s_median_max_rank": max(medians) if len(medians) == len(by_key) else None,
                "ops_per_sample": rec["ops_per_sample"],
                "algbw_bytes_per_s": algbw,
                "busbw_bytes_per_s": algbw * busbw_factor(op, world_size),
                **prov,
                "date": rec["date"],
            }
        )
    return rows
