"""The grouped expert GEMM of the companion (vLLM's fused-MoE structure) against float64, in Triton's interpreter."""

from __future__ import annotations

import pytest
import torch

from companion.kernels import moe


@pytest.mark.parametrize(("tokens", "top_k", "experts", "n", "k", "block_m"),
                         [(5, 2, 4, 40, 72, 16), (33, 3, 8, 64, 96, 16), (1, 1, 3, 32, 32, 16), (40, 2, 2, 48, 64, 32)])
def test_grouped_gemm_matches_float64(tokens, top_k, experts, n, k, block_m):
    g = torch.Generator().manual_seed(tokens * 1000 + experts)
    a = torch.randn(tokens, k, generator=g).to(torch.bfloat16)
    w = torch.randn(experts, n, k, generator=g).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(experts, generator=g)[:top_k] for _ in range(tokens)])
    got = moe.grouped_gemm(a, w, ids, block_m, 32, 32).double()
    want = moe.grouped_gemm_ref(a, w, ids)
    assert want.abs().min() > 0 or want.abs().max() > 1  # a real product, not zeros
    # one bf16 conversion of the fp32 sum (the interpreter truncates: one unit in the last place, 2^-7 of the value),
    # and fp32 accumulation over k terms, far below 2^-12 of the row's largest value
    scale = want.abs().amax(dim=1, keepdim=True)
    assert ((got - want).abs() <= 2.0**-7 * want.abs() + 2.0**-12 * scale).all()


def test_align_pads_each_expert_to_the_row_tile():
    ids = torch.tensor([[0, 2], [2, 1], [2, 0]])
    sorted_rows, tile_expert, padded, tiles = moe.align(ids, 3, 4)
    assert int(padded) == 12  # experts 0, 1, 2 get 2, 1, 3 rows: one tile of 4 each
    assert tile_expert[:3].tolist() == [0, 1, 2]
    assert sorted_rows[:4].tolist() == [0, 5, 6, 6] and sorted_rows[8:11].tolist() == [1, 2, 4]
    assert tiles == -(-(6 + 3 * 3) // 4)
