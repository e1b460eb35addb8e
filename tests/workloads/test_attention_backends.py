"""Split-KV partitions of the engines' MLA decode backends: hand-computed cases of each cited heuristic, the
trends each heuristic promises, the engines' default backends, and the errors."""

from __future__ import annotations

import pytest

from hwmodels.dtypes import Dtype
from hwmodels.spec import load_gpu, spec_names
from workloads.attention_backends import (
    MlaBackend,
    backends_for,
    batch_mean_splits,
    default_mla_backend,
    mean_splits,
    mla_splits,
)
from workloads.attention_kernels import MlaDecode

H200, B200, MI355X = load_gpu("h200"), load_gpu("b200"), load_gpu("mi355x")
K, B = 1024, MlaBackend


def _batch(seqs: int, context: int) -> list[int]:
    return [context] * seqs


def test_the_catalog_gpus_have_the_expected_counts():
    # the hand-computed values below assume these SM (CU) counts
    assert (H200.compute_units, B200.compute_units, MI355X.compute_units) == (132, 148, 256)


def test_backends_by_gpu():
    assert backends_for(H200) == (B.FLASHMLA, B.FLASH_ATTN_VLLM, B.FLASH_ATTN_SGLANG, B.FLASHINFER,
                                  B.TRITON_VLLM, B.TRITON_SGLANG)
    assert backends_for(B200) == (B.FLASHINFER, B.TRTLLM_GEN, B.TRITON_VLLM, B.TRITON_SGLANG)
    assert backends_for(MI355X) == (B.AITER, B.AITER_PERSISTENT, B.TRITON_VLLM, B.TRITON_SGLANG)
    assert backends_for(load_gpu("b300")) == backends_for(B200)  # sm_103 runs the sm_100 family's cubins
    assert backends_for(load_gpu("mi300x")) == backends_for(MI355X)  # gfx942 has AITER's MLA kernels too


# FlashMLA on H200, 128 heads: num_sm_parts = 132 / ceil(128 / 64) = 66.
#   batch 1, 1k: 16 blocks, total 21, payload ceil(21/66) + 5 = 6 -> one block a part -> 16 splits
#   batch 1, 32k: 512 blocks, total 517, payload 8 + 5 = 13 -> 8 blocks a part -> 64 splits
#   batch 64, 1k: total 64 x 21 = 1344, payload 21 + 5 = 26 -> one whole request a part -> 1 split each
# TP8 (16 heads): 132 parts; batch 1, 32k: payload ceil(517/132) + 5 = 9 -> 4 blocks a part -> 128 splits.
@pytest.mark.parametrize("heads, seqs, context, expected", [
    (128, 1, 1 * K, [16]), (128, 1, 32 * K, [64]), (128, 64, 1 * K, [1] * 64), (16, 1, 1 * K, [16]),
    (16, 1, 32 * K, [128]),
])
def test_flashmla_deals_blocks_to_sm_parts(heads, seqs, context, expected):
    assert list(mla_splits(B.FLASHMLA, H200, _batch(seqs, context), heads)) == expected


def test_flashmla_splits_a_request_where_a_part_fills():
    # batch 64, 32k, 128 heads: payload ceil(64 x 517 / 66) + 5 = 507 < 512 + 5, so every request spans two
    # parts (three when it starts near a part's end)
    splits = mla_splits(B.FLASHMLA, H200, _batch(64, 32 * K), 128)
    assert set(splits) <= {2, 3} and mean_splits(B.FLASHMLA, H200, _batch(64, 32 * K), 128) == 2
    # an uneven batch: total 517 + 3 x 6 = 535, payload ceil(535/66) + 5 = 14, so 9 blocks a part: the long
    # request takes 57 parts (56 x 9 + 8), the short ones fit whole
    assert mla_splits(B.FLASHMLA, H200, [32 * K, 64, 64, 64], 128) == (57, 1, 1, 1)


# FA3 on H200, 128 heads (2 query tiles of 64, 64-token KV tiles): blocks_per_sm = ceil(total x 1.1 / 132).
#   batch 1, 1k: 16 tiles, total 32 -> 1 a SM -> 16 (vLLM's cap 32 does not bind)
#   batch 1, 32k: 512 tiles, total 1024 -> 9 a SM -> ceil(512/9) = 57, capped at 32 by vLLM
#   SGLang's cap is FA3's heuristic: 2 query tiles on 132 SMs reach 85% of the best wave efficiency at
#   57 splits (2 x 57 / 132 = 0.86), and at 14 for 16 KV tiles (best 2 x 16 / 132; 14 / 16 >= 0.85)
#   batch 64, 1k: total 2048 -> 18 a SM -> 1
@pytest.mark.parametrize("backend, seqs, context, expected", [
    (B.FLASH_ATTN_VLLM, 1, 1 * K, 16), (B.FLASH_ATTN_VLLM, 1, 32 * K, 32), (B.FLASH_ATTN_VLLM, 64, 1 * K, 1),
    (B.FLASH_ATTN_VLLM, 64, 32 * K, 1), (B.FLASH_ATTN_SGLANG, 1, 1 * K, 14), (B.FLASH_ATTN_SGLANG, 1, 32 * K, 57),
    (B.FLASH_ATTN_SGLANG, 64, 1 * K, 1),
])
def test_fa3_dynamic_split(backend, seqs, context, expected):
    assert mla_splits(backend, H200, _batch(seqs, context), 128) == (expected,) * seqs


def test_fa3_splits_each_request_by_its_own_tiles():
    # total = 2 x (512 + 16) = 1056 -> ceil(1056 x 1.1 / 132) = 9 a SM: 57 for the long one (cap 32), 2 short
    assert mla_splits(B.FLASH_ATTN_VLLM, H200, [32 * K, 1 * K], 128) == (32, 2)


# FlashInfer MLAPlan on H200: 128 heads pack 2-CTA clusters (66 clusters), 16 heads single CTAs (132).
#   128 heads, batch 1, 1k: ceil(1024/66) = 16 -> chunk 64 -> 16 splits; 32k: 497 -> 512 -> 64 splits
#   128 heads, batch 64, 1k: ceil(65536/66) = 993 -> 1024 -> 1 split; 32k: 31775 -> 31744 -> 2 splits
#   16 heads, batch 1, 1k: ceil(1024/132) = 8 -> chunk 32 -> 32 splits
@pytest.mark.parametrize("heads, seqs, context, expected", [
    (128, 1, 1 * K, 16), (128, 1, 32 * K, 64), (128, 64, 1 * K, 1), (128, 64, 32 * K, 2), (16, 1, 1 * K, 32),
])
def test_flashinfer_chunk_from_total_history(heads, seqs, context, expected):
    assert mla_splits(B.FLASHINFER, H200, _batch(seqs, context), heads) == (expected,) * seqs


# TRT-LLM-gen on B200 (148 SMs): splits = min(ceil(longest / 256), 148 / (CTAs a request x requests)).
#   128 heads, batch 1, 32k: a trial split of ceil(32768 / 18) > 1024 tokens -> 2-CTA kernel -> min(128, 74) = 74
#   128 heads, batch 1, 1k: trial splits of 256 tokens -> swapped kernel, 8 head CTAs -> min(4, 18) = 4
#   128 heads, batch 1, 8k: swapped, min(32, 18) = 18 on 144 CTAs <= 148 -> 256-wide values, 16 CTAs -> 9
#   16 heads, batch 1, 32k: min(128, 148) = 128 on 128 CTAs -> 256-wide values (2 x 128 > 148) -> 74
#   16 heads, batch 8, 8k: min(32, 18) = 18 on 144 CTAs, 2 x 144 > 148 -> 18
#   128 heads, batch 64, 1k: 512 16-head CTAs exceed the SMs -> 2-CTA kernel -> max(1, 148 / 128) = 1
@pytest.mark.parametrize("heads, seqs, context, expected", [
    (128, 1, 32 * K, 74), (128, 1, 1 * K, 4), (128, 1, 8 * K, 9), (16, 1, 32 * K, 74), (16, 8, 8 * K, 18),
    (128, 64, 1 * K, 1),
])
def test_trtllm_gen_one_count_per_batch(heads, seqs, context, expected):
    assert mla_splits(B.TRTLLM_GEN, B200, _batch(seqs, context), heads) == (expected,) * seqs


# AITER on MI355X (256 CUs): score(i) = bs·i / (ceil(bs·i/256)·256) x avg / (avg + 84.1·i), i = 1..16.
#   batch 1 and 8: bs·16 <= 256, so occupancy grows linearly and i / (avg + 84.1 i) grows too -> 16
#   batch 64: i = 4 fills the CUs exactly with the least overhead (1k: 0.753 vs 0.602 at i = 3 and 8) -> 4
@pytest.mark.parametrize("seqs, expected", [(1, 16), (8, 16), (64, 4)])
@pytest.mark.parametrize("context", [1 * K, 8 * K, 32 * K])
def test_aiter_scores_occupancy_and_overhead(seqs, context, expected):
    for heads in (128, 16):
        assert mla_splits(B.AITER, MI355X, _batch(seqs, context), heads) == (expected,) * seqs


def test_aiter_at_a_wave_boundary():
    # batch 96 on 256 CUs: i = 8 gives 768 = 3 full waves, i = 4 only 384 / 512 -> 8 wins at long histories
    # (1.0 x 32768 / (32768 + 672.8) = 0.980 vs 0.75 x 0.990 = 0.742)
    assert mean_splits(B.AITER, MI355X, _batch(96, 32 * K), 16) == 8


@pytest.mark.parametrize("gpu", [H200, B200, MI355X])
def test_vllm_triton_always_four(gpu):
    for seqs in (1, 8, 64):
        for context in (1 * K, 8 * K, 32 * K):
            assert mla_splits(B.TRITON_VLLM, gpu, _batch(seqs, context), 16) == (4,) * seqs
    assert mla_splits(B.TRITON_VLLM, gpu, [3, 4, 5], 16) == (3, 4, 4)  # never more partitions than tokens


# SGLang Triton on H200: cap 256; with one request of L tokens, chunk2 = ceil(L / ceil(ext_cores / heads)),
# ext_cores = int(132 x max(log2(L / 64), 1)).
#   16 heads, 1k: ext 528 -> ceil(528/16) = 33 -> chunk 32 -> 32 splits
#   16 heads, 32k: ext 1188 -> 75 -> chunk 437 -> 75 splits
#   128 heads, 1k: ceil(528/128) = 5 -> chunk 205 -> 5 splits
#   16 heads, batch 64, 1k: ceil(528 / 1024) = 1 -> 1 split
@pytest.mark.parametrize("heads, seqs, context, expected", [
    (16, 1, 1 * K, 32), (16, 1, 32 * K, 75), (128, 1, 1 * K, 5), (16, 64, 1 * K, 1),
])
def test_sglang_triton_dynamic_splits(heads, seqs, context, expected):
    assert mla_splits(B.TRITON_SGLANG, H200, _batch(seqs, context), heads) == (expected,) * seqs


def test_sglang_triton_uneven_batch():
    # L = 32k, l = 1k: chunk1 = ceil(32768 / 32) = 1024; ext 1188, grid 2 x 16 -> 38 -> chunk2 863
    assert mla_splits(B.TRITON_SGLANG, H200, [32 * K, 1 * K], 16) == (38, 2)


SEQS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CONTEXTS = tuple(k * K for k in (1, 2, 4, 8, 16, 32, 64, 128))
# (backend, gpu, more requests never raise the splits, longer histories never lower them); where a trend is
# False the heuristic itself breaks it: FlashMLA's payload rounding, TRT-LLM-gen's switch to the swapped
# kernel with more CTAs per request
TRENDS = [
    (B.FLASHMLA, H200, True, False), (B.FLASH_ATTN_VLLM, H200, True, True), (B.FLASH_ATTN_SGLANG, H200, True, True),
    (B.FLASHINFER, H200, True, True), (B.FLASHINFER, B200, True, True), (B.TRTLLM_GEN, B200, False, True),
    (B.AITER, MI355X, True, True), (B.AITER_PERSISTENT, MI355X, True, True),
    (B.AITER_PERSISTENT, load_gpu("mi300x"), True, True), (B.TRITON_VLLM, H200, True, True),
    (B.TRITON_SGLANG, H200, True, True), (B.TRITON_SGLANG, MI355X, True, True),
]


@pytest.mark.parametrize("backend, gpu, by_batch, by_context", TRENDS, ids=lambda v: getattr(v, "name", None))
@pytest.mark.parametrize("heads", [128, 16])
def test_trends(backend, gpu, by_batch, by_context, heads):
    table = {(s, c): mean_splits(backend, gpu, _batch(s, c), heads) for s in SEQS for c in CONTEXTS}
    if by_batch:
        for c in CONTEXTS:
            col = [table[s, c] for s in SEQS]
            assert col == sorted(col, reverse=True), (c, col)
    if by_context:
        for s in SEQS:
            row = [table[s, c] for c in CONTEXTS]
            assert row == sorted(row), (s, row)


def test_trtllm_gen_more_requests_can_mean_more_splits():
    # batch 1 narrows value columns (4 CTAs a request, 37 splits); batch 2 keeps them (64 splits)
    assert mean_splits(B.TRTLLM_GEN, B200, _batch(1, 16 * K), 16) == 37
    assert mean_splits(B.TRTLLM_GEN, B200, _batch(2, 16 * K), 16) == 64


@pytest.mark.parametrize("gpu", spec_names("gpus"))
@pytest.mark.parametrize("contexts", [[1], [7, 3000], [1 * K] * 8, [128 * K, 1, 64]])
def test_counts_fit_the_kernel_model(gpu, contexts):
    spec = load_gpu(gpu)
    for backend in backends_for(spec):
        splits = mla_splits(backend, spec, contexts, 16)
        assert all(1 <= s <= c for s, c in zip(splits, contexts, strict=True)), backend
        n = mean_splits(backend, spec, contexts, 16)
        context = min(contexts)
        MlaDecode(seqs=len(contexts), context=context, heads=16, num_splits=min(n, context))


@pytest.mark.parametrize("gpu", spec_names("gpus"))
def test_the_serving_loops_unchecked_mean_is_the_checked_one(gpu):
    spec = load_gpu(gpu)
    for backend in backends_for(spec):
        for contexts in ((1,), (7, 3000), (1 * K,) * 8, (128 * K, 1, 64), (5 * K,) * 64):
            for heads in (16, 36, 128):
                assert batch_mean_splits(backend, spec, contexts, heads) == mean_splits(backend, spec, contexts, heads)


def test_mean_rounds_half_up():
    assert mean_splits(B.TRITON_SGLANG, H200, [32 * K, 1 * K], 16) == 20  # (38 + 2) / 2
    assert mean_splits(B.TRITON_VLLM, H200, [1, 2], 16) == 2  # (1 + 2) / 2 = 1.5


@pytest.mark.parametrize("gpu, engine, kv_dtype, expected", [
    ("h200", "vllm", Dtype.BF16, B.FLASH_ATTN_VLLM), ("h200", "vllm", Dtype.FP8, B.FLASHMLA),
    ("h100", "vllm", Dtype.BF16, B.FLASH_ATTN_VLLM), ("h200", "sglang", Dtype.BF16, B.FLASH_ATTN_SGLANG),
    ("h200", "sglang", Dtype.FP8, B.FLASH_ATTN_SGLANG), ("b200", "vllm", Dtype.FP8, B.TRTLLM_GEN),
    ("b300", "vllm", Dtype.BF16, B.TRTLLM_GEN), ("b200", "sglang", Dtype.BF16, B.TRTLLM_GEN),
    ("mi355x", "vllm", Dtype.BF16, B.TRITON_VLLM), ("mi300x", "vllm", Dtype.FP8, B.TRITON_VLLM),
    ("mi355x", "sglang", Dtype.BF16, B.AITER_PERSISTENT), ("mi325x", "sglang", Dtype.FP8, B.AITER_PERSISTENT),
    ("b200", "trtllm", Dtype.FP8, B.TRTLLM_GEN), ("h200", "trtllm", Dtype.FP8, B.FLASHMLA),
])
def test_default_backends(gpu, engine, kv_dtype, expected):
    spec = load_gpu(gpu)
    chosen = default_mla_backend(spec, engine, kv_dtype=kv_dtype)
    assert chosen is expected and chosen.runs_on(spec)


def test_default_backend_on_rocm_follows_aiter_switch_and_heads():
    assert default_mla_backend(MI355X) is B.TRITON_VLLM  # VLLM_ROCM_USE_AITER defaults off
    assert default_mla_backend(MI355X, rocm_aiter=True) is B.AITER
    assert default_mla_backend(MI355X, rocm_aiter=True, heads=32) is B.TRITON_VLLM  # AITER takes 16 or 128
    # SGLang's aiter backend runs the persistent decode, except at 16 heads over a bf16 cache
    assert default_mla_backend(MI355X, "sglang", heads=16) is B.AITER
    assert default_mla_backend(MI355X, "sglang", heads=16, kv_dtype=Dtype.FP8) is B.AITER_PERSISTENT
    assert default_mla_backend(MI355X, "sglang", heads=128) is B.AITER_PERSISTENT
    assert default_mla_backend(MI355X, "sglang", heads=8) is B.TRITON_SGLANG


def test_parse_backend_names():
    assert MlaBackend.parse("FlashMLA") is B.FLASHMLA
    with pytest.raises(ValueError, match=r"unknown MLA backend 'fa2' \(valid: flashmla, fa3-vllm, "):
        MlaBackend.parse("fa2")


@pytest.mark.parametrize("contexts, heads, kv_heads, message", [
    ([], 16, 1, "contexts must hold at least one request's history"),
    ([1024, 0], 16, 1, r"contexts\[1\] must be positive, got 0"),
    ([1024, -5], 16, 1, r"contexts\[1\] must be positive, got -5"),
    ([1024.0], 16, 1, r"contexts\[0\] must be an integer, got 1024.0"),
    ([True], 16, 1, r"contexts\[0\] must be an integer, got True"),
    (1024, 16, 1, "contexts must be a sequence of histories, got 1024"),
    ([1024], 0, 1, "heads must be positive, got 0"),
    ([1024], -16, 1, "heads must be positive, got -16"),
    ([1024], 16, 0, "kv_heads must be positive, got 0"),
    ([1024], 16, 3, r"heads \(16\) must be a multiple of kv_heads \(3\)"),
])
def test_bad_arguments(contexts, heads, kv_heads, message):
    with pytest.raises(ValueError, match=message):
        mla_splits(B.TRITON_VLLM, H200, contexts, heads, kv_heads)


@pytest.mark.parametrize("backend, gpu, valid", [
    (B.FLASHMLA, B200, "flashinfer, trtllm-gen, triton-vllm, triton-sglang"),
    (B.AITER, H200, "flashmla, fa3-vllm, fa3-sglang, flashinfer, triton-vllm, triton-sglang"),
    (B.TRTLLM_GEN, MI355X, "aiter, aiter-persistent, triton-vllm, triton-sglang"),
])
def test_backend_not_on_this_gpu(backend, gpu, valid):
    with pytest.raises(ValueError, match=rf"backend {backend.value} does not run on {gpu.name} .*valid backends "
                                         rf"for it: {valid}$"):
        mla_splits(backend, gpu, [1024], 16)


def test_bad_engine_and_options():
    with pytest.raises(ValueError, match=r"unknown engine 'tgi' \(valid: vllm, sglang, trtllm\)"):
        default_mla_backend(H200, "tgi")
    with pytest.raises(ValueError, match=r"TensorRT-LLM runs on NVIDIA GPUs, not mi355x \(engines for it: vllm"):
        default_mla_backend(MI355X, "trtllm")
    with pytest.raises(ValueError, match="heads must be positive, got 0"):
        default_mla_backend(H200, heads=0)
    with pytest.raises(ValueError, match="kv_dtype must be a Dtype"):
        default_mla_backend(H200, kv_dtype="fp8")
    with pytest.raises(ValueError, match="backend must be an MlaBackend"):
        mla_splits("flashmla", H200, [1024], 16)


# SGLang's persistent AITER decode (get_mla_metadata_v1_0): 16 splits a request on gfx942 whatever the batch and
# history; on gfx950 history // 196, at most ceil(256 CUs / batch) and 64
@pytest.mark.parametrize("seqs, context, mi300x, mi355x", [
    (1, 100, 16, 1), (1, 1 * K, 16, 5), (4, 1 * K, 16, 5), (4, 8 * K, 16, 41), (8, 8 * K, 16, 32),
    (64, 8 * K, 16, 4), (1, 128 * K, 16, 64), (300, 8 * K, 16, 1),
])
def test_aiter_persistent_splits(seqs, context, mi300x, mi355x):
    batch = _batch(seqs, context)
    assert mla_splits(B.AITER_PERSISTENT, load_gpu("mi300x"), batch, 16) == (min(mi300x, context),) * seqs
    assert mla_splits(B.AITER_PERSISTENT, MI355X, batch, 16) == (mi355x,) * seqs


def test_aiter_persistent_counts_each_request_on_gfx950():
    # one count a request, from its own history (intra-batch mode)
    assert mla_splits(B.AITER_PERSISTENT, MI355X, [1 * K, 8 * K], 16) == (5, 41)
