"""AITER's block-scaled FP8 GEMM as ported (`companion.kernels.aiter_gemm`) against float64, in Triton's interpreter."""

from __future__ import annotations

import pytest
import torch

from companion.kernels import aiter_gemm

FP8 = torch.float8_e4m3fn


@pytest.mark.parametrize(("m", "n", "k"), [(4, 256, 256), (37, 200, 384), (130, 128, 128)])
def test_block_scaled_gemm_matches_float64(rng, m, n, k):
    """Fresh random FP8 operands and positive scales; M smaller than a tile (the rows wrap, the store masks them),
    N not a multiple of the tile, and M over one tile."""
    a = torch.randn(m, k, generator=rng).clamp(-8, 8).to(FP8)
    w = torch.randn(n, k, generator=rng).clamp(-8, 8).to(FP8)
    a_scale = torch.rand(m, k // 128, generator=rng) + 0.5
    w_scale = torch.rand(-(-n // 128), k // 128, generator=rng) + 0.5
    got = aiter_gemm.gemm_a8w8_blockscale(a, w, a_scale, w_scale).double()
    want = aiter_gemm.gemm_a8w8_blockscale_ref(a, w, a_scale, w_scale)
    assert got.shape == (m, n) and want.abs().max() > 1  # a real product, not zeros
    # FP8 inputs are exact in float64; fp32 accumulation over k terms and one bf16 rounding of the result
    scale = want.abs().amax(dim=1, keepdim=True)
    assert ((got - want).abs() <= 2.0**-7 * want.abs() + 2.0**-12 * scale).all()


def test_shapes_that_the_kernel_cannot_take_are_refused():
    a, w = torch.zeros(4, 200).to(FP8), torch.zeros(128, 200).to(FP8)
    with pytest.raises(ValueError, match="multiple of 128"):
        aiter_gemm.gemm_a8w8_blockscale(a, w, torch.ones(4, 1), torch.ones(1, 1))
    a, w = torch.zeros(4, 256).to(FP8), torch.zeros(128, 256).to(FP8)
    with pytest.raises(ValueError, match="do not match"):
        aiter_gemm.gemm_a8w8_blockscale(a, w, torch.ones(4, 1), torch.ones(1, 2))
