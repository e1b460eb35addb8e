"""Every catalog model runs on every GPU where its weights fit: a decode step and a prefill step, timed
through the path `infersim step` takes, with every launch's LDS within the GPU's limit."""

from __future__ import annotations

import math

import pytest

from hwmodels.spec import load_gpu, load_platform, spec_names
from infersim.workload_queries import step_query
from workloads.deployment import Deployment
from workloads.layers import build_step
from workloads.memory import plan_memory
from workloads.model import load_model, model_names
from workloads.step import Batch, PrefillChunk

DECODE, PREFILL = "16x4096", "1x2048"
# (model, GPU) pairs that fit at no TP a platform offers: at TP8 the weights, the step workspace and 64
# sequences' state exceed 90% of each GPU's memory as the runtime reports it (workloads/memory.py). Kimi K2's FP8
# weights at TP8 fit in 90 % of the 150.1 GB CUDA reports on an H200, so it runs there, with little cache.
_NO_ROOM = "weights exceed 90% of HBM at TP8"
EXPECTED_SKIPS = {
    ("deepseek-r1", "h100"): _NO_ROOM,
    ("deepseek-v3", "h100"): _NO_ROOM,
    ("kimi-k2", "h100"): _NO_ROOM,
    ("kimi-k3", "b200"): _NO_ROOM,
    ("kimi-k3", "h100"): _NO_ROOM,
    ("kimi-k3", "h200"): _NO_ROOM,
    ("kimi-k3", "mi300x"): _NO_ROOM,
}

# (model, GPU) pairs whose weights fit but one of whose prefill kernels cannot launch: Kimi K3's KDA chunked-prefill
# kernels hold 80 KiB of LDS a workgroup (workloads/kda_kernels.py, Kimi K3 study mechanism 6) and CDNA3 gives a
# workgroup 64 KiB (MI300X never gets this far: the weights do not fit). Decode steps run.
PREFILL_KERNEL_LIMITS = {
    ("kimi-k3", "mi325x"): r"lds_bytes must be in 0\.\.65536 on mi325x, got 81920",
}


def _tp_options(gpu: str) -> list[int]:
    """Powers of two up to the largest platform of this GPU."""
    most = max(load_platform(p).gpus for p in spec_names("platforms") if load_platform(p).gpu == gpu)
    return [2**i for i in range(int(math.log2(most)) + 1)]


def _platform(gpu: str, tp: int) -> str:
    """The smallest platform of this GPU with tp GPUs."""
    fits = [p for p in spec_names("platforms") if load_platform(p).gpu == gpu and load_platform(p).gpus >= tp]
    return min(fits, key=lambda p: load_platform(p).gpus)


def _smallest_tp(model: str, gpu: str) -> tuple[int | None, str]:
    reasons = []
    for tp in _tp_options(gpu):
        try:
            plan_memory(Deployment(load_model(model), load_gpu(gpu), tp=tp))
        except ValueError as err:  # heads not divisible by tp, or weights do not fit
            reasons.append(f"tp={tp}: {err}")
            continue
        return tp, ""
    return None, "; ".join(reasons)


PAIRS = [(m, g) for m in model_names() for g in spec_names("gpus")]


def test_the_skip_list():
    skipped = {pair: reason for pair in PAIRS if (reason := _smallest_tp(*pair)[1])}
    assert set(skipped) == set(EXPECTED_SKIPS), skipped
    assert all("does not fit" in reason for reason in skipped.values())


@pytest.mark.parametrize(("model", "gpu"), PAIRS, ids=[f"{m}-{g}" for m, g in PAIRS])
def test_decode_and_prefill_steps_fit_and_take_time(model, gpu):
    tp, reason = _smallest_tp(model, gpu)
    if tp is None:
        pytest.skip(reason)
    spec = load_gpu(gpu)
    platform = _platform(gpu, tp)
    limit = PREFILL_KERNEL_LIMITS.get((model, gpu))
    for decode, prefill in ((DECODE, None), (None, PREFILL)):
        if prefill and limit:
            with pytest.raises(ValueError, match=limit):
                step_query(model, gpu, tp=tp, decode=decode, prefill=prefill, platform=platform)
            continue
        result = step_query(model, gpu, tp=tp, decode=decode, prefill=prefill, platform=platform)
        assert math.isfinite(result["step_time_s"]) and result["step_time_s"] > 0, (decode, prefill)
    deployment = Deployment(load_model(model), spec, tp=tp)
    count, context = (int(x) for x in DECODE.split("x"))
    prefills = () if limit else (PrefillChunk(int(PREFILL.split("x")[1]), 0),)
    batch = Batch(decodes=(context,) * count, prefills=prefills)
    for item in build_step(batch, deployment).kernels:
        for work in item.kernel.launches():  # type: ignore[union-attr]
            assert work.lds_bytes_per_workgroup <= spec.lds_max_per_workgroup_bytes, item.name
            assert work.threads_per_workgroup <= spec.max_threads_per_workgroup, item.name
