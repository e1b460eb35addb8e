"""MLA decode kernels against the float64 reference: splits, head padding, ragged and variable lengths."""

from __future__ import annotations

import pytest
import torch

from companion.kernels.mla_decode import BLOCK_N, KV_LORA, ROPE_DIM, mla_decode, mla_decode_ref

WIDTH = KV_LORA + ROPE_DIM
# The interpreter stores bf16 as uint16 and its tl.dot multiplies the bit patterns (triton 3.9;
# triton-lang/triton#11584, "we just don't support it yet"), so on the CPU the kernels are checked
# in fp16, which runs the same code; on the GPU both dtypes run.
DTYPES = [torch.bfloat16, torch.float16] if torch.cuda.is_available() else [torch.float16]
# Bounds against float64 for bf16 inputs, which are exact in float64 (fp16 rounds 8x finer, so they
# hold for it too). The scores are fp32 sums of exact products, so the error comes from rounding p to
# bf16 before the PV dot (2**-9 relative per weight) and the bf16 output (half an ulp, 2**-9 relative).
# Outputs are softmax averages of N(0, 1) values, |o| < 4, so 2**-9 * 4 < 1e-2 bounds each element;
# the relative Frobenius error is about 2**-9 ~ 2e-3 (an fp32 emulation of these roundings gave
# 3.5e-3 max and 2.0e-3 relative at 100 rows).
ATOL = 1e-2
REL_NORM_MAX = 5e-3
# Padded and unpadded runs compute each real head from the same values in the same order; allow one
# bf16 ulp (2**-7 relative) in case the two compiled layouts round an fp32 sum differently.
PAD_RTOL = 2.0**-7


def _inputs(rng, seqs, max_len, heads, device, lengths=None, dtype=DTYPES[0]):
    """q, cache and lengths, random normal; cache rows past each length are NaN, so reading one shows."""
    q = torch.randn(seqs, heads, WIDTH, generator=rng).to(dtype)
    cache = torch.randn(seqs, max_len, WIDTH, generator=rng).to(dtype)
    lengths = torch.full((seqs,), max_len, dtype=torch.int32) if lengths is None else torch.tensor(
        lengths, dtype=torch.int32)
    for b, n in enumerate(lengths.tolist()):
        cache[b, n:] = float("nan")
    return q.to(device), cache.to(device), lengths.to(device)


def _check(out, ref):
    """Elementwise and relative-norm bounds against the float64 reference (see ATOL)."""
    assert out.shape == ref.shape
    assert bool(torch.isfinite(out).all())
    err = out.double() - ref
    assert float(err.abs().max()) < ATOL
    assert float(err.norm() / ref.norm()) < REL_NORM_MAX


@pytest.mark.parametrize(
    ("seqs", "max_len", "heads", "num_splits"),
    [
        (2, 100, 12, 1),  # ragged last tile (100 = 3 * 32 + 4)
        (2, 200, 12, 3),  # 3 non-empty splits of 96, 96 and 8 rows
        (3, 77, 12, 8),  # splits are whole tiles: 3 hold rows, 5 are empty
        (1, 64, 16, 3),  # heads already a multiple of 16: unmasked without a pad launch
        (2, 40, 20, 3),  # two head blocks, the second masked
    ],
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_reference_padded_or_not(rng, device, seqs, max_len, heads, num_splits, dtype):
    q, cache, lengths = _inputs(rng, seqs, max_len, heads, device, dtype=dtype)
    ref = mla_decode_ref(q.cpu(), cache.cpu(), lengths.cpu()).to(device)
    plain = mla_decode(q, cache, lengths, num_splits=num_splits)
    padded = mla_decode(q, cache, lengths, num_splits=num_splits, pad_heads_to=32 if heads > 16 else 16)
    _check(plain, ref)
    _check(padded, ref)
    torch.testing.assert_close(padded, plain, rtol=PAD_RTOL, atol=0.0)


@pytest.mark.parametrize("num_splits", [1, 3, 8])
def test_variable_lengths_per_sequence(rng, device, num_splits):
    lengths = [1, BLOCK_N, 95, 150]  # one row, exactly one tile, ragged, longest
    q, cache, lens = _inputs(rng, len(lengths), 160, 12, device, lengths)
    ref = mla_decode_ref(q.cpu(), cache.cpu(), lens.cpu()).to(device)
    for pad in (0, 16):
        _check(mla_decode(q, cache, lens, num_splits=num_splits, pad_heads_to=pad), ref)


def test_one_row_returns_that_rows_values(rng, device):
    """With a single row the softmax weight is 1: the output is the row's first kv_lora values."""
    q, cache, lengths = _inputs(rng, 2, 8, 12, device, [1, 1])
    out = mla_decode(q, cache, lengths, num_splits=3, pad_heads_to=16)
    expected = cache[:, :1, :KV_LORA].expand(-1, 12, -1)
    torch.testing.assert_close(out, expected, rtol=0.0, atol=0.0)


def test_softmax_scale_is_a_parameter(rng, device):
    q, cache, lengths = _inputs(rng, 1, 50, 12, device)
    ref = mla_decode_ref(q.cpu(), cache.cpu(), lengths.cpu(), sm_scale=0.02).to(device)
    default = mla_decode_ref(q.cpu(), cache.cpu(), lengths.cpu()).to(device)
    assert float((ref - default).abs().max()) > 10 * ATOL  # the scale changes the answer
    _check(mla_decode(q, cache, lengths, num_splits=3, sm_scale=0.02), ref)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lengths": torch.ones(2, dtype=torch.int64)}, "int32"),
        ({"cache": torch.ones(2, 8, WIDTH, dtype=torch.float32)}, "bf16 or fp16"),
        ({"cache": torch.ones(3, 8, WIDTH, dtype=torch.bfloat16)}, "does not match"),
        ({"num_splits": 0}, "num_splits"),
        ({"block_n": 24}, "block_n"),
    ],
)
def test_bad_arguments_name_the_problem(kwargs, match):
    q = torch.ones(2, 12, WIDTH, dtype=torch.bfloat16)
    cache = kwargs.pop("cache", torch.ones(2, 8, WIDTH, dtype=torch.bfloat16))
    lengths = kwargs.pop("lengths", torch.full((2,), 8, dtype=torch.int32))
    with pytest.raises(ValueError, match=match):
        mla_decode(q, cache, lengths, **kwargs)


# ------------------------------------------------------------------------- the mla_decode suite


def test_suite_defaults_are_the_kernels():
    """The suite's shape columns describe the launches the kernel module makes."""
    from companion.kernels import mla_decode as kernels
    from validation.suites import mla_decode as suite

    assert (suite.BLOCK_N, suite.NUM_WARPS, suite.KV_LORA, suite.ROPE_DIM, suite.HEADS_PER_WORKGROUP) == (
        kernels.BLOCK_N, kernels.NUM_WARPS, kernels.KV_LORA, kernels.ROPE_DIM, kernels.BLOCK_H)


def test_suite_cases_and_exact_counts():
    from validation.suites.mla_decode import PLAN_L2_BYTES, MlaDecodeCase, cases

    planned = cases()
    assert 35 <= len(planned) <= 50
    assert len(set(planned)) == len(planned)
    for case in planned:
        assert case.flop() > 0 and case.bytes() > 0 and case.ops_per_sample >= 1
        # a graph holds enough calls, each on its own input set, for the sets to pass two L2s
        assert case.ops_per_sample * case.input_set_bytes() > 2 * PLAN_L2_BYTES
    tiny = MlaDecodeCase(seqs=2, context=64, num_splits=1, pad_heads_to=0)
    assert tiny.flop() == 2 * (2 * 12 * 64 * (576 + 512))
    q, cache, out = 2 * 12 * 576 * 2, 2 * 64 * 576 * 2, 2 * 12 * 512 * 2
    assert tiny.bytes() == q + cache + out
    split_padded = MlaDecodeCase(seqs=2, context=64, num_splits=2, pad_heads_to=16)
    partials = 2 * 2 * 16 * (512 + 1) * 4
    pad = 2 * 16 * 576 * 2
    assert split_padded.bytes() == q + cache + 2 * pad + 2 * partials + 2 * 16 * 512 * 2
    assert split_padded.flop() == tiny.flop()  # padding rows are not counted as useful work


@pytest.mark.parametrize(("splits", "pad"), [(1, 0), (16, 0), (1, 16), (16, 16)])
def test_suite_bytes_equal_the_models_launches(splits, pad):
    """The counted bytes are the model's: the suite and MlaDecode describe the same launches."""
    from validation.suites.mla_decode import MlaDecodeCase
    from workloads.attention_kernels import MlaDecode

    case = MlaDecodeCase(seqs=8, context=1024, num_splits=splits, pad_heads_to=pad)
    model = MlaDecode(seqs=8, context=1024, heads=12, num_splits=splits, pad_heads_to=pad, kv_dtype="bf16")
    launches = model.launches()
    assert sum(w.read_bytes + w.write_bytes for w in launches) == case.bytes()
    assert len(launches) == 1 + (pad > 12) + (splits > 1)


def test_suite_compare_on_a_synthetic_row():
    """Not a measurement: a planned row with made-up timing columns goes through compare()."""
    from validation.suites import case_row
    from validation.suites.mla_decode import GROUP, cases, compare

    case = next(c for c in cases() if c.pad_heads_to and c.num_splits > 1)
    row = {k: str(v) for k, v in case_row(case).items()}
    row.update(time_s_median="1e-5", time_s_p10="1e-5", time_s_p90="1e-5", repeats="20")
    result = compare(row, "h200")
    assert result.group == GROUP and "pad16" in result.label
    assert result.predicted_s > 0 and result.measured_s == pytest.approx(1e-5)


def test_suite_lists_without_a_gpu(capsys):
    from companion.bench.cli import main
    from validation.suites.mla_decode import cases

    assert main(["suites", "--suite", "mla_decode", "--list"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(cases())
