"""Probe rows that set no constant, predicted by the model: checks of its structure, not of its numbers.

Two probes measure kernels whose every input the model knows, and neither sets a constant beyond the rows
named below, so they test how the cycle-level model combines its terms:

- `probe_floor.csv`, the `tile_*B_*w` rows: W one-tile copies (each program loads its 1, 4 or 16 KiB tile,
  stores it and exits), 1 to 64 per SM. `tile_4k_sm` and `tile_4k_1prog` (L2 flushed) set the first-load
  burst (`hbm_burst_latency_s`); the rows here are the others. The 1 KiB rows are left out: at 1 and 2 per
  SM their tiles stay in L2 across graph replays.
- `probe_grid.csv`: the same tile work (load 4 KiB, 0, 32 or 128 multiply-adds a value, store) as one
  workgroup per tile and as 4, 8 and 16 persistent programs per SM: do resident workgroups overlap their
  loads with each other's compute (`hwmodels.cycle_time.drifting_s`)? Its three persistent copies (rounds 0)
  set `grid_stride_efficiency` (a grid-stride loop's share of the bandwidth one workgroup per tile gets), so
  the rows that test the structure are the other nine.

- `probe_tiles.csv`: stores of column tiles, as a recurrence tiled over value columns writes its state:
  program (t, b) writes 4 to 512 bytes of each of the 128 rows of a 64 KiB block, the tiles of one block
  consecutive in the grid, from 1 MiB to 512 MiB a launch (`Program.row_run_bytes`, `Program.sector_factor`).

- `probe_drift.csv`: persistent programs (1, 2 or 4 a SM) walking 16 KiB tiles with the grid's stride, each
  trip a load, 0 to 128 dependent multiply-adds a value, then a store of the tile (`rw`) or a running sum
  (`read`): how the drifted residents share HBM (`hwmodels.cycle_time.steady_trip_s`). No constant comes from
  it; each row is `infersim kernel --triton` of `drift_kernel` at the row's grid and rounds (`drift_rows`, which
  needs Triton to compile it).

- `probe_async.csv`: a tile of 4 to 64 KiB per loop trip feeding a `tl.dot`, loaded through registers (LDG,
  num_stages 1) or by asynchronous copy into shared memory (cp.async, num_stages 2 and 3), 1 to 4 programs per
  SM and 1 to 66 programs alone. No constant comes from it: each row is the product's prediction of a Triton
  kernel it never saw, `infersim kernel --triton companion/kernels/probes.py:tile_dot_kernel` at the row's grid,
  arguments and stages (`async_rows`, which needs Triton to compile it).

Each row is a `Comparison` (group "probe tiles", "probe grid", "probe store tiles", "probe drift" or "probe
async"), predicted as its kernel ran: the copy as the model's `Copy` split over the row's grid, the grid probe's
kernel with its compiled code's counts and timeline (`compiled/sass_counts.py`, kernel `probe_tile_work`), the
column tiles as a store of their rows over their grid, the drift and async probes' kernels as `infersim kernel
--triton` prices them.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from compiled.kernel import Compiled
from hwmodels.program import Program
from hwmodels.work import Family, Work
from validation.comparison import Comparison, compare
from workloads.kernel_base import KernelKind
from workloads.kernels import Copy

DATA_DIR = Path(__file__).parent / "data"
FP32_BYTES = 4


def _rows(hw: str, probe: str) -> list[dict[str, str]]:
    with open(DATA_DIR / hw / f"probe_{probe}.csv", newline="") as f:
        return list(csv.DictReader(f))


def tile_rows(hw: str = "h200") -> list[Comparison]:
    """The floor probe's one-tile copies of 4 and 16 KiB against the model's copy over the same grid."""
    out = []
    for row in _rows(hw, "floor"):
        variant = row["variant"]
        if not variant.startswith("tile_") or variant.startswith("tile_1024B") or row["l2_flushed"] == "True":
            continue
        _, size, warps = variant.split("_")  # tile_4096B_8w
        tile, threads, programs = int(size[:-1]), 32 * int(warps[:-1]), int(row["programs"])
        kernel = Copy(size_bytes=tile * programs, threads=threads, bytes_per_workgroup=tile)
        out.append(compare(row, kernel, hw, f"{variant} x {programs}", "probe tiles"))
    return out


@dataclass(frozen=True)
class _TileWork(KernelKind):
    """The grid probe's kernel: `tiles` tiles of `block` fp32 over `programs` programs, each tile loaded,
    computed on and stored by one program (`tile_work_kernel`)."""

    kind: ClassVar[str] = "probe-tile-work"

    tiles: int
    block: int
    programs: int
    threads: int

    def launches(self) -> tuple[Work, ...]:
        tile_bytes = self.block * FP32_BYTES
        trips = -(-self.tiles // self.programs)
        return (Work(flop_by_dtype={}, read_bytes=self.tiles * tile_bytes, write_bytes=self.tiles * tile_bytes,
                     workgroups=self.programs, threads_per_workgroup=self.threads, family=Family.COPY,
                     program=Program(trips=trips, trip_load_bytes=tile_bytes, trip_store_bytes=tile_bytes,
                                     grid_stride=trips > 1)),)


@dataclass(frozen=True)
class _StoreTiles(KernelKind):
    """The tiles probe's kernel: `footprint` bytes of rows `pitch` bytes long, written by programs that each
    store `tile` bytes of every one of `rows` rows of one block (`column_tile_store_kernel`)."""

    kind: ClassVar[str] = "probe-store-tiles"

    tile: int
    pitch: int
    rows: int
    footprint: int
    threads: int

    def launches(self) -> tuple[Work, ...]:
        stored = self.rows * self.tile
        return (Work(flop_by_dtype={}, read_bytes=0, write_bytes=self.footprint,
                     workgroups=self.footprint // stored, threads_per_workgroup=self.threads, family=Family.COPY,
                     program=Program(trips=1, trip_store_bytes=stored,
                                     row_run_bytes=self.tile if self.tile < self.pitch else 0.0,
                                     store_footprint_bytes=self.footprint)),)


def store_tile_rows(hw: str = "h200") -> list[Comparison]:
    """The tiles probe's column-tile stores against the model's store of the same rows over the same grid."""
    out = []
    for row in _rows(hw, "tiles"):
        tile, footprint = int(row["tile_bytes"]), int(row["footprint_bytes"])
        kernel = _StoreTiles(tile, int(row["pitch_bytes"]), int(row["rows_per_block"]), footprint,
                             32 * int(row["num_warps"]))
        out.append(compare({**row, "launch_mode": "eager", "host_gaps": "hidden"}, kernel, hw,
                           f"store {tile} B tiles, {footprint >> 20} MiB", "probe store tiles"))
    return out


def grid_rows(hw: str = "h200") -> list[Comparison]:
    """The grid probe's rows against the model's time of the same tiles, grid and compiled code."""
    from compiled.sass_counts import compiled, cycles_of, per_thread

    out = []
    for row in _rows(hw, "grid"):
        tiles, block, programs = int(row["tiles"]), int(row["block_elems"]), int(row["programs"])
        config = f"rounds={row['rounds']}"
        kernel = _TileWork(tiles, block, programs, 32 * int(row["num_warps"]))
        instructions, registers = compiled(hw, "probe_tile_work", config, -(-tiles // programs))
        counted = Compiled(kernel, (instructions,), (registers,), (per_thread(hw, "probe_tile_work", config),),
                           (cycles_of(hw, "probe_tile_work", config),))
        # eager launches with the host's gaps hidden: the GPU's own launch cost (`compare`)
        out.append(compare({**row, "launch_mode": "eager", "host_gaps": "hidden"}, counted, hw,
                           f"tile work {config} programs={programs}", "probe grid"))
    return out


ASYNC_KERNEL = "companion/kernels/probes.py:tile_dot_kernel"
ASYNC_BUFFER_BYTES = 1 << 30  # the probe's bf16 source (`companion.bench.probes.MLP_BUFFER_BYTES`)
ASYNC_ITERS = 512  # tiles a program reads a sample at most (`companion.bench.probes.MLP_ITERS`)


def async_arguments(row: dict[str, str]) -> tuple[int, list[str], int]:
    """(grid, the `--arg` values of one async-probe row as the bench launched it, num_stages)."""
    grid, rows, cols = int(row["grid"]), int(row["rows"]), int(row["cols"])
    total = ASYNC_BUFFER_BYTES // 2 // (rows * cols)
    tiles = min(total, grid * ASYNC_ITERS)
    args = [f"src_ptr=bf16[{total},{rows},{cols}]", f"w_ptr=bf16[16,{rows}]", f"out_ptr=fp32[{grid},16,{cols}]",
            "base_tile=0", f"n_tiles={tiles}", f"total_tiles={total}", f"ROWS={rows}", f"COLS={cols}", "M=16"]
    return grid, args, int(row["num_stages"])


def _as_user_kernel(spec: str, row: dict[str, str], grid: int, args: list[str], hw: str, label: str, group: str,
                    stages: int | None = None) -> Comparison:
    """One probe row against `infersim kernel --triton` of its kernel at the row's grid, arguments and stages,
    launched as the probe did (eager, the host's gaps hidden)."""
    from compiled.triton_args import parse_args
    from compiled.triton_kernel import triton_launch
    from hwmodels.calibration import load_calibration
    from hwmodels.roofline import kernel_time
    from hwmodels.spec import load_gpu
    from validation.comparison import launch_mode_of

    gpu = load_gpu(hw)
    found = triton_launch(spec, (grid, 1, 1), parse_args(args), gpu, int(row["num_warps"]), stages)
    mode = launch_mode_of({**row, "launch_mode": "eager", "host_gaps": "hidden"})
    t = kernel_time(found.work, gpu, load_calibration(hw), mode)
    return Comparison(label, group, "eager", float(row["time_s_median"]), t.time_s, t.bound.value, mode=mode.value)


def async_rows(hw: str = "h200") -> list[Comparison]:
    """The async probe's rows against `infersim kernel --triton` of the same kernel, grid, arguments and stages."""
    out = []
    for row in _rows(hw, "async"):
        grid, args, stages = async_arguments(row)
        label = f"tile {row['rows']}x{row['cols']} stages={stages} programs={grid}"
        out.append(_as_user_kernel(ASYNC_KERNEL, row, grid, args, hw, label, "probe async", stages))
    return out


DRIFT_KERNEL = "companion/kernels/probes.py:drift_kernel"


def drift_arguments(row: dict[str, str]) -> tuple[int, list[str]]:
    """(grid, the `--arg` values of one drift-probe row as the bench launched it)."""
    tiles, block = int(row["tiles"]), int(row["block_elems"])
    values = tiles * block
    store = 1 if row["mode"] == "rw" else 0
    return int(row["programs"]), [f"src_ptr=fp32[{values}]", f"dst_ptr=fp32[{values}]", f"n_tiles={tiles}",
                                  f"BLOCK={block}", f"ROUNDS={row['rounds']}", f"STORE={store}"]


def drift_rows(hw: str = "h100") -> list[Comparison]:
    """The drift probe's rows against `infersim kernel --triton` of the same kernel, grid and arguments."""
    out = []
    for row in _rows(hw, "drift"):
        grid, args = drift_arguments(row)
        label = f"{row['mode']} rounds={row['rounds']} programs={grid}"
        out.append(_as_user_kernel(DRIFT_KERNEL, row, grid, args, hw, label, "probe drift"))
    return out
