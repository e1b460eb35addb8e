"""`simulate(scenario)`: build the deployment, the request stream, the KV cache and the cycle cost, run
the engine, and summarise. Returns DataFrames and a summary; writes no files."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from hwmodels.calibration import load_calibration
from hwmodels.dtypes import Dtype
from hwmodels.interconnect import PCIE_EFFICIENCY, build_fabric
from hwmodels.spec import Vendor, load_gpu, load_platform
from hwmodels.specfile import FieldError
from simulator.cost.cycle import CycleCost, HostCopies
from simulator.engine import EngineConfig, simulate_stream, wall_clock
from simulator.engine_profiles import FRONT_ENDS, RECEIVE_LAG_STEPS, launch_policy
from simulator.kvcache import KVCache
from simulator.metrics import request_rows_to_frame, step_rows_to_frame, summarize
from simulator.prefix_reuse import prefix_reuse
from simulator.scenario import AUTO_MAX_MODEL_LEN, ArrivalKind, Scenario, ScenarioError, WorkloadKind
from simulator.scheduler import Budget
from simulator.specdecode import Acceptance
from workloads.arrivals import FixedRate, Gamma, Infinite, Poisson
from workloads.attention_backends import default_mla_backend
from workloads.codecs import Codec
from workloads.deployment import Deployment, default_shared_fusion
from workloads.memory import plan_memory
from workloads.model import Part, load_model
from workloads.trace_readers import read_trace
from workloads.traces import AgenticConfig, RequestStream, agentic_stream, random_stream


@dataclass(frozen=True)
class SimulationResult:
    """One run: a row per request, a row per step, and the summary the run summary's contract defines."""

    scenario: Scenario
    requests: Any  # pandas.DataFrame
    steps: Any  # pandas.DataFrame
    summary: dict[str, Any]


def deployment_of(scenario: Scenario) -> Deployment:
    """The scenario's model on its platform's GPU with its parallel plan, precisions and kernel options."""
    platform = load_platform(scenario.hardware.platform)
    if scenario.parallel.tp > platform.gpus:
        raise ScenarioError(f"parallel.tp={scenario.parallel.tp} needs more GPUs than {platform.name} has "
                            f"({platform.gpus})")
    weights: dict[Part, Dtype] = {}
    kv_cache = None
    for key, dtype in scenario.precision.items():
        if key == "kv_cache":
            kv_cache = Dtype.parse(dtype)
            continue
        try:
            weights[Part(key)] = Dtype.parse(dtype)
        except ValueError as err:
            valid = ", ".join([p.value for p in Part] + ["kv_cache"])
            raise ScenarioError(f"precision.{key}: {err} (keys: {valid})") from None
    p = scenario.parallel
    try:
        model, gpu, options = load_model(scenario.model.name), load_gpu(platform.gpu), scenario.kernels
        if scenario.serving.engine == "trtllm" and gpu.vendor is Vendor.AMD:
            raise ScenarioError(f"serving.engine: TensorRT-LLM runs on NVIDIA GPUs; {platform.name} has {gpu.name} "
                                "(engines for it: vllm, sglang)")
        if options.mla_backend == "auto" and model.mla is not None and model.mla.heads % p.tp == 0:
            # the engine's default MLA decode backend for this GPU, cache dtype and per-GPU heads
            kv = kv_cache or model.kv_cache
            options = replace(options, mla_backend=default_mla_backend(
                gpu, scenario.serving.engine, kv_dtype=kv, heads=model.mla.heads // p.tp).value)
        deployment = Deployment(model, gpu, tp=p.tp, dcp=p.dcp, ep=p.ep, weights=weights, kv_cache=kv_cache,
                                options=options)
        if options.moe_shared_fusion == "auto":  # the engine's default for this model, plan and precision
            deployment = replace(deployment, options=replace(
                options, moe_shared_fusion=default_shared_fusion(deployment, scenario.serving.engine)))
        return deployment
    except FieldError as err:  # the plan or an option does not fit the model: name the scenario key
        section = "parallel" if err.key in ("tp", "dcp", "ep") else "kernels"
        raise ScenarioError(f"{section}.{err.key}: {err}") from None


def check_scenario(scenario: Scenario) -> None:
    """Everything about a scenario that can be checked without simulating: the plan, options and drafts."""
    deployment_of(scenario)
    acceptance_of(scenario)
    if scenario.collectives.quickreduce:
        try:
            Codec.parse(scenario.collectives.quickreduce)
        except ValueError as err:
            raise ScenarioError(f"collectives.quickreduce: {err}") from None


def stream_of(scenario: Scenario, rng: np.random.Generator) -> RequestStream:
    w, block = scenario.workload, scenario.cache.block_tokens
    # burstiness 1 keeps the exponential draws of Poisson, so that a scenario without it draws what it always did
    poisson = (lambda: Poisson(w.rate_per_s)) if w.burstiness == 1 else (lambda: Gamma(w.rate_per_s, w.burstiness))
    arrivals = {ArrivalKind.POISSON: poisson, ArrivalKind.FIXED: lambda: FixedRate(w.rate_per_s),
                ArrivalKind.INFINITE: Infinite}
    if w.kind is WorkloadKind.AGENTIC:
        if w.arrival not in (ArrivalKind.POISSON, ArrivalKind.FIXED):
            raise ScenarioError("workload.arrival: agentic sessions start as poisson or fixed")
        config = AgenticConfig(sessions=w.sessions, turns_mean=w.turns_mean, session_arrivals=arrivals[w.arrival]())
        return agentic_stream(config, rng, block_tokens=block)
    if w.kind is WorkloadKind.RANDOM:
        if w.arrival is ArrivalKind.TRACE:
            raise ScenarioError("workload.arrival: trace arrivals need workload.kind: trace")
        return random_stream(w.num_prompts, w.input_len, w.output_len, w.range_ratio,
                             arrivals=arrivals[w.arrival](), rng=rng, block_tokens=block)
    if not w.trace_path or not w.trace_format:
        raise ScenarioError("workload.kind trace needs workload.trace_path and workload.trace_format")
    return read_trace(w.trace_path, w.trace_format, block_tokens=block)


def max_model_len_of(scenario: Scenario, kv: KVCache) -> int:
    """The longest request (prompt + output) served: serving.max_model_len, or with -1 the longest the KV cache
    holds with a decode's lookahead (vLLM's `--max-model-len auto`), at most AUTO_MAX_MODEL_LEN. A length the KV
    cache cannot hold is refused, as vLLM refuses to start ("To serve at least one request with the model's max
    seq len ..."), since such a request could never be scheduled."""
    fits = kv.capacity_blocks * kv.block_tokens - scenario.spec_decode.drafts - 1
    asked = scenario.serving.max_model_len
    if asked == -1:
        if fits < 1:
            raise ScenarioError(f"the KV cache holds {kv.capacity_blocks} blocks of {kv.block_tokens} tokens: no "
                                "request fits; raise serving.gpu_memory_utilization or lower cache.block_tokens")
        return min(AUTO_MAX_MODEL_LEN, fits)
    if asked > fits:
        raise ScenarioError(f"serving.max_model_len: {asked} tokens do not fit in the KV cache ({kv.capacity_blocks} "
                            f"blocks of {kv.block_tokens} tokens hold requests of at most {max(fits, 0)}); set it "
                            "to at most that, or to -1 for the longest that fits, or raise "
                            "serving.gpu_memory_utilization")
    return asked


def _check_window(scenario: Scenario, stream: RequestStream, max_model_len: int) -> None:
    """workload.duration_s must be a time; max_model_len must leave some request to serve."""
    duration = scenario.workload.duration_s
    if not 0 <= duration < float("inf"):  # NaN fails this too
        raise ScenarioError(f"workload.duration_s: must be finite and non-negative (0: no window), got {duration}")
    if not len(stream):
        return
    lengths = stream.prompt_tokens.astype(np.int64) + np.maximum(1, stream.output_tokens)
    if np.all(lengths > max_model_len):  # vLLM would reject every one: nothing to measure
        i = int(np.argmin(lengths))
        fix = ("raise serving.max_model_len" if scenario.serving.max_model_len != -1 else
               "-1 is the longest the KV cache holds; raise serving.gpu_memory_utilization")
        raise ScenarioError(f"serving.max_model_len: every request needs more than {max_model_len} tokens "
                            f"(the shortest: {int(stream.prompt_tokens[i])} prompt + {int(stream.output_tokens[i])} "
                            f"output); {fix} or shorten the workload")


def acceptance_of(scenario: Scenario) -> Acceptance | None:
    s = scenario.spec_decode
    if s.drafts == 0:
        return None
    if s.acceptance_rates:
        if len(s.acceptance_rates) < s.drafts:
            raise ScenarioError(f"spec_decode.acceptance_rates has {len(s.acceptance_rates)} rates for "
                                f"{s.drafts} drafts")
        return Acceptance.from_rates(s.acceptance_rates).truncate(s.drafts)
    if s.mean_tokens_per_cycle:
        return Acceptance.min_variance(s.mean_tokens_per_cycle, s.drafts)
    if s.acceptance_alpha:
        return Acceptance.geometric(s.acceptance_alpha, s.drafts)
    raise ScenarioError("spec_decode.drafts > 0 needs acceptance_rates, mean_tokens_per_cycle or acceptance_alpha")


# CPython collects its youngest generation every 700 net allocations by default. A run allocates millions of
# small objects that live for the whole run (requests, cache blocks, step rows), so those collections find almost
# nothing to free and re-walk the same young objects; raising the first threshold makes them ~70x rarer.
# Reference cycles are still collected, only in larger batches. Assumption: the value trades a few MB of
# uncollected cycles for speed; peak RSS of the hour-long benchmark was unchanged (285 MB) at it.
RUN_GC_THRESHOLDS = (50_000, 20, 100)


@contextmanager
def rarer_collections() -> Iterator[None]:
    """The garbage collector during a run: what was allocated before it frozen out of the collector's view
    (`gc.freeze`: loaded specs, compiled programs, caches), young collections rarer; both restored after.

    At the end the run's survivors (memos, columns) join the frozen objects before all of them go back to the
    oldest generation (`gc.unfreeze`): with the young thresholds restored, the run's young objects would
    otherwise be traversed at once by a collection that finds them alive (a fifth of a second on an hour's run).
    """
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(*RUN_GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        gc.set_threshold(*before)


def simulate(scenario: Scenario, progress: Callable[[int, float], None] | None = None) -> SimulationResult:
    """Run one scenario; `progress(requests_done, simulated_s)` is called after every step."""
    # One generator per purpose, so that nothing a change does to timing moves a draw: the request stream
    # (arrivals, lengths, think times) is drawn up front from the seed's own generator, and the acceptance
    # draws are keyed by request and position from a child of the same seed (common random numbers).
    seeds = np.random.SeedSequence(scenario.workload.seed)
    rng, acceptance_rng = np.random.default_rng(seeds), np.random.default_rng(seeds.spawn(1)[0])
    deployment = deployment_of(scenario)
    platform = load_platform(scenario.hardware.platform)
    serving = scenario.serving
    block = scenario.cache.block_tokens
    # KDA checkpoints (Kimi K3 study, mechanism 2): a hit resumes only where every layer has state. With KDA
    # layers the hit is cut to the last KDA checkpoint, unless checkpoints are saved with every attention
    # block (aligned); each saved checkpoint takes HBM (and host DRAM) beside the attention history it goes
    # with.
    checkpoint = None
    if deployment.model.kda is not None:
        checkpoint = block if scenario.cache.align_kda_checkpoints else scenario.cache.kda_checkpoint_interval
    memory = plan_memory(deployment, mem_fraction=serving.gpu_memory_utilization,
                         max_num_seqs=serving.max_num_seqs, max_batched_tokens=serving.max_num_batched_tokens,
                         kda_checkpoint_tokens=checkpoint)
    block_bytes = memory.kv_bytes_per_token * block
    host_blocks = int(scenario.cache.host_offload_gb_per_gpu * 1e9 // block_bytes) if block_bytes else 0
    kv = KVCache(capacity_blocks=max(1, memory.kv_capacity_tokens // block), block_tokens=block,
                 checkpoint_tokens=checkpoint, host_capacity_blocks=host_blocks,
                 snapshots=scenario.workload.kind is not WorkloadKind.RANDOM)  # random prompts extend none
    max_model_len = max_model_len_of(scenario, kv)
    stream = stream_of(scenario, rng)
    _check_window(scenario, stream, max_model_len)
    quickreduce = Codec.parse(scenario.collectives.quickreduce) if scenario.collectives.quickreduce else None
    host = HostCopies(block_bytes, deployment.gpu.host_link_bytes_per_s * PCIE_EFFICIENCY,
                      scenario.cache.offload_overlap)
    drafts = scenario.spec_decode.drafts
    calib = load_calibration(deployment.gpu.name, cost_model=scenario.cost.model)
    cost = CycleCost(deployment, build_fabric(platform, deployment.gpu), calib,
                     quickreduce=quickreduce, host=host, drafts=drafts,
                     launches=launch_policy(serving.engine, serving.cuda_graph_max_bs, serving.max_num_seqs,
                                            deployment.tp, drafts))
    acceptance = acceptance_of(scenario)
    config = EngineConfig(
        budget=Budget(serving.max_num_seqs, serving.max_num_batched_tokens, tokens_per_decode=drafts + 1,
                      mixed_prefill=serving.engine != "sglang"),
        closed_loop=scenario.workload.kind is WorkloadKind.AGENTIC,
        max_concurrency=serving.max_concurrency,
        acceptance=acceptance,
        admit_until_s=scenario.workload.duration_s,
        prefix_caching=scenario.cache.prefix_caching,
        max_model_len=max_model_len,
        recv_interval=serving.recv_interval,
        receive_lag_steps=RECEIVE_LAG_STEPS[serving.engine],
        front_end=FRONT_ENDS[serving.engine],
    )
    reuse = prefix_reuse(stream) if scenario.cache.prefix_caching else 0.0  # before the frames: a lower peak
    start = wall_clock()
    with rarer_collections():
        run = simulate_stream(stream, cost, kv, config, acceptance_rng, progress)
    simulated_s = run.simulated_s
    wall_s = max(wall_clock() - start, 1e-9)
    del stream  # the stream and the engine's columns go before the frames are built, so that their peaks do not add
    requests, steps = request_rows_to_frame(run.requests), step_rows_to_frame(run.steps)
    cut, rejected = run.cut, run.rejected
    del run
    usd = scenario.cost.usd_per_gpu_hour or deployment.gpu.tco_usd_per_gpu_hour
    summary = summarize(requests, steps, gpus=deployment.tp, usd_per_gpu_hour=usd, simulated_s=simulated_s,
                        wall_s=wall_s)
    # throughputs are over [0, window_s]: until the last admitted request was served, with nothing cut after it
    summary["window_s"] = simulated_s
    summary["admit_until_s"] = scenario.workload.duration_s
    summary["requests_cut"] = cut
    summary["requests_rejected"] = rejected  # prompt + output over serving.max_model_len, refused as vLLM does
    summary["max_model_len"] = max_model_len  # as resolved (serving.max_model_len -1: what the KV cache holds)
    summary["cycle_cost"] = {"hits": cost.hits, "misses": cost.misses, "hit_rate": cost.hit_rate,
                             "miss_wall_s": cost.miss_wall_s}
    summary["kv_capacity_tokens"] = memory.kv_capacity_tokens
    # the stream's reuse with an unlimited cache: the ceiling prefix_hit_rate is measured against
    summary["theoretical_prefix_reuse"] = reuse
    summary["host_prefix_hit_rate"] = kv.host_hits_tokens / kv.lookups_tokens if kv.lookups_tokens else 0.0
    summary["host_capacity_blocks"] = host_blocks
    return SimulationResult(scenario, requests, steps, summary)
