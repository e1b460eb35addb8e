"""Tile configurations per GPU family: library starting points, halving to fit, pinned fields, and the CLI."""

from __future__ import annotations

import json

import pytest

from hwmodels.dtypes import Dtype
from hwmodels.spec import load_gpu, spec_names
from infersim.cli import main
from workloads.kernels import AttentionPrefill, Gemm, MlaDecode, MoeGemm
from workloads.tiles import (
    ArchFamily,
    aiter_persistent_mla_tiles,
    arch_family,
    attention_tiles,
    describe,
    gemm_tiles,
    mla_decode_tiles,
    moe_gemm_tiles,
    with_tiles,
)

GPUS = spec_names("gpus")


def _lds(kernel) -> int:
    return max(w.lds_bytes_per_workgroup for w in kernel.launches())


def test_families_of_the_catalog_gpus():
    assert {g: arch_family(load_gpu(g)) for g in GPUS} == {
        "b200": ArchFamily.BLACKWELL, "b300": ArchFamily.BLACKWELL, "h100": ArchFamily.HOPPER,
        "h200": ArchFamily.HOPPER, "mi300x": ArchFamily.CDNA3, "mi325x": ArchFamily.CDNA3, "mi355x": ArchFamily.CDNA4}


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("head_dim", [64, 128, 192, 256, 512])
@pytest.mark.parametrize("dtype", [Dtype.BF16, Dtype.FP8])
def test_attention_tiles_fit_as_the_kernel_counts_them(gpu, head_dim, dtype):
    spec = load_gpu(gpu)
    config = attention_tiles(spec, head_dim=head_dim, dtype=dtype)
    kernel = AttentionPrefill(seqs=2, q_len=300, heads=8, kv_heads=1, head_dim=head_dim, dtype=dtype, **config.fields)
    assert _lds(kernel) == config.lds_bytes <= spec.lds_max_per_workgroup_bytes
    assert kernel.threads <= spec.max_threads_per_workgroup
    assert config.why


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("kv_dtype", [Dtype.FP8, Dtype.BF16])
def test_mla_decode_tiles_fit(gpu, kv_dtype):
    spec = load_gpu(gpu)
    config = mla_decode_tiles(spec, kv_dtype=kv_dtype)
    kernel = MlaDecode(seqs=4, context=4096, heads=16, kv_dtype=kv_dtype, num_splits=4, **config.fields)
    assert _lds(kernel) <= spec.lds_max_per_workgroup_bytes


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("dtype", [Dtype.BF16, Dtype.FP8, Dtype.MXFP4, Dtype.MXFP6, Dtype.FP32])
def test_gemm_and_moe_tiles_fit(gpu, dtype):
    spec = load_gpu(gpu)
    gemm = Gemm(m=4096, n=4096, k=4096, dtype=dtype, **gemm_tiles(spec, dtype=dtype).fields)
    assert _lds(gemm) <= spec.lds_max_per_workgroup_bytes
    for tokens in (1, 20, 40, 500):
        config = moe_gemm_tiles(spec, tokens_per_expert=tokens, dtype=dtype)
        moe = MoeGemm(experts=8, tokens_per_expert=tokens, n=1024, k=2048, dtype=dtype, **config.fields)
        assert _lds(moe) <= spec.lds_max_per_workgroup_bytes
        rows = 16 if tokens <= 16 else 32 if tokens <= 32 else 64
        # AITER's CK MoE GEMMs on CDNA build no 16-row tile; 128 bytes of K a stage, as the dense GEMMs
        assert config.fields["tile_m"] == (max(32, rows) if spec.vendor.value == "amd" else rows)


def test_library_defaults_where_they_fit_and_halving_where_they_do_not():
    mi300x, mi355x, h200 = load_gpu("mi300x"), load_gpu("mi355x"), load_gpu("h200")
    # ck_tile FMHA 128x128 at hdim 128 needs 96 KiB: MI355X holds it, MI300X halves block_n to 64
    assert attention_tiles(mi355x, head_dim=128).why.startswith("library default")
    assert attention_tiles(mi300x, head_dim=128).fields == {"block_m": 128, "block_n": 64, "threads": 256}
    assert "fits 64 KiB LDS after halving block_n 128\u219264" in attention_tiles(mi300x, head_dim=128).why
    # FlashAttention-3 on Hopper: 128x128 at hdim 128
    assert attention_tiles(h200, head_dim=128).fields["block_m"] == 128
    assert attention_tiles(h200, head_dim=128).fields["block_n"] == 128
    # FlashMLA: 64-row blocks on Hopper; aiter's 16 heads per workgroup on CDNA
    assert mla_decode_tiles(h200).fields["heads_per_workgroup"] == 64
    assert mla_decode_tiles(mi355x).fields["heads_per_workgroup"] == 16
    # the 256x256 ck_tile GEMM keeps 2 stages in 160 KiB, 1 in 64 KiB
    assert gemm_tiles(mi355x).fields["stages"] == 2
    assert gemm_tiles(mi300x).fields["stages"] == 1
    assert "stages 2\u21921" in gemm_tiles(mi300x).why


def test_deepseek_v4_flash_attention_fits_mi355x():
    """The 512-wide head that broke the fixed 128x64 tile: (128 + 2*64) * 512 * 2 B = 256 KiB > 160 KiB."""
    spec = load_gpu("mi355x")
    config = attention_tiles(spec, head_dim=512)
    assert config.lds_bytes <= spec.lds_max_per_workgroup_bytes == 160 * 1024
    assert "halving" in config.why


def test_pinned_fields_are_held_and_an_impossible_pin_names_kernel_gpu_and_limit():
    spec = load_gpu("mi300x")
    config = attention_tiles(spec, head_dim=512, pinned={"block_m": 32})
    assert config.fields["block_m"] == 32 and "block_m set by the caller" in config.why
    with pytest.raises(ValueError, match=r"attention-prefill does not fit on mi300x.*64 KiB"):
        attention_tiles(spec, head_dim=512, pinned={"block_m": 128, "block_n": 64})
    with pytest.raises(ValueError, match=r"attention-prefill does not fit on mi300x.*LDS"):
        attention_tiles(spec, head_dim=8192)


def test_with_tiles_keeps_the_callers_fields():
    spec = load_gpu("mi355x")
    kernel = Gemm(m=64, n=4096, k=4096, tile_m=32)
    chosen, config = with_tiles(kernel, spec, pinned={"tile_m"})
    assert chosen.tile_m == 32 and chosen.tile_n == config.fields["tile_n"]


def test_kernel_command_reports_tiles_and_honours_params(capsys):
    argv = ["kernel", "--hw", "mi355x", "attention-prefill", "--param", "seqs=1", "--param", "q_len=4096",
            "--param", "heads=32", "--param", "kv_heads=1", "--param", "head_dim=512", "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    tiles = result["tiles"]
    assert tiles["lds_bytes"] <= tiles["lds_limit_bytes"] == 163840 and "why" in tiles
    assert result["params"]["block_n"] == tiles["block_n"]
    assert main([*argv, "--param", "block_n=16"]) == 0
    assert json.loads(capsys.readouterr().out)["tiles"]["block_n"] == 16
    assert main(["kernel", "--hw", "mi355x", "copy", "--param", "size_bytes=1MiB", "--json"]) == 0
    assert "tiles" not in json.loads(capsys.readouterr().out)


def test_step_command_reports_tiles_per_kernel(capsys):
    assert main(["step", "--model", "deepseek-v4-flash", "--hw", "mi355x", "--tp", "2", "--decode", "8x4096",
                 "--prefill", "1x2048", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    tiles = result["tiles"]
    assert {"gqa.prefill_attention", "gqa.decode_attention", "gqa.o_proj", "moe.routed_up"} <= set(tiles)
    assert all(t["lds_bytes"] <= t["lds_limit_bytes"] for t in tiles.values())
    assert result["step_time_s"] > 0


def test_a_wave_balancing_split_is_stream_k_over_the_last_waves_only():
    """On a GPU without recorded library choices (B200: 148 SMs) the tile policy's own heuristics decide."""
    from hwmodels.spec import load_gpu
    from workloads.tiles import gemm_config

    b200 = load_gpu("b200")
    fields = gemm_config(b200, 2560, 8192, 1024).fields
    tiles = -(-2560 // fields["tile_m"]) * -(-8192 // fields["tile_n"])
    assert tiles % 148 and fields["split_k"] > 1 and fields["split_tiles"] == tiles % 148 + 148
    skinny = gemm_config(b200, 16, 4096, 4096).fields  # fewer tiles than SMs: split-K over every tile
    assert skinny["split_k"] > 1 and skinny["split_tiles"] == 0


def test_on_hopper_the_gemm_takes_the_library_choice_recorded_for_the_nearest_shape():
    """cuBLAS's recorded nvjet tiles follow the token count (88 of 433 rows fill one wave of 120 tiles); a split over
    k is summed by a reduction launch of its own, and a shallower k splits fewer ways than the recorded shape."""
    from hwmodels.spec import load_gpu
    from workloads.kernels import Gemm
    from workloads.tiles import blas_gemm, gemm_config

    h200 = load_gpu("h200")
    config = gemm_config(h200, 433, 3072, 6144)
    assert (config.fields["tile_m"], config.fields["tile_n"]) == (88, 128) and "nvjet" in config.why
    split = blas_gemm(h200, 2, 2304, 4096)
    assert split.split_k == 3 and split.reduce_launch and len(split.launches()) == 2
    assert blas_gemm(h200, 2, 2304, 1024).split_k == 1  # a quarter of the recorded depth: no split
    partials = 3 * 2 * 2304 * 4
    tiles, reduce = split.launches()
    assert tiles.write_bytes == partials and reduce.read_bytes == partials and reduce.write_bytes == 2 * 2 * 2304
    assert len(Gemm(m=2, n=2304, k=4096, split_k=3).launches()) == 1  # the fix-up in the same launch
    pinned = gemm_config(h200, 433, 3072, 6144, pinned={"tile_m": 128})
    assert "nvjet" not in pinned.why and pinned.fields["tile_m"] == 128  # a pinned field keeps the tile policy


def test_an_unrecorded_shape_takes_the_fastest_of_its_neighbours_kernels():
    """3 x 7,168 x 8,448 was not recorded. Its nearest recorded shape (3 x 18,432 x 7,168) ran a 192-column tile,
    which gives 7,168 columns 38 tiles on 132 SMs; among the kernels recorded near it the model times one that fills
    the GPU faster, and says so. A recorded shape keeps its own kernel."""
    from compiled.launch_time import launch_times
    from hwmodels.calibration import load_calibration
    from hwmodels.roofline import LaunchMode
    from hwmodels.spec import load_gpu
    from workloads import gemm_library
    from workloads.kernels import Gemm
    from workloads.tiles import gemm_config

    h200, calib = load_gpu("h200"), load_calibration("h200")
    candidates = gemm_library.choices(3, 7168, 8448, Dtype.BF16)
    assert len(candidates) > 1 and candidates[0][0]["tile_n"] == 192

    def time_s(fields: dict) -> float:
        gemm = Gemm(m=3, n=7168, k=8448, **{**fields, "split_tiles": 0})
        return sum(t.time_s for t in launch_times(gemm, h200, calib, LaunchMode.GRAPH))

    config = gemm_config(h200, 3, 7168, 8448)
    assert config.fields["tile_n"] < 192 and "fastest" in config.why
    assert time_s(config.fields) == min(time_s(fields) for fields, _ in candidates) < time_s(candidates[0][0])
    recorded = gemm_library.choices(4, 7168, 8192, Dtype.BF16)
    assert len(recorded) == 1 and "this shape" in recorded[0][1]
    assert gemm_config(h200, 4, 7168, 8192).why == recorded[0][1]


def test_aiter_persistent_mla_on_gfx942_pads_the_query_to_four_positions():
    # bf16 query: mla_a16w8_qh16_m16x4_n16x1_ps, 64 query rows by 16 latent rows a step, all 64 KiB of LDS
    mi300x = load_gpu("mi300x")
    config = aiter_persistent_mla_tiles(mi300x, kv_dtype=Dtype.FP8)
    assert {k: config.fields[k] for k in ("heads_per_workgroup", "block_n", "threads")} == {
        "heads_per_workgroup": 64, "block_n": 16, "threads": 256}
    kernel = MlaDecode(seqs=4, context=4096, heads=16, num_splits=16, **config.fields)
    assert _lds(kernel) == config.lds_bytes == mi300x.lds_max_per_workgroup_bytes == 65536
    # one workgroup of 64 rows covers the 16 heads; the padded rows cost the trips their compute
    plain = MlaDecode(seqs=4, context=4096, heads=16, num_splits=16, heads_per_workgroup=16, block_n=16, threads=256)
    split, padded = kernel.launches()[0], plain.launches()[0]
    assert split.workgroups == padded.workgroups == 4 * 16
    assert split.program.trip_instructions > 3 * padded.program.trip_instructions
    assert describe(kernel, mi300x)["why"].startswith("AITER persistent MLA decode")  # not "set by the caller"
    # an fp8 query (gfx950's a8w8 kernel) is not padded: the generic tiles
    mi355x = load_gpu("mi355x")
    assert aiter_persistent_mla_tiles(mi355x, q_dtype=Dtype.FP8) == mla_decode_tiles(mi355x, q_dtype=Dtype.FP8)
    assert aiter_persistent_mla_tiles(mi355x) == mla_decode_tiles(mi355x)


def test_mla_decode_lds_reserved_must_not_be_negative():
    with pytest.raises(ValueError, match="lds_reserved must not be negative"):
        MlaDecode(seqs=1, context=64, heads=16, lds_reserved=-1)


def test_block_scaled_fp8_is_rescaled_on_cdna_alone_and_a_pin_holds():
    """Every FP8 checkpoint of the catalog is block-scaled: on CDNA the GEMM and the fused MoE rescale each 128-deep
    slice's partial product on the vector ALUs (`scale_group_k` 128); NVIDIA's kernels hide it (0), BF16 has none,
    and a caller's value is held."""
    from workloads.tiles import BLOCK_SCALE_GROUP_K, blas_gemm, gemm_config

    assert BLOCK_SCALE_GROUP_K == 128
    for name in ("mi300x", "mi325x", "mi355x"):
        gpu = load_gpu(name)
        config = gemm_config(gpu, 4096, 7168, 2048, Dtype.FP8)
        assert config.fields["scale_group_k"] == 128 and "block-scaled FP8" in config.why
        assert gemm_config(gpu, 4096, 7168, 2048, Dtype.BF16).fields["scale_group_k"] == 0
        assert moe_gemm_tiles(gpu, tokens_per_expert=64, dtype=Dtype.FP8).fields["scale_group_k"] == 128
        assert moe_gemm_tiles(gpu, tokens_per_expert=64, dtype=Dtype.BF16).fields["scale_group_k"] == 0
        assert gemm_config(gpu, 4096, 7168, 2048, Dtype.FP8, pinned={"scale_group_k": 0}).fields["scale_group_k"] == 0
        assert moe_gemm_tiles(gpu, tokens_per_expert=64, dtype=Dtype.FP8,
                              pinned={"scale_group_k": 64}).fields["scale_group_k"] == 64
    for name in ("h100", "h200", "b200", "b300"):
        assert blas_gemm(load_gpu(name), 4096, 7168, 2048, Dtype.FP8).scale_group_k == 0


def test_the_rescale_is_one_fma_per_value_and_group_and_costs_its_vector_time():
    """FP32 work of 2 x m x n x ceil(k / 128) per split, timed after the matrix work at the GPU's FP32 vector rate:
    on the MI355X, whose FP8 matrix rate doubled the MI300X's while its vector rate did not, a compute-bound
    block-scaled GEMM gains the ratio of the two rates' times (about a fifth), the MI300X about half of that."""
    from compiled.launch_time import launch_times
    from hwmodels.calibration import load_calibration
    from hwmodels.roofline import LaunchMode
    from hwmodels.work import Family
    from workloads.kernels import rescale_flop

    m, n, k = 8192, 8192, 8192
    kernel = Gemm(m=m, n=n, k=k, dtype=Dtype.FP8, tile_m=256, tile_n=256, tile_k=128, split_k=2, scale_group_k=128)
    (work,) = kernel.launches()
    assert work.flop_by_dtype[Dtype.FP32] == rescale_flop(m * n, k // 2, 128) * 2 == 2 * m * n * (k // 128)
    assert Dtype.FP32 not in Gemm(m=m, n=n, k=k, dtype=Dtype.FP8).launches()[0].flop_by_dtype
    gains = {}
    for name in ("mi300x", "mi355x"):
        gpu, calib = load_gpu(name), load_calibration(name)
        plain = Gemm(m=m, n=n, k=k, dtype=Dtype.FP8, tile_m=256, tile_n=128, tile_k=64)
        scaled = Gemm(m=m, n=n, k=k, dtype=Dtype.FP8, tile_m=256, tile_n=128, tile_k=64, scale_group_k=128)
        t_plain, t_scaled = (launch_times(g, gpu, calib, LaunchMode.GRAPH)[0] for g in (plain, scaled))
        assert t_plain.bound.value == "compute"
        vector = 2 * m * n * (k // 128) / (gpu.peak_flop_per_s(Dtype.FP32)
                                           * calib.compute_efficiency_for(Family.GEMM, Dtype.FP32))
        tiles = (m // 256) * (n // 128)
        busiest = -(-tiles // gpu.compute_units) * gpu.compute_units / tiles  # the busiest CU's share of the tiles
        assert t_scaled.compute_s - t_plain.compute_s == pytest.approx(vector * busiest, rel=1e-6)  # added, serial
        gains[name] = t_scaled.time_s / t_plain.time_s - 1
    assert 0.15 < gains["mi355x"] < 0.25 and 0.05 < gains["mi300x"] < 0.12
