"""Kernel times on real specs: monotone in every size, never below the floor, the Kimi K3 study's cases."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hwmodels.calibration import load_calibration
from hwmodels.roofline import LaunchMode, kernel_time, launches_time_s, roofline_floor_s
from hwmodels.spec import load_gpu, spec_names
from workloads.kernels import (
    AttentionPrefill,
    Elementwise,
    Gemm,
    KdaDecode,
    KdaPrefill,
    KdaVerify,
    MlaDecode,
    MoeGemm,
)

GPUS = spec_names("gpus")
SIZES = st.integers(1, 20_000)


def _time(kernel, gpu_name: str, mode: LaunchMode = LaunchMode.EAGER, calib=None) -> float:
    gpu = load_gpu(gpu_name)
    return launches_time_s(kernel.launches(), gpu, calib or load_calibration(gpu_name), mode)


def _assert_monotone(kernel, field: str, grow: int, gpu_name: str, slack: float = 1e-12) -> None:
    bigger = replace(kernel, **{field: getattr(kernel, field) + grow})
    for mode in LaunchMode:
        assert _time(bigger, gpu_name, mode) >= _time(kernel, gpu_name, mode) * (1 - slack), (field, kernel)


@settings(max_examples=150, deadline=None)
@given(m=SIZES, n=SIZES, k=SIZES, grow=st.integers(1, 5000), field=st.sampled_from(["m", "n", "k"]),
       gpu=st.sampled_from(GPUS), dtype=st.sampled_from(["bf16", "fp8"]))
def test_gemm_time_never_decreases_with_m_n_or_k(m, n, k, grow, field, gpu, dtype):
    _assert_monotone(Gemm(m=m, n=n, k=k, dtype=dtype), field, grow, gpu)


@settings(max_examples=100, deadline=None)
@given(t=st.integers(0, 600), n=st.integers(1, 8192), k=st.integers(1, 8192), grow=st.integers(1, 300),
       field=st.sampled_from(["tokens_per_expert", "n", "k", "experts"]), gpu=st.sampled_from(GPUS))
def test_moe_gemm_time_never_decreases_with_size(t, n, k, grow, field, gpu):
    _assert_monotone(MoeGemm(experts=8, tokens_per_expert=t, n=n, k=k), field, grow, gpu)


@settings(max_examples=100, deadline=None)
@given(seqs=st.integers(1, 64), q_len=st.integers(1, 8192), cached=st.integers(0, 100_000),
       grow=st.integers(1, 4096), field=st.sampled_from(["seqs", "q_len", "cached"]), gpu=st.sampled_from(GPUS))
def test_attention_prefill_time_never_decreases_with_batch_or_context(seqs, q_len, cached, grow, field, gpu):
    # Strictly, except where a longer query stops fitting one packed GQA block (q_len x 8 > 128): the kernel
    # then runs 8x the workgroups, each on fewer rows, and on a tiny grid that spread can win by up to 1 %.
    kernel = AttentionPrefill(seqs=seqs, q_len=q_len, heads=16, kv_heads=2, head_dim=128, cached=cached)
    unpacks = field == "q_len" and q_len * 8 <= kernel.block_m < (q_len + grow) * 8
    _assert_monotone(kernel, field, grow, gpu, slack=0.01 if unpacks else 1e-12)


@settings(max_examples=100, deadline=None)
@given(seqs=st.integers(1, 256), context=st.integers(16, 300_000), grow=st.integers(1, 50_000),
       field=st.sampled_from(["seqs", "context"]), splits=st.sampled_from([1, 4, 16]), gpu=st.sampled_from(GPUS))
def test_mla_decode_time_never_decreases_with_batch_or_context(seqs, context, grow, field, splits, gpu):
    # While the splits keep their rows. A longer history can fill fewer splits of longer rows (769 rows fill 13
    # splits of 64; 1025 fill 9 of 128), as the split-KV kernels cut it, and the merge visits only the splits
    # that hold rows, one dependent load each: there the time may fall (10 % at 769 -> 1025 on a B200).
    kernel = MlaDecode(seqs=seqs, context=context, heads=12, num_splits=splits, pad_heads_to=16)
    if field == "context":
        assume(replace(kernel, context=context + grow).split_rows == kernel.split_rows)
    _assert_monotone(kernel, field, grow, gpu)


# The intra-chunk kernel asks 80 KiB of LDS (Kimi K3 study: 79.5 KiB on CDNA4): more than CDNA3's 64 KiB.
KDA_GPUS = [g for g in GPUS if load_gpu(g).lds_max_per_workgroup_bytes >= 80 * 1024]


@settings(max_examples=60, deadline=None)
@given(seqs=st.integers(1, 8), tokens=st.integers(1, 20_000), grow=st.integers(1, 4096),
       grouped=st.booleans(), field=st.sampled_from(["seqs", "tokens"]), gpu=st.sampled_from(KDA_GPUS))
def test_kda_prefill_time_never_decreases_with_batch_or_tokens(seqs, tokens, grow, grouped, field, gpu):
    # Within 1e-4: a longer last chunk moves a few bytes of a chunk-summary workgroup from its reads to its
    # writes, which leave at the CU's share instead of waiting on the memory curve (0.1 ns at 385 -> 386 tokens)
    _assert_monotone(KdaPrefill(seqs=seqs, tokens=tokens, heads=12, grouped_scan=grouped), field, grow, gpu,
                     slack=1e-4)


@settings(max_examples=60, deadline=None)
@given(seqs=st.integers(1, 512), grow=st.integers(1, 512), gpu=st.sampled_from(GPUS))
def test_decode_and_elementwise_time_never_decrease_with_batch(seqs, grow, gpu):
    _assert_monotone(KdaDecode(seqs=seqs, heads=12), "seqs", grow, gpu)
    _assert_monotone(KdaVerify(seqs=seqs, positions=4, heads=12), "seqs", grow, gpu)
    _assert_monotone(Elementwise(elements=seqs * 7168), "elements", grow * 7168, gpu)


@pytest.mark.parametrize("gpu_name", GPUS)
def test_no_kernel_is_predicted_below_its_floor(gpu_name):
    gpu, calib = load_gpu(gpu_name), load_calibration(gpu_name)
    kernels = [Gemm(m=4096, n=4096, k=4096), Gemm(m=1, n=7168, k=7168), MoeGemm(experts=112, tokens_per_expert=3,
               n=3072, k=3584), AttentionPrefill(seqs=2, q_len=2048, heads=12, kv_heads=12, head_dim=128),
               MlaDecode(seqs=64, context=32768, heads=12, num_splits=16, pad_heads_to=16),
               KdaDecode(seqs=64, heads=12),
               KdaVerify(seqs=1, positions=4, heads=12, tile_cols=4)]
    if gpu_name in KDA_GPUS:
        kernels.append(KdaPrefill(seqs=1, tokens=8192, heads=12))
    for kernel in kernels:
        for work in kernel.launches():
            assert kernel_time(work, gpu, calib).time_s >= roofline_floor_s(work, gpu)


WIDE_VERIFY = KdaVerify(seqs=1, positions=4, heads=12, head_dim=128, tile_cols=32)


def test_kda_verify_narrow_tiles_fill_the_mi355x():
    # Kimi K3 study, mechanism 7: 12 heads x 128 columns; 32-column tiles give 48 workgroups on 256 CUs.
    narrow = replace(WIDE_VERIFY, tile_cols=4)
    assert (WIDE_VERIFY.work().workgroups, narrow.work().workgroups) == (48, 384)
    # the roofline's partial-grid bandwidth: more CUs streaming beats the extra q/k re-reads
    gpu, calib = load_gpu("mi355x"), load_calibration("mi355x", cost_model="roofline")
    wide_t, narrow_t = (kernel_time(k.launches()[0], gpu, calib) for k in (WIDE_VERIFY, narrow))
    assert narrow_t.memory_s < wide_t.memory_s / 1.5
    for mode in LaunchMode:
        assert _time(narrow, "mi355x", mode, calib) < _time(WIDE_VERIFY, "mi355x", mode, calib)


def test_kda_verify_narrow_tiles_run_faster_on_the_mi355x_in_the_cycle_model():
    """The study's case on the MI355X, timed from the compiled gfx950 code: 384 narrow-tile workgroups beat 48 wide
    ones (the analytic program, without the compiled code, still has them 2 % slower). The narrow tiles' 16-byte state
    rows would cost whole 64-byte sectors, partly written, at HBM; the launch's 3 MiB of stores fit in the 256 MiB
    Infinity Cache in front of HBM, which merges the neighbouring tiles' rows (`Program.sector_factor`). Not measured
    here on an MI355X: the sign is the study's, the margin (about 8 %) the model's."""
    from compiled.launch_time import ProgramSource, launch_times, timed_kernel

    narrow = replace(WIDE_VERIFY, tile_cols=4)
    gpu, calib = load_gpu("mi355x"), load_calibration("mi355x")
    if timed_kernel(narrow, gpu)[1] is not ProgramSource.COMPILED:
        pytest.skip("needs the compiled gfx950 code (Triton installed)")

    def product(kernel, mode):  # the one prediction every command makes
        return sum(t.time_s for t in launch_times(kernel, gpu, calib, mode))

    for mode in LaunchMode:
        assert product(narrow, mode) < product(WIDE_VERIFY, mode)
    # the H200 merges these 3 MiB of stores in its L2 and passes the 16-byte pieces at its measured rate; a GPU
    # without that rate measured (the B200) pays partial sectors at HBM
    (work,) = narrow.launches()
    h200, b200 = load_gpu("h200"), load_gpu("b200")
    assert work.program.sector_factor(load_gpu("mi355x")) == work.program.sector_factor(h200) == 1.0
    assert work.program.sector_factor(b200) > 1.0
    assert work.program.short_rows_s(h200, work.workgroups) > 0 == work.program.short_rows_s(b200, work.workgroups)
    (big,) = replace(narrow, seqs=512).launches()  # 3.3 GB of states: more than the cache holds
    assert big.program.sector_factor(load_gpu("mi355x")) > 1.0


def test_a_kernel_that_does_not_fit_names_the_resource():
    with pytest.raises(ValueError, match=r"lds_bytes must be in 0\.\.65536 on mi300x"):
        _time(KdaPrefill(seqs=1, tokens=64, heads=1), "mi300x")


def test_kda_grouped_scan_exposes_parallel_work_that_the_plain_scan_lacks():
    # Kimi K3 study, mechanism 6: one sequence, 12 heads per GPU: the plain scan has 12 x 2 workgroups
    # on 256 CUs, the grouped replay one per chunk, head and value tile. (Whether that pays depends on the
    # summaries' traffic, which only measuring the kernels settles.)
    plain = KdaPrefill(seqs=1, tokens=16384, heads=12)
    grouped = replace(plain, grouped_scan=True)
    assert len(grouped.launches()) == 4 and len(plain.launches()) == 2
    assert plain.launches()[1].workgroups == 24
    assert grouped.launches()[3].workgroups == 12 * 256 * 2
    gpu, calib = load_gpu("mi355x"), load_calibration("mi355x")
    plain_scan, replay = kernel_time(plain.launches()[1], gpu, calib), kernel_time(grouped.launches()[3], gpu, calib)
    assert replay.compute_s < plain_scan.compute_s / 5


def test_a_fused_moes_experts_are_phases_whose_bytes_are_the_launchs():
    """Each expert's phase: its weight once from HBM plus its rows and output; its weight read from L2 by each row
    tile and its rows by each column tile. The phases' HBM bytes add up to the launch's."""
    rows = (300, 40, 40, 7, 0, 1)
    kernel = MoeGemm(experts=6, tokens_per_expert=300, n=1024, k=512, tile_m=32, tile_n=128, rows_by_expert=rows)
    (work,) = kernel.launches()
    assert sum(hbm for hbm, _ in work.l2_phases) == pytest.approx(work.bytes)
    weight = 2 * 1024 * 512
    by_rows = {300: (weight + 2 * 300 * (512 + 1024), 10 * weight + 8 * 2 * 300 * 512),
               40: (2 * (weight + 2 * 40 * (512 + 1024)), 2 * (2 * weight + 8 * 2 * 40 * 512))}
    phases = dict(zip(sorted({r for r in rows if r}), work.l2_phases, strict=True))
    for r, expected in by_rows.items():
        assert phases[r] == pytest.approx(expected)
    assert work.program.reuse == pytest.approx((10 + 2 + 2 + 1 + 1) / 5)  # row tiles over active experts, unrounded


@pytest.mark.parametrize("gpu_name", ["h200", "mi355x"])
def test_a_hot_expert_read_from_l2_leaves_hbm_idle(gpu_name):
    """One expert's weight read by many row tiles runs at L2's rate while HBM waits: the same routed rows and the
    same HBM bytes take longer skewed onto one expert than spread over the experts, and the launch is never faster
    than its phases at their rates."""
    gpu, calib = load_gpu(gpu_name), load_calibration(gpu_name)
    balanced = MoeGemm(experts=64, tokens_per_expert=64, n=4096, k=2048, tile_m=64, tile_n=128)
    skewed_rows = (64 * 64 - 63 * 8,) + (8,) * 63
    skewed = replace(balanced, tokens_per_expert=max(skewed_rows), rows_by_expert=skewed_rows)
    (b,), (s,) = balanced.launches(), skewed.launches()
    assert b.bytes == s.bytes
    bandwidth = gpu.hbm_bandwidth_bytes_per_s * calib.memory_efficiency_for(s.family)
    phased = s.phased_memory_s(bandwidth, gpu.l2_bandwidth_bytes_per_s)
    assert phased > s.bytes / bandwidth  # the hot expert's phase is L2's
    assert _time(skewed, gpu_name, LaunchMode.GRAPH) >= phased
    if gpu_name == "h200":  # 9.2 TB/s of L2 against 4.8 of HBM: 57 row tiles of one weight bind L2
        assert _time(skewed, gpu_name, LaunchMode.GRAPH) > _time(balanced, gpu_name, LaunchMode.GRAPH)


def test_mla_decodes_head_blocks_read_one_latent_from_hbm_and_the_rest_from_l2():
    """Every head reads the same latent rows, so a split's second head block finds its tiles in L2 (`reuse`): 32
    heads in two blocks of 16 stream the cache at about the time of 16 heads, where reading it twice from HBM
    would take half again as long (H100, the split grid's 52 x 3586 shape; measured there 127.5 us at 32 heads)."""
    from hwmodels.dtypes import Dtype
    from workloads.attention_kernels import MlaDecode

    gpu, calib = load_gpu("h100"), load_calibration("h100")

    def main_launch(heads: int):
        return MlaDecode(seqs=52, context=3586, heads=heads, num_splits=4, kv_dtype=Dtype.BF16,
                         heads_per_workgroup=16, threads=128, block_n=32).launches()[0]

    one, two = main_launch(16), main_launch(32)
    assert (one.program.reuse, two.program.reuse) == (1, 2)
    assert two.read_bytes < 1.01 * one.read_bytes  # the latent counted once, whatever the head blocks
    t_one, t_two = (kernel_time(w, gpu, calib, LaunchMode.GRAPH).time_s for w in (one, two))
    twice_from_hbm = kernel_time(replace(two, program=replace(two.program, reuse=1.0)), gpu, calib,
                                 LaunchMode.GRAPH).time_s
    assert t_two < 1.15 * t_one
    assert twice_from_hbm > 1.5 * t_one


def test_an_in_place_update_reads_its_input_from_l2_where_it_fits():
    """`x.add_(1)` launched back to back: the launch before wrote x, so a tensor that fits in L2 is read at L2's
    latency and rate, one that does not is read from HBM as any input is."""
    small, big = 256 * 1024, 256 * 2**20  # 1 MiB and 1 GiB of fp32
    for elements, faster in ((small, True), (big, False)):
        cold, warm = (_time(Elementwise(elements=elements, inputs=1, dtype="fp32", input_in_l2=flag), "h200",
                            LaunchMode.GRAPH) for flag in (False, True))
        assert (warm < cold) if faster else warm == pytest.approx(cold, rel=0.05)
    with pytest.raises(ValueError, match="input_in_l2"):
        Elementwise(elements=small, input_in_l2="yes")
