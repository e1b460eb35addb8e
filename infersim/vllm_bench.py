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
    Alias("--input-len", ("workload.input_len",), "N", "as --random-input-len (vllm's general length flag)"),
    Alias("--output-len", ("workload.output_len",), "N", "as --random-output-len (vllm's general length flag)"),
    Alias("--dataset-name", ("workload.kind",), "NAME",
          "random: workload.kind=random, the one vllm dataset simulated (for recorded traffic: workload.kind=trace); "
          "without --request-rate its requests all arrive at once, as vllm's default rate inf",
          random_only=False),
)
# vllm bench serve's flags that shape the result file rather than the run: (flag, metavar, help)
RESULT_FLAGS = (
    ("--percentile-metrics", "METRICS", "comma-separated metrics whose statistics the vllm result holds, of ttft, "
     "tpot, itl, e2el (default ttft,tpot,itl,e2el; client_queue_time and e2el_including_client_queue follow "
     "--max-concurrency as in vllm)"),
    ("--metric-percentiles", "PERCENTILES", "comma-separated percentiles of each metric (default 50,90,99)"),
    ("--label", "TEXT", "the result's label (default: the scenario's name)"),
)
DATASETS = ("random",)


def add_arguments(parser: Any) -> None:
    """The aliases as the parser's argument group "vllm bench serve flags", each naming its scenario key."""
    group = parser.add_argument_group(ARGUMENT_GROUP, "aliases of scenario keys, each applied as its --set is")
    for alias in ALIASES:
        group.add_argument(alias.flag, dest=alias.dest, default=None, metavar=alias.metavar, help=alias.help)
    for flag, metavar, text in RESULT_FLAGS:
        group.add_argument(flag, dest="vllm_" + flag.removeprefix("--").replace("-", "_"), default=None,
                           metavar=metavar, help=text)
    group.add_argument("--save-result", dest="vllm_save_result", action="store_true",
                       help="write the vllm result as vllm_result.json in --out (as --format vllm does)")


def _pairs(alias: Alias, text: str) -> list[str]:
    """The `--set` pairs an alias's value stands for."""
    if alias.flag == "--request-rate":
        if text.strip().lower() in ("inf", "infinity"):
            return ["workload.arrival=infinite"]
        return ["workload.arrival=poisson", f"workload.rate_per_s={text}"]
    if alias.flag == "--dataset-name" and text.strip() not in DATASETS:
        raise ScenarioError(f"--dataset-name {text}: infersim simulates vllm bench serve's {', '.join(DATASETS)} "
                            "dataset; for recorded traffic give workload.kind=trace and workload.trace_path")
    return [f"{alias.keys[0]}={text.strip() if alias.flag == '--dataset-name' else text}"]


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
    for general, specific in (("--input-len", "--random-input-len"), ("--output-len", "--random-output-len")):
        if values.get(_dest(general)) is not None and values.get(_dest(specific)) is not None:
            raise ScenarioError(f"{general} and {specific} both set the same length: give one of them")
    for alias in ALIASES:
        text = values.get(alias.dest)
        if text is None:
            continue
        pairs = _pairs(alias, text)
        for key in alias.keys:
            clash = [item for item in sets if _sets_key(item, key)]
            if clash:
                raise ScenarioError(f"{alias.flag} and --set {clash[0]} both set {key}: give one of them")
        try:  # the value alone, through the scenario's own converter, so that the error names the flag
            build(Scenario, parse_set(pairs))
        except ScenarioError as err:
            raise ScenarioError(f"{alias.flag} {text}: {err}") from None
        if alias.flag == "--max-concurrency" and parse_set(pairs)["serving"]["max_concurrency"] == 0:
            raise ScenarioError(f"{alias.flag} {text}: must be at least 1, as in vllm bench serve "
                                "(no cap: leave the flag out)")
        out += pairs
    if (values.get(_dest("--dataset-name")) is not None and values.get(_dest("--request-rate")) is None
            and not any(_sets_key(item, key) for item in sets for key in ("workload.arrival", "workload.rate_per_s"))):
        out.append("workload.arrival=infinite")  # vllm bench serve's --request-rate defaults to inf
    return out


def _dest(flag: str) -> str:
    return "vllm_" + flag.removeprefix("--").replace("-", "_")


@dataclass(frozen=True)
class ResultOptions:
    """What the result file holds, as vllm bench serve's --percentile-metrics, --metric-percentiles and --label."""

    metrics: tuple[str, ...] = ("ttft", "tpot", "itl", "e2el")
    percentiles: tuple[float, ...] = (50.0, 90.0, 99.0)
    label: str | None = None


SELECTABLE = ("ttft", "tpot", "itl", "e2el")


def result_options(values: Mapping[str, Any]) -> ResultOptions:
    """The result flags' values, checked: an unknown metric or a percentile outside (0, 100] names the flag."""
    options = ResultOptions(label=values.get(_dest("--label")))
    text = values.get(_dest("--percentile-metrics"))
    if text is not None:
        metrics = tuple(m.strip() for m in text.split(",") if m.strip())
        unknown = [m for m in metrics if m not in SELECTABLE]
        if unknown or not metrics:
            raise ScenarioError(f"--percentile-metrics {text}: unknown metric {', '.join(unknown) or '(none)'} "
                                f"(valid: {', '.join(SELECTABLE)})")
        options = ResultOptions(metrics, options.percentiles, options.label)
    text = values.get(_dest("--metric-percentiles"))
    if text is not None:
        try:
            percentiles = tuple(float(p) for p in text.split(","))
        except ValueError:
            raise ScenarioError(f"--metric-percentiles {text}: expected comma-separated numbers") from None
        if not percentiles or not all(0 < p <= 100 for p in percentiles):
            raise ScenarioError(f"--metric-percentiles {text}: each percentile must lie in (0, 100]")
        options = ResultOptions(options.metrics, percentiles, options.label)
    return options


def check_aliases(scenario: Scenario, values: Mapping[str, Any]) -> None:
    """Refuse a random-workload alias on a workload that does not read its key, rather than ignore it."""
    if scenario.workload.kind is WorkloadKind.RANDOM:
        return
    for alias in ALIASES:
        if alias.random_only and values.get(alias.dest) is not None:
            raise ScenarioError(f"{alias.flag} sets {alias.keys[-1]}, which only a random workload reads (this "
                                f"scenario's workload.kind is {scenario.workload.kind.value}; add --set "
                                "workload.kind=random)")


# Each key infersim writes, with its unit in the result file (the metrics' statistics: `unit_of`).
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
    "latencies": "s",
    "queue_times": "s",
    "max_output_tokens_per_s": "tokens/s",
    "max_concurrent_requests": "requests",
    "rtfx": "audio s/s",
    "spec_decode_acceptance_rate": "%",
    "spec_decode_acceptance_length": "tokens/cycle",
    "spec_decode_num_drafts": "cycles",
    "spec_decode_draft_tokens": "tokens",
    "spec_decode_accepted_tokens": "tokens",
    "spec_decode_per_position_acceptance_rates": "probability",
}
METRICS = ("ttft", "tpot", "itl", "e2el", "client_queue_time", "e2el_including_client_queue")
# Keys written null, and why (vllm writes them from a served endpoint, a tokenizer or a client setting).
NULL_REASONS = {
    "endpoint_type": "no HTTP endpoint is called: the server is simulated",
    "backend": "no client backend sends requests: the server is simulated",
    "request_goodput": "as vllm writes it without --goodput",
    "num_prompts": "outside a random workload the stream sets the requests (the count is `completed`)",
    "request_rate": "outside a random workload an arrival rate counts sessions or follows a trace",
    "burstiness": "a fixed rate (vllm's infinite burstiness, which JSON cannot hold) or a non-random workload",
    "max_concurrency": "no client cap (as vllm without --max-concurrency)",
}


def unit_of(key: str) -> str:
    """The unit of a result key: ms for every metric statistic (`mean_ttft_ms`, `p99.9_itl_ms`), else `UNITS`."""
    return "ms" if key.endswith("_ms") else UNITS[key]


def _percentile_word(q: float) -> str:
    """vllm's spelling of a percentile in a key: 99 as "99", 99.9 as "99.9"."""
    return str(int(q)) if int(q) == q else str(q)


def _ms_stats(name: str, values: np.ndarray, percentiles: tuple[float, ...],
              weights: np.ndarray | None = None) -> dict[str, float | None]:
    """mean, median, std and percentiles of samples (s) in ms under vLLM's key names; None without samples."""
    from simulator.metrics import weighted_percentile

    values = np.asarray(values, dtype="float64")
    weights = np.ones(values.shape, dtype="int64") if weights is None else np.asarray(weights, dtype="int64")
    total = int(weights.sum())
    keys = ("mean", "median", "std", *(f"p{_percentile_word(q)}" for q in percentiles))
    if total == 0:
        return {f"{stat}_{name}_ms": None for stat in keys}
    mean = float(np.dot(values, weights) / total)
    out = {f"mean_{name}_ms": mean * 1e3, f"median_{name}_ms": weighted_percentile(values, weights, 50) * 1e3,
           # numpy's std (ddof 0), as vLLM's np.std, of the samples each repeated `weight` times
           f"std_{name}_ms": math.sqrt(max(0.0, float(np.dot(weights, (values - mean) ** 2)) / total)) * 1e3}
    for q in percentiles:
        out[f"p{_percentile_word(q)}_{name}_ms"] = weighted_percentile(values, weights, q) * 1e3
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


def _spec_decode(result: SimulationResult) -> dict[str, Any]:
    """vllm's spec_decode_* keys (written when the server reports speculative decoding), from the run's cycles: a
    cycle verifies one request's drafts and commits its accepted drafts plus one token. The per-position rates are
    the scenario's acceptance (unconditional, as vllm reports them), which the run's draws follow."""
    from simulator.simulate import acceptance_of

    acceptance = acceptance_of(result.scenario)
    if acceptance is None:
        return {}
    cycles = int(result.steps["spec_cycles"].sum())
    accepted = int(result.steps["spec_committed_tokens"].sum()) - cycles
    drafts = cycles * acceptance.drafts
    return {
        "spec_decode_acceptance_rate": accepted / drafts * 100 if drafts else 0.0,
        "spec_decode_acceptance_length": 1 + accepted / cycles if cycles else 0.0,
        "spec_decode_num_drafts": cycles,
        "spec_decode_draft_tokens": drafts,
        "spec_decode_accepted_tokens": accepted,
        "spec_decode_per_position_acceptance_rates": list(acceptance.rates),
    }


def vllm_result(result: SimulationResult, options: ResultOptions = ResultOptions(),
                date: str | None = None) -> dict[str, Any]:
    """The run as the JSON object `vllm bench serve --save-result` writes: its keys in its order, names and units.

    Every key of the result file of vllm/benchmarks/serve.py at the commit this module cites, without
    --save-detailed: the set-up (`date` the run's, `label`, `model_id` and `tokenizer_id` the scenario's name and
    model), the traffic, the counts and throughputs, `latencies` and `queue_times` per request (s, in request
    order), the peaks, `rtfx` (0: no audio), the spec_decode_* keys when the scenario drafts, and the statistics
    of the metrics `options` select (client_queue_time, and at a finite rate e2el_including_client_queue, under
    a concurrency cap, as vllm). Keys with no value here are null; `NULL_REASONS` says why. ITL is the step-based
    approximation of `simulator/metrics.py`.
    """
    from datetime import datetime

    from simulator.metrics import e2el_s, itl_samples, queue_wait_s, tpot_s, ttft_s

    summary, requests, scenario = result.summary, result.requests, result.scenario
    w = scenario.workload
    random_workload = w.kind is WorkloadKind.RANDOM
    duration = float(summary["simulated_s"])
    completed = int(summary["requests_completed"])
    rate: Any = None
    burstiness = None
    if random_workload:
        rate = "inf" if w.arrival is ArrivalKind.INFINITE else w.rate_per_s  # vllm writes the string for inf
        if w.arrival in (ArrivalKind.INFINITE, ArrivalKind.POISSON):
            burstiness = w.burstiness
    latencies, queue_times = e2el_s(requests), queue_wait_s(requests)
    out: dict[str, Any] = {
        "date": date or datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": None,
        "backend": None,
        "label": options.label if options.label is not None else scenario.name,
        "model_id": scenario.model.name,
        "tokenizer_id": scenario.model.name,  # vllm's default: the model's own tokenizer
        "num_prompts": w.num_prompts if random_workload else None,
        "request_rate": rate,
        "burstiness": burstiness,
        "max_concurrency": scenario.serving.max_concurrency or None,
        "duration": duration,
        "completed": completed,
        "failed": 0,  # the simulated server fails no request (one it cannot hold stops the run instead)
        "total_input_tokens": int(requests["prompt_tokens"].sum()),
        "total_output_tokens": int(requests["output_tokens"].sum()),
        "request_throughput": completed / duration if duration else None,
        "request_goodput": None,
        "output_throughput": summary["output_tok_per_s"],
        "total_token_throughput": summary["total_tok_per_s"],
        "latencies": latencies.tolist(),
        "queue_times": queue_times.tolist(),
        "max_output_tokens_per_s": _peak_output_tokens_per_s(result),
        "max_concurrent_requests": _peak_concurrency(result),
        "rtfx": 0.0,  # vllm's audio real-time factor: no audio
        **_spec_decode(result),
    }
    q = options.percentiles
    samples = {"ttft": (ttft_s(requests),), "tpot": (tpot_s(requests),), "itl": itl_samples(result.steps),
               "e2el": (latencies,)}
    for metric in SELECTABLE:
        if metric in options.metrics:
            out.update(_ms_stats(metric, *samples[metric][:1], q, *samples[metric][1:]))
    if scenario.serving.max_concurrency:
        out.update(_ms_stats("client_queue_time", queue_times, q))
        if w.arrival is not ArrivalKind.INFINITE:
            out.update(_ms_stats("e2el_including_client_queue",
                                 (requests["finish_s"] - requests["arrival_s"]).to_numpy(dtype="float64"), q))
    return out
