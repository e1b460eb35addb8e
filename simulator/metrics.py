"""Serving metrics from the engine's request and step DataFrames: the `infersim run --json` summary.

Definitions follow `vllm bench serve` and InferenceX so that simulated points overlay measured ones:

- A request arrives (`arrival_s`) and is sent (`sent_s`) when the client lets it go: at once without a
  concurrency cap, else when one of the cap's slots frees. Like `vllm bench serve --max-concurrency`, every
  latency is measured from the send; the client-side wait, queue_wait = sent_s - arrival_s, is reported apart.
- TTFT = first_token_s - sent_s. E2E latency (e2el) = finish_s - sent_s. `first_token_s` and `finish_s` are when
  the client has those tokens: the serving front end's time after the engine's step made them
  (`simulator.engine_profiles.FrontEnd`).
- TPOT per request = (finish_s - first_token_s) / (output_tokens - 1), only for requests with at least
  2 output tokens (vLLM's definition; it excludes TTFT).
- Interactivity (tok/s/user) = 1 / TPOT percentile: P50 = 1 / median TPOT, P90 = 1 / P90 TPOT
  (InferenceX `*_intvty`). P90 interactivity is the slow end, so it is the smaller number.
- Total tokens count every prompt token, cached or not, plus the output tokens (InferenceX counts reused
  input). Tokens per dollar = total_tok_per_s_per_gpu * 3600 / usd_per_gpu_hour.
- Percentiles use numpy's default ("linear") method: for n sorted samples, the q-th percentile
  interpolates linearly at position (n - 1) * q / 100.

ITL is approximated from the step table, since the engine does not record per-token timestamps. A step
of duration d with `decode_seqs` plain decodes contributes the value d (one token each) with weight
`decode_seqs`; its `verify_seqs` sequences contribute d / k with weight `verify_seqs`, where
k = spec_committed_tokens / spec_cycles is the step's mean tokens committed per verify sequence (k = 1
when no cycle completed). So each sequence in each step is one sample, its step time shared evenly among
the tokens it committed. Percentiles of these weighted samples equal numpy's linear percentile of the
sample list with every value repeated `weight` times; they are computed without expanding it.

Undefined values (no samples, zero denominators) are None, which JSON writes as null.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

REQUEST_COLUMNS: dict[str, str] = {
    "request_id": "int64",
    "session_id": "int64",
    "turn": "int64",
    "arrival_s": "float64",
    "sent_s": "float64",  # when the client sent it (arrival_s unless a concurrency cap held it)
    "scheduled_s": "float64",
    "first_token_s": "float64",
    "finish_s": "float64",
    "prompt_tokens": "int64",
    "cached_tokens": "int64",
    "output_tokens": "int64",
    "preemptions": "int64",
}

STEP_COLUMNS: dict[str, str] = {
    "start_s": "float64",
    "end_s": "float64",
    "prefill_tokens": "int64",
    "decode_seqs": "int64",
    "verify_seqs": "int64",
    "committed_tokens": "int64",
    "spec_cycles": "int64",
    "spec_committed_tokens": "int64",
    "kv_blocks_used": "int64",
    "kv_blocks_total": "int64",
    "in_system": "int64",  # requests waiting or running when the step started (for Little's law)
    "in_system_end": "int64",  # ... and when it ended, arrivals during the step included
}

STEP_COUNT_COLUMNS = [name for name, dtype in STEP_COLUMNS.items() if dtype == "int64"]

# A column a table may lack, and the column it then equals: a requests table from before `sent_s` existed, or
# from a source without a client-side cap, sent every request when it arrived.
DEFAULT_COLUMNS = {"sent_s": "arrival_s"}

PERCENTILES = (50, 90, 99)

Rows = Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Any]]


def request_rows_to_frame(rows: Rows) -> pd.DataFrame:
    """Build the requests frame with exact columns and dtypes from engine rows (dicts, or columns of arrays)."""
    return _to_frame(rows, REQUEST_COLUMNS, "requests")


def step_rows_to_frame(rows: Rows) -> pd.DataFrame:
    """Build the steps frame with exact columns and dtypes from engine rows (dicts, or columns of arrays)."""
    return _to_frame(rows, STEP_COLUMNS, "steps")


def _to_frame(rows: Rows, schema: Mapping[str, str], table: str) -> pd.DataFrame:
    """Turn rows or columns into a frame, so that both engine styles share one validation. Columns of arrays are
    taken as they are, not copied: a copy would hold every value twice at the run's peak."""
    frame = pd.DataFrame(rows, copy=False) if len(rows) else pd.DataFrame(columns=list(schema))
    return _conform(frame, schema, table)


def _conform(frame: pd.DataFrame, schema: Mapping[str, str], table: str) -> pd.DataFrame:
    """Return the schema's columns with its dtypes; a bad table fails here, naming the column, not later."""
    if len(frame) == 0:
        return pd.DataFrame({name: pd.Series([], dtype=dtype) for name, dtype in schema.items()})
    conformant = list(frame.columns) == list(schema) and all(
        str(frame[name].dtype) == dtype for name, dtype in schema.items()) and frame.index.equals(
        pd.RangeIndex(len(frame)))
    defaults = {name: source for name, source in DEFAULT_COLUMNS.items()
                if name in schema and name not in frame.columns and source in frame.columns}
    if defaults:
        frame = frame.assign(**{name: frame[source] for name, source in defaults.items()})
    missing = [name for name in schema if name not in frame.columns]
    if missing:
        raise ValueError(f"{table} is missing column(s) {missing}; expected {list(schema)}")
    out = {}
    for name, dtype in schema.items():
        column = frame[name]
        if column.isna().any():
            rows = list(column.index[column.isna()][:5])
            raise ValueError(f"{table} column {name!r} has missing values (first rows {rows})")
        try:
            numeric = pd.to_numeric(column, errors="raise")
        except (TypeError, ValueError) as err:
            raise ValueError(f"{table} column {name!r} is not numeric: {err}") from err
        if dtype == "int64" and not np.all(np.equal(np.mod(numeric, 1), 0)):
            raise ValueError(f"{table} column {name!r} must hold whole numbers")
        if not np.all(np.isfinite(numeric.to_numpy(dtype="float64"))):
            raise ValueError(f"{table} column {name!r} has infinite values")
        if not conformant:
            out[name] = numeric.astype(dtype).reset_index(drop=True)
    return frame if conformant else pd.DataFrame(out)  # a conformant frame is checked, not copied


def _check_requests(requests: pd.DataFrame) -> None:
    """Reject orderings no engine can produce, so a bookkeeping bug does not become a plausible latency."""
    checks = {
        "sent_s < arrival_s": requests["sent_s"] < requests["arrival_s"],
        "first_token_s < arrival_s": requests["first_token_s"] < requests["arrival_s"],
        "first_token_s < sent_s": requests["first_token_s"] < requests["sent_s"],
        "finish_s < first_token_s": requests["finish_s"] < requests["first_token_s"],
        "cached_tokens > prompt_tokens": requests["cached_tokens"] > requests["prompt_tokens"],
        "negative token count": (requests[["prompt_tokens", "cached_tokens", "output_tokens"]] < 0).any(axis=1),
    }
    for problem, bad in checks.items():
        if bad.any():
            ids = list(requests.loc[bad, "request_id"][:5])
            raise ValueError(f"requests: {problem} for request_id {ids}")


def _check_steps(steps: pd.DataFrame) -> None:
    """Reject steps with negative time or capacity, which would give negative or infinite weights."""
    checks = {
        "end_s < start_s": steps["end_s"] < steps["start_s"],
        "kv_blocks_total <= 0": steps["kv_blocks_total"] <= 0,
        "negative count": (steps[STEP_COUNT_COLUMNS] < 0).any(axis=1),
        "kv_blocks_used > kv_blocks_total": steps["kv_blocks_used"] > steps["kv_blocks_total"],
        "spec_cycles > verify_seqs": steps["spec_cycles"] > steps["verify_seqs"],
        "spec_committed_tokens < spec_cycles": steps["spec_committed_tokens"] < steps["spec_cycles"],
    }
    for problem, bad in checks.items():
        if bad.any():
            raise ValueError(f"steps: {problem} at row(s) {list(steps.index[bad][:5])}")


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """numpy's linear percentile of `values` each repeated `weights` times, without building that array."""
    values = np.asarray(values, dtype="float64")
    weights = np.asarray(weights, dtype="int64")
    if values.shape != weights.shape:
        raise ValueError(f"values {values.shape} and weights {weights.shape} differ in shape")
    if np.any(weights < 0):
        raise ValueError("weights must be non-negative")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q={q} is outside [0, 100]")
    keep = weights > 0
    values, weights = values[keep], weights[keep]
    if values.size == 0:
        raise ValueError("weighted_percentile needs at least one sample with positive weight")
    order = np.argsort(values, kind="stable")
    values, ends = values[order], np.cumsum(weights[order])
    position = (int(ends[-1]) - 1) * q / 100.0
    low, high = math.floor(position), math.ceil(position)
    # The expanded element at index i is the first value whose cumulative count exceeds i.
    at_low = values[np.searchsorted(ends, low, side="right")]
    at_high = values[np.searchsorted(ends, high, side="right")]
    return float(at_low + (at_high - at_low) * (position - low))


def _stats(values: np.ndarray, weights: np.ndarray | None = None) -> dict[str, float | None]:
    """p50/p90/p99/mean as plain floats, or all None when there are no samples."""
    values = np.asarray(values, dtype="float64")
    if weights is None:
        weights = np.ones(values.shape, dtype="int64")
    weights = np.asarray(weights, dtype="int64")
    total = int(weights.sum())
    if total == 0:
        return {**{f"p{q}": None for q in PERCENTILES}, "mean": None}
    stats: dict[str, float | None] = {f"p{q}": weighted_percentile(values, weights, q) for q in PERCENTILES}
    stats["mean"] = float(np.dot(values, weights) / total)
    return stats


def ttft_s(requests: pd.DataFrame) -> np.ndarray:
    """Time to first token per request from its send, the server's queueing included (vLLM's definition)."""
    return (requests["first_token_s"] - requests["sent_s"]).to_numpy(dtype="float64")


def e2el_s(requests: pd.DataFrame) -> np.ndarray:
    """End-to-end latency per request: from its send to its last token (vLLM's e2el)."""
    return (requests["finish_s"] - requests["sent_s"]).to_numpy(dtype="float64")


def queue_wait_s(requests: pd.DataFrame) -> np.ndarray:
    """Time per request between its arrival and its send: the client holding it under a concurrency cap."""
    return (requests["sent_s"] - requests["arrival_s"]).to_numpy(dtype="float64")


def tpot_s(requests: pd.DataFrame) -> np.ndarray:
    """Time per output token after the first, per request with at least 2 output tokens (vLLM's rule)."""
    many = requests[requests["output_tokens"] >= 2]
    decode_s = (many["finish_s"] - many["first_token_s"]).to_numpy(dtype="float64")
    return decode_s / (many["output_tokens"].to_numpy(dtype="float64") - 1.0)


def itl_samples(steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Approximate inter-token gaps and their weights (sequences) from steps; see the module docstring."""
    duration_s = (steps["end_s"] - steps["start_s"]).to_numpy(dtype="float64")
    cycles = steps["spec_cycles"].to_numpy(dtype="float64")
    committed = steps["spec_committed_tokens"].to_numpy(dtype="float64")
    tokens_per_verify = np.divide(committed, cycles, out=np.ones_like(cycles), where=cycles > 0)
    values = np.concatenate([duration_s, duration_s / tokens_per_verify])
    weights = np.concatenate([steps["decode_seqs"].to_numpy(), steps["verify_seqs"].to_numpy()]).astype("int64")
    keep = weights > 0
    return values[keep], weights[keep]


def _time_weighted_mean(values: np.ndarray, duration_s: np.ndarray) -> float | None:
    """Mean over busy engine time (idle gaps between steps excluded); None when no step took time."""
    total_s = float(duration_s.sum())
    return float(np.dot(values, duration_s) / total_s) if total_s > 0 else None


def _ratio(numerator: float, denominator: float) -> float | None:
    """numerator / denominator as a float, or None when the denominator is zero."""
    return float(numerator / denominator) if denominator else None


def _reciprocal(value: float | None) -> float | None:
    """1 / value, or None when it is undefined or zero (a zero TPOT would be infinite interactivity)."""
    return 1.0 / value if value else None


def _check_arguments(gpus: int, usd_per_gpu_hour: float, simulated_s: float, wall_s: float) -> None:
    """Reject run parameters that would make rates negative, infinite or meaningless."""
    if isinstance(gpus, bool) or not isinstance(gpus, int | np.integer) or gpus < 1:
        raise ValueError(f"gpus must be a positive integer, got {gpus!r}")
    if not math.isfinite(usd_per_gpu_hour) or usd_per_gpu_hour <= 0:
        raise ValueError(f"usd_per_gpu_hour must be positive and finite, got {usd_per_gpu_hour!r}")
    if not math.isfinite(simulated_s) or simulated_s < 0:
        raise ValueError(f"simulated_s must be non-negative and finite, got {simulated_s!r}")
    if not math.isfinite(wall_s) or wall_s <= 0:
        raise ValueError(f"wall_s must be positive and finite, got {wall_s!r}")


def summarize(
    requests: pd.DataFrame,
    steps: pd.DataFrame,
    *,
    gpus: int,
    usd_per_gpu_hour: float,
    simulated_s: float,
    wall_s: float,
) -> dict[str, Any]:
    """The `infersim run --json` summary (the run summary's contract keys plus batch and KV extras), JSON-ready."""
    _check_arguments(gpus, usd_per_gpu_hour, simulated_s, wall_s)
    gpus, usd_per_gpu_hour, simulated_s, wall_s = int(gpus), float(usd_per_gpu_hour), float(simulated_s), float(wall_s)
    requests = _conform(requests, REQUEST_COLUMNS, "requests")
    steps = _conform(steps, STEP_COLUMNS, "steps")
    _check_requests(requests)
    _check_steps(steps)

    tpot = tpot_s(requests)
    tpot_stats = _stats(tpot)
    prompt_tokens = int(requests["prompt_tokens"].sum())
    output_tokens = int(requests["output_tokens"].sum())
    output_rate = _ratio(output_tokens, simulated_s)
    total_rate = _ratio(prompt_tokens + output_tokens, simulated_s)
    total_rate_per_gpu = None if total_rate is None else total_rate / gpus
    spec_cycles = int(steps["spec_cycles"].sum())
    duration_s = (steps["end_s"] - steps["start_s"]).to_numpy(dtype="float64")
    batch = (steps["decode_seqs"] + steps["verify_seqs"]).to_numpy(dtype="float64")
    kv_fraction = (steps["kv_blocks_used"] / steps["kv_blocks_total"]).to_numpy(dtype="float64")

    return {
        "requests_completed": len(requests),
        "simulated_s": simulated_s,
        "wall_s": wall_s,
        "sim_speedup": simulated_s / wall_s,
        "gpus": gpus,
        "ttft_s": _stats(ttft_s(requests)),
        "tpot_s": tpot_stats,
        "itl_s": _stats(*itl_samples(steps)),
        "e2el_s": _stats(e2el_s(requests)),
        "queue_wait_s": _stats(queue_wait_s(requests)),
        "interactivity_tok_per_s_per_user": {
            "p50": _reciprocal(tpot_stats["p50"]),
            "p90": _reciprocal(tpot_stats["p90"]),
        },
        "output_tok_per_s": output_rate,
        "total_tok_per_s": total_rate,
        "output_tok_per_s_per_gpu": None if output_rate is None else output_rate / gpus,
        "total_tok_per_s_per_gpu": total_rate_per_gpu,
        "tokens_per_dollar": None if total_rate_per_gpu is None else total_rate_per_gpu * 3600.0 / usd_per_gpu_hour,
        "prefix_hit_rate": _ratio(int(requests["cached_tokens"].sum()), prompt_tokens),
        "spec_tokens_per_cycle": float(steps["spec_committed_tokens"].sum() / spec_cycles) if spec_cycles else 1.0,
        "mean_batch_decode_seqs": _time_weighted_mean(batch, duration_s),
        "kv_utilization_mean": _time_weighted_mean(kv_fraction, duration_s),
    }
