"""`GroupedMm`: torch._grouped_mm (CUTLASS's ptr-array grouped GEMM on Hopper) as the library runs it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from compiled.launch_time import launch_times
from hwmodels.calibration import load_calibration
from hwmodels.dtypes import Dtype
from hwmodels.roofline import LaunchMode
from hwmodels.spec import load_gpu
from workloads.kernels import (
    GROUPED_GRID_CLUSTERS,
    GROUPED_LARGE_TILE,
    GROUPED_MAX_GROUPS,
    GROUPED_SMALL_TILE,
    GroupedMm,
)


def test_the_tile_follows_pytorchs_rule_on_the_mean_rows_of_a_group():
    assert GroupedMm(experts=8, tokens_per_expert=128, n=4096, k=4096).tile() == GROUPED_SMALL_TILE
    assert GroupedMm(experts=8, tokens_per_expert=129, n=4096, k=4096).tile() == GROUPED_LARGE_TILE
    assert GroupedMm(experts=8, tokens_per_expert=4096, n=128, k=4096).tile() == GROUPED_SMALL_TILE
    skewed = GroupedMm(experts=4, tokens_per_expert=400, n=4096, k=512, rows_by_expert=(400, 100, 0, 0))
    assert skewed.tile() == GROUPED_SMALL_TILE  # 500 rows over 4 groups: 125 a group


def test_a_call_is_two_launches_and_each_group_pads_to_whole_clusters():
    kernel = GroupedMm(experts=256, tokens_per_expert=2, n=7168, k=256)
    prep, gemm = kernel.launches()
    assert prep.workgroups == 1 and prep.threads_per_workgroup == 256 and not prep.grouped_library
    # two rows still take a cluster of two 64-row CTAs on each of the 56 column tiles
    assert gemm.workgroups == 256 * 2 * 56 and gemm.grouped_library
    assert gemm.flop_by_dtype[Dtype.BF16] == 2 * 256 * 128 * 7168 * 256  # the padded rows are executed
    # only the real rows are read and written; every active expert's weight is read once
    assert gemm.read_bytes == 2 * (512 * 256 + 256 * 7168 * 256) and gemm.write_bytes == 2 * 512 * 7168
    assert GroupedMm(experts=4, tokens_per_expert=0, n=128, k=128).launches()[1:] == ()


def test_a_cluster_switches_group_unless_its_group_has_more_tiles_than_the_grid_has_clusters():
    # 56 cluster tiles a group, fewer than the 66 clusters: every tile a cluster takes is another group's
    assert GroupedMm(experts=256, tokens_per_expert=2, n=7168, k=256).switch_share() == 1.0
    # one group of 1,023 cluster tiles: only each cluster's first is a switch
    one = GroupedMm(experts=1, tokens_per_expert=1023 * 128, n=128, k=128)
    assert one.switch_share() == pytest.approx(GROUPED_GRID_CLUSTERS / 1023)
    (_, same), (_, switch) = one.launches(), GroupedMm(experts=1023, tokens_per_expert=128, n=128, k=128).launches()
    assert switch.program.setup_chain.dram > same.program.setup_chain.dram > 0


def test_switching_groups_and_the_library_set_up_cost_time():
    gpu, calib = load_gpu("h200"), load_calibration("h200")
    assert calib.library_grouped_setup_s > 0

    def time_s(kernel: GroupedMm) -> float:
        return sum(t.time_s for t in launch_times(kernel, gpu, calib, LaunchMode.GRAPH))

    same = GroupedMm(experts=1, tokens_per_expert=1023 * 128, n=128, k=256)
    # the same tiles, 1,023 groups of one cluster each: more weight bytes and a switch at every tile
    assert time_s(GroupedMm(experts=1023, tokens_per_expert=128, n=128, k=256)) > time_s(same)
    # the set-up is paid once a call, by the GEMM's launch, however many tiles it walks
    bare = replace(calib, library_grouped_setup_s=0.0)
    for kernel in (GroupedMm(experts=1, tokens_per_expert=64, n=128, k=128), same):
        without = sum(t.time_s for t in launch_times(kernel, gpu, bare, LaunchMode.GRAPH))
        assert time_s(kernel) == pytest.approx(without + calib.library_grouped_setup_s, rel=1e-12)


def test_bad_groups_are_refused_by_name():
    with pytest.raises(ValueError, match=f"at most {GROUPED_MAX_GROUPS} groups"):
        GroupedMm(experts=1024, tokens_per_expert=1, n=128, k=128)
    with pytest.raises(ValueError, match="rows_by_expert has 2 experts"):
        GroupedMm(experts=3, tokens_per_expert=5, n=128, k=128, rows_by_expert=(5, 1))
    with pytest.raises(ValueError, match="non-negative"):
        GroupedMm(experts=2, tokens_per_expert=5, n=128, k=128, rows_by_expert=(5, -1))


@pytest.mark.parametrize("gpu", ["b200", "mi355x", "mi300x"])
def test_a_gpu_whose_kernel_is_another_is_refused_by_name(gpu, capsys):
    from infersim.cli import main

    kernel = GroupedMm(experts=8, tokens_per_expert=2, n=4096, k=1792)
    with pytest.raises(ValueError, match=f"Hopper .sm_90. kernel; {gpu} is not a Hopper GPU .valid: h100, h200."):
        launch_times(kernel, load_gpu(gpu), load_calibration(gpu), LaunchMode.GRAPH)
    argv = ["kernel", "--hw", gpu, "grouped-mm", "--param", "experts=8", "--param", "tokens_per_expert=2",
            "--param", "n=4096", "--param", "k=1792"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "not a Hopper GPU" in err and "Traceback" not in err
    assert launch_times(kernel, load_gpu("h100"), load_calibration("h100"), LaunchMode.GRAPH)


def test_the_fused_moe_grid_is_sized_for_the_worst_padding_and_its_extra_programs_cost_their_dispatch():
    """vLLM's fused-MoE grid holds routed rows + experts x (BLOCK_M - 1) rows of tiles (capped at routed rows x
    BLOCK_M when the rows are fewer than the experts); the programs past the padded rows exit at once, and each CU is
    handed its share of them at the dispatcher's rate."""
    from compiled.launch_time import launch_times
    from hwmodels.calibration import load_calibration
    from hwmodels.roofline import LaunchMode
    from hwmodels.spec import load_gpu
    from workloads.kernels import MoeGemm, worst_case_row_tiles

    assert worst_case_row_tiles(512, 256, 16) == (512 + 256 * 15) // 16  # more rows than experts: no cap
    assert worst_case_row_tiles(64, 256, 16) == 64  # fewer rows than experts: at most a tile a row
    assert worst_case_row_tiles(4096, 8, 64) == -(-(4096 + 8 * 63) // 64)
    assert worst_case_row_tiles(64, 256, 16, capped=False) == -(-(64 + 256 * 15) // 16)  # the companion's rule
    gpu, calib = load_gpu("h200"), load_calibration("h200")
    rows = (1,) * 8 + (0,) * 248
    exact = MoeGemm(experts=256, tokens_per_expert=1, n=7168, k=256, rows_by_expert=rows, tile_m=16)
    grid = (8 + 256 * 15 + 15) // 16
    worst = MoeGemm(experts=256, tokens_per_expert=1, n=7168, k=256, rows_by_expert=rows, tile_m=16,
                    grid_row_tiles=grid)
    (work,) = worst.launches()
    assert work.exiting_workgroups == (grid - 8) * 56 and work.workgroups == 8 * 56
    extra = (launch_times(worst, gpu, calib, LaunchMode.GRAPH)[0].time_s
             - launch_times(exact, gpu, calib, LaunchMode.GRAPH)[0].time_s)
    assert extra == pytest.approx(-(-(grid - 8) * 56 // 132) * gpu.workgroup_dispatch_s, rel=1e-9)
    with pytest.raises(ValueError, match="grid_row_tiles"):
        MoeGemm(experts=256, tokens_per_expert=1, n=7168, k=256, rows_by_expert=rows, tile_m=16,
                grid_row_tiles=4).launches()
