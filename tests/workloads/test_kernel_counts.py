"""Exact FLOP, byte, grid and launch counts of every kernel kind on tiny shapes, worked out by hand."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hwmodels.dtypes import Dtype
from hwmodels.work import Family, Work
from workloads.codecs import Codec
from workloads.kernels import (
    KERNEL_KINDS,
    AddRmsNorm,
    AttentionPrefill,
    AttnResMix,
    Copy,
    Dequantize,
    Elementwise,
    EmptyKernel,
    Gemm,
    GroupedMm,
    KdaDecode,
    KdaPrefill,
    KdaVerify,
    MlaDecode,
    MoeGemm,
    Quantize,
    RmsNorm,
)

BF16, FP32 = Dtype.BF16, Dtype.FP32

EXAMPLES = {
    "gemm": Gemm(m=2, n=3, k=4),
    "moe-gemm": MoeGemm(experts=3, tokens_per_expert=5, n=6, k=8, tile_m=4, tile_n=4),
    "grouped-mm": GroupedMm(experts=3, tokens_per_expert=5, n=6, k=8, rows_by_expert=(5, 0, 2)),
    "attention-prefill": AttentionPrefill(seqs=2, q_len=3, heads=4, kv_heads=2, head_dim=8, cached=5),
    "mla-decode": MlaDecode(seqs=2, context=10, heads=3, num_splits=4, pad_heads_to=16),
    "kda-prefill": KdaPrefill(seqs=1, tokens=40, heads=2, key_dim=4, value_dim=8, chunk=32, block_v=4),
    "kda-decode": KdaDecode(seqs=2, heads=3, key_dim=4, value_dim=8, fused=False, block_v=4),
    "kda-verify": KdaVerify(seqs=1, positions=2, heads=1, head_dim=4, tile_cols=3),
    "rmsnorm": RmsNorm(tokens=3, hidden=8),
    "add-rmsnorm": AddRmsNorm(tokens=3, hidden=8, fused=False),
    "attnres-mix": AttnResMix(tokens=3, hidden=8, sources=2),
    "elementwise": Elementwise(elements=5000, inputs=3, ops_per_element=2),
    "empty": EmptyKernel(),
    "copy": Copy(size_bytes=20000),
    "quantize": Quantize(values=4096, codec=Codec.INT3),
    "dequantize": Dequantize(values=4096),
}


def counts(work: Work) -> tuple[dict[Dtype, float], float, float, int, int]:
    """The counted fields a test compares: FLOP by dtype (zeros dropped), bytes, grid, launches."""
    flop = {dtype: value for dtype, value in work.flop_by_dtype.items() if value}
    return flop, work.read_bytes, work.write_bytes, work.workgroups, work.launches


# ---- the protocol, for every kind


def test_examples_cover_every_kind():
    assert set(EXAMPLES) == set(KERNEL_KINDS)
    for kind, kernel in EXAMPLES.items():
        assert KERNEL_KINDS[kind] is type(kernel)
        assert type(kernel).kind == kind


@pytest.mark.parametrize("kind", sorted(KERNEL_KINDS))
def test_work_is_the_sum_of_launches(kind):
    kernel = EXAMPLES[kind]
    launches = kernel.launches()
    assert isinstance(launches, tuple)
    assert all(launch.launches == 1 and launch.family is not None for launch in launches)
    assert kernel.work() == sum(launches, Work.nothing())
    assert kernel.work().launches == len(launches)


def test_kernel_kinds_is_read_only():
    with pytest.raises(TypeError):
        KERNEL_KINDS["new"] = Gemm  # type: ignore[index]


# ---- dense and grouped GEMM


def test_gemm_style_example():
    assert Gemm(m=2, n=3, k=4).work().flop == 48


def test_gemm_counts():
    work = Gemm(m=2, n=3, k=4).work()
    assert counts(work) == ({BF16: 2 * 2 * 3 * 4}, 2 * 4 * 2 + 4 * 3 * 2, 2 * 3 * 2, 1, 1)
    assert work.family is Family.GEMM
    assert work.lds_bytes_per_workgroup == 2 * (128 * 32 + 32 * 128) * 2
    (launch,) = Gemm(m=2, n=3, k=4).launches()
    # The tile executes 16 rows (the matrix-core granule); the one column block streams B and C (A is
    # shared through L2 and counts in the whole-GPU bytes).
    assert launch.flop_per_workgroup == 2 * 16 * 3 * 4
    assert (launch.memory_workgroups, launch.bytes_per_workgroup) == (1, 4 * 3 * 2 + 2 * 3 * 2)
    (big,) = Gemm(m=300, n=300, k=8).launches()
    assert big.workgroups == 3 * 3 and big.memory_workgroups == 3
    assert big.flop_per_workgroup == 2 * 128 * 128 * 8
    assert big.bytes_per_workgroup == 8 * 128 * 2 + 128 * 128 * 2
    assert Gemm(m=200, n=300, k=64).work().workgroups == 2 * 3


def test_gemm_accepts_dtype_names():
    assert Gemm(m=2, n=3, k=4, dtype="bf16").dtype is Dtype.BF16
    assert Gemm(m=2, n=3, k=4, out_dtype="FP32").out_dtype is Dtype.FP32


def test_mxfp4_gemm_counts_its_scales():
    work = Gemm(m=2, n=64, k=64, dtype=Dtype.MXFP4).work()
    a_bytes = 2 * 64 // 2 + 2 * 64 // 32  # 4-bit data + one byte per 32 values
    b_bytes = 64 * 64 // 2 + 64 * 64 // 32
    assert counts(work) == ({Dtype.MXFP4: 2 * 2 * 64 * 64}, a_bytes + b_bytes, 2 * 64 * 2, 1, 1)
    assert a_bytes + b_bytes == 68 + 2176
    assert work.lds_bytes_per_workgroup == 2 * (128 * 32 + 32 * 128) // 2


def test_moe_gemm_pads_rows_to_the_tile():
    work = MoeGemm(experts=3, tokens_per_expert=5, n=6, k=8, tile_m=4, tile_n=4).work()
    flop = 2 * 3 * 8 * 6 * 8  # 5 rows padded to 8
    assert counts(work) == ({BF16: flop}, 3 * (5 * 8 * 2 + 8 * 6 * 2), 3 * 5 * 6 * 2, 3 * 2 * 2, 1)
    assert work.family is Family.MOE_GEMM


def test_moe_gemm_idle_experts_cost_nothing_but_a_launch():
    work = MoeGemm(experts=3, tokens_per_expert=0, n=6, k=8).work()
    assert counts(work) == ({}, 0, 0, 0, 1)


# ---- attention


def test_attention_prefill_causal_pairs():
    work = AttentionPrefill(seqs=2, q_len=3, heads=4, kv_heads=2, head_dim=8, cached=5).work()
    pairs = (5 + 1) + (5 + 2) + (5 + 3)
    read = 2 * (3 * 4 * 8 + 2 * (5 + 3) * 2 * 8) * 2
    # 3 queries x 2 heads per KV group fit one 128-row block: the group's heads are packed (pack_gqa), so one
    # workgroup per (sequence, KV head)
    assert counts(work) == ({BF16: 4 * 2 * 4 * 8 * pairs, FP32: 5 * 2 * 4 * pairs}, read, 2 * 3 * 4 * 8 * 2,
                            2 * 2, 1)
    assert work.lds_bytes_per_workgroup == (128 + 2 * 64) * 8 * 2


def test_a_long_prefill_is_not_packed_and_a_decode_is():
    prefill = AttentionPrefill(seqs=1, q_len=4096, heads=64, kv_heads=8, head_dim=128).work()
    decode = AttentionPrefill(seqs=32, q_len=1, heads=64, kv_heads=8, head_dim=128, cached=1024).launches()[0]
    assert prefill.workgroups == 64 * 4096 // 128
    assert decode.workgroups == 32 * 8 and decode.program.reuse == 1  # each KV group streams once


def test_attention_prefill_non_causal_pairs_and_query_blocks():
    kernel = AttentionPrefill(seqs=2, q_len=3, heads=4, kv_heads=2, head_dim=8, cached=5, causal=False,
                              block_m=2)
    pairs = 3 * (5 + 3)
    assert kernel.pairs == pairs
    assert counts(kernel.work())[0] == {BF16: 4 * 2 * 4 * 8 * pairs, FP32: 5 * 2 * 4 * pairs}
    assert kernel.work().workgroups == 2 * 4 * 2


def test_mla_decode_one_launch():
    kernel = MlaDecode(seqs=2, context=10, heads=3)
    flop = {BF16: 2 * 2 * 3 * 10 * 576 + 2 * 2 * 3 * 10 * 512, FP32: 5 * 2 * 3 * 10}
    read = 2 * 10 * 576 * 1 + 2 * 3 * 576 * 2
    assert counts(kernel.work()) == (flop, read, 2 * 3 * 512 * 2, 2, 1)
    assert kernel.work().family is Family.MLA_DECODE


def test_mla_decode_padding_and_splits():
    launches = MlaDecode(seqs=2, context=10, heads=3, num_splits=4, pad_heads_to=16).launches()
    copy, attention, merge = launches
    partials = 2 * 4 * 16 * (512 * 4 + 4)
    assert copy.family is Family.COPY
    assert counts(copy) == ({}, 2 * 3 * 576 * 2, 2 * 16 * 576 * 2, 2 * 16, 1)
    assert counts(attention) == (
        {BF16: 2 * 2 * 16 * 10 * 576 + 2 * 2 * 16 * 10 * 512, FP32: 5 * 2 * 16 * 10},
        2 * 10 * 576 + 2 * 16 * 576 * 2, partials, 2 * 4 * 1, 1)
    assert counts(merge) == ({FP32: 2 * 16 * 4 * (2 * 512 + 4)}, partials, 2 * 16 * 512 * 2, 2, 1)
    assert attention.family is merge.family is Family.MLA_DECODE


def test_mla_decode_launch_counts():
    assert len(MlaDecode(seqs=1, context=8, heads=12).launches()) == 1
    assert len(MlaDecode(seqs=1, context=8, heads=12, pad_heads_to=16).launches()) == 2
    assert len(MlaDecode(seqs=1, context=8, heads=12, num_splits=2).launches()) == 2
    assert len(MlaDecode(seqs=1, context=8, heads=12, num_splits=2, pad_heads_to=16).launches()) == 3
    assert len(MlaDecode(seqs=1, context=8, heads=12, pad_heads_to=8).launches()) == 1  # no-op pad


# ---- KDA


KDA_SHAPE = {"seqs": 1, "tokens": 40, "heads": 2, "key_dim": 4, "value_dim": 8, "chunk": 32, "block_v": 4}


def test_kda_prefill_plain_with_partial_chunk():
    intra, scan = KdaPrefill(**KDA_SHAPE).launches()  # chunks of 32 and 8 tokens, 2 heads
    assert counts(intra) == (
        {BF16: 2 * ((4 * 32 * 32 * 4 + 2 * 32 * 32 * 8) + (4 * 8 * 8 * 4 + 2 * 8 * 8 * 8)),
         FP32: 2 * ((32**3 - 32) // 3 + (8**3 - 8) // 3)},
        2 * 40 * (4 * 2 + 4 * 2 + 8 * 2 + 4 * 4 + 4),
        2 * (40 * (4 + 8 + 4) * 2 + (32 * 32 + 8 * 8) * 4),
        2 * 2, 1)
    assert counts(intra)[0][FP32] == 2 * (10912 + 168)
    assert intra.lds_bytes_per_workgroup == 2 * 32 * 4 * 2 + 32 * 4 * 4 + 32 * 32 * 4
    assert counts(scan) == (
        {BF16: 2 * ((6 * 32 * 4 * 8 + 2 * 32 * 32 * 8) + (6 * 8 * 4 * 8 + 2 * 8 * 8 * 8))},
        2 * (40 * 16 * 2 + (32 * 32 + 8 * 8) * 4 + 40 * 4 * 2 + 4 * 8 * 4),
        2 * (40 * 8 * 2 + 4 * 8 * 4),
        2 * 2, 1)
    f_32 = 4 * 32 * 32 * 4 + 4 * 32 * 32 * 8 + 6 * 32 * 4 * 8  # 4c^2 K + 4c^2 V + 6cKV
    f_8 = 4 * 8 * 8 * 4 + 4 * 8 * 8 * 8 + 6 * 8 * 4 * 8
    assert intra.flop_by_dtype[BF16] + scan.flop_by_dtype[BF16] == 2 * (f_32 + f_8)


def test_kda_prefill_grouped_scan():
    plain = KdaPrefill(**KDA_SHAPE)
    grouped = KdaPrefill(**KDA_SHAPE, grouped_scan=True)
    intra, summaries, ordered, replay = grouped.launches()
    assert intra == plain.launches()[0]
    assert counts(summaries) == (
        {BF16: 2 * ((2 * 32 * 16 + 2 * 32 * 32) + (2 * 8 * 16 + 2 * 8 * 32))},
        2 * 40 * 16 * 2, 2 * 2 * (16 + 32) * 4, 2 * 2, 1)
    assert counts(ordered) == (
        {BF16: 2 * 2 * 2 * 4 * 4 * 8},
        2 * (2 * (16 + 32) * 4 + 32 * 4), 2 * (2 * 32 * 4 + 32 * 4), 2 * 2, 1)
    assert counts(replay) == (
        {BF16: 2 * ((4 * 32 * 4 * 8 + 2 * 32 * 32 * 8) + (4 * 8 * 4 * 8 + 2 * 8 * 8 * 8))},
        2 * (2 * 32 * 4 + 40 * 16 * 2 + (32 * 32 + 8 * 8) * 4 + 40 * 4 * 2), 2 * 40 * 8 * 2,
        2 * 2 * 2, 1)
    assert {launch.family for launch in grouped.launches()} == {Family.KDA_PREFILL}
    assert plain.work().launches == 2
    assert grouped.work().launches == 4
    assert grouped.work().workgroups > plain.work().workgroups


def test_kda_decode_fused_is_one_launch():
    work = KdaDecode(seqs=2, heads=3, key_dim=4, value_dim=8, block_v=4).work()
    state = 4 * 8 * 4
    flop = 2 * 3 * (7 * 4 * 8 + 4 + 4 * 8)  # recurrence, exp(g), output norm
    read = 2 * 3 * (state + 4 * 2 + 4 * 2 + 8 * 2 + 4 * 4 + 4)
    assert counts(work) == ({FP32: flop}, read, 2 * 3 * (state + 8 * 2), 2 * 3 * 2, 1)
    assert work.family is Family.KDA_DECODE


def test_kda_decode_unfused_is_five_launches():
    fused = KdaDecode(seqs=2, heads=3, key_dim=4, value_dim=8, block_v=4)
    unfused = KdaDecode(seqs=2, heads=3, key_dim=4, value_dim=8, fused=False, block_v=4)
    gate, recurrence, norm, copy1, copy2 = unfused.launches()
    assert counts(gate) == ({FP32: 6 * 4}, 6 * 4 * 4, 6 * 4 * 4, 6, 1)
    assert counts(recurrence) == ({FP32: 6 * 7 * 4 * 8}, 6 * 180, 6 * (128 + 16), 6 * 2, 1)
    assert counts(norm) == ({FP32: 6 * 4 * 8}, 6 * 8 * 2, 6 * 8 * 2, 6, 1)
    assert counts(copy1) == counts(copy2) == ({}, 6 * 8 * 2, 6 * 8 * 2, 6, 1)
    assert copy1.family is copy2.family is Family.COPY
    assert {gate.family, recurrence.family, norm.family} == {Family.KDA_DECODE}
    assert unfused.work().flop == fused.work().flop
    assert unfused.work().bytes - fused.work().bytes == 6 * (4 * 4 * 2 + 8 * 2 * 2 * 3)


def test_kda_verify_small_exact():
    work = KdaVerify(seqs=1, positions=2, heads=1, head_dim=4, tile_cols=3).work()  # 2 tiles
    read = 4 * 4 * 4 + 2 * (2 * (4 * 2 + 4 * 2 + 4 * 4) + 4 * 2 + 4)
    assert counts(work) == ({FP32: 7 * 4 * 4 * 2}, read, 2 * 4 * 2 + 2 * 4 * 4 * 4, 2, 1)
    assert work.family is Family.KDA_VERIFY
    final_only = KdaVerify(seqs=1, positions=2, heads=1, head_dim=4, tile_cols=3, store_states=False)
    assert final_only.work().write_bytes == 2 * 4 * 2 + 4 * 4 * 4


def test_kda_verify_kimi_k3_study_tiles():
    wide = KdaVerify(seqs=1, positions=4, heads=12, head_dim=128, tile_cols=32).work()
    narrow = KdaVerify(seqs=1, positions=4, heads=12, head_dim=128, tile_cols=4).work()
    assert wide.workgroups == 48
    assert narrow.workgroups == 384
    assert wide.read_bytes == 12 * (65536 + 4 * (4 * 1024 + 256 + 4))
    assert narrow.read_bytes == 12 * (65536 + 4 * (32 * 1024 + 256 + 4))
    assert narrow.write_bytes == wide.write_bytes == 12 * (4 * 256 + 4 * 65536)
    assert narrow.flop == wide.flop == 7 * 128 * 128 * 4 * 12
    assert wide.bytes < narrow.bytes < 1.5 * wide.bytes


# ---- norms, AttnRes, elementwise, copy


def test_rmsnorm_counts():
    work = RmsNorm(tokens=3, hidden=8).work()
    assert counts(work) == ({FP32: 4 * 3 * 8}, (3 * 8 + 8) * 2, 3 * 8 * 2, 3, 1)
    assert work.family is Family.NORM


def test_add_rmsnorm_fused_and_unfused():
    fused = AddRmsNorm(tokens=3, hidden=8).work()
    unfused = AddRmsNorm(tokens=3, hidden=8, fused=False)
    assert counts(fused) == ({FP32: 5 * 3 * 8}, (2 * 3 * 8 + 8) * 2, 2 * 3 * 8 * 2, 3, 1)
    assert fused.family is Family.NORM
    add, norm = unfused.launches()
    assert counts(add) == ({FP32: 3 * 8}, 2 * 3 * 8 * 2, 3 * 8 * 2, 1, 1)
    assert add.family is Family.ELEMENTWISE
    assert counts(norm) == counts(RmsNorm(tokens=3, hidden=8).work())
    assert unfused.work().flop == fused.flop
    assert fused.bytes < unfused.work().bytes
    assert fused.launches < unfused.work().launches


def test_attnres_mix_fused_and_unfused():
    mix_flop = 3 * (4 * 2 * 8 + 5 * 2)
    unfused = AttnResMix(tokens=3, hidden=8, sources=2)
    mix, norm = unfused.launches()
    assert counts(mix) == ({FP32: mix_flop}, (2 * 3 * 8 + 8) * 2, 3 * 8 * 2, 3, 1)
    assert mix.family is Family.ELEMENTWISE
    assert counts(norm) == counts(RmsNorm(tokens=3, hidden=8).work())
    fused = AttnResMix(tokens=3, hidden=8, sources=2, fused_norm=True).work()
    assert counts(fused) == ({FP32: mix_flop + 4 * 3 * 8}, (2 * 3 * 8 + 8 + 8) * 2, 2 * 3 * 8 * 2, 3, 1)
    assert fused.family is Family.NORM
    assert fused.flop == unfused.work().flop
    assert fused.bytes < unfused.work().bytes
    assert fused.launches < unfused.work().launches


def test_elementwise_and_copy_counts():
    work = Elementwise(elements=5000, inputs=3, ops_per_element=2).work()
    assert counts(work) == ({FP32: 2 * 5000}, 3 * 5000 * 2, 5000 * 2, 2, 1)
    copy = Copy(size_bytes=20000).work()
    assert counts(copy) == ({}, 20000, 20000, 2, 1)
    assert copy.family is Family.COPY


# ---- codecs


def test_codec_tile_bytes_table():
    table = {codec.value: codec.tile_bytes for codec in Codec}
    assert table == {"fp": 4096, "int8": 2176, "int6": 1664, "int4": 1152, "int3": 896, "fp4": 1152}
    assert Codec.INT3.tile_bytes == 512 + 256 + 128
    assert Codec.INT4.wire_bytes(2049) == 2 * 1152
    assert Codec.INT4.wire_bytes(0) == 0
    assert Codec.parse("INT3") is Codec.INT3


def test_quantize_and_dequantize_counts():
    quantize = Quantize(values=4096, codec="int3").work()
    assert counts(quantize) == ({FP32: 5 * 4096}, 4096 * 2, 2 * 896, 2, 1)
    assert quantize.family is Family.CODEC
    dequantize = Dequantize(values=4096).work()
    assert counts(dequantize) == ({FP32: 2 * 4096}, 2 * 1152, 4096 * 2, 2, 1)
    assert counts(Quantize(values=100, codec=Codec.FP).work()) == ({}, 200, 4096, 1, 1)
    assert counts(Dequantize(values=100, codec=Codec.FP).work()) == ({}, 4096, 200, 1, 1)


# ---- bad input


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Gemm(m=-3, n=3, k=4), "m must be positive, got -3"),
        (lambda: Gemm(m=2, n=3, k=4, dtype="fp7"), "dtype"),
        (lambda: Gemm(m=2.5, n=3, k=4), "m must be an integer"),
        (lambda: MoeGemm(experts=2, tokens_per_expert=-1, n=4, k=4), "tokens_per_expert"),
        (lambda: AttentionPrefill(seqs=1, q_len=4, heads=0, kv_heads=1, head_dim=8), "heads must be"),
        (lambda: AttentionPrefill(seqs=1, q_len=4, heads=6, kv_heads=4, head_dim=8), "kv_heads"),
        (lambda: AttentionPrefill(seqs=1, q_len=4, heads=4, kv_heads=4, head_dim=8, cached=-1), "cached"),
        (lambda: AttentionPrefill(seqs=1, q_len=4, heads=4, kv_heads=4, head_dim=8, causal="no"), "causal"),
        (lambda: MlaDecode(seqs=1, context=4, heads=12, num_splits=8), "num_splits"),
        (lambda: MlaDecode(seqs=1, context=4, heads=12, kv_dtype="fp5"), "kv_dtype"),
        (lambda: KdaPrefill(seqs=1, tokens=64, heads=2, chunk=48), "chunk"),
        (lambda: KdaDecode(seqs=0, heads=2), "seqs"),
        (lambda: KdaVerify(seqs=1, positions=4, heads=2, tile_cols=256), "tile_cols"),
        (lambda: Copy(size_bytes=0), "size_bytes"),
        (lambda: Quantize(values=10, codec="int5"), "codec"),
    ],
)
def test_bad_values_name_the_field(make, field):
    with pytest.raises(ValueError, match=field):
        make()


# ---- monotonicity (hypothesis)


def assert_non_decreasing(make, kwargs: dict, field: str, step: int) -> None:
    """Growing one size field never lowers any dtype's FLOP, or the bytes read or written."""
    small = make(**kwargs).work()
    large = make(**{**kwargs, field: kwargs[field] + step}).work()
    for dtype, flop in small.flop_by_dtype.items():
        assert large.flop_by_dtype.get(dtype, 0) >= flop
    assert large.read_bytes >= small.read_bytes
    assert large.write_bytes >= small.write_bytes


sizes = st.integers(min_value=1, max_value=300)
steps = st.integers(min_value=0, max_value=200)


@given(m=sizes, n=sizes, k=sizes, field=st.sampled_from(["m", "n", "k"]), step=steps,
       dtype=st.sampled_from(list(Dtype)))
def test_gemm_non_decreasing(m, n, k, field, step, dtype):
    assert_non_decreasing(Gemm, {"m": m, "n": n, "k": k, "dtype": dtype}, field, step)


@given(q_len=sizes, cached=st.integers(0, 500), kv_heads=st.integers(1, 4), group=st.integers(1, 4),
       causal=st.booleans(), field=st.sampled_from(["q_len", "cached"]), step=steps)
def test_attention_prefill_non_decreasing(q_len, cached, kv_heads, group, causal, field, step):
    kwargs = {"seqs": 2, "q_len": q_len, "heads": kv_heads * group, "kv_heads": kv_heads,
              "head_dim": 64, "cached": cached, "causal": causal}
    assert_non_decreasing(AttentionPrefill, kwargs, field, step)


@given(context=st.integers(8, 5000), splits=st.integers(1, 8), pad=st.sampled_from([0, 16]),
       heads=st.integers(1, 20), step=steps)
def test_mla_decode_non_decreasing(context, splits, pad, heads, step):
    kwargs = {"seqs": 2, "context": context, "heads": heads, "num_splits": splits, "pad_heads_to": pad}
    assert_non_decreasing(MlaDecode, kwargs, "context", step)


@given(tokens=st.integers(1, 700), chunk=st.sampled_from([32, 64]), grouped=st.booleans(),
       key_dim=st.integers(1, 64), value_dim=st.integers(1, 64), step=steps)
def test_kda_prefill_non_decreasing(tokens, chunk, grouped, key_dim, value_dim, step):
    kwargs = {"seqs": 1, "tokens": tokens, "heads": 2, "key_dim": key_dim, "value_dim": value_dim,
              "chunk": chunk, "grouped_scan": grouped}
    assert_non_decreasing(KdaPrefill, kwargs, "tokens", step)


def test_a_stream_k_region_pays_the_fix_up_of_its_own_tiles_only():
    from workloads.kernels import Gemm

    plain = Gemm(m=512, n=512, k=1024, tile_m=128, tile_n=128).launches()[0]
    split_k = Gemm(m=512, n=512, k=1024, tile_m=128, tile_n=128, split_k=2).launches()[0]
    region = Gemm(m=512, n=512, k=1024, tile_m=128, tile_n=128, split_k=2, split_tiles=3).launches()[0]
    # split-K: every value of C written and read back in fp32 by each of its 2 splits
    assert split_k.bytes - plain.bytes == 2 * 2 * 512 * 512 * 4
    # stream-K's region of 3 tiles: only their values
    assert region.bytes - plain.bytes == 2 * 2 * 3 * 128 * 128 * 4
    assert region.flop == plain.flop == 2 * 512 * 512 * 1024
