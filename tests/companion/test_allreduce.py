"""The two-shot all-reduce's kernels, N ranks emulated in one process (phase k of every rank before phase k+1).

Two references: the float64 sum of the inputs, within `error_bound` (two quantizations), and the codecs'
own numpy format (`codecs_ref`) run through the same two shots, which the kernels must match bit for bit.
A gpu test runs the real thing on 2 GPUs against NCCL.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from companion.kernels import allreduce as ar
from companion.kernels.codecs import CODECS, TILE_VALUES
from companion.kernels.codecs_ref import dequantize_ref, quantize_ref

# Ragged on purpose: 4 full tiles and 300 values; at N=4 rank 2 owns the partial tile and rank 3 none.
N_VALUES = 4 * TILE_VALUES + 300
PROGRAMS = 2  # programs per kernel, < tiles per rank at N=2, so one program loops over several tiles


def _inputs(world: int, rng: torch.Generator, device: str, dtype=torch.bfloat16, n: int = N_VALUES):
    return [torch.randn(n, generator=rng, dtype=torch.float32).to(dtype).to(device) for _ in range(world)]


def _two_shot_ref(xs, codec: str, out_dtype) -> torch.Tensor:
    """Phase 1 and 2 through the numpy codec reference, the sum in fp32 in rank order as the kernel does."""
    n = xs[0].numel()
    acc = np.zeros(n, dtype=np.float32)
    for x in xs:
        x16 = x.cpu().to(torch.float16).numpy()  # bf16 inputs are cast to fp16 first (vLLM's default)
        acc += dequantize_ref(quantize_ref(x16, codec), codec, n)
    return torch.from_numpy(dequantize_ref(quantize_ref(acc, codec), codec, n)).to(out_dtype)


def _bound(xs, codec: str, out_dtype) -> tuple[torch.Tensor, torch.Tensor]:
    ref = ar.all_reduce_ref(xs)
    abs_sum = torch.stack([x.cpu().double().abs() for x in xs]).sum(0)
    absmax_sum = torch.stack([ar.block_absmax(x.cpu()) for x in xs]).sum(0)
    return ref, ar.error_bound(abs_sum, absmax_sum, ref, codec, out_dtype, len(xs))


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("codec", CODECS)
def test_all_reduce_matches_two_quantizations(codec, world, rng, device):
    xs = _inputs(world, rng, device)
    em = ar.Emulation(world, N_VALUES, device, max_programs=PROGRAMS)
    outs = em.run(xs, codec)
    expect = _two_shot_ref(xs, codec, torch.bfloat16)
    ref, bound = _bound(xs, codec, torch.bfloat16)
    for r, out in enumerate(outs):
        got = out.cpu()
        # Every rank decodes the same bytes, so all ranks agree, and with the codec's format exactly.
        assert torch.equal(got, expect), f"rank {r}: {int((got != expect).sum())} values differ from codecs_ref"
        err = (got.double() - ref).abs()
        assert bool((err <= bound).all()), f"rank {r}: worst |err| / bound {float((err / bound).max()):.3f}"
    assert all(int(s.err.item()) == 0 for s in em.states)


@pytest.mark.parametrize("world", [2, 4])
def test_fp_codec_is_exact_up_to_fp16_rounding_of_the_sum(world, rng, device):
    xs = _inputs(world, rng, device, dtype=torch.float16)
    outs = ar.Emulation(world, N_VALUES, device, max_programs=PROGRAMS).run(xs, "fp")
    acc = torch.zeros(N_VALUES, dtype=torch.float32)
    for x in xs:
        acc += x.cpu().float()  # the kernel's fp32 sum, in rank order
    ref = ar.all_reduce_ref(xs)
    for out in outs:
        assert torch.equal(out.cpu(), acc.half())
        # fp16 inputs of one binade span sum exactly in fp32; the one rounding is to fp16 (half an ulp, 2^-11).
        assert bool(((out.cpu().double() - ref).abs() <= 2.0**-11 * ref.abs() + 2.0**-24).all())


def test_second_call_uses_the_next_epoch(rng, device):
    world = 2
    em = ar.Emulation(world, N_VALUES, device, max_programs=PROGRAMS)
    em.run(_inputs(world, rng, device), "int4")
    xs = _inputs(world, rng, device)
    outs = em.run(xs, "int4")  # stale flags from call 1 equal epoch 1: waits need epoch 2 now
    expect = _two_shot_ref(xs, "int4", torch.bfloat16)
    assert all(torch.equal(o.cpu(), expect) for o in outs)
    for s in em.states:
        assert s.epochs.cpu().tolist() == [2] * PROGRAMS
    for pad in em.pads:  # flag1 and flag2 of every (rank, program) hold the last epoch
        assert pad.cpu().tolist() == [2] * (2 * world * PROGRAMS)


def test_missing_peer_flags_raise_the_error_word_instead_of_hanging(rng, device):
    world = 2
    em = ar.Emulation(world, N_VALUES, device, max_programs=PROGRAMS)
    xs = _inputs(world, rng, device)
    lay = ar.Layout.plan(N_VALUES, world, PROGRAMS)
    ar.scatter(xs[0], 0, em.peers, em.states[0], "fp", lay)  # rank 1 never sends
    ar.reduce(0, em.peers, em.states[0], "fp", lay, max_spin=3)
    assert int(em.states[0].err.item()) == 1


def test_layout_plan():
    lay = ar.Layout.plan(N_VALUES, 4, 1024)
    assert (lay.tiles, lay.seg, lay.programs) == (5, 2, 2)
    assert lay.buffer_bytes("int3") == 4 * 2 * 896
    big = ar.Layout.plan(1 << 29, 2, 1024)  # 1 GiB of bf16
    assert (big.tiles, big.seg, big.programs) == (1 << 18, 1 << 17, 1024)
    with pytest.raises(ValueError, match="numel"):
        ar.Layout.plan(0, 2, 8)


def test_unknown_codec_is_named(rng, device):
    em = ar.Emulation(2, N_VALUES, device, max_programs=PROGRAMS)
    with pytest.raises(ValueError, match="int5"):
        em.run(_inputs(2, rng, device), "int5")


def _gpu_worker(rank: int, init: str, n: int, codecs: tuple[str, ...]) -> None:
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=2, device_id=torch.device("cuda", rank))
    try:
        comm = ar.SymmetricAllReduce(dist.group.WORLD, n, torch.device("cuda", rank), max_programs=64)
        gen = torch.Generator(device="cuda").manual_seed(1234 + rank)
        for codec in codecs:
            x = torch.randn(n, generator=gen, device="cuda").bfloat16()
            out = torch.full_like(x, float("nan"))
            comm(x, codec, out)
            ref = x.float()
            dist.all_reduce(ref)  # NCCL
            abs_sum, absmax = x.double().abs(), ar.block_absmax(x)
            dist.all_reduce(abs_sum)
            dist.all_reduce(absmax)
            bound = ar.error_bound(abs_sum, absmax, ref.double(), codec, torch.bfloat16, 2) + 2.0**-23 * ref.abs()
            err = (out.double() - ref.double()).abs()
            if not bool((err <= bound).all()) or int(comm.state.err.item()):
                raise AssertionError(f"rank {rank} {codec}: worst |err| / bound {float((err / bound).max()):.3f}")
    finally:
        dist.destroy_process_group()


@pytest.mark.gpu
def test_two_gpus_against_nccl(tmp_path):
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    import torch.multiprocessing as mp

    from companion.bench.collective_plan import force_safe_env

    force_safe_env()  # NVLink multicast stays off in the workers too
    assert os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    mp.spawn(_gpu_worker, args=("file://" + str(tmp_path / "rdv"), 3 * TILE_VALUES * 100 + 7, ("fp", "int4", "int3")),
             nprocs=2)
