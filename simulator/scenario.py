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

from hwmodels.specfile import FieldError, YamlError, parse_yaml, range_problem, ranged, read_yaml_file, shown
from workloads.attention_backends import ENGINES
from workloads.deployment import AUTO_SPLITS, KernelOptions

SCENARIO_DIR = Path(__file__).parent / "scenarios"
MAX_DRAFTS = 64
MAX_SEED = 2**64 - 1
# Ranges of the scenario's numbers, checked by `build` with the key path (hwmodels/specfile.py: ranged).
GPUS = "a platform has at most 1,024 GPUs (hwmodels/spec.py Platform.gpus)"
MAX_TOKENS = 10_000_000
TOKENS = "assumption: no model's context reaches 10M tokens (the longest published are ~1M-10M)"
MAX_REQUESTS = 10_000_000
REQUESTS = "assumption: 10M requests; the memory estimate (stream_bytes) bounds it further"
# The longest context `serving.max_model_len: -1` allows. Assumption: 262,144 tokens (256K, a long native context
# of today's open models); the catalog's model files do not state a context length, where vLLM reads the model's.
AUTO_MAX_MODEL_LEN = 262_144
MAX_STREAM_BYTES = 8e9  # assumption: a request stream larger than 8 GB is a typo, not a study
ROW_BYTES = 512
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


def _within(section: object, name: str, low: float, high: float) -> None:
    value = getattr(section, name)
    if not low <= value <= high:
        raise FieldError(name, f"must lie in [{low}, {high}], got {value}")


@dataclass(frozen=True)
class Parallel:
    tp: int = ranged(1, 1024, GPUS, 8)
    dcp: int = ranged(1, 1024, GPUS, 1)
    ep: int = ranged(1, 1024, GPUS, 1)


# Scenario fields that also take the word "auto", and the value it stands for.
AUTO_VALUES = {"mla_num_splits": AUTO_SPLITS, "cuda_graph_max_bs": 0}


@dataclass(frozen=True)
class Serving:
    # vLLM --max-num-seqs
    max_num_seqs: int = ranged(1, 65536, "assumption: a batch of 65,536 sequences is far past any GPU's KV", 64)
    # vLLM --max-num-batched-tokens (token budget per step)
    max_num_batched_tokens: int = ranged(1, MAX_TOKENS, TOKENS, 8192)
    gpu_memory_utilization: float = ranged(
        0.01, 1.0, "a fraction of the device memory the runtime reports, as vLLM's --gpu-memory-utilization", 0.9)
    # vllm bench serve --max-concurrency (0: no cap)
    max_concurrency: int = ranged(0, MAX_REQUESTS, REQUESTS, 0)
    # vLLM --max-model-len: longer requests (prompt + output) are rejected. -1 (the default) is vLLM's
    # `--max-model-len auto` (vllm-project/vllm#29431): the longest request the KV cache holds, at most
    # AUTO_MAX_MODEL_LEN; a value the KV cache cannot hold is refused, as vLLM refuses to start.
    max_model_len: int = ranged(-1, MAX_TOKENS, TOKENS, -1)
    # the serving engine (vllm, sglang, trtllm): its MLA decode backend where the scenario names none
    # (workloads.attention_backends.default_mla_backend), its scheduler's prefill policy (vLLM and TensorRT-LLM mix
    # prefill into decode steps, SGLang runs prefill-only steps first: server_args.py enable_mixed_chunk False), and
    # what simulator/engine_profiles.py holds: graph capture, eager host cost, when a request joins a step
    engine: str = "vllm"
    # the largest step the engine replays as captured graphs (simulator/engine_profiles.py), "auto" (0): the
    # engine's default. SGLang --cuda-graph-max-bs and TensorRT-LLM cuda_graph_config.max_batch_size (requests of
    # a decode batch; steps with prefill run eagerly); vLLM max_cudagraph_capture_size (tokens of a step)
    cuda_graph_max_bs: int = ranged(0, MAX_TOKENS, TOKENS, 0)
    # SGLang --scheduler-recv-interval: while decoding, the scheduler takes new requests every this many steps
    recv_interval: int = ranged(1, 1_000_000, "assumption: SGLang's recipes poll every 1 to 30 steps", 1)

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise FieldError("engine", f"{self.engine!r} is not one of {', '.join(ENGINES)}")
        if self.recv_interval > 1 and self.engine != "sglang":
            raise FieldError("recv_interval", f"is SGLang's --scheduler-recv-interval; serving.engine is "
                                              f"{self.engine!r} (set serving.engine: sglang, or leave it at 1)")
        if self.max_model_len == 0:
            raise FieldError("max_model_len", "must be a token count >= 1, or -1 for the longest request the KV "
                                              "cache holds (vLLM's --max-model-len auto), got 0")


@dataclass(frozen=True)
class Cache:
    # vLLM's block sizes are 1 to 256 tokens; assumption: a page past 65,536 tokens is no page
    block_tokens: int = ranged(1, 65536, "assumption: vLLM pages are 1 to 256 tokens; 65,536 leaves room", 16)
    prefix_caching: bool = True
    # host DRAM tier per GPU (0: no offload)
    host_offload_gb_per_gpu: float = ranged(0.0, 100_000.0, "assumption: no host has 100 TB of DRAM per GPU", 0.0)
    offload_overlap: bool = True  # host copies overlap compute (False: they add to the step)
    # tokens between saved KDA states (Kimi K3 study, mechanism 2)
    kda_checkpoint_interval: int = ranged(1, MAX_TOKENS, TOKENS, 2048)
    align_kda_checkpoints: bool = False  # save KDA state with each MLA block so resume points agree


@dataclass(frozen=True)
class SpecDecode:
    # draft tokens per cycle (0: off)
    drafts: int = ranged(0, MAX_DRAFTS, "assumption: no drafter proposes more than 64; vLLM's recipes use 1 to 7", 0)
    # unconditional per-position rates r_1..r_k
    acceptance_rates: tuple[float, ...] = ranged(0.0, 1.0, "a probability", ())
    # geometric per-token acceptance (used when rates are empty)
    acceptance_alpha: float = ranged(0.0, 1.0, "a probability", 0.0)
    # vLLM's synthetic minimum-variance schedule (used when > 0)
    mean_tokens_per_cycle: float = ranged(0.0, MAX_DRAFTS + 1, "at most drafts + 1 tokens a cycle", 0.0)

    def __post_init__(self) -> None:
        if len(self.acceptance_rates) > MAX_DRAFTS:
            raise FieldError("acceptance_rates", f"{len(self.acceptance_rates)} rates (valid: at most {MAX_DRAFTS})")
        if self.drafts and self.mean_tokens_per_cycle and not 1.0 <= self.mean_tokens_per_cycle <= self.drafts + 1:
            raise FieldError("mean_tokens_per_cycle", f"must lie in [1.0, {self.drafts + 1}] at {self.drafts} drafts, "
                             f"got {self.mean_tokens_per_cycle} (a mean holds for one draft count: to vary "
                             "drafts, give acceptance_rates or acceptance_alpha and set mean_tokens_per_cycle to 0)")


@dataclass(frozen=True)
class Collectives:
    quickreduce: str = ""  # QuickReduce codec for all-reduce on ROCm: fp, int8, int6, int4, int3, fp4 ("" off)


@dataclass(frozen=True)
class Workload:
    kind: WorkloadKind = WorkloadKind.AGENTIC
    seed: int = ranged(0, MAX_SEED, "numpy's SeedSequence takes any 64-bit seed", 0)
    sessions: int = ranged(1, MAX_REQUESTS, REQUESTS, 64)  # agentic sessions
    # geometric turns per session; workloads/traces.py AgenticConfig caps a session at 400 turns
    turns_mean: float = ranged(1.0, 400.0, "AgenticConfig.max_turns is 400", 40.0)
    # The random workload's defaults are vllm bench serve's for its random dataset: --num-prompts 1000,
    # --random-input-len 1024, --random-output-len 128, --request-rate inf (vllm/benchmarks/serve.py and
    # vllm/benchmarks/datasets.py at vllm-project/vllm@009e6d4a)
    num_prompts: int = ranged(1, MAX_REQUESTS, REQUESTS, 1000)  # random workload
    input_len: int = ranged(1, MAX_TOKENS, TOKENS, 1024)
    output_len: int = ranged(1, MAX_TOKENS, TOKENS, 128)
    range_ratio: float = ranged(0.0, 0.999, "vllm bench serve's --random-range-ratio lies in [0, 1)", 0.0)
    # None: the kind's own (random: infinite, every request at once, as vllm's --request-rate inf; otherwise poisson)
    arrival: ArrivalKind | None = None
    # sessions per second (agentic) or requests per second (random)
    rate_per_s: float = ranged(0.0, 1e9, "assumption: no stream arrives faster than 1e9 a second", 0.5)
    # poisson arrivals' gap shape, as vllm bench serve --burstiness (1: exponential)
    burstiness: float = ranged(1e-6, 1e6, "assumption: gamma shapes outside 1e-6..1e6 draw no useful gaps", 1.0)
    trace_path: str = ""
    trace_format: str = ""  # mooncake, azure or csv
    # stop admitting new requests after this simulated time (0: run the stream out)
    duration_s: float = ranged(0.0, 1e9, "assumption: no run simulates past 1e9 s (~32 years)", 0.0)

    def __post_init__(self) -> None:
        if self.arrival is None:
            object.__setattr__(self, "arrival", ArrivalKind.INFINITE if self.kind is WorkloadKind.RANDOM
                               else ArrivalKind.POISSON)
        if self.arrival in (ArrivalKind.POISSON, ArrivalKind.FIXED) and self.rate_per_s <= 0:
            raise FieldError("rate_per_s", f"must be positive for {self.arrival.value} arrivals, got {self.rate_per_s}")
        if not 0 < self.burstiness < math.inf:
            raise FieldError("burstiness", f"must be positive and finite, got {self.burstiness} "
                                           "(even gaps: workload.arrival: fixed)")


@dataclass(frozen=True)
class Cost:
    # 0: the GPU spec's TCO
    usd_per_gpu_hour: float = ranged(0.0, 1e6, "assumption: no GPU costs a million dollars an hour", 0.0)
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

    def __post_init__(self) -> None:
        needed = stream_bytes(self.workload, self.cache.block_tokens)
        if needed > MAX_STREAM_BYTES:
            key = "workload.sessions" if self.workload.kind is WorkloadKind.AGENTIC else "workload.num_prompts"
            raise FieldError(key, f"the request stream would take ~{needed / 1e9:.3g} GB of memory (valid: at most "
                                  f"{MAX_STREAM_BYTES / 1e9:g} GB, assumption: a laptop's share; fewer requests, "
                                  "shorter prompts or larger cache.block_tokens)")


def stream_bytes(w: Workload, block_tokens: int) -> float:
    """Estimated memory of a workload's request stream and its result rows, in bytes (0 for a trace: its file
    size bounds it). Per request: its columns and result rows (assumption: ~512 bytes) and, in an agentic stream,
    an 8-byte hash per full block of its prompt, which averages ~60k tokens (workloads/traces.py AgenticConfig); a
    random stream makes its hashes as they are read (workloads/traces.py ChainPool) and stores none."""
    if w.kind is WorkloadKind.AGENTIC:
        return w.sessions * w.turns_mean * (ROW_BYTES + 8 * 60_000 / block_tokens)
    if w.kind is WorkloadKind.RANDOM:
        return w.num_prompts * ROW_BYTES
    return 0.0


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
            raise ScenarioError(f"{key}: {_short(raw)} is not one of {choices}") from None
    origin = typing.get_origin(hint)
    if origin in (dict, Mapping):
        if not isinstance(raw, Mapping):
            raise ScenarioError(f"{key}: expected a mapping, got {type(raw).__name__}")
        return types.MappingProxyType({str(k): str(v) for k, v in raw.items()})
    if origin is tuple:
        if not isinstance(raw, list | tuple) or not all(isinstance(v, int | float) and not isinstance(v, bool)
                                                         and math.isfinite(v) for v in raw):
            raise ScenarioError(f"{key}: expected a list of finite numbers, got {str(raw)[:80]}")
        return tuple(float(v) for v in raw)
    if hint is bool:
        if not isinstance(raw, bool):
            raise ScenarioError(f"{key}: expected true or false, got {_short(raw)}")
        return raw
    if hint is int and raw == "auto" and key.rpartition(".")[2] in AUTO_VALUES:
        return AUTO_VALUES[key.rpartition(".")[2]]
    if hint in (int, float) and isinstance(raw, str):
        try:
            number = float(raw)
        except ValueError:
            pass
        else:
            raise ScenarioError(f"{key}: expected a number, got the text {_short(raw)} (YAML 1.1 reads an exponent "
                                f"without a dot and sign as text: write {number:.1e})")
    if hint is int and raw == "auto" and key.rpartition(".")[2] in AUTO_VALUES:
        return AUTO_VALUES[key.rpartition(".")[2]]
    if hint is int:
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise ScenarioError(f"{key}: expected a whole number, got {_short(raw)}")
        return raw
    if hint is float:
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
            raise ScenarioError(f"{key}: expected a finite number, got {_short(raw)}")
        return float(raw)
    if hint is str:
        if not isinstance(raw, str):
            raise ScenarioError(f"{key}: expected text, got {_short(raw)}")
        return raw
    raise TypeError(f"unsupported scenario field type {hint!r} at {key}")  # a programming error


def _short(raw: Any) -> str:
    """A value as an error shows it: one line, at most 80 characters."""
    if isinstance(raw, int) and not isinstance(raw, bool) and raw.bit_length() > 64:
        return shown(raw)
    text = repr(raw).replace("\n", " ")
    return text if len(text) <= 80 else text[:77] + "..."


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
            raise ScenarioError(f"{where}: unknown key {_short(key)} (valid keys: {', '.join(fields)})")
        path = f"{prefix}.{key}" if prefix else str(key)
        values[key] = _convert(hints[key], value, path)
        problem = range_problem(fields[key], values[key])
        if problem:
            raise ScenarioError(f"{path}: {problem}")
    try:
        return cls(**values)
    except FieldError as err:
        raise ScenarioError(f"{prefix + '.' if prefix else ''}{err.key}: {err}") from None
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


# The keys that name files: a relative path in a scenario or overlay file is taken from that file's folder.
PATH_KEYS = (("hardware", "platform"), ("model", "name"), ("workload", "trace_path"))


def builtin_scenarios() -> dict[str, Path]:
    """The built-in scenarios and overlays by name (a file's stem): the default and the benchmark, the design-change
    overlays of `changes/` and the platform studies of `study/`, in that order."""
    found: dict[str, Path] = {}
    for folder in (SCENARIO_DIR, SCENARIO_DIR / "changes", SCENARIO_DIR / "study"):
        for path in sorted(folder.glob("*.yaml")):
            found.setdefault(path.stem, path)
    return found


def scenario_path(text: str | Path) -> Path:
    """A scenario or overlay file: `text` as a path where one exists, else the built-in of that name (`dcp8`,
    `kimi-k3-b300`); an error lists the built-in names."""
    path = Path(text)
    if path.exists() or isinstance(text, Path):
        return path
    named = builtin_scenarios().get(str(text))
    if named is not None:
        return named
    if path.suffix in (".yaml", ".yml") or "/" in str(text):
        return path  # a file the caller meant: the loader names what is wrong with it
    raise ScenarioError(f"{text!r}: no such file, and no built-in scenario or overlay of that name (built-in: "
                        f"{', '.join(builtin_scenarios())})")


def read_scenario_file(path: str | Path) -> dict[str, Any]:
    """A scenario or overlay file (a path, or a built-in's name: `scenario_path`), parsed with the bounded safe
    loader; errors name the file and line. Relative spec paths (`*.yaml`) and trace paths in it are made relative
    to the file's folder."""
    path = scenario_path(path)
    try:
        raw = read_yaml_file(path)
    except YamlError as err:
        raise ScenarioError(str(err)) from None
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ScenarioError(f"{path}: a scenario is a mapping of sections, got {type(raw).__name__}")
    raw = dict(raw)
    for section, key in PATH_KEYS:
        value = raw.get(section, {}).get(key) if isinstance(raw.get(section), Mapping) else None
        if not isinstance(value, str) or not value or Path(value).is_absolute():
            continue
        if key == "trace_path" or Path(value).suffix in (".yaml", ".yml"):
            raw[section] = {**raw[section], key: str(path.parent / value)}
    return raw


def parse_set(items: list[str]) -> dict[str, Any]:
    """`--set a.b=c` pairs as a nested overlay; values are read as YAML scalars (8, true, 0.5, int4)."""
    overlay: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ScenarioError(f"--set {item!r}: expected SECTION.KEY=VALUE")
        try:
            value = parse_yaml(text, f"--set {key[:80]}") if text else ""
        except YamlError as err:
            raise ScenarioError(str(err)) from None
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
    """The default scenario (or `path`; an empty one is the default), with overlay files and `--set` pairs merged
    on top, in order."""
    raw = read_scenario_file(path or DEFAULT_SCENARIO) or read_scenario_file(DEFAULT_SCENARIO)
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
