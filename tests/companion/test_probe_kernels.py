"""The probe kernels compute their documented results, on tiny sizes, against float64 or exact references.

On the CPU they run under the Triton interpreter with USE_CLOCK off (no inline PTX there); on a CUDA
machine the same tests run the compiled kernels with the clock on and check the clock records are sane.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from companion.kernels import probes as k

USE_CLOCK = torch.cuda.is_available()
# The interpreter multiplies bf16 dot operands as raw bits (see occupancy_probe.py): fp16 there, bf16 on the GPU.
DOT_DTYPE = torch.bfloat16 if torch.cuda.is_available() else torch.float16


def _clock_ok(clk: torch.Tensor, programs: int) -> None:
    clk = clk.cpu().view(programs, 3)
    if USE_CLOCK:
        assert bool((clk[:, 1] > clk[:, 0]).all())
    else:
        assert bool((clk == 0).all())


def test_chase_table_is_one_cycle_over_line_heads(rng):
    lines = 50
    table = k.chase_table(lines, rng).numpy()
    stride = k.CACHE_LINE_BYTES // 4
    i, seen = 0, set()
    for _ in range(lines):
        assert i % stride == 0
        seen.add(i)
        i = int(table[i])
    assert i == 0 and len(seen) == lines


@pytest.mark.parametrize("steps", [1, 37])
def test_chase_ends_where_the_reference_does(rng, device, steps):
    table = k.chase_table(64, rng)
    start = int(torch.randint(0, 64, (1,), generator=rng)) * (k.CACHE_LINE_BYTES // 4)
    state = torch.tensor([start], dtype=torch.int32, device=device)
    clk = torch.zeros(3, dtype=torch.int64, device=device)
    k.chase_kernel[(1,)](table.to(device), state, clk, steps, USE_CLOCK=USE_CLOCK, num_warps=1)
    assert int(state.item()) == k.chase_ref(table.numpy(), start, steps)
    _clock_ok(clk, 1)


@pytest.mark.parametrize(("programs", "base", "n_blocks", "cache_global"), [(5, 3, 17, True), (2, 0, 8, False)])
def test_read_sum_matches_float64(rng, device, programs, base, n_blocks, cache_global):
    block, total_blocks = 64, 11
    src = torch.randn(total_blocks * block, generator=rng)
    out = torch.full((programs,), float("nan"), device=device)
    k.read_sum_kernel[(programs,)](src.to(device), out, base, n_blocks, total_blocks, BLOCK=block,
                                   CACHE_GLOBAL=cache_global, num_warps=1, num_stages=1)
    ref = k.read_sum_ref(src.numpy(), programs, base, n_blocks, block)
    np.testing.assert_allclose(out.cpu().double().numpy(), ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(("programs", "base", "n_blocks"), [(3, 4, 10), (2, 0, 7)])
def test_stream_reads_writes_and_copies_its_blocks(rng, device, programs, base, n_blocks):
    """The loaded-latency probe's background: blocks base, base + 1, ... (mod the buffer) below base + n_blocks,
    summed per program (reads, against float64), written with their number + 1, or copied; the rest untouched."""
    block, total_blocks = 32, 8
    src = torch.randn(total_blocks * block, generator=rng).to(device)
    taken = [(base + j) % total_blocks for j in range(n_blocks)]
    out = torch.full((programs,), float("nan"), device=device)
    k.stream_kernel[(programs,)](src, out, base, n_blocks, total_blocks, BLOCK=block, MODE=0, num_warps=1)
    blocks = src.cpu().double().view(total_blocks, block)
    want = [sum(blocks[taken[j]].sum().item() for j in range(p, n_blocks, programs)) for p in range(programs)]
    np.testing.assert_allclose(out.cpu().double().numpy(), want, rtol=1e-5, atol=1e-4)
    for mode in (1, 2):
        fill = torch.randn(total_blocks * block, generator=rng).to(device)
        dst = fill.clone()
        k.stream_kernel[(programs,)](src, dst, base, n_blocks, total_blocks, BLOCK=block, MODE=mode, num_warps=1)
        got, before = dst.cpu().view(total_blocks, block), fill.cpu().view(total_blocks, block)
        for b in range(total_blocks):
            want_b = (torch.full((block,), float(b + 1)) if mode == 1 else src.cpu().view(total_blocks, block)[b]
                      ) if b in taken else before[b]
            assert torch.equal(got[b], want_b)


@pytest.mark.parametrize(("programs", "base", "n_tiles", "stages"), [(3, 2, 7, 1), (2, 5, 9, 2)])
def test_tile_dot_matches_float64(rng, device, programs, base, n_tiles, stages):
    rows, cols, m, total = 16, 32, 16, 5
    src = torch.randn(total, rows, cols, generator=rng).to(DOT_DTYPE)
    w = torch.randn(m, rows, generator=rng).to(DOT_DTYPE)
    out = torch.full((programs, m, cols), float("nan"), device=device)
    k.tile_dot_kernel[(programs,)](src.to(device), w.to(device), out, base, n_tiles, total, ROWS=rows, COLS=cols,
                                   M=m, num_warps=4, num_stages=stages)
    ref = k.tile_dot_ref(src.float().numpy(), w.float().numpy(), programs, base, n_tiles)
    np.testing.assert_allclose(out.cpu().double().numpy(), ref, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("block", [1, 16])
def test_copy_tile_copies(rng, device, block):
    src = torch.randn(3 * block, generator=rng).to(device)
    dst = torch.full_like(src, float("nan"))
    k.copy_tile_kernel[(3,)](src, dst, BLOCK=block, num_warps=1)
    assert torch.equal(dst, src)


@pytest.mark.parametrize(("programs", "rounds"), [(7, 3), (2, 3), (3, 0)])
def test_tile_work_matches_float64_for_any_grid(rng, device, programs, rounds):
    # 7 tiles: one program per tile, or 2 and 3 programs striding over them (the persistent grids)
    block, tiles = 16, 7
    src = torch.randn(tiles * block, generator=rng).to(device)
    dst = torch.full_like(src, float("nan"))
    k.tile_work_kernel[(programs,)](src, dst, tiles, BLOCK=block, ROUNDS=rounds, num_warps=1)
    want = k.tile_work_reference(src, rounds)
    assert torch.allclose(dst.double(), want, rtol=1e-6, atol=1e-6)
    if rounds:
        assert not torch.allclose(dst, src)


def test_empty_kernel_runs(device):
    k.empty_kernel[(1,)](torch.zeros(1, device=device))


def _issue_inputs(op: str, n: int, rng: torch.Generator):
    if op == "fp32_fma":
        return torch.randn(n, generator=rng), torch.tensor([0.75 + 0.1 * float(torch.rand(1, generator=rng)),
                                                           float(torch.randn(1, generator=rng))])
    if op == "exp2":
        return torch.rand(n, generator=rng) * 4 - 2, torch.randn(2, generator=rng)
    if op == "frnd_mix":  # fractional values: the first floor rounds them; a = 1, b = 1/2 keep every step exact
        return torch.randn(n, generator=rng) * 1000, torch.tensor([1.0, 0.5])
    x = torch.randint(-(2**31), 2**31 - 1, (n,), generator=rng, dtype=torch.int64).to(torch.int32)
    coef = torch.randint(3, 2**20, (2,), generator=rng, dtype=torch.int64).to(torch.int32)
    return x, coef


@pytest.mark.parametrize("op", list(k.ISSUE_OPS))
@pytest.mark.parametrize("chains", [1, 2])
def test_issue_chain_matches_reference(rng, device, op, chains):
    threads, programs, trips, unroll = 32, 2, 3, 4
    x, coef = _issue_inputs(op, programs * chains * threads, rng)
    out = torch.empty_like(x).to(device)
    clk = torch.zeros(3 * programs, dtype=torch.int64, device=device)
    k.issue_kernel[(programs,)](x.to(device), coef.to(device), out, clk, trips, OP=k.ISSUE_OPS[op], CHAINS=chains,
                                THREADS=threads, UNROLL=unroll, USE_CLOCK=USE_CLOCK, num_warps=1)
    ref = k.issue_ref(op, x.numpy(), coef[0].item(), coef[1].item(), trips * unroll)
    got = out.cpu().numpy()
    if op in ("int32_mad", "bit"):
        np.testing.assert_array_equal(got.astype(np.int64), ref)
    else:
        np.testing.assert_allclose(got.astype(np.float64), ref, rtol=1e-5, atol=1e-6)
    _clock_ok(clk, programs)


def test_bit_step_does_not_collapse(rng):
    """The xor-shift map is invertible: distinct inputs stay distinct, so the chain never settles at 0 or -1."""
    x, _ = _issue_inputs("bit", 4096, rng)
    y = k.issue_ref("bit", x.numpy(), 0, 0, 64)
    assert len(np.unique(y)) == len(np.unique(x.numpy()))


@pytest.mark.parametrize(("m", "n", "kk", "warps"), [(16, 16, 16, 1), (16, 32, 16, 4)])
def test_mma_chain_is_dots_times_the_product(rng, device, m, n, kk, warps):
    dots = 3
    a = torch.randn(m, kk, generator=rng).to(DOT_DTYPE)
    b = torch.randn(kk, n, generator=rng).to(DOT_DTYPE)
    out = torch.empty(m, n, device=device)
    clk = torch.zeros(3, dtype=torch.int64, device=device)
    k.mma_chain_kernel[(1,)](a.to(device), b.to(device), out, clk, dots, M=m, N=n, K=kk, USE_CLOCK=USE_CLOCK,
                             num_warps=warps)
    ref = dots * (a.double() @ b.double())
    # Products of 8- or 11-bit mantissas are exact in fp32; only the fp32 sums round (~1e-7 each).
    torch.testing.assert_close(out.cpu().double(), ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max()))
    _clock_ok(clk, 1)


@pytest.mark.parametrize("warps", [1, 4])
def test_reduce_chain_matches_float64(rng, device, warps):
    block, rounds = 32 * warps, 5
    x = torch.rand(block, generator=rng) + 0.5
    x = 1.1 * x / x.sum()  # sum 1.1: s grows by 10 % a round, so a missed or extra round shows
    s0 = torch.rand(1, generator=rng) + 0.5
    out = torch.empty(1, device=device)
    clk = torch.zeros(3, dtype=torch.int64, device=device)
    k.reduce_chain_kernel[(1,)](x.to(device), s0.to(device), out, clk, rounds, BLOCK=block, USE_CLOCK=USE_CLOCK,
                               num_warps=warps)
    ref = float(s0.double()) * float(x.double().sum()) ** rounds
    assert float(out.item()) == pytest.approx(ref, rel=1e-5)
    _clock_ok(clk, 1)


def test_transpose_chain_matches_float64(rng, device):
    t, programs, rounds = 16, 2, 3
    x = torch.randn(programs, t, t, generator=rng)
    c = 1 + 0.1 * torch.randn(t, t, generator=rng)
    out = torch.empty_like(x).to(device)
    clk = torch.zeros(3 * programs, dtype=torch.int64, device=device)
    k.transpose_chain_kernel[(programs,)](x.to(device), c.to(device), out, clk, rounds, T=t, USE_CLOCK=USE_CLOCK,
                                          num_warps=4)
    for p in range(programs):
        ref = k.transpose_chain_ref(x[p].numpy(), c.numpy(), rounds)
        np.testing.assert_allclose(out[p].cpu().double().numpy(), ref, rtol=1e-5, atol=1e-6)
    _clock_ok(clk, programs)


@pytest.mark.parametrize("r", [1, 4, 8])
def test_row_slice_loads_sum_the_first_values_of_each_row(rng, device, r):
    pitch, rows, grid = 16, 8, 3
    src = torch.rand(grid * rows * pitch, generator=rng) + 0.5
    dst = torch.zeros(grid * rows * pitch).to(device)
    k.row_slice_kernel[(grid,)](src.to(device), dst, PITCH=pitch, R=r, ROWS=rows, STORE=0)
    want = k.row_slice_reference(src.numpy(), pitch, r, rows)
    np.testing.assert_allclose(dst[:grid].cpu().numpy().astype(np.float64), want, rtol=1e-5)
    assert np.all(dst[grid:].cpu().numpy() == 0)  # one sum per program, nothing else written


def test_row_slice_stores_touch_only_the_first_values_of_each_row(rng, device):
    pitch, rows, grid, r = 16, 8, 3, 4
    dst = (torch.rand(grid * rows * pitch, generator=rng) + 0.5).to(device)
    before = dst.cpu().clone().view(grid, rows, pitch)
    k.row_slice_kernel[(grid,)](dst, dst, PITCH=pitch, R=r, ROWS=rows, STORE=1)
    after = dst.cpu().view(grid, rows, pitch)
    want = torch.arange(1, grid + 1, dtype=torch.float32)[:, None, None].expand(grid, rows, r)
    assert torch.equal(after[:, :, :r], want)
    assert torch.equal(after[:, :, r:], before[:, :, r:])


@pytest.mark.parametrize("rounds", [0, 3])
def test_drift_programs_store_their_tiles_or_sum_them(rng, device, rounds):
    block, tiles, programs = 8, 7, 3  # uneven: programs 0 takes 3 tiles, the others 2
    src = torch.rand(tiles * block, generator=rng) + 0.5
    stored = torch.zeros(tiles * block).to(device)
    k.drift_kernel[(programs,)](src.to(device), stored, tiles, BLOCK=block, ROUNDS=rounds, STORE=1)
    np.testing.assert_allclose(stored.cpu().double().numpy(), k.tile_work_reference(src, rounds).numpy(),
                               rtol=1e-6)
    sums = torch.zeros(programs + 5).to(device)
    k.drift_kernel[(programs,)](src.to(device), sums, tiles, BLOCK=block, ROUNDS=rounds, STORE=0)
    want = k.drift_reference(src, programs, block, rounds)
    np.testing.assert_allclose(sums[:programs].cpu().double().numpy(), want.numpy(), rtol=1e-5)
    assert np.all(sums[programs:].cpu().numpy() == 0)  # one sum per program, nothing else written


def test_scattered_tile_order_visits_every_tile_once_in_groups_of_row_tiles():
    order = k.scattered_tile_order(num_pid_m=5, num_pid_n=3, group_m=2)
    assert sorted(map(tuple, order)) == [(m, n) for m in range(5) for n in range(3)]
    # the first group: row tiles 0 and 1 alternate over each column tile; the last group holds row tile 4 alone
    assert order[:6].tolist() == [[0, 0], [1, 0], [0, 1], [1, 1], [0, 2], [1, 2]]
    assert order[-3:].tolist() == [[4, 0], [4, 1], [4, 2]]


@pytest.mark.parametrize("r", [4, 8, 16])
def test_scattered_tiles_load_the_rows_their_index_names(rng, device, r):
    pitch, rows, group_m, n_rows = 16, 4, 3, 32
    src = torch.rand(n_rows * pitch, generator=rng) + 0.5
    index = torch.randperm(n_rows, generator=rng).to(torch.int32)
    num_pid_m, programs = n_rows // rows, (n_rows // rows) * (pitch // r)
    dst = torch.zeros(programs + 7).to(device)
    k.scattered_tile_kernel[(programs,)](src.to(device), dst, index.to(device), num_pid_m, PITCH=pitch, R=r,
                                         ROWS=rows, GROUP_M=group_m, STORE=0)
    want = k.scattered_tile_reference(src.numpy(), index.numpy(), pitch, r, rows, group_m)
    np.testing.assert_allclose(dst[:programs].cpu().numpy().astype(np.float64), want, rtol=1e-5)
    assert np.all(dst[programs:].cpu().numpy() == 0)  # one sum per program, nothing else written


@pytest.mark.parametrize("r", [4, 16])
def test_scattered_tiles_store_every_value_of_every_indexed_row_once(rng, device, r):
    pitch, rows, group_m, n_rows = 16, 4, 3, 32
    index = torch.randperm(n_rows, generator=rng).to(torch.int32)
    dst = torch.zeros(n_rows * pitch).to(device)
    programs = (n_rows // rows) * (pitch // r)
    k.scattered_tile_kernel[(programs,)](dst, dst, index.to(device), n_rows // rows, PITCH=pitch, R=r, ROWS=rows,
                                         GROUP_M=group_m, STORE=1)
    want = (torch.arange(n_rows)[:, None] % 4096) * pitch + torch.arange(pitch)[None, :] + 1
    assert torch.equal(dst.cpu().view(n_rows, pitch), want.to(torch.float32))


def test_shfl_mix_matches_its_float64_reference(rng, device):
    chains, warps, trips, unroll, programs = 2, 1, 2, 2, 2
    x = torch.rand(programs * chains * warps * 32, generator=rng) - 0.5
    coef = torch.tensor([0.5, 0.25])
    out = torch.empty_like(x).to(device)
    clk = torch.zeros(3 * programs, dtype=torch.int64, device=device)
    k.shfl_mix_kernel[(programs,)](x.to(device), coef.to(device), out, clk, trips, CHAINS=chains, WARPS=warps,
                                   UNROLL=unroll, USE_CLOCK=USE_CLOCK, num_warps=warps)
    want = k.shfl_mix_ref(x.numpy().reshape(programs, chains, warps, 32), 0.5, 0.25, trips * unroll)
    np.testing.assert_allclose(out.cpu().numpy().reshape(want.shape).astype(np.float64), want, rtol=1e-5, atol=1e-6)
    _clock_ok(clk, programs)


def test_imad_mix_matches_its_references(rng, device):
    chains, threads, trips, unroll, programs = 2, 32, 2, 2, 2
    n = programs * chains * threads
    x = torch.rand(n, generator=rng) - 0.5
    i = torch.randint(-(2**31), 2**31 - 1, (n,), generator=rng, dtype=torch.int64).to(torch.int32)
    coef, icoef = torch.tensor([0.5, 0.25]), torch.tensor([1_103_515_245, 12_345], dtype=torch.int32)
    out, iout = torch.empty_like(x).to(device), torch.empty_like(i).to(device)
    clk = torch.zeros(3 * programs, dtype=torch.int64, device=device)
    k.imad_mix_kernel[(programs,)](x.to(device), i.to(device), coef.to(device), icoef.to(device), out, iout, clk,
                                   trips, CHAINS=chains, THREADS=threads, UNROLL=unroll, USE_CLOCK=USE_CLOCK,
                                   num_warps=1)
    want_x, want_i = k.imad_mix_ref(x.numpy(), i.numpy(), 0.5, 0.25, 1_103_515_245, 12_345, trips * unroll)
    np.testing.assert_allclose(out.cpu().numpy().astype(np.float64), want_x, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(iout.cpu().numpy().astype(np.int64), want_i)
    _clock_ok(clk, programs)


@pytest.mark.parametrize("releases", [1, 2])
def test_copy_release_copies_then_sets_every_flag(rng, device, releases):
    programs, block = 3, 64
    src = (torch.rand(programs * block, generator=rng) + 0.5).to(device)
    dst = torch.zeros_like(src)
    flags = torch.zeros(2 * programs, dtype=torch.int32, device=device)
    k.copy_release_kernel[(programs,)](src, dst, flags, BLOCK=block, RELEASES=releases)
    assert torch.equal(dst.cpu(), src.cpu())
    assert flags.cpu().tolist() == [1] * (releases * programs) + [0] * ((2 - releases) * programs)


@pytest.mark.parametrize(("m", "dot", "fmas"), [(16, True, 0), (16, True, 2), (64, True, 1), (16, False, 3)])
def test_sm_clock_kernel_runs_its_dots_and_fmas_per_program(rng, device, m, dot, fmas):
    n = kk = 16
    steps, programs, c, d = 3, 2, 0.75, 0.25
    a = (torch.rand(m, kk, generator=rng) + 0.5).to(DOT_DTYPE)
    b = (torch.rand(kk, n, generator=rng) + 0.5).to(DOT_DTYPE)
    x = torch.rand(m, n, generator=rng) + 0.5
    acc = torch.zeros(programs * m * n).to(device)
    y = torch.zeros(programs * m * n).to(device)
    clk = torch.zeros(2 * programs, dtype=torch.int64).to(device)
    k.sm_clock_kernel[(programs,)](a.to(device), b.to(device), x.to(device), acc, y, clk, steps, c, d, M=m, N=n, K=kk,
                                   DOT=dot, FMAS=fmas, USE_CLOCK=USE_CLOCK)
    want_acc, want_y = k.sm_clock_reference(a.float().numpy(), b.float().numpy(), x.numpy(), steps, fmas, c, d, dot)
    for p in range(programs):  # every program computes its own copy
        tile = slice(p * m * n, (p + 1) * m * n)
        np.testing.assert_allclose(acc[tile].cpu().double().numpy().reshape(m, n), want_acc, rtol=1e-5)
        np.testing.assert_allclose(y[tile].cpu().double().numpy().reshape(m, n), want_y, rtol=1e-5)
    spans = clk.cpu().view(programs, 2)  # (cycles, ns) of each program's loop: positive on a GPU, 0 without the clock
    assert bool((spans > 0).all()) if USE_CLOCK else bool((spans == 0).all())
