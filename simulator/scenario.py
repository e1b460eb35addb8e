"""Scenarios: YAML (plus overlays and `--set`) into a typed Scenario; every unknown key or bad value is named.

A scenario has sections hardware, model, precision, parallel, serving, cache, spec_decode,
collectives, kernels, workload and cost. A design change is a partial scenario deep-merged onto a
base; `--set a.b=c` is the same overlay on the command line.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import yaml

from hwmodels.specfile import FieldError
from workloads.deployment import KernelOptions

SCENARIO_DIR = Path(__file__).parent / "scenarios"
MAX_DRAFTS = 64
DEFAULT_SCENARIO = SCENARIO_DIR / "default.yaml"


class ScenarioError(ValueError):
    """A scenario that cannot be used; the message names the file or key and the valid choices."""


class WorkloadKind(Enum):
    AGENTIC = "agentic"
    RANDOM = "random"
    TRACE = "trace"


class ArrivalKind(Enum):
    POISSON = "poisson"
    FIXED = "fixed"
    INFINITE = "infinite"
    TRACE = "trace"


@dataclass(frozen=True)
class Hardware:
    platform: str = "mi355x-8"  # a platform spec name (hwmodels/specs/platforms)


@dataclass(frozen=True)
class ModelChoice:
    name: str = "kimi-k3"  # a catalog model (workloads/models)


def _at_least(section: object, minimum: float, *names: str) -> None:
    """Range checks of a section's fields, run when it is built: errors carry the key they name."""
    for name in names:
        value = getattr(section, name)
        if value < minimum:
            raise FieldError(name, f"must be at least {minimum}, got {value}")


def _within(section: object, name: str, low: float, high: float) -> None:
    value = getattr(section, name)
    if not low <= value <= high:
        raise FieldError(name, f"must lie in [{low}, {high}], got {value}")


@dataclass(frozen=True)
class Parallel:
    tp: int = 8
    dcp: int = 1
    ep: int = 1

    def __post_init__(self) -> None:
        _at_least(self, 1, "tp", "dcp", "ep")


@dataclass(frozen=True)
class Serving:
    max_num_seqs: int = 64  # vLLM --max-num-seqs
    max_num_batched_tokens: int = 8192  # vLLM --max-num-batched-tokens (token budget per step)
    gpu_memory_utilization: float = 0.9
    max_concurrency: int = 0  # vllm bench serve --max-concurrency (0: no cap)
    max_model_len: int = 262144  # vLLM --max-model-len: longer requests (prompt + output) are rejected

    def __post_init__(self) -> None:
        _at_least(self, 1, "max_num_seqs", "max_num_batched_tokens", "max_model_len")
        _within(self, "gpu_memory_utilization", 0.01, 1.0)


@dataclass(frozen=True)
class Cache:
    block_tokens: int = 16
    prefix_caching: bool = True
    host_offload_gb_per_gpu: float = 0.0  # host DRAM tier per GPU (0: no offload)
    offload_overlap: bool = True  # host copies overlap compute (False: they add to the step)
    kda_checkpoint_interval: int = 2048  # tokens between saved KDA states (Kimi K3 study, mechanism 2)
    align_kda_checkpoints: bool = False  # save KDA state with each MLA block so resume points agree

    def __post_init__(self) -> None:
        _at_least(self, 1, "block_tokens", "kda_checkpoint_interval")


@dataclass(frozen=True)
class SpecDecode:
    drafts: int = 0  # draft tokens per cycle (0: off)
    acceptance_rates: tuple[float, ...] = ()  # unconditional per-position rates r_1..r_k
    acceptance_alpha: float = 0.0  # geometric per-token acceptance (used when rates are empty)
    mean_tokens_per_cycle: float = 0.0  # vLLM's synthetic minimum-variance schedule (used when > 0)

    def __post_init__(self) -> None:
        # Assumption: no drafter proposes more than 64 tokens a cycle (vLLM's recipes use 1 to 7).
        _within(self, "drafts", 0, MAX_DRAFTS)
        _within(self, "acceptance_alpha", 0.0, 1.0)
        if self.drafts and self.mean_tokens_per_cycle:
            _within(self, "mean_tokens_per_cycle", 1.0, self.drafts + 1)


@dataclass(frozen=True)
class Collectives:
    quickreduce: str = ""  # QuickReduce codec for all-reduce on ROCm: fp, int8, int6, int4, int3, fp4 ("" off)


@dataclass(frozen=True)
class Workload:
    kind: WorkloadKind = WorkloadKind.AGENTIC
    seed: int = 0
    sessions: int = 64  # agentic sessions
    turns_mean: float = 40.0
    num_prompts: int = 256  # random workload
    input_len: int = 4096
    output_len: int = 10
    range_ratio: float = 0.0
    arrival: ArrivalKind = ArrivalKind.POISSON
    rate_per_s: float = 0.5  # sessions per second (agentic) or requests per second (random)
    burstiness: float = 1.0  # poisson arrivals' gap shape, as vllm bench serve --burstiness (1: exponential)
    trace_path: str = ""
    trace_format: str = ""  # mooncake, azure or csv
    duration_s: float = 0.0  # stop admitting new requests after this simulated time (0: run the stream out)

    def __post_init__(self) -> None:
        _at_least(self, 1, "sessions", "num_prompts", "input_len", "output_len")
        _within(self, "range_ratio", 0.0, 0.999)
        if self.arrival in (ArrivalKind.POISSON, ArrivalKind.FIXED) and self.rate_per_s <= 0:
            raise FieldError("rate_per_s", f"must be positive for {self.arrival.value} arrivals, got {self.rate_per_s}")
        if not 0 < self.burstiness < math.inf:
            raise FieldError("burstiness", f"must be positive and finite, got {self.burstiness} "
                                           "(even gaps: workload.arrival: fixed)")


@dataclass(frozen=True)
class Cost:
    usd_per_gpu_hour: float = 0.0  # 0: the GPU spec's TCO
    model: str = "cycle"  # how kernels are timed: "cycle" (workgroup programs) or "roofline" (the older floor)

    def __post_init__(self) -> None:
        if self.model not in ("cycle", "roofline"):
            raise FieldError("model", f"unknown cost model {self.model!r} (valid: cycle, roofline)")


@dataclass(frozen=True)
class Scenario:
    """Everything one simulated serving run needs."""

    name: str = "scenario"
    hardware: Hardware = field(default_factory=Hardware)
    model: ModelChoice = field(default_factory=ModelChoice)
    precision: Mapping[str, str] = field(default_factory=dict)  # weight part or "kv_cache" -> dtype
    parallel: Parallel = field(default_factory=Parallel)
    serving: Serving = field(default_factory=Serving)
    cache: Cache = field(default_factory=Cache)
    spec_decode: SpecDecode = field(default_factory=SpecDecode)
    collectives: Collectives = field(default_factory=Collectives)
    kernels: KernelOptions = field(default_factory=KernelOptions)
    workload: Workload = field(default_factory=Workload)
    cost: Cost = field(default_factory=Cost)


def _convert(cls_hint: Any, raw: Any, key: str) -> Any:
    hint = cls_hint
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if dataclasses.is_dataclass(hint):
        return build(hint, raw, key)
    if isinstance(hint, type) and issubclass(hint, Enum):
        try:
            return hint(raw.lower() if isinstance(raw, str) else raw)
        except ValueError:
            choices = ", ".join(str(m.value) for m in hint)
            raise ScenarioError(f"{key}: {raw!r} is not one of {choices}") from None
    origin = typing.get_origin(hint)
    if origin in (dict, Mapping):
        if not isinstance(raw, Mapping):
            raise ScenarioError(f"{key}: expected a mapping, got {type(raw).__name__}")
        return types.MappingProxyType({str(k): str(v) for k, v in raw.items()})
    if origin is tuple:
        if not isinstance(raw, list | tuple) or not all(isinstance(v, int | float) and not isinstance(v, bool)
                                                         for v in raw):
            raise ScenarioError(f"{key}: expected a list of numbers, got {raw!r}")
        return tuple(float(v) for v in raw)
    if hint is bool:
        if not isinstance(raw, bool):
            raise ScenarioError(f"{key}: expected true or false, got {raw!r}")
        return raw
    if hint is int:
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise ScenarioError(f"{key}: expected a whole number, got {raw!r}")
        if raw < 0:
            raise ScenarioError(f"{key}: must not be negative, got {raw}")
        return raw
    if hint is float:
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise ScenarioError(f"{key}: expected a number, got {raw!r}")
        if raw < 0:
            raise ScenarioError(f"{key}: must not be negative, got {raw}")
        return float(raw)
    if hint is str:
        if not isinstance(raw, str):
            raise ScenarioError(f"{key}: expected text, got {raw!r}")
        return raw
    raise TypeError(f"unsupported scenario field type {hint!r} at {key}")  # a programming error


def build(cls: type, raw: Any, prefix: str = "") -> Any:
    """A scenario dataclass from a mapping: unknown keys list the valid ones, bad values name the key."""
    where = prefix or "scenario"
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ScenarioError(f"{where}: expected a mapping of keys to values, got {type(raw).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    values = {}
    for key, value in raw.items():
        if key not in fields:
            raise ScenarioError(f"{where}: unknown key {key!r} (valid keys: {', '.join(fields)})")
        values[key] = _convert(hints[key], value, f"{prefix}.{key}" if prefix else str(key))
    try:
        return cls(**values)
    except FieldError as err:
        raise ScenarioError(f"{where}.{err.key}: {err}") from None
    except ValueError as err:
        raise ScenarioError(f"{where}: {err}") from None


def deep_merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """`overlay` onto `base`: mappings merge key by key, anything else replaces."""
    merged = dict(base)
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def read_scenario_file(path: str | Path) -> dict[str, Any]:
    """A scenario or overlay file, parsed with the safe loader; errors name the file and line."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as err:
        raise ScenarioError(f"{path}: cannot read: {err.strerror}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f"line {mark.line + 1}: " if mark is not None else ""
        raise ScenarioError(f"{path}: {line}malformed YAML: {getattr(err, 'problem', err)}") from None
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ScenarioError(f"{path}: a scenario is a mapping of sections, got {type(raw).__name__}")
    return dict(raw)


def parse_set(items: list[str]) -> dict[str, Any]:
    """`--set a.b=c` pairs as a nested overlay; values are read as YAML scalars (8, true, 0.5, int4)."""
    overlay: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ScenarioError(f"--set {item!r}: expected SECTION.KEY=VALUE")
        value = yaml.safe_load(text) if text else ""
        node = overlay
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ScenarioError(f"--set {item!r}: {part} is set twice")
        node[parts[-1]] = value
    return overlay


def kernel_options(pairs: list[str]) -> KernelOptions:
    """`--option KEY=VALUE` pairs: the scenario's `kernels` section, read by the same converter as `--set`."""
    overlay = parse_set([f"kernels.{pair}" for pair in pairs])
    return build(KernelOptions, overlay.get("kernels", {}), "kernels")


def load_scenario(path: str | Path | None = None, overlays: list[str | Path] = (), sets: list[str] = ()) -> Scenario:
    """The default scenario (or `path`), with overlay files and `--set` pairs merged on top, in order."""
    raw = read_scenario_file(path or DEFAULT_SCENARIO)
    for overlay in overlays:
        raw = deep_merge(raw, read_scenario_file(overlay))
    raw = deep_merge(raw, parse_set(list(sets)))
    return build(Scenario, raw)


def to_mapping(scenario: Any) -> dict[str, Any]:
    """A scenario (or any of its sections) as plain YAML-ready values: every field, enums as their values,
    tuples as lists, mappings as dicts; `build(Scenario, to_mapping(s)) == s`."""

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, Enum):
            return value.value
        if isinstance(value, tuple | list):
            return [plain(v) for v in value]
        if isinstance(value, Mapping):
            return {str(k): plain(v) for k, v in value.items()}
        return value

    return plain(scenario)
