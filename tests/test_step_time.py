"""Step time: kernels and collectives in order, the overlap switch, and the bucketed cache."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hwmodels.calibration import load_calibration
from hwmodels.interconnect import build_fabric
from hwmodels.spec import load_gpu, load_platform
from simulator.cost.step_cache import StepTimer
from simulator.cost.step_time import time_plan
from workloads.deployment import Deployment, KernelOptions
from workloads.model import load_model
from workloads.step import Batch, PrefillChunk, build_step

GPU = load_gpu("h200")
FABRIC = build_fabric(load_platform("h200-8"), GPU)
CALIB = load_calibration("h200")
LLAMA = Deployment(load_model("llama-3.1-70b"), GPU, tp=8)


def test_step_time_is_kernels_plus_collectives_unless_overlapped():
    batch = Batch(decodes=(4000,) * 32)
    serial = time_plan(build_step(batch, LLAMA), FABRIC, CALIB)
    assert serial.total_s == pytest.approx(serial.kernel_s + serial.collective_s)
    assert serial.collective_s > 0 and serial.kernel_launches > 80 * 5
    overlapped = time_plan(build_step(batch, replace(LLAMA, options=KernelOptions(overlap_collectives=True))),
                           FABRIC, CALIB)
    assert overlapped.total_s == pytest.approx(max(serial.kernel_s, serial.collective_s))
    assert sum(serial.by_family_s.values()) == pytest.approx(serial.kernel_s)


def test_the_cache_hits_on_the_same_bucketed_shape_and_misses_on_a_new_one():
    timer = StepTimer(LLAMA, FABRIC, CALIB, bucket_ratio=1.04)
    first = timer.step_time(Batch(decodes=(1000,) * 16))
    again = timer.step_time(Batch(decodes=(1010,) * 16))  # 1.04^176 = 995: both round there
    other = timer.step_time(Batch(decodes=(1300,) * 16))
    assert (timer.hits, timer.misses) == (1, 2)
    assert first is again and other.total_s > first.total_s
    assert timer.hit_rate == pytest.approx(1 / 3) and timer.miss_wall_s > 0


def test_a_cached_time_equals_the_time_of_its_bucketed_shape():
    timer = StepTimer(LLAMA, FABRIC, CALIB, bucket_ratio=1.04)
    cached = timer.step_time(Batch(decodes=(1000,) * 16)).total_s
    assert timer.key(Batch(decodes=(1000,) * 16))[1] == (16, round(1.04**176))
    direct = time_plan(build_step(Batch(decodes=(round(1.04**176),) * 16), LLAMA), FABRIC, CALIB).total_s
    assert cached == pytest.approx(direct)


def test_more_context_never_makes_a_step_faster():
    timer = StepTimer(LLAMA, FABRIC, CALIB)
    times = [timer.step_time_s(Batch(decodes=(ctx,) * 32)) for ctx in (1000, 4000, 16000, 64000)]
    assert times == sorted(times)


MIXED = Batch(prefills=(PrefillChunk(700, 3000), PrefillChunk(1200, 0)), decodes=(5000, 900, 33000))
SPEC = Batch(prefills=(PrefillChunk(64, 100),), verifies=(4000, 12000), spec_depth=3)


@pytest.mark.parametrize("model,gpu,tp,dcp", [
    ("llama-3.1-70b", "h200", 8, 1), ("llama-3.1-70b", "h200", 8, 4), ("deepseek-v3", "h200", 8, 8),
    ("kimi-k3", "mi355x", 8, 1), ("kimi-k3", "mi355x", 8, 8), ("qwen3-235b-a22b", "b200", 4, 1),
])
@pytest.mark.parametrize("batch", [MIXED, SPEC], ids=["mixed", "spec"])
def test_layer_parts_sum_to_the_full_plan_for_every_mixer(model, gpu, tp, dcp, batch):
    # the part split (token-count parts, prefill and decode mixer parts) must lose and double nothing
    from simulator.cost.step_time import time_batch

    d = Deployment(load_model(model), load_gpu(gpu), tp=tp, dcp=dcp)
    platform = {"h200": "h200-8", "mi355x": "mi355x-8", "b200": "b200-8"}[gpu]
    fabric, calib = build_fabric(load_platform(platform), d.gpu), load_calibration(gpu)
    full = time_plan(build_step(batch, d), fabric, calib)
    parts = time_batch(batch, d, fabric, calib)
    assert parts.kernel_launches == full.kernel_launches
    assert parts.by_family_s == pytest.approx(full.by_family_s, rel=1e-12)
    assert parts.by_collective_s == pytest.approx(full.by_collective_s, rel=1e-12)
    assert parts.total_s == pytest.approx(full.total_s, rel=1e-12)


def test_grouping_layers_by_signature_gives_the_full_plan_time():
    from simulator.cost.step_time import time_batch

    k3 = Deployment(load_model("kimi-k3"), load_gpu("mi355x"), tp=8)
    fabric, calib = build_fabric(load_platform("mi355x-8"), k3.gpu), load_calibration("mi355x")
    batch = Batch(decodes=(20000,) * 48, verifies=(9000,) * 3, spec_depth=2)
    full = time_plan(build_step(batch, k3), fabric, calib)
    grouped = time_batch(batch, k3, fabric, calib)
    assert grouped.total_s == pytest.approx(full.total_s)
    assert grouped.kernel_launches == full.kernel_launches
    assert grouped.by_family_s == pytest.approx(full.by_family_s)


def test_the_serving_loops_total_only_path_equals_the_full_step_time():
    k3 = Deployment(load_model("kimi-k3"), load_gpu("mi355x"), tp=8)
    fabric, calib = build_fabric(load_platform("mi355x-8"), k3.gpu), load_calibration("mi355x")
    fast, full = StepTimer(k3, fabric, calib), StepTimer(k3, fabric, calib)
    for batch in (MIXED, SPEC, Batch(verifies=(30000,) * 20, spec_depth=2), Batch(decodes=(700,) * 64)):
        key = fast.key(batch)
        assert fast.cycle_time_s_of(key) == pytest.approx(full.step_time(batch).total_s, rel=1e-12)
    spec = Batch(verifies=(30000,) * 20, spec_depth=2)
    drafts = full.step_time(Batch(decodes=(30000,) * 20)).total_s
    assert fast.cycle_time_s(spec, 0.5) == pytest.approx(full.step_time(spec).total_s + 0.5 * drafts, rel=1e-12)


def test_token_count_parts_build_no_decode_kernels_the_options_forbid():
    # 16 MLA KV splits need at least 16 tokens of context; the token-count parts must not invent tiny decodes
    k3 = Deployment(load_model("kimi-k3"), load_gpu("mi355x"), tp=8, options=KernelOptions(mla_num_splits=16))
    timer = StepTimer(k3, build_fabric(load_platform("mi355x-8"), k3.gpu), load_calibration("mi355x"))
    assert timer.cycle_time_s(Batch(prefills=(PrefillChunk(900, 0),), verifies=(5000,) * 3, spec_depth=2)) > 0


def test_a_step_assembled_from_memoized_parts_is_the_same_float_as_timing_it():
    # the serving loop's miss path: a new shape whose parts were all seen before builds no batch
    k3 = Deployment(load_model("kimi-k3"), load_gpu("mi355x"), tp=8)
    fabric, calib = build_fabric(load_platform("mi355x-8"), k3.gpu), load_calibration("mi355x")
    timer = StepTimer(k3, fabric, calib)
    seen = [((1, 2000, 30000), (0, 0), (20, 9000), 2), ((1, 2000, 500), (0, 0), (20, 4000), 2)]
    for key in seen:
        timer.cycle_time_s_of(key)
    mixed = ((1, 2000, 30000), (0, 0), (20, 4000), 2)  # the first key's prefill with the second's verifies
    assembled = timer._from_parts(mixed)
    assert assembled is not None
    assert assembled == StepTimer(k3, fabric, calib).cycle_time_s_of(mixed)  # timed from scratch: same float
    assert timer._from_parts(((3, 5000, 100000), (0, 0), (7, 77777), 2)) is None  # unseen parts
