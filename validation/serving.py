"""Published end-to-end serving results against the simulator: each configuration of
`validation/published/serving.csv` run as a scenario, throughput per GPU, TTFT and TPOT set beside the published.

A row becomes a scenario by what it states and nothing else: the platform (`<gpu>-8`), the catalog model, TP and
EP, the random workload (prompts, input and output lengths, the benchmark's length range), the client's
concurrency cap, all requests sent at once (request rate inf), the engine (`serving.engine`: vLLM, SGLang or
TensorRT-LLM), and the engine flags that have a scenario key (`--attention-backend`, `--max-running-requests`,
`--chunked-prefill-size`, `--mem-fraction-static`, `--kv-cache-dtype fp8*`, `--disable-radix-cache`,
`--cuda-graph-max-bs`, `--scheduler-recv-interval`; TensorRT-LLM's `cuda_graph_config` max_batch_size, an FP8
`kv_cache_config` and its `free_gpu_memory_fraction`, a share of the memory left after the weights, turned into the
share of the device that leaves the same KV cache). Without a KV-cache flag the cache has the checkpoint's dtype
(the engines' `auto`), not the default scenario's. SGLang's `--num-continuous-decode-steps` does nothing in these
versions and `--stream-interval` sends the first token at once, so neither has a key. Everything else is the
scenario defaults. Rows the simulator cannot stand for are left out with their reason: speculative decoding with
unstated acceptance, attention data parallelism, offline runs with no stated prompt count or batch limit,
TensorRT-LLM's piecewise context graphs, and configurations the model refuses (weights that do not fit).

Nothing is fitted to these rows: they test. `infersim validate --serving` reports per platform the median and p90
|error| of output throughput per GPU, median TPOT and median TTFT.
"""

from __future__ import annotations

import csv
import math
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from workloads.attention_backends import ENGINES
from workloads.model import load_model

TABLE = Path(__file__).parent / "published" / "serving.csv"
# `summary` of every point, as `infersim validate --serving --write-report` last wrote it: what `infersim run` shows
# as the end-to-end check of a scenario's GPU (a slow test holds it equal to a fresh run)
SUMMARY = Path(__file__).parent / "published" / "serving_summary.json"
# SGLang images whose AITER holds only its generic gfx942 config of the Triton block-scaled FP8 GEMM: v0.5.9's
# ROCm image carries AITER v0.1.10.post3 (SemiAnalysisAI/InferenceX perf-changelog.yaml, PR #816; sglang
# docker/rocm.Dockerfile), before the tuned gfx942 configs of ROCm/aiter PR #2024 (`kernels.fp8_gemm_configs`)
AITER_GENERIC_IMAGES = ("v0.5.9-rocm700-mi30x",)
SEED = 0
# (published column, summary key of the simulation, how a summary value becomes the column's unit)
METRICS = {
    "output_tok_s_per_gpu": ("output_tok_per_s_per_gpu", 1.0),
    "tpot_ms_median": ("tpot_s", 1e3),
    "ttft_ms_median": ("ttft_s", 1e3),
}
# InferenceX's random prompts: lengths uniform in [0.8 L, L] (`--random-range-ratio 0.8` of its benchmark client,
# stated in the rows' notes); the scenario's range is vllm bench serve's, [L (1 - r), L (1 + r)] around its mean.
INFERENCEX_LOW = 0.8
# TensorRT-LLM's KvCacheConfig.free_gpu_memory_fraction when a recipe leaves it out: 0.9 of the memory free after
# the model is loaded (TensorRT-LLM docs, "How to Change KV Cache Behavior", examples/kvcacheconfig)
TRTLLM_FREE_FRACTION = 0.9


# SGLang's --attention-backend values and the MLA decode backends they run (workloads.attention_backends)
ATTENTION_BACKENDS = {"flashinfer": "flashinfer", "aiter": "aiter", "trtllm_mla": "trtllm-gen", "fa3": "fa3-sglang",
                      "triton": "triton-sglang", "flashmla": "flashmla"}


class Excluded(ValueError):
    """A published row the simulator does not stand for; the message says why."""


@dataclass(frozen=True)
class ServingPoint:
    """One published configuration: its identity, the scenario keys it sets, and its published numbers."""

    index: int  # data row of the table, from 1
    source_id: str
    platform: str
    model: str
    engine: str
    isl: int
    osl: int
    concurrency: int
    sets: Mapping[str, object]
    published: Mapping[str, float]

    @property
    def label(self) -> str:
        return f"{self.platform} {self.model} {self.engine} {self.isl}/{self.osl} c{self.concurrency}"


@dataclass(frozen=True)
class ServingComparison:
    point: ServingPoint
    predicted: Mapping[str, float]
    errors: Mapping[str, float] = field(default_factory=dict)  # predicted / published - 1, per metric


def _number(text: str | None) -> float | None:
    if text is None or text.strip() in ("", "nan"):
        return None
    value = float(text)
    return None if math.isnan(value) else value


def _flag(flags: str, name: str) -> str | None:
    match = re.search(rf"{re.escape(name)}[ =]([^\s]+)", flags)
    return match.group(1) if match else None


def _of_free_memory(sets: Mapping[str, object], fraction: float) -> float:
    """The `serving.gpu_memory_utilization` (a share of the device's memory, as vLLM's and SGLang's fractions are)
    that leaves the KV cache what TensorRT-LLM's `free_gpu_memory_fraction` does: that share of the memory left
    after the weights and the runtime's buffers, u T - W - O = f (T - W - O)."""
    from simulator.scenario import load_scenario
    from simulator.simulate import deployment_of
    from workloads.memory import plan_memory

    scenario = load_scenario(None, sets=[f"{k}={v}" for k, v in sets.items()])
    serving, deployment = scenario.serving, deployment_of(scenario)  # the deployment and limits the run takes
    try:
        plan = plan_memory(deployment, mem_fraction=1.0, max_num_seqs=serving.max_num_seqs,
                           max_batched_tokens=serving.max_num_batched_tokens)
    except ValueError as err:
        raise Excluded(str(err).splitlines()[0]) from None
    held = plan.weights_bytes_per_gpu + plan.workspace_bytes + plan.reserve_bytes
    total = deployment.gpu.memory_total_bytes
    return (held + fraction * (total - held)) / total


def scenario_sets(row: Mapping[str, str]) -> dict[str, object]:
    """The scenario keys a published row sets; Excluded naming why when the simulator cannot stand for it."""
    notes, flags = row.get("notes") or "", row.get("recipe_flags") or ""
    if "spec-decode" in notes.lower():
        raise Excluded("speculative decoding with no stated acceptance")
    if int(float(row["dp"] or 1)) > 1:
        raise Excluded("attention data parallelism is not modelled")
    prompts = _number(row.get("num_prompts"))
    if prompts is None:
        raise Excluded("no stated prompt count")
    if _number(row.get("concurrency")) is None and "--max-running-requests" not in flags:
        raise Excluded("an offline run with no stated batch limit (the engine's own heuristic sizes it)")
    isl, osl = int(float(row["isl"])), int(float(row["osl"]))
    concurrency = _number(row.get("concurrency"))
    rate = _number(row.get("request_rate"))
    if rate is not None and not math.isinf(rate):
        raise Excluded(f"a request rate of {rate}/s is not replayed (only all-at-once runs)")
    ranged = "random-range-ratio 0.8" in notes or "[0.8x 1.0x]" in notes
    mean = (1 + INFERENCEX_LOW) / 2 if ranged else 1.0
    sets: dict[str, object] = {
        "hardware.platform": f"{row['platform']}-8",
        "model.name": row["model"],
        "parallel.tp": int(float(row["tp"])),
        "parallel.ep": int(float(row["ep"] or 1)),
        "parallel.dcp": 1,
        "workload.kind": "random",
        "workload.seed": SEED,
        "workload.arrival": "infinite",
        "workload.num_prompts": int(prompts),
        "workload.input_len": max(1, round(isl * mean)),
        "workload.output_len": max(1, round(osl * mean)),
        "workload.range_ratio": (1 - INFERENCEX_LOW) / (1 + INFERENCEX_LOW) if ranged else 0.0,
        "serving.max_concurrency": int(concurrency) if concurrency else 0,
        "spec_decode.drafts": 0,
        "spec_decode.mean_tokens_per_cycle": 0.0,
        "cache.prefix_caching": "--disable-radix-cache" not in flags,
    }
    for name, key, convert in (("--max-running-requests", "serving.max_num_seqs", int),
                               ("--chunked-prefill-size", "serving.max_num_batched_tokens", int),
                               ("--mem-fraction-static", "serving.gpu_memory_utilization", float),
                               ("--cuda-graph-max-bs", "serving.cuda_graph_max_bs", int),
                               ("--scheduler-recv-interval", "serving.recv_interval", int)):
        value = _flag(flags, name)
        if value is not None:
            sets[key] = convert(value)
    if row["engine"] in ENGINES:
        sets["serving.engine"] = row["engine"]
    codec = re.search(r"ROCM_QUICK_REDUCE_QUANTIZATION=([A-Za-z0-9]+)", flags)  # the engines' QuickReduce switch
    if codec and codec.group(1).lower() != "none":
        sets["collectives.quickreduce"] = codec.group(1).lower()
    if any(image in row.get("engine_version", "") for image in AITER_GENERIC_IMAGES):
        sets["kernels.fp8_gemm_configs"] = "generic"
    # The engines' KV cache is the checkpoint's dtype unless a flag says otherwise (SGLang and vLLM
    # `--kv-cache-dtype auto`; TensorRT-LLM `KvCacheConfig.dtype: auto` follows the checkpoint's quantization
    # metadata, which sets no KV quantization for these checkpoints): the row states it, so the default
    # scenario's FP8 KV (the Kimi K3 recipe's) is not inherited.
    kv = _flag(flags, "--kv-cache-dtype")
    fp8_kv = (kv is not None and kv.startswith("fp8")) or "kv_cache_config dtype fp8" in flags
    try:
        sets["precision.kv_cache"] = "fp8" if fp8_kv else load_model(row["model"]).kv_cache.value
    except ValueError as err:  # a model the catalog lacks
        raise Excluded(str(err).splitlines()[0]) from None
    backend = ATTENTION_BACKENDS.get(_flag(flags, "--attention-backend") or "")
    if backend == "aiter":  # SGLang's aiter backend: the persistent decode unless 16 heads hold a bf16 cache
        mla = load_model(row["model"]).mla
        heads = mla.heads // int(float(row["tp"])) if mla is not None else 0
        backend = "aiter" if heads == 16 and not fp8_kv else "aiter-persistent"
    if backend is not None:
        sets["kernels.mla_backend"] = backend
    if row["engine"] == "trtllm":  # the extra_llm_api_options the recipe's YAML sets, as the table transcribes them
        if "piecewise cuda graphs true" in flags:
            raise Excluded("TensorRT-LLM's piecewise graphs for context steps are not modelled")
        graphs = re.search(r"cuda_graph_config[^/]*max_batch_size (\d+)", flags)
        if graphs:
            sets["serving.cuda_graph_max_bs"] = int(graphs.group(1))
        free = re.search(r"free_gpu_memory_fraction ([0-9.]+)", flags)
        sets["serving.gpu_memory_utilization"] = _of_free_memory(
            sets, float(free.group(1)) if free else TRTLLM_FREE_FRACTION)
    return sets


def points(table: Path = TABLE) -> tuple[list[ServingPoint], list[tuple[int, str, str]]]:
    """(the rows the simulator stands for, as points; (row, label, reason) of each row left out)."""
    kept, left = [], []
    with table.open(newline="") as handle:
        for index, row in enumerate(csv.DictReader(handle), start=1):
            label = f"{row['platform']} {row['model']} {row['engine']} {row['isl']}/{row['osl']} c{row['concurrency']}"
            try:
                sets = scenario_sets(row)
            except Excluded as why:
                left.append((index, label, str(why)))
                continue
            published = {m: v for m in METRICS if (v := _number(row.get(m))) is not None}
            kept.append(ServingPoint(index, row["source_id"], row["platform"], row["model"], row["engine"],
                                     int(float(row["isl"])), int(float(row["osl"])),
                                     int(_number(row.get("concurrency")) or 0), sets, published))
    return kept, left


def predict(point: ServingPoint) -> dict[str, float]:
    """The simulation of one point: output tok/s per GPU, median TPOT and TTFT in ms (Excluded if refused)."""
    from simulator.scenario import load_scenario
    from simulator.simulate import simulate

    try:
        scenario = load_scenario(None, sets=[f"{k}={v}" for k, v in point.sets.items()])
        summary = simulate(scenario).summary
    except (ValueError, KeyError) as err:
        raise Excluded(str(err).splitlines()[0]) from None
    out = {}
    for column, (key, scale) in METRICS.items():
        value = summary.get(key)
        value = value.get("p50") if isinstance(value, Mapping) else value
        if value is not None:
            out[column] = float(value) * scale
    return out


def compare(selected: Iterable[ServingPoint] | None = None,
            progress: Callable[[], None] | None = None) -> tuple[list[ServingComparison], list[tuple[int, str, str]]]:
    """Every point simulated and set beside its published numbers; refused points join the left-out ones."""
    kept, left = points()
    out = []
    for point in (kept if selected is None else selected):
        try:
            predicted = predict(point)
        except Excluded as why:
            left.append((point.index, point.label, f"the model refuses it: {why}"))
        else:
            errors = {m: predicted[m] / v - 1 for m, v in point.published.items() if m in predicted and v > 0}
            out.append(ServingComparison(point, predicted, errors))
        if progress is not None:
            progress()
    return out, left


def summary(rows: Sequence[ServingComparison]) -> list[dict[str, object]]:
    """Per platform (and all together): points, and per metric the median and p90 |error| and median signed, in %."""
    groups: dict[str, list[ServingComparison]] = {}
    for row in rows:
        groups.setdefault(row.point.platform, []).append(row)
    groups["all"] = list(rows)
    out = []
    for platform, members in groups.items():
        entry: dict[str, object] = {"platform": platform, "points": len(members),
                                    "models": sorted({m.point.model for m in members})}
        for metric in METRICS:
            errors = [m.errors[metric] * 100 for m in members if metric in m.errors]
            if not errors:
                continue
            magnitudes = sorted(abs(e) for e in errors)
            entry[metric] = {
                "points": len(errors), "median_abs_pct": statistics.median(magnitudes),
                "p90_abs_pct": (statistics.quantiles(magnitudes, n=10, method="inclusive")[-1]
                                if len(magnitudes) > 1 else magnitudes[0]),
                "median_signed_pct": statistics.median(errors)}
        out.append(entry)
    return out


def summary_json(rows: Sequence[ServingComparison]) -> str:
    """The per-platform summary of every point, as `SUMMARY` holds it."""
    import json

    return json.dumps({"table": TABLE.name, "command": "infersim validate --serving", "platforms": summary(rows)},
                      indent=1, allow_nan=False) + "\n"


def published_check(gpu: str) -> dict[str, object] | None:
    """The end-to-end check of `gpu` from `SUMMARY`: published points, their models, and per metric the median and p90
    |error| and the median signed error (%); None when no published point runs on it."""
    import json

    for entry in json.loads(SUMMARY.read_text())["platforms"]:
        if entry["platform"] == gpu:
            return {"gpu": gpu, "points": entry["points"], "models": entry["models"],
                    **{f"{metric}_{key}": round(value, 1) for metric in METRICS if metric in entry
                       for key, value in entry[metric].items() if key != "points"},
                    "command": f"infersim validate --serving --platform {gpu}"}
    return None


def figure_html(rows: Sequence[ServingComparison]) -> str:
    """An interactive plotly page: predicted against published for each metric, log axes, one colour per platform,
    the y = x line and +-15 % beside it."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    titles = {"output_tok_s_per_gpu": "output tok/s per GPU", "tpot_ms_median": "median TPOT (ms)",
              "ttft_ms_median": "median TTFT (ms)"}
    fig = make_subplots(rows=1, cols=len(METRICS), subplot_titles=[titles[m] for m in METRICS])
    platforms = sorted({r.point.platform for r in rows})
    palette = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2")
    for col, metric in enumerate(METRICS, start=1):
        values = [v for r in rows for v in (r.point.published.get(metric), r.predicted.get(metric)) if v]
        if not values:
            continue
        low, high = min(values) / 1.5, max(values) * 1.5
        for scale, dash in ((1.0, "solid"), (1.15, "dot"), (1 / 1.15, "dot")):
            fig.add_trace(go.Scatter(x=[low, high], y=[low * scale, high * scale], mode="lines", showlegend=False,
                                     line={"color": "#888", "dash": dash, "width": 1}, hoverinfo="skip"),
                          row=1, col=col)
        for i, platform in enumerate(platforms):
            members = [r for r in rows if r.point.platform == platform and metric in r.errors]
            fig.add_trace(go.Scatter(
                x=[r.point.published[metric] for r in members], y=[r.predicted[metric] for r in members],
                mode="markers", name=platform, legendgroup=platform, showlegend=col == 1,
                marker={"color": palette[i % len(palette)], "size": 8},
                text=[f"{r.point.label}<br>error {r.errors[metric] * 100:+.1f} %" for r in members],
                hovertemplate="%{text}<br>published %{x:.4g}<br>predicted %{y:.4g}<extra></extra>"),
                row=1, col=col)
        fig.update_xaxes(type="log", title_text="published", row=1, col=col)
        fig.update_yaxes(type="log", title_text="predicted", row=1, col=col)
    fig.update_layout(title="Predicted against published end-to-end serving results (dotted: +-15 %)",
                      height=520, width=1500, template="plotly_white")
    return fig.to_html(include_plotlyjs=True, full_html=True)  # opens offline
