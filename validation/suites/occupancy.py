"""Suite `occupancy`: does the occupancy model predict the step in time when shared memory per block grows?

The probe (`companion.kernels.occupancy_probe`) runs a fixed, latency-bound amount of work per
program (a 256-step chase of dependent L2 loads after a small staged dot) on a grid of 8 programs
per SM (1056 on the H200). Only its shared-memory reservation changes across the sweep, from 4 KiB
to 224 KiB, through the dot's tile width BK and Triton's `num_stages`. Each row records the
reservation and registers of the compiled kernel (`.metadata.shared`, `.n_regs`): the model is
given those, never a planned number. Eager, one launch per sample, host gaps hidden. The inputs are
a few KiB of tiles and a 2 MiB table that stay in L2 by design: there is nothing to rotate.

What is predicted: the model (hwmodels.occupancy through hwmodels.roofline.kernel_time) has no
notion of a fixed-latency chain, so it cannot give one program's time. It gives the waves,
ceil(grid / (SMs x resident programs per SM)). A row's prediction is the measured time of the
anchor row (the smallest reservation in the same run) times waves(row) / waves(anchor): the
waves ratio, in seconds. The anchor row is marked fitted. Group: "occupancy waves ratio".
The model is not told the 1 KiB of shared memory that CUDA reserves per block on sm_80+ (the sm_90
cubin of this probe declares it: `cuobjdump -res-usage` reads SHARED:1024); the 28 KiB row
(BK 64, 8 stages) is where that alone changes the waves, 1 in the model against 2 on the GPU.

Counts per launch (P programs, BK, k_iters = 2 staged tile pairs of 16 x BK and BK x 16, s = 256 steps):
- flop = P x 2 x 16 x 16 x BK x k_iters (the dots; the chase is loads only);
- bytes = the tiles once (every program reads the same, through L2) + 4 x P x s (each program reads
  s distinct entries of its own table segment) + 8 x P (an int32 position and an fp32 sum written).
"""

from __future__ import annotations

from dataclasses import dataclass

from hwmodels.calibration import load_calibration
from hwmodels.dtypes import Dtype
from hwmodels.roofline import LaunchMode, kernel_time
from hwmodels.spec import load_gpu
from hwmodels.work import Work
from validation.comparison import Comparison
from validation.suites import EAGER

SUITE = "occupancy"
SHAPE_COLUMNS = ("grid", "num_warps", "block_k", "num_stages", "chase_steps")
METHOD_COLUMNS = ("shared_bytes", "registers", "spills", "anchor", "anchor_time_s", "anchor_shared_bytes",
                  "anchor_registers")
KERNEL = "triton_occupancy_probe"
GROUP = "occupancy waves ratio"

PLANNED_SMS = 132  # H200 SMs (hwmodels/specs/gpus/h200.yaml); the run uses env["sm_count"]
PROGRAMS_PER_SM = 8  # waves step at 8, 4..7, 3, 2 and 1 resident programs per SM: 1, 2, 3, 4, 8 waves
NUM_WARPS = 4
TILE = 16  # occupancy_probe.TILE (the kernel module imports torch, so it is not imported here)
K_ITERS = 2  # occupancy_probe.STAGED_TILES
CHASE_STEPS = 256  # ~256 L2 round trips: tens of microseconds per program (assumption: ~0.3 us each)
# (BK, num_stages), smallest planned reservation first. Planned = (num_stages - 1) x 2 x TILE x BK x 2 bytes
# (what triton 3.6 and 3.9 allocate for sm_90, compiled ahead of time without a GPU). 28 KiB (64, 8) sits
# where the model fits 8 programs per SM but 8 x (28 + 1) KiB, counting the 1 KiB CUDA reserves per block,
# does not fit in 228 KiB; 56 KiB (128, 8) fits 4 exactly.
SWEEP = ((64, 2), (128, 2), (128, 3), (128, 4), (64, 8), (128, 5), (128, 6), (128, 7), (128, 8),
         (256, 5), (256, 6), (256, 7), (256, 8), (512, 5), (512, 6), (512, 7), (512, 8))


@dataclass(frozen=True)
class OccupancyCase:
    """One probe launch: the grid, the tile width and stage count that set its shared-memory reservation."""

    grid: int
    block_k: int
    num_stages: int
    num_warps: int = NUM_WARPS
    chase_steps: int = CHASE_STEPS
    kernel: str = KERNEL
    dtype: str = "float16"  # the staged tiles
    launch_mode: str = EAGER
    ops_per_sample: int = 1
    host_gaps: str = "hidden"

    @property
    def suite(self) -> str:
        return SUITE

    def flop(self) -> int:
        return self.grid * 2 * TILE * TILE * self.block_k * K_ITERS

    def bytes(self) -> int:
        tiles = K_ITERS * 2 * TILE * self.block_k * 2
        return tiles + 4 * self.grid * self.chase_steps + 8 * self.grid

    def shape(self) -> dict[str, object]:
        return {"grid": self.grid, "num_warps": self.num_warps, "block_k": self.block_k,
                "num_stages": self.num_stages, "chase_steps": self.chase_steps}


def cases() -> list[OccupancyCase]:
    """The sweep on the H200's grid, smallest planned reservation first."""
    return [OccupancyCase(PLANNED_SMS * PROGRAMS_PER_SM, bk, stages) for bk, stages in SWEEP]


def planned_shared_bytes(case: OccupancyCase) -> int:
    """The reservation triton 3.9 gave for sm_90 (for planning the sweep; rows record the real one)."""
    return (case.num_stages - 1) * 2 * TILE * case.block_k * 2


def case_label(case: OccupancyCase) -> str:
    """The name a row's `anchor` column gives its anchor case."""
    return anchor_label(case.block_k, case.num_stages)


def anchor_label(block_k: object, num_stages: object) -> str:
    return f"bk{block_k} s{num_stages}"


def _work(grid: int, num_warps: int, shared_bytes: int, registers: int, flop: float, size_bytes: float) -> Work:
    return Work(flop_by_dtype={Dtype.FP16: flop}, read_bytes=size_bytes, write_bytes=0.0, workgroups=grid,
                threads_per_workgroup=num_warps * 32, lds_bytes_per_workgroup=shared_bytes,
                registers_per_thread=registers)


def predicted_waves(grid: int, num_warps: int, shared_bytes: int, registers: int, gpu_name: str) -> int:
    """Waves of the grid at the model's residency for this reservation (its flop and bytes do not change waves)."""
    gpu, calib = load_gpu(gpu_name), load_calibration(gpu_name)
    return kernel_time(_work(grid, num_warps, shared_bytes, registers, 1.0, 1.0), gpu, calib,
                       LaunchMode.EAGER).waves


def compare(row: dict[str, str], gpu_name: str) -> Comparison:
    """Anchor time x waves(row) / waves(anchor); see the module docstring for why a ratio."""
    gpu, calib = load_gpu(gpu_name), load_calibration(gpu_name)
    grid, warps = int(row["grid"]), int(row["num_warps"])
    shared, registers = int(row["shared_bytes"]), int(row["registers"])
    work = _work(grid, warps, shared, registers, float(row["flop"]), float(row["bytes"]))
    timed = kernel_time(work, gpu, calib, LaunchMode.EAGER)
    anchor_waves = predicted_waves(grid, warps, int(row["anchor_shared_bytes"]), int(row["anchor_registers"]),
                                   gpu_name)
    label = (f"{anchor_label(row['block_k'], row['num_stages'])}: {shared} B shared, "
             f"{timed.occupancy.workgroups_per_cu}/SM, {timed.waves} wave(s)")
    return Comparison(
        label=label,
        group=GROUP,
        launch_mode=row["launch_mode"],
        measured_s=float(row["time_s_median"]),
        predicted_s=float(row["anchor_time_s"]) * timed.waves / anchor_waves,
        bound="latency",  # by design: dependent loads, far below any throughput limit
        fitted=row["anchor"] == anchor_label(row["block_k"], row["num_stages"]),
    )
