"""What the vendor BLAS picks for a dense GEMM, where it was recorded: tiles, pipeline stages and split over k.

cuBLAS chooses a kernel per shape by its own heuristic, and on Hopper (cuBLAS 13, CUDA 13.0) it is an `nvjet`
kernel whose name states its choice: `nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT` is a 64 x 8 output tile
(weights x tokens: PyTorch's `A @ W.T` is cuBLAS's column-major `W @ A.T`), 64 deep per stage, 16 stages, a 4 x 1
cluster, split over k (`splitK` in the name, or a `splitKreduce_kernel` launched after it). The tile adapts to the
token count (88 tokens for 433 rows fills one wave of 120 tiles; 160 for 4,044 rows), which is why a fixed library
tile mispredicts mid-size and large GEMMs.

`data/gemm_choices_sm90.csv` holds the choices PyTorch 2.11's cuBLAS made on one NVIDIA H200 for 2,116 shapes (the
catalog's dense projections at 1 to 16,384 tokens, bf16 and fp8), derived by `derive` from the profiler's kernel
names and grids (`validation/data/h200/library/gemm_choices.csv`, recorded by `python -m companion.bench gemm-choices`;
regenerate with `python -m workloads.gemm_library validation/data/h200/library/gemm_choices.csv`). No time is in it.
`choices` gives, for any shape on a Hopper GPU, the choice recorded for it, or those recorded for the nearest
shapes (log-distance, tokens weighted most: the tile follows them), among which `workloads.tiles.gemm_config` takes
the one the model times fastest. Other GPUs have no recorded choices and keep the tile policy of
`workloads.tiles.gemm_config`.
"""

from __future__ import annotations

import csv
import math
import re
import sys
from functools import cache
from pathlib import Path

from hwmodels.dtypes import Dtype

CHOICES_FILE = Path(__file__).parent / "data" / "gemm_choices_sm90.csv"
LIBRARY = "cuBLAS 13.0 (PyTorch 2.11.0+cu130), NVIDIA H200"
COLUMNS = ("dtype", "m", "n", "k", "tile_m", "tile_n", "tile_k", "stages", "split_k", "kernel")
# nvjet_sm90_<variant>_<weights>x<tokens>_<depth>x<stages>_<cluster>_...
_NVJET = re.compile(r"^nvjet_sm90_\w*?tst_(\d+)x(\d+)_(\d+)x(\d+)_(\d+)x(\d+)_")
_DTYPES = {"bfloat16": "bf16", "float8_e4m3fn": "fp8"}
# Nearest recorded shape: distance in log2 of tokens counts this many times one in log2 of n or k (an assumption:
# the recorded tiles follow the token count far more than n or k; not fitted to any time).
TOKEN_WEIGHT = 4.0
THREADS = 384  # every nvjet kernel recorded runs 384 threads (one producer and two consumer warpgroups)


def parse(name: str) -> dict[str, int] | None:
    """The tile of an nvjet kernel name, in the model's orientation (tile_m tokens, tile_n weights); None for
    another kernel (a GEMV, a CUTLASS fallback)."""
    found = _NVJET.match(name)
    if found is None:
        return None
    weights, tokens, depth, stages = (int(g) for g in found.groups()[:4])
    return {"tile_m": tokens, "tile_n": weights, "tile_k": depth, "stages": stages}


def derive(raw: list[dict]) -> list[dict]:
    """The table's rows from the profiler's (`companion.bench.gemm_choices`): one per shape whose main kernel is an
    nvjet kernel, its split the launched workgroups over the output tiles where it splits over k."""
    out = []
    for row in raw:
        names = row["kernels"].split(";") if row["kernels"] else []
        if not names or row["dtype"] not in _DTYPES:
            continue
        tile = parse(names[0])
        if tile is None:
            continue
        m, n, k = int(row["m"]), int(row["n"]), int(row["k"])
        grid = math.prod(int(g) for g in row["grids"].split(";")[0].split("x"))
        tiles = -(-m // tile["tile_m"]) * -(-n // tile["tile_n"])
        splits_k = "splitK" in names[0] or any("splitKreduce" in name for name in names[1:])
        split = max(1, round(grid / tiles)) if splits_k else 1
        out.append({"dtype": _DTYPES[row["dtype"]], "m": m, "n": n, "k": k, **tile,
                    "split_k": min(split, max(1, k // tile["tile_k"])), "kernel": names[0]})
    return out


@cache
def _table() -> dict[str, list[dict]]:
    """The recorded choices by datatype (bf16, fp8)."""
    if not CHOICES_FILE.is_file():
        return {}
    by_dtype: dict[str, list[dict]] = {}
    with open(CHOICES_FILE, newline="") as f:
        for row in csv.DictReader(f):
            parsed = {c: (row[c] if c in ("dtype", "kernel") else int(row[c])) for c in COLUMNS}
            by_dtype.setdefault(parsed["dtype"], []).append(parsed)
    return by_dtype


def _family(dtype: Dtype) -> str | None:
    """The recorded datatype a GEMM's datatype takes its choice from (fp16 as bf16: the same kernels' variants)."""
    return {Dtype.BF16: "bf16", Dtype.FP16: "bf16", Dtype.FP8: "fp8"}.get(dtype)


# Recorded shapes an unrecorded one chooses among (`choices`): those within this many log2 units of the nearest
# (distance as `TOKEN_WEIGHT` counts it), at most `NEIGHBOURS` of them. Assumption, not fitted to any time: cuBLAS's
# heuristic picks a kernel that suits the shape, and the nearest recorded shape's kernel may not (a tile that
# filled the GPU for 18,432 columns leaves it a third full at 7,168), so the product takes the neighbours' kernels
# that the model times fastest for the shape (`workloads.tiles.gemm_config`).
NEIGHBOUR_SPAN = 2.0
NEIGHBOURS = 8


def _fields(near: dict, k: int) -> dict[str, int | bool]:
    """A recorded choice's tile fields for a GEMM of depth k."""
    fields: dict[str, int | bool] = {f: near[f] for f in ("tile_m", "tile_n", "tile_k", "stages")}
    fields["threads"] = THREADS
    # the recorded split's depth per split kept: a shallower k splits fewer ways, never more than recorded
    fields["split_k"] = max(1, min(near["split_k"], round(k * near["split_k"] / near["k"]), k // near["tile_k"]))
    # every recorded split over k was summed by a splitKreduce_kernel launched after the tiles
    fields["reduce_launch"] = fields["split_k"] > 1
    return fields


def _why(near: dict, what: str) -> str:
    return (f"{LIBRARY}'s choice for {near['m']}x{near['n']}x{near['k']} {near['dtype']}, {what}: {near['kernel']}"
            + (f", split over k {near['split_k']} ways" if near["split_k"] > 1 else ""))


def choices(m: int, n: int, k: int, dtype: Dtype) -> list[tuple[dict[str, int | bool], str]]:
    """The tile fields (tile_m, tile_n, tile_k, stages, threads, split_k, reduce_launch) cuBLAS picked for m x n x k
    where that shape was recorded (one choice), else those it picked for the nearest recorded shapes
    (`NEIGHBOUR_SPAN`, `NEIGHBOURS`; one per distinct kernel), nearest first, each with why; none for a datatype
    it was not recorded for."""
    rows = _table().get(_family(dtype) or "", [])
    if not rows:
        return []

    def distance(r: dict) -> float:
        return (TOKEN_WEIGHT * abs(math.log2(r["m"] / m)) + abs(math.log2(r["n"] / n))
                + abs(math.log2(r["k"] / k)))

    ranked = sorted(rows, key=distance)
    if distance(ranked[0]) == 0.0:
        return [(_fields(ranked[0], k), _why(ranked[0], "this shape"))]
    span = distance(ranked[0]) + NEIGHBOUR_SPAN
    out: dict[tuple, tuple[dict[str, int | bool], str]] = {}
    for near in ranked[:NEIGHBOURS]:
        if distance(near) > span:
            break
        fields = _fields(near, k)
        out.setdefault(tuple(fields.items()), (fields, _why(near, "a recorded shape near this one")))
    return list(out.values())


def main(argv: list[str]) -> int:
    """Regenerate the table from the profiler's CSV."""
    if len(argv) != 1:
        print("usage: python -m workloads.gemm_library RAW.csv", file=sys.stderr)
        return 2
    with open(argv[0], newline="") as f:
        rows = derive(list(csv.DictReader(f)))
    CHOICES_FILE.parent.mkdir(exist_ok=True)
    with open(CHOICES_FILE, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} shapes -> {CHOICES_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
