"""QuickReduce codecs: Triton bytes equal the numpy reference's, round trips stay within the codec's bound."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from companion.bench.suites import codec as bench
from companion.bench.timing import environment
from companion.kernels import codecs, codecs_ref
from validation.suites import case_row
from validation.suites import codec as suite
from workloads.codecs import Codec

INT_CODECS = ("int8", "int6", "int4", "int3")


def _scaled_normal(n: int, rng: torch.Generator) -> torch.Tensor:
    """Random normal values times a random power-of-two scale per 32-value block, 2^-4 to 2^4.

    The range keeps every block scale (absmax / qmax) an fp16 normal, where `error_bound` is stated.
    """
    blocks = -(-n // 32)
    scales = 2.0 ** torch.randint(-4, 5, (blocks,), generator=rng).double()
    return torch.randn(n, generator=rng, dtype=torch.float64) * scales.repeat_interleave(32)[:n]


def _edge_block(codec: str) -> torch.Tensor:
    """32 values at the clip edges and at exact rounding ties, with step D = 4 so that D + 1e-7 == D in fp32.

    With the encode scale exactly 1/4, x * e lands on the ties themselves: this checks round-half-even and
    QuickReduce's asymmetric clip (+qmax D encodes as qmax - 1, -qmax D as -qmax).
    """
    if codec == "fp4":  # the E2M1 midpoints and the ends, both signs
        mags = [6.0, 5.0, 3.5, 2.5, 1.75, 1.25, 0.75, 0.25, 4.0, 3.0, 0.5, 5.5, 4.5, 2.25, 0.1, 1.0]
        ratios = mags + [-m for m in mags]
    else:
        q = codecs_ref.QMAX.get(codec, 8)  # the FP codec gets INT4's block
        ratios = [q, -q, q - 0.5, -q + 0.5, q - 1, q - 1.5, -q + 1.5, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5]
        ratios += [0.25, -0.75, q / 2 + 0.5, -q / 2 - 0.5, 1.0]
        ratios += [(k % (2 * q)) - q + 0.5 for k in range(32 - len(ratios))]
    return torch.tensor(ratios, dtype=torch.float64) * 4.0


def _special_input(n: int, codec: str, rng: torch.Generator) -> torch.Tensor:
    """Scaled normals with three special blocks: one value repeated, equal magnitudes of mixed signs, edges."""
    x = _scaled_normal(n, rng)
    c = float(torch.rand((), generator=rng, dtype=torch.float64)) * 3 + 0.1
    x[0:32] = c  # all one value, not zero
    signs = torch.where(torch.rand(32, generator=rng) < 0.5, -1.0, 1.0).double()
    signs[0], signs[1] = -1.0, 1.0  # both signs present
    x[32:64] = c * signs  # equal magnitudes, mixed signs
    x[64:96] = _edge_block(codec)
    return x


def _round_trip(x: torch.Tensor, codec: str, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    packed = codecs.quantize(x.to(dtype).to(device), codec)
    return packed.cpu(), codecs.dequantize(packed, codec, x.numel(), dtype).cpu()


@pytest.mark.parametrize("codec", codecs.CODECS)
def test_tile_bytes_match_the_model(codec):
    assert codecs.tile_bytes(codec) == Codec(codec).tile_bytes == codecs_ref.TILE_BYTES[codec]


@pytest.mark.parametrize("codec", codecs.CODECS)
def test_quantize_matches_numpy_and_round_trip_is_bounded(codec, device, rng):
    n = 2 * codecs.TILE_VALUES + 100  # a ragged last tile: zero-padded
    x = _special_input(n, codec, rng).half()  # the input the kernel sees, and its float64 reference
    packed, y = _round_trip(x, codec, torch.float16, device)

    assert packed.numel() == 3 * codecs.tile_bytes(codec)
    ref_packed = codecs_ref.quantize_ref(x.numpy(), codec)
    mismatched = np.flatnonzero(packed.numpy() != ref_packed)
    assert mismatched.size == 0, f"bytes differ at {mismatched[:10]}"
    ref_y = torch.from_numpy(codecs_ref.dequantize_ref(ref_packed, codec, n)).half()
    assert torch.equal(y, ref_y)
    err = (y.double() - x.double()).abs()
    bound = codecs_ref.error_bound(x, codec)
    worst = int(torch.argmax(err - bound))
    assert bool((err <= bound).all()), f"value {worst}: {x[worst]} -> {y[worst]}, bound {bound[worst]}"
    assert torch.equal(y[:32], y[:1].expand(32))  # one value repeated decodes to one value


@pytest.mark.parametrize("codec", INT_CODECS)
def test_edge_block_codes(codec, device, rng):
    """The stored codes of the edge block, spelled out: ties to even, +qmax clipped to qmax - 1."""
    x = _special_input(codecs.TILE_VALUES, codec, rng).half()
    _, y = _round_trip(x, codec, torch.float16, device)
    q = codecs_ref.QMAX[codec]
    got = (y[64:96].double() / 4.0).tolist()
    ratios = (x[64:96].double() / 4.0).tolist()
    expected = [min(max(float(np.rint(r)), -q), q - 1) for r in ratios]
    assert got == expected
    assert got[:3] == [q - 1, -q, q - 1]  # +qmax clips to qmax - 1, -qmax does not; so does qmax - 0.5
    assert got[7:13] == [0.0, 0.0, 2.0, -2.0, 2.0, -2.0]  # ties at +-0.5, +-1.5, +-2.5 go to the even code


def test_fp4_edge_block_codes(device, rng):
    x = _special_input(codecs.TILE_VALUES, "fp4", rng).half()
    _, y = _round_trip(x, "fp4", torch.float16, device)
    got = (y[64:80].double() / 4.0).tolist()  # D = absmax / 6 = 4
    # 5 -> 4, 3.5 -> 4, 2.5 -> 2, 1.75 -> 2, 1.25 -> 1, 0.75 -> 1, 0.25 -> 0 (ties to the even code)
    assert got == [6.0, 4.0, 4.0, 2.0, 2.0, 1.0, 1.0, 0.0, 4.0, 3.0, 0.5, 6.0, 4.0, 2.0, 0.0, 1.0]
    assert (y[80:96].double() / 4.0).tolist() == [-v for v in got]


@pytest.mark.parametrize("codec", ("fp", "int4", "int3", "fp4"))
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float32))
def test_bf16_input_and_other_output_dtypes(codec, dtype, device, rng):
    """bf16 in, bf16 or fp32 out: still the numpy bytes, and the bound with the output's rounding."""
    n = codecs.TILE_VALUES - 7
    x = _scaled_normal(n, rng).bfloat16()
    packed = codecs.quantize(x.to(device), codec)
    y = codecs.dequantize(packed, codec, n, dtype).cpu()
    ref_packed = codecs_ref.quantize_ref(x.float().numpy(), codec)
    assert np.array_equal(packed.cpu().numpy(), ref_packed)
    assert torch.equal(y, torch.from_numpy(codecs_ref.dequantize_ref(ref_packed, codec, n)).to(dtype))
    assert bool(((y.double() - x.double()).abs() <= codecs_ref.error_bound(x, codec, dtype)).all())


def test_fp_codec_is_exact_for_fp16(device, rng):
    x = _scaled_normal(codecs.TILE_VALUES + 1, rng).half()
    _, y = _round_trip(x, "fp", torch.float16, device)
    assert torch.equal(y, x)


def test_coarser_codecs_err_more(device, rng):
    """Bits buy accuracy: the mean error grows from INT8 to INT6, INT4 and INT3 on the same input."""
    x = _scaled_normal(codecs.TILE_VALUES, rng).half()
    errs = [float((_round_trip(x, c, torch.float16, device)[1].double() - x.double()).abs().mean()) for c in INT_CODECS]
    assert errs == sorted(errs) and errs[0] < errs[-1] / 8


def test_bad_arguments_are_named(device):
    x = torch.ones(10, dtype=torch.float16, device=device)
    with pytest.raises(ValueError, match="int5"):
        codecs.quantize(x, "int5")
    with pytest.raises(ValueError, match="1152 packed bytes"):
        codecs.dequantize(torch.zeros(100, dtype=torch.uint8, device=device), "int4", 10)
    with pytest.raises(ValueError, match="fp16 or bf16"):
        codecs.quantize(x.float(), "int4")


def test_reference_bound_fails_a_wrong_decode(rng):
    """The bound is tight enough to catch an off-by-one code: shift every INT4 code by one step and it fails."""
    x = _scaled_normal(codecs.TILE_VALUES, rng).half()
    y = torch.from_numpy(codecs_ref.dequantize_ref(codecs_ref.quantize_ref(x.numpy(), "int4"), "int4", x.numel()))
    step = x.double().view(-1, 32).abs().amax(dim=1).repeat_interleave(32) / 8
    assert not bool(((y.double() + step - x.double()).abs() <= codecs_ref.error_bound(x, "int4")).all())


# ---------------------------------------------------------------------------------------- suite


def test_suite_cases_and_counts():
    cases = suite.cases()
    assert len(cases) == 48
    for case in cases:
        assert case.bytes() > 0 and case.flop() >= 0 and case.ops_per_sample >= 1
        assert set(case.shape()) == set(suite.SHAPE_COLUMNS)
    one = next(c for c in cases if c.kernel == suite.QUANTIZE and c.codec == "int4" and c.values == 1 << 19)
    assert one.bytes() == 2 * (1 << 19) + 256 * 1152 and one.flop() == 5 * (1 << 19)
    assert one.launch_mode == "graph" and one.ops_per_sample * 2 * one.values >= suite.ROTATION_BYTES


def test_suite_compare_on_a_synthetic_row():
    """Not a measurement: fake timing columns only check that compare() maps a row to the model."""
    case = next(c for c in suite.cases() if c.kernel == suite.DEQUANTIZE and c.codec == "int3")
    row = {k: str(v) for k, v in case_row(case).items()}
    row.update(time_s_median="1e-5", time_s_p10="1e-5", time_s_p90="1e-5", repeats="20")
    result = suite.compare(row, "h200")
    assert result.predicted_s > 0 and result.group == "codec dequantize"


@pytest.mark.parametrize("codec", ("int6", "fp4"))
def test_suite_check_passes_on_correct_kernels(codec, device):
    """The suite's pre-timing check (bytes and values against numpy, error bound) accepts the real kernels."""
    values = 2 * bench.CHECK_TILES * codecs.TILE_VALUES
    x, packed = bench.checked_pair(codec, values, device)
    assert x.numel() == values and packed.numel() == 2 * bench.CHECK_TILES * codecs.tile_bytes(codec)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="times kernels on a CUDA GPU")
def test_suite_runs_one_size_on_the_gpu():
    planned = [c for c in suite.cases() if c.codec == "int3" and c.values == 1 << 19]
    rows, failures = bench.run(planned, environment())
    assert failures == [] and len(rows) == 2
    assert all(float(r["time_s_median"]) > 0 for r in rows)
