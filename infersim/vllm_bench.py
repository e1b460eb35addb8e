"""`vllm bench serve` on the command line of `infersim run`: its flag names as scenario aliases, its result format.

The names, units and definitions follow vLLM's `vllm/benchmarks/serve.py` (vllm-project/vllm, commit
009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1): `add_cli_args` for the flags, `calculate_metrics` and
`BenchmarkMetrics` for the metrics, and `benchmark` / `main_async` for the `result_json` that `--save-result`
writes. The random dataset's lengths follow `RandomDataset.get_sampling_params` in `vllm/benchmarks/datasets.py`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.scenario import ArrivalKind, Scenario, ScenarioError, WorkloadKind, build, parse_set

if TYPE_CHECKING:  # the metrics pull in pandas: imported where a result is made, not when the parser is built
    from simulator.simulate import SimulationResult

ARGUMENT_GROUP = "vllm bench serve flags"


@dataclass(frozen=True)
class Alias:
    """A `vllm bench serve` flag and the scenario key(s) that mean the same thing."""

    flag: str
    keys: tuple[str, ...]
    metavar: str
    help: str
    random_only: bool = True  # only a random workload reads the key(s)

    @property
    def dest(self) -> str:
        """The argparse attribute that holds the flag's text."""
        return "vllm_" + self.flag.removeprefix("--").replace("-", "_")


ALIASES: tuple[Alias, ...] = (
    Alias("--num-prompts", ("workload.num_prompts",), "N", "requests of the random workload (workload.num_prompts)"),
    Alias("--request-rate", ("workload.arrival", "workload.rate_per_s"), "R",
          "requests per second: workload.arrival=poisson and workload.rate_per_s=R; 'inf' sends them all at t = 0 "
          "(workload.arrival=infinite)"),
    Alias("--max-concurrency", ("serving.max_concurrency",), "N",
          "requests the client keeps in flight at most, at least 1 (serving.max_concurrency); latencies count "
          "from each request's send", random_only=False),
    Alias("--random-input-len", ("workload.input_len",), "N", "mean prompt tokens (workload.input_len)"),
    Alias("--random-output-len", ("workload.output_len",), "N", "mean output tokens (workload.output_len)"),
    Alias("--random-range-ratio", ("workload.range_ratio",), "R",
          "lengths uniform in [mean * (1 - R), mean * (1 + R)], R in [0, 1) (workload.range_ratio)"),
    Alias("--burstiness", ("workload.burstiness",), "B",
          "gamma shape of the gaps between poisson arrivals: 1 exponential, below 1 bursty, above 1 even "
          "(workload.burstiness)"),
    Alias("--seed", ("workload.seed",), "N", "seed of the run's random draws (workload.seed)", random_only=False),
)


def add_arguments(parser: Any) -> None:
    """The aliases as the parser's argument group "vllm bench serve flags", each naming its scenario key."""
    group = parser.add_argument_group(ARGUMENT_GROUP, "aliases of scenario keys, each applied as its --set is")
    for alias in ALIASES:
        group.add_argument(alias.flag, dest=alias.dest, default=None, metavar=alias.metavar, help=alias.help)


def _pairs(alias: Alias, text: str) -> list[str]:
    """The `--set` pairs an alias's value stands for."""
    if alias.flag == "--request-rate":
        if text.strip().lower() in ("inf", "infinity"):
            return ["workload.arrival=infinite"]
        return ["workload.arrival=poisson", f"workload.rate_per_s={text}"]
    return [f"{alias.keys[0]}={text}"]


def _sets_key(item: str, key: str) -> bool:
    """Whether the `--set` pair `item` gives a value to the dotted `key` (a whole section's mapping may)."""
    node: Any = parse_set([item])
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def alias_sets(values: Mapping[str, Any], sets: Sequence[str]) -> list[str]:
    """`sets` with the given aliases' `--set` pairs after them; a bad value or a clash with `--set` is an error."""
    out = list(sets)
    for alias in ALIASES:
        text = values.get(alias.dest)
        if text is None:
            continue
        for key in alias.keys:
            clash = [item for item in sets if _sets_key(item, key)]
            if clash:
                raise ScenarioError(f"{alias.flag} and --set {clash[0]} both set {key}: give one of them")
        pairs = _pairs(alias, text)
        try:  # the value alone, through the scenario's own converter, so that the error names the flag
            build(Scenario, parse_set(pairs))
        except ScenarioError as err:
            raise ScenarioError(f"{alias.flag} {text}: {err}") from None
        if alias.flag == "--max-concurrency" and parse_set(pairs)["serving"]["max_concurrency"] == 0:
            raise ScenarioError(f"{alias.flag} {text}: must be at least 1, as in vllm bench serve "
                                "(no cap: leave the flag out)")
        out += pairs
    return out


def check_aliases(scenario: Scenario, values: Mapping[str, Any]) -> None:
    """Refuse a random-workload alias on a workload that does not read its key, rather than ignore it."""
    if scenario.workload.kind is WorkloadKind.RANDOM:
        return
    for alias in ALIASES:
        if alias.random_only and values.get(alias.dest) is not None:
            raise ScenarioError(f"{alias.flag} sets {alias.keys[-1]}, which only a random workload reads (this "
                                f"scenario's workload.kind is {scenario.workload.kind.value}; add --set "
                                "workload.kind=random)")


PERCENTILES = (50, 90, 99)  # as --metric-percentiles 50,90,99: the percentiles infersim's summary holds

# Each key infersim writes, with its unit in the result file.
UNITS: dict[str, str] = {
    "num_prompts": "requests",
    "request_rate": "requests/s",
    "burstiness": "gamma shape",
    "max_concurrency": "requests",
    "duration": "s",
    "completed": "requests",
    "failed": "requests",
    "total_input_tokens": "tokens",
    "total_output_tokens": "tokens",
    "request_throughput": "requests/s",
    "request_goodput": "requests/s",
    "output_throughput": "tokens/s",
    "total_token_throughput": "tokens/s",
    "max_output_tokens_per_s": "tokens/s",
    "max_concurrent_requests": "requests",
}
METRICS = ("ttft", "tpot", "itl", "e2el", "client_queue_time", "e2el_including_client_queue")
STATISTICS = ("mean", "median", "std", *(f"p{q}" for q in PERCENTILES))
UNITS |= {f"{stat}_{metric}_ms": "ms" for metric in METRICS for stat in STATISTICS}


def _ms_stats(name: str, values: np.ndarray, weights: np.ndarray | None = None) -> dict[str, float | None]:
    """mean, median, std and percentiles of samples (s) in ms under vLLM's key names; None without samples."""
    from simulator.metrics import weighted_percentile

    values = np.asarray(values, dtype="float64")
    weights = np.ones(values.shape, dtype="int64") if weights is None else np.asarray(weights, dtype="int64")
    total = int(weights.sum())
    if total == 0:
        return {f"{stat}_{name}_ms": None for stat in STATISTICS}
    mean = float(np.dot(values, weights) / total)
    out = {f"mean_{name}_ms": mean * 1e3, f"median_{name}_ms": weighted_percentile(values, weights, 50) * 1e3,
           # numpy's std (ddof 0), as vLLM's np.std, of the samples each repeated `weight` times
           f"std_{name}_ms": math.sqrt(max(0.0, float(np.dot(weights, (values - mean) ** 2)) / total)) * 1e3}
    for q in PERCENTILES:
        out[f"p{q}_{name}_ms"] = weighted_percentile(values, weights, q) * 1e3
    return out


def _peak_output_tokens_per_s(result: SimulationResult) -> float:
    """vLLM's max_output_tokens_per_s: the most tokens in one 1-second bucket from the first send.

    A step's tokens are committed when it ends, so each step puts them in the bucket of its end."""
    steps, requests = result.steps, result.requests
    if not len(steps) or not len(requests):
        return 0.0
    start = float(requests["sent_s"].min())
    bucket = np.floor(steps["end_s"].to_numpy(dtype="float64") - start).astype("int64")
    keep = bucket >= 0
    counts = np.bincount(bucket[keep], weights=steps["committed_tokens"].to_numpy(dtype="float64")[keep])
    return float(counts.max()) if counts.size else 0.0


def _peak_concurrency(result: SimulationResult) -> int:
    """vLLM's max_concurrent_requests: the most requests between their send and their end (half-open intervals)."""
    requests = result.requests
    if not len(requests):
        return 0
    starts = np.sort(requests["sent_s"].to_numpy(dtype="float64"))
    ends = np.sort(requests["finish_s"].to_numpy(dtype="float64"))
    live = np.arange(1, starts.size + 1) - np.searchsorted(ends, starts, side="right")
    return int(live.max())


def vllm_result(result: SimulationResult) -> dict[str, Any]:
    """The run as the JSON object `vllm bench serve --save-result` writes, in its key names and units.

    It is what `--percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99` saves, with
    client_queue_time (and, at a finite rate, e2el_including_client_queue) under a concurrency cap: times in ms,
    `duration` in s, throughputs per second. Left out, having no value here: the run's `date`, `backend`,
    `endpoint_type`, `label`, `model_id` and `tokenizer_id` (no served endpoint or tokenizer), `rtfx` (audio
    only), the per-request lists (`latencies`, `queue_times`, and with --save-detailed `input_lens`,
    `output_lens`, `ttfts`, `itls`, `start_times`, `generated_texts`, `errors`: requests.csv holds the numbers,
    and no text is generated); `num_prompts`, `request_rate` and `burstiness` outside a random workload (an
    agentic rate counts sessions; a trace has its own clock), and `burstiness` at a fixed rate (vLLM's
    infinite burstiness, which JSON cannot hold). `request_goodput` is null, as vLLM writes it without --goodput.
    ITL is the step-based approximation of `simulator/metrics.py`.
    """
    from simulator.metrics import e2el_s, itl_samples, queue_wait_s, tpot_s, ttft_s

    summary, requests, scenario = result.summary, result.requests, result.scenario
    w = scenario.workload
    out: dict[str, Any] = {}
    if w.kind is WorkloadKind.RANDOM:
        out["num_prompts"] = w.num_prompts
        if w.arrival is ArrivalKind.INFINITE:
            out["request_rate"] = "inf"  # vLLM writes the string for --request-rate inf
            out["burstiness"] = w.burstiness
        else:
            out["request_rate"] = w.rate_per_s
            if w.arrival is ArrivalKind.POISSON:
                out["burstiness"] = w.burstiness
    out["max_concurrency"] = scenario.serving.max_concurrency or None
    duration = float(summary["simulated_s"])
    completed = int(summary["requests_completed"])
    out.update({
        "duration": duration,
        "completed": completed,
        "failed": 0,  # the simulated server fails no request (one it cannot hold stops the run instead)
        "total_input_tokens": int(requests["prompt_tokens"].sum()),
        "total_output_tokens": int(requests["output_tokens"].sum()),
        "request_throughput": completed / duration if duration else None,
        "request_goodput": None,
        "output_throughput": summary["output_tok_per_s"],
        "total_token_throughput": summary["total_tok_per_s"],
        "max_output_tokens_per_s": _peak_output_tokens_per_s(result),
        "max_concurrent_requests": _peak_concurrency(result),
    })
    out.update(_ms_stats("ttft", ttft_s(requests)))
    out.update(_ms_stats("tpot", tpot_s(requests)))
    out.update(_ms_stats("itl", *itl_samples(result.steps)))
    out.update(_ms_stats("e2el", e2el_s(requests)))
    if scenario.serving.max_concurrency:
        out.update(_ms_stats("client_queue_time", queue_wait_s(requests)))
        if w.arrival is not ArrivalKind.INFINITE:
            out.update(_ms_stats("e2el_including_client_queue",
                                 (requests["finish_s"] - requests["arrival_s"]).to_numpy(dtype="float64")))
    return out
