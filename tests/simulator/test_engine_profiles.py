"""The serving engine around the kernels: which steps replay graphs and what an eager step's host costs, when a
request sent during a step can join one, and SGLang's recv interval."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hwmodels.calibration import load_calibration
from hwmodels.interconnect import build_fabric
from hwmodels.roofline import LaunchMode
from hwmodels.spec import load_gpu, load_platform
from simulator.cost.cycle import CycleCost, CycleShape
from simulator.engine_profiles import (
    FRONT_ENDS,
    SGLANG_EAGER_FORWARD_S,
    SGLANG_EAGER_LAUNCH_HOST_S,
    SGLANG_GRAPH_FORWARD_S,
    SGLANG_PROBE_LAUNCHES,
    LaunchPolicy,
    RecvSkipper,
    launch_policy,
)
from simulator.scenario import ScenarioError, load_scenario
from simulator.simulate import simulate
from workloads import layers
from workloads.deployment import Deployment
from workloads.model import load_model
from workloads.step import Batch, PrefillChunk


def _cycle_cost(engine: str, model: str = "deepseek-v3", tp: int = 8, graph_max_bs: int = 0) -> CycleCost:
    gpu = load_gpu("h200")
    deployment = Deployment(load_model(model), gpu, tp=tp)
    return CycleCost(deployment, build_fabric(load_platform("h200-8"), gpu), load_calibration("h200"),
                     launches=launch_policy(engine, graph_max_bs, 64, tp))


def test_the_sglang_host_cost_is_its_source_spread_over_this_models_launches():
    """sgl-project/sglang#12160 timed DeepSeek-V3's one-token prefill eager and as a graph; the figure per launch
    holds only for the launch count of that step here: a plan that changes it must re-derive the constant."""
    cost = _cycle_cost("sglang")
    assert _calls(cost, Batch(prefills=(PrefillChunk(1, 0),))) == SGLANG_PROBE_LAUNCHES
    assert pytest.approx(30.86e-6, rel=1e-3) == SGLANG_EAGER_LAUNCH_HOST_S
    eager = cost.cycle_s(CycleShape(prefills=1, prefill_tokens=1))
    graph = cost.parts.total_s(((1, 0),), (), (), 0, 1)
    # the model's eager step over its graph step: the source's difference less the graph nodes the eager step skips
    assert eager - graph == pytest.approx(SGLANG_EAGER_FORWARD_S - SGLANG_GRAPH_FORWARD_S, rel=0.05)
    assert eager - graph < SGLANG_EAGER_FORWARD_S - SGLANG_GRAPH_FORWARD_S


def _calls(cost: CycleCost, batch: Batch) -> int:
    """Kernel launches and collective calls of the batch's step."""
    items = layers.build_step(batch, cost.deployment).items
    return cost.parts.step_time(batch).kernel_launches + sum(1 for item in items if item.collective is not None)


def test_which_steps_replay_graphs_follows_each_engines_rule():
    vllm, sglang = launch_policy("vllm", 0, 64, 8), launch_policy("sglang", 0, 64, 8)
    assert vllm.graph_tokens == 128 and vllm.eager_launch_host_s is None  # min(2 x max_num_seqs, 512)
    assert launch_policy("vllm", 0, 1024, 8).graph_tokens == 512
    assert launch_policy("vllm", 0, 64, 8, drafts=2).graph_tokens == 384  # decodes verify 3 positions each
    assert vllm.graphed(prefill_tokens=100, decodes=20) and not vllm.graphed(prefill_tokens=100, decodes=40)
    assert vllm.graphed(0, 42, tokens_per_decode=3) and not vllm.graphed(0, 43, tokens_per_decode=3)
    assert sglang.graph_decodes == 512 and launch_policy("sglang", 0, 64, 2).graph_decodes == 256
    assert sglang.graphed(0, 512) and not sglang.graphed(0, 513) and not sglang.graphed(1, 0)
    assert not LaunchPolicy(graph_decodes=4).graphed(0, 5)
    trtllm = launch_policy("trtllm", 0, 64, 8)
    assert trtllm.graph_decodes == 128 and trtllm.eager_launch_host_s == SGLANG_EAGER_LAUNCH_HOST_S
    assert launch_policy("trtllm", 16, 64, 8).graphed(0, 16) and not launch_policy("trtllm", 16, 64, 8).graphed(0, 17)
    with pytest.raises(ValueError, match=r"unknown serving engine 'tgi'.*vllm, sglang, trtllm"):
        launch_policy("tgi", 0, 64, 8)


def test_steps_outside_the_graphs_pay_the_hosts_launches_and_decodes_inside_do_not():
    sglang, vllm = _cycle_cost("sglang", graph_max_bs=16), _cycle_cost("vllm")
    decode = CycleShape(decodes=16, decode_context=16 * 2048)
    assert sglang.cycle_s(decode) == vllm.cycle_s(decode)  # both replay it
    big = CycleShape(decodes=17, decode_context=17 * 2048)
    extra = sglang.cycle_s(big) - vllm.cycle_s(big)  # vLLM replays 17 decodes (at most 128 tokens)
    assert extra == pytest.approx(_calls(sglang, Batch(decodes=(2048,) * 17)) * SGLANG_EAGER_LAUNCH_HOST_S, rel=0.1)
    # 1,024 prefill tokens: past vLLM's 128-token graphs too, so both run eagerly, vLLM at the GPU's launch cost
    prefill = CycleShape(prefills=1, prefill_tokens=1024)
    extra = sglang.cycle_s(prefill) - vllm.cycle_s(prefill)
    calls = _calls(sglang, Batch(prefills=(PrefillChunk(1024, 0),)))
    assert extra == pytest.approx(calls * (SGLANG_EAGER_LAUNCH_HOST_S - load_gpu("h200").launch_eager_s), rel=0.05)
    # a kernels.launch other than graph is the user's: every step keeps it
    d = sglang.deployment
    eager = replace(d, options=replace(d.options, launch=LaunchMode.EAGER))
    cost = CycleCost(eager, build_fabric(load_platform("h200-8"), d.gpu), load_calibration("h200"),
                     launches=launch_policy("sglang", 0, 64, 8))
    assert cost.launches is None


def _scenario(*sets: str):
    """A dense model on 8x H200, equal requests all at t = 0, four in flight at most."""
    base = ["hardware.platform=h200-8", "model.name=qwen3-32b", "parallel.tp=8", "spec_decode.drafts=0",
            "precision={}", "workload.kind=random", "workload.num_prompts=24", "workload.input_len=256",
            "workload.output_len=64", "workload.arrival=infinite", "workload.range_ratio=0.5", "workload.seed=3",
            "cache.prefix_caching=false", "serving.max_num_seqs=64", "serving.max_concurrency=4"]
    return load_scenario(sets=[*base, *sets])


def _boundaries_after(steps, sent: np.ndarray) -> np.ndarray:
    """For each send time, the start times of the steps after it (as an index into the sorted starts)."""
    starts = np.sort(steps["start_s"].to_numpy())
    return starts, np.searchsorted(starts, sent, side="right")


@pytest.mark.parametrize("engine,lag", [("vllm", 1), ("sglang", 2)])
def test_a_request_sent_during_a_step_joins_a_step_lag_boundaries_later(engine, lag):
    """The client sends the next request when one finishes: when the front end hands it the last token, a few
    milliseconds into a later step. The engine forms the step after it next (vLLM), or has formed that one already
    and forms the one after (SGLang's overlap scheduler), so the request's prefill starts no sooner than the
    lag-th boundary after its send."""
    result = simulate(_scenario(f"serving.engine={engine}"))
    requests = result.requests.sort_values("request_id")
    later = requests[requests["sent_s"] > 0]
    assert len(later) == 20
    starts, after = _boundaries_after(result.steps, later["sent_s"].to_numpy())
    first = after + lag - 1  # the earliest boundary whose step can take the request
    busy = first < starts.size
    assert busy.sum() >= 15
    np.testing.assert_array_equal(later["scheduled_s"].to_numpy()[busy] >= starts[first[busy]], True)
    if lag > 1:  # SGLang's overlap: the first boundary after the send forms a step without it
        assert (later["scheduled_s"].to_numpy()[busy] > starts[after[busy]]).all()
    assert (later["scheduled_s"].to_numpy() > later["sent_s"].to_numpy()).all()


def test_sglangs_recv_interval_holds_new_requests_for_up_to_that_many_decode_steps():
    base = simulate(_scenario("serving.engine=sglang")).requests
    held = simulate(_scenario("serving.engine=sglang", "serving.recv_interval=10")).requests
    wait = lambda r: (r["scheduled_s"] - r["sent_s"]).to_numpy()  # noqa: E731
    decode_s = 0.005  # a qwen3-32b TP8 decode step of four on an H200 is 4-6 ms
    assert np.median(wait(held)) > np.median(wait(base)) + 2 * decode_s
    assert wait(held).max() < wait(base).max() + 11 * 0.02
    skipper = RecvSkipper(3)
    assert skipper.due(idle=False)  # the first poll reads at once
    skipper.stepped(decode_only=True)
    assert not skipper.due(idle=False) and skipper.due(idle=True)
    skipper.stepped(decode_only=False)  # any step with prefill: the next poll reads
    assert skipper.due(idle=False)


def test_tensorrt_llm_is_an_nvidia_engine():
    with pytest.raises(ScenarioError, match=r"serving\.engine: TensorRT-LLM runs on NVIDIA GPUs; mi355x-8 has mi355x"):
        simulate(load_scenario(sets=["serving.engine=trtllm"]))
    result = simulate(_scenario("serving.engine=trtllm"))  # an H200 node: overlap scheduling, two steps' wait
    requests = result.requests
    later = requests[requests["sent_s"] > 0]
    starts, after = _boundaries_after(result.steps, later["sent_s"].to_numpy())
    busy = after + 1 < starts.size
    assert busy.sum() >= 15
    assert (later["scheduled_s"].to_numpy()[busy] >= starts[(after + 1)[busy]]).all()


def test_recv_interval_is_an_sglang_key():
    with pytest.raises(ScenarioError, match=r"serving\.recv_interval.*SGLang's --scheduler-recv-interval.*'vllm'"):
        _scenario("serving.recv_interval=10")


def test_the_client_sees_each_token_the_front_ends_time_after_the_engine_made_it():
    """The serving front end (HTTP, tokenizing the prompt, the hops between processes, the stream back) delays
    what the client sees, by a few milliseconds a request and 0.7 us a prompt token, and not the engine's steps."""
    front = FRONT_ENDS["sglang"]
    assert 5e-3 < front.request_s < 8e-3 and front.per_prompt_token_s == pytest.approx(0.7e-6)
    result = simulate(_scenario("serving.engine=sglang", "serving.max_concurrency=1", "workload.num_prompts=3"))
    requests, ends = result.requests.sort_values("request_id"), result.steps["end_s"].to_numpy()
    lag = front.seconds(requests["prompt_tokens"].to_numpy())
    assert (lag > front.request_s).all()
    # the first request's prefill is the run's first step; its first and last tokens reach the client the front
    # end's time after the steps that made them
    assert requests["first_token_s"].iloc[0] == pytest.approx(ends[0] + lag[0])
    for made in requests["finish_s"].to_numpy() - lag:
        assert np.isclose(ends, made, rtol=0, atol=1e-12).any()
    # one request at a time: the client sends the next when it has the last token, mid-way between steps
    np.testing.assert_allclose(requests["sent_s"].to_numpy()[1:], requests["finish_s"].to_numpy()[:-1])
    assert result.summary["simulated_s"] == pytest.approx(requests["finish_s"].max())
