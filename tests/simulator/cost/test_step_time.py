"""The cost layer: a step's plan in order, its memoized parts (the fast twin of the plan) and the cycle cost."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hwmodels.calibration import load_calibration
from hwmodels.interconnect import build_fabric
from hwmodels.roofline import LaunchMode
from hwmodels.spec import load_gpu, load_platform
from simulator.cost.cycle import DRAFT_LAYERS, CycleCost, CycleShape, HostCopies, bucket
from simulator.cost.step_parts import StepParts, signatures
from simulator.cost.step_time import step_total_s, time_plan
from workloads.deployment import Deployment, KernelOptions
from workloads.layers import build_step
from workloads.model import load_model
from workloads.step import Batch, Depends, PrefillChunk, StepItem, StepPlan

GPU = load_gpu("h200")
FABRIC = build_fabric(load_platform("h200-8"), GPU)
CALIB = load_calibration("h200")
LLAMA = Deployment(load_model("llama-3.1-70b"), GPU, tp=8)
K3 = Deployment(load_model("kimi-k3"), load_gpu("mi355x"), tp=8)
K3_FABRIC, K3_CALIB = build_fabric(load_platform("mi355x-8"), K3.gpu), load_calibration("mi355x")


def full_s(batch: Batch, d: Deployment = K3) -> float:
    return time_plan(build_step(batch, d), K3_FABRIC, K3_CALIB).total_s


def test_step_time_is_kernels_plus_collectives_unless_overlapped():
    batch = Batch(decodes=(4000,) * 32)
    serial = time_plan(build_step(batch, LLAMA), FABRIC, CALIB)
    assert serial.total_s == pytest.approx(serial.kernel_s + serial.collective_s)
    assert serial.collective_s > 0 and serial.kernel_launches > 80 * 5
    overlapped = time_plan(build_step(batch, replace(LLAMA, options=KernelOptions(overlap_collectives=True))),
                           FABRIC, CALIB)
    assert overlapped.total_s == pytest.approx(max(serial.kernel_s, serial.collective_s))
    assert sum(serial.by_family_s.values()) == pytest.approx(serial.kernel_s)
    assert step_total_s(2.0, 3.0, True) == 3.0 and step_total_s(2.0, 3.0, False) == 5.0


def test_the_cycle_memo_hits_on_the_same_bucketed_shape_and_misses_on_a_new_one():
    cost = CycleCost(LLAMA, FABRIC, CALIB, bucket_ratio=1.04)
    first = cost.cycle_s(CycleShape(decodes=16, decode_context=16 * 1000))
    again = cost.cycle_s(CycleShape(decodes=16, decode_context=16 * 1010))  # 1.04^176 = 995: both round there
    other = cost.cycle_s(CycleShape(decodes=16, decode_context=16 * 1300))
    assert (cost.hits, cost.misses) == (1, 2)
    assert first == again and other > first
    assert cost.hit_rate == pytest.approx(1 / 3) and cost.miss_wall_s > 0


def test_a_cycle_time_equals_the_full_plan_of_its_bucketed_shape():
    cost = CycleCost(LLAMA, FABRIC, CALIB, bucket_ratio=1.04)
    cycled = cost.cycle_s(CycleShape(decodes=16, decode_context=16 * 1000))
    assert bucket(1000, 1.04) == round(1.04**176)
    direct = time_plan(build_step(Batch(decodes=(round(1.04**176),) * 16), LLAMA), FABRIC, CALIB).total_s
    assert cycled == pytest.approx(direct, rel=1e-12)


def test_more_context_never_makes_a_cycle_slower_to_compute_less():
    cost = CycleCost(LLAMA, FABRIC, CALIB)
    times = [cost.cycle_s(CycleShape(decodes=32, decode_context=32 * ctx)) for ctx in (1000, 4000, 16000, 64000)]
    assert times == sorted(times) and times[0] < times[-1]


MIXED = Batch(prefills=(PrefillChunk(700, 3000), PrefillChunk(1200, 0)), decodes=(5000, 900, 33000))
SPEC = Batch(prefills=(PrefillChunk(64, 100),), verifies=(4000, 12000), drafts=3)


@pytest.mark.parametrize("model,gpu,tp,dcp", [
    ("llama-3.1-70b", "h200", 8, 1), ("llama-3.1-70b", "h200", 8, 4), ("deepseek-v3", "h200", 8, 8),
    ("kimi-k3", "mi355x", 8, 1), ("kimi-k3", "mi355x", 8, 8), ("qwen3-235b-a22b", "b200", 4, 1),
    ("gpt-oss-120b", "h200", 8, 1), ("gpt-oss-120b", "h200", 8, 4),  # sliding-window and full layers
])
@pytest.mark.parametrize("batch", [MIXED, SPEC], ids=["mixed", "spec"])
def test_step_parts_sum_to_the_full_plan_for_every_mixer(model, gpu, tp, dcp, batch):
    # the split by tags (token parts, prefill and decode parts of each signature) must lose and double nothing
    d = Deployment(load_model(model), load_gpu(gpu), tp=tp, dcp=dcp)
    platform = {"h200": "h200-8", "mi355x": "mi355x-8", "b200": "b200-8"}[gpu]
    fabric, calib = build_fabric(load_platform(platform), d.gpu), load_calibration(gpu)
    full = time_plan(build_step(batch, d), fabric, calib)
    parts = StepParts(d, fabric, calib)
    timed = parts.step_time(batch)
    assert timed.kernel_launches == full.kernel_launches
    assert timed.by_family_s == pytest.approx(full.by_family_s, rel=1e-12)
    assert timed.by_collective_s == pytest.approx(full.by_collective_s, rel=1e-12)
    assert timed.total_s == pytest.approx(full.total_s, rel=1e-12)
    chunks = tuple((c.tokens, c.cached) for c in batch.prefills)
    total = parts.total_s(chunks, batch.decodes, batch.verifies, batch.drafts, batch.tokens)
    assert total == pytest.approx(full.total_s, rel=1e-12)


def test_parts_of_a_mixer_that_reads_no_history_are_shared_across_lengths():
    # KDA's recurrence carries a fixed-size state: its decode part is keyed by counts, MLA's by contexts
    by_mixer = {s.key[1]: s for s in signatures(K3) if s.key[0] == "mixer"}
    assert not by_mixer["kda"].decode_history and not by_mixer["kda"].prefill_history
    assert by_mixer["mla"].decode_history and by_mixer["mla"].prefill_history
    parts = StepParts(K3, K3_FABRIC, K3_CALIB)
    for context in (1000, 90000):  # both exact against the full plan, whatever is shared
        batch = Batch(decodes=(context,) * 8)
        assert parts.total_s((), batch.decodes, (), 0, batch.tokens) == pytest.approx(full_s(batch), rel=1e-12)


def test_sliding_window_layers_are_a_signature_of_their_own():
    gpt_oss = Deployment(load_model("gpt-oss-120b"), GPU, tp=8)
    mixers = {s.key: s.layers for s in signatures(gpt_oss) if s.key[0] == "mixer"}
    assert mixers == {("mixer", "gqa", 128): 18, ("mixer", "gqa", 0): 18}


def test_every_step_item_carries_a_tag_and_only_the_lm_head_reads_sampled_positions():
    plan = build_step(SPEC, K3)
    assert all(isinstance(item.depends, Depends) for item in plan.items)
    sampled = {item.name for item in plan.items if item.depends is Depends.SAMPLED}
    assert sampled == {"lm_head", "logits", "sampling"}


def test_a_cycle_adds_the_drafter_passes_and_the_host_copies():
    host = HostCopies(bytes_per_block=1e6, link_bytes_per_s=50e9, overlap=False)
    cost = CycleCost(K3, K3_FABRIC, K3_CALIB, host=host, drafts=2)
    verify = cost.cycle_s(CycleShape(decodes=20, decode_context=20 * 30000))
    step = full_s(Batch(verifies=(bucket(30000, 1.04),) * 20, drafts=2))
    drafter = full_s(Batch(decodes=(bucket(30000, 1.04),) * 20))
    assert verify == pytest.approx(step + 2 * DRAFT_LAYERS / K3.model.layers * drafter, rel=1e-12)
    copied = cost.cycle_s(CycleShape(decodes=20, decode_context=20 * 30000, host_blocks=100))
    assert copied == pytest.approx(verify + 100 * 1e6 / 50e9)
    overlapped = CycleCost(K3, K3_FABRIC, K3_CALIB, host=replace(host, overlap=True))
    long_copy = CycleShape(decodes=1, decode_context=100, host_blocks=10**6)
    assert overlapped.cycle_s(long_copy) == pytest.approx(1e6 * 1e6 / 50e9)


def test_token_parts_build_no_decode_kernels_the_options_forbid():
    # 16 MLA KV splits need at least 16 tokens of context; the token-count parts must not invent tiny decodes
    k3 = replace(K3, options=KernelOptions(mla_num_splits=16))
    cost = CycleCost(k3, K3_FABRIC, K3_CALIB, drafts=2)
    assert cost.cycle_s(CycleShape(prefills=1, prefill_tokens=900, decodes=3, decode_context=15000)) > 0
    # and a decode shorter than the split count runs with fewer partitions instead of failing mid-run
    assert cost.cycle_s(CycleShape(decodes=4, decode_context=4 * 3)) > 0


def test_a_cycle_assembled_from_memoized_parts_is_the_same_float_as_timing_it_fresh():
    # a new shape whose parts were all seen before builds no batch; the sum must not depend on the memo's history
    warm = CycleCost(K3, K3_FABRIC, K3_CALIB, drafts=2)
    for shape in (CycleShape(1, 2000, 30000, decodes=20, decode_context=20 * 9000),
                  CycleShape(1, 2000, 500, decodes=20, decode_context=20 * 4000)):
        warm.cycle_s(shape)
    mixed = CycleShape(1, 2000, 30000, decodes=20, decode_context=20 * 4000)
    parts_before = len(warm.parts._parts)
    assembled = warm.cycle_s(mixed)
    assert len(warm.parts._parts) == parts_before  # every part was memoized already
    assert assembled == CycleCost(K3, K3_FABRIC, K3_CALIB, drafts=2).cycle_s(mixed)


UNEVEN = Batch(prefills=(PrefillChunk(300, 40000),), decodes=(700, 700, 52000), verifies=(9000, 9000, 9000, 31000),
               drafts=2)


@pytest.mark.parametrize("model,gpu,tp,dcp", [
    ("llama-3.1-70b", "h200", 8, 4), ("deepseek-v3", "h200", 8, 8), ("deepseek-v3", "mi355x", 8, 1),
    ("kimi-k3", "mi355x", 8, 1), ("gpt-oss-120b", "h200", 8, 1),
])
@pytest.mark.parametrize("batch", [MIXED, SPEC, UNEVEN], ids=["mixed", "spec", "uneven"])
def test_a_mixers_sequence_items_are_its_items_without_the_token_ones(model, gpu, tp, dcp, batch):
    # sequence parts build only these; they must be exactly the items the full layer has for the sequences
    from workloads.layers import mixer_items, mixer_sequence_items

    d = Deployment(load_model(model), load_gpu(gpu), tp=tp, dcp=dcp)
    for layer in {s.first_layer for s in signatures(d) if s.key[0] == "mixer"}:
        full = [i for i in mixer_items(layer, batch, d) if i.depends not in (Depends.TOKENS, Depends.SAMPLED)]
        assert full and list(mixer_sequence_items(layer, batch, d)) == full


def test_graph_and_eager_timings_share_items_and_busy_times_and_each_equals_its_own_fresh_timing():
    from simulator.cost.launch_policy import LaunchPolicy

    policy = LaunchPolicy(graph_tokens=64, graph_decodes=64, eager_launch_host_s=29e-6)  # prefills run eagerly
    shapes = [CycleShape(decodes=20, decode_context=20 * 9000, decode_context_max=40000),
              CycleShape(1, 2000, 30000, decodes=20, decode_context=20 * 9000, decode_context_max=40000),
              CycleShape(1, 2000, 30000)]
    shared = CycleCost(K3, K3_FABRIC, K3_CALIB, drafts=2, launches=policy)
    times = [shared.cycle_s(s) for s in shapes]
    assert shared._eager_parts._built is shared.parts._built
    assert shared._eager_parts._timed.busy is shared.parts._timed.busy
    assert shared._eager_parts._timed.launch_busy is shared.parts._timed.launch_busy
    # the same shapes, each timed by a cost that has seen nothing else, give the same floats
    assert times == [CycleCost(K3, K3_FABRIC, K3_CALIB, drafts=2, launches=policy).cycle_s(s) for s in shapes]
    assert times[1] > times[0]  # the mixed step runs eagerly, at the engine's host cost per launch


def test_parts_share_only_with_a_timing_that_differs_in_how_kernels_launch():
    graph = StepParts(K3, K3_FABRIC, K3_CALIB)
    with pytest.raises(ValueError, match="launch"):
        StepParts(replace(K3, options=KernelOptions(mla_num_splits=4)), K3_FABRIC, K3_CALIB, launched_apart=graph)
    eager = replace(K3, options=replace(K3.options, launch=LaunchMode.EAGER))
    StepParts(eager, K3_FABRIC, replace(K3_CALIB, launch_eager_s=29e-6), launched_apart=graph)


def test_launches_of_equal_work_are_timed_once_at_kernel_busys_value():
    from hwmodels.roofline import kernel_busy
    from simulator.cost.step_time import TimedItems, timed_items
    from simulator.cost.workgroup_des import dispatch_s
    from workloads.attention_kernels import MlaDecode

    # two histories in the same number of whole splits: different kernels, the same split-KV merge launch
    kernels = [MlaDecode(seqs=8, context=c, heads=16, num_splits=4) for c in (30000, 30100)]
    assert kernels[0] != kernels[1] and kernels[0].launches()[-1] == kernels[1].launches()[-1]
    timed = TimedItems()
    items = tuple(StepItem(1, "mla.decode", Depends.DECODE_HISTORY, kernel=k) for k in kernels)
    launched = [times for _, times in timed_items(StepPlan(K3, Batch(decodes=(1,)), items), K3_FABRIC, K3_CALIB,
                                                 timed=timed)]
    assert len(timed.launch_busy) == 3  # two split launches, one merge
    for kernel in kernels:
        assert [busy for _, busy, _ in timed.busy[kernel]] == [
            kernel_busy(w, K3.gpu, K3_CALIB, dispatch_s).time_s for w in kernel.launches()]
    assert launched[0][-1] == launched[1][-1]

