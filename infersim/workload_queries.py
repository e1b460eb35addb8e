"""The CLI's model and memory queries as pure functions returning JSON-ready dicts."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from enum import Enum
from functools import lru_cache
from typing import Any

from compiled.launch_time import ProgramSource, timed_kernel
from hwmodels.calibration import chosen, load_calibration
from hwmodels.interconnect import build_fabric
from hwmodels.spec import load_gpu, load_platform
from hwmodels.specfile import FieldError, Range
from infersim import chrome_trace
from infersim.flags import field_range
from simulator.cost.step_parts import StepParts
from simulator.scenario import MAX_TOKENS, TOKENS, Serving, SpecDecode, kernel_options
from workloads.codecs import Codec
from workloads.deployment import Deployment, KernelOptions
from workloads.layers import build_step
from workloads.memory import plan_memory, weights_bytes_per_gpu
from workloads.model import load_model, model_names
from workloads.params import active_matmul_params, count_params
from workloads.step import Batch, PrefillChunk, parse_shape
from workloads.tiles import describe

CONTEXT = Range(0, MAX_TOKENS, TOKENS)


def model_list() -> dict[str, Any]:
    """Every catalog model with its size."""
    rows = []
    for name in model_names():
        model = load_model(name)
        rows.append({
            "name": model.name,
            "description": model.description,
            "params": sum(count_params(model).values()),
            "active_params": active_matmul_params(model),
            "provisional": model.provisional,
        })
    return {"models": rows}


def scenario_list() -> dict[str, Any]:
    """Every built-in scenario and overlay: its name, what it is, its file in the package and the first sentence of
    its header comment (what the file says it is)."""
    from simulator.scenario import SCENARIO_DIR, builtin_scenarios

    kinds = {"": "scenario", "changes": "overlay", "study": "study scenario"}
    rows = []
    for name, path in builtin_scenarios().items():
        folder = path.parent.relative_to(SCENARIO_DIR).as_posix()
        header = []
        for line in path.read_text().splitlines():
            if not line.startswith("#"):
                break
            header.append(line.lstrip("# ").strip())
        text = " ".join(part for part in header if part)
        end = text.find(". ")
        first = text if end < 0 else text[:end + 1]  # the header comment's first sentence
        rows.append({"name": name, "kind": kinds.get("" if folder == "." else folder, folder),
                     "file": path.relative_to(SCENARIO_DIR.parent.parent).as_posix(), "about": first})
    return {"scenarios": rows}


def model_show(name: str) -> dict[str, Any]:
    """One model: layer counts, experts, parameter counts against the published total, checkpoint bytes."""
    model = load_model(name)
    by_part = count_params(model)
    total = sum(by_part.values())
    counts = model.layer_counts()
    return {
        "name": model.name,
        "description": model.description,
        "provisional": model.provisional,
        "layers": model.layers,
        "mla_layers": counts["mla"],
        "kda_layers": counts["kda"],
        "gqa_layers": counts["gqa"],
        "moe_layers": counts["moe"],
        "dense_mlp_layers": counts["dense_mlp"],
        "experts": model.moe.experts if model.moe else 0,
        "top_k": model.moe.top_k if model.moe else 0,
        "shared_experts": model.moe.shared_experts if model.moe else 0,
        "hidden_size": model.hidden_size,
        "params": total,
        "params_by_part": {p.value: n for p, n in by_part.items()},
        "active_params": active_matmul_params(model),
        "published_params": model.published_params,
        "params_error_vs_published": total / model.published_params - 1,
        "checkpoint_bytes": sum(model.weights[p].storage_bytes(n) for p, n in by_part.items()),
        "weights_dtype": {p.value: d.value for p, d in model.weights.items()},
        "kv_cache_dtype": model.kv_cache.value,
        "sources": dict(model.sources),
    }


def memory_query(model: str, hw: str, *, tp: int, dcp: int = 1, ep: int = 1, context: int = 0,
                 mem_fraction: float = 0.9, max_num_seqs: int = 64, max_batched_tokens: int = 8192,
                 row_only_weights: bool = False, kda_checkpoint_tokens: int | None = None) -> dict[str, Any]:
    """Memory per GPU of a model on a GPU under a parallel plan, with the KV of one `context`-token request."""
    if context < 0:
        raise ValueError(f"context must not be negative, got {context}")
    deployment = Deployment(load_model(model), load_gpu(hw), tp=tp, dcp=dcp, ep=ep,
                            options=KernelOptions(moe_row_only_weights=row_only_weights))
    plan = plan_memory(deployment, mem_fraction=mem_fraction, max_num_seqs=max_num_seqs,
                       max_batched_tokens=max_batched_tokens, kda_checkpoint_tokens=kda_checkpoint_tokens)
    return {
        "model": deployment.model.name,
        "hw": deployment.gpu.name,
        "tp": tp,
        "dcp": dcp,
        "ep": ep,
        "context": context,
        "weights_bytes_per_gpu": plan.weights_bytes_per_gpu,
        "weights_by_part_bytes_per_gpu": plan.weights_by_part_bytes_per_gpu,
        "mla_kv_bytes_per_gpu": plan.mla_kv_bytes_per_token * context,
        "gqa_kv_bytes_per_gpu": plan.gqa_kv_bytes_per_token * context,
        "kv_bytes_per_token_per_gpu": plan.kv_bytes_per_token,
        "kda_state_bytes_per_seq": plan.kda_state_bytes_per_seq,
        "kda_conv_bytes_per_seq": plan.kda_conv_bytes_per_seq,
        "kda_checkpoint_bytes": plan.kda_checkpoint_bytes,
        "kda_checkpoint_bytes_per_token": plan.kda_checkpoint_bytes_per_token,
        "workspace_bytes": plan.workspace_bytes,
        "reserve_bytes": plan.reserve_bytes,
        "usable_bytes": plan.usable_bytes,
        "kv_budget_bytes": plan.kv_budget_bytes,
        "kv_capacity_tokens": plan.kv_capacity_tokens,
        "mem_fraction": mem_fraction,
        "max_num_seqs": max_num_seqs,
    }


@lru_cache(maxsize=64)
def step_parts(model: str, hw: str, platform: str, tp: int, dcp: int, ep: int, options: tuple[str, ...],
               quickreduce: str | None, chosen: tuple[str | None, str | None] = (None, None)) -> StepParts:
    """One StepParts per deployment for the life of the process, so repeated queries reuse its timed parts;
    `chosen` (the caller's calibration file and cost model, `hwmodels.calibration.chosen`) keys the memo."""
    try:
        deployment = Deployment(load_model(model), load_gpu(hw), tp=tp, dcp=dcp, ep=ep,
                                options=kernel_options(list(options)))
    except FieldError as err:
        flag = f"--{err.key}" if err.key in ("tp", "dcp", "ep") else f"--option {err.key}"
        raise ValueError(f"{flag}: {err}") from None
    spec = load_platform(platform)
    if spec.gpu != deployment.gpu.name:
        raise ValueError(f"platform {spec.name} holds {spec.gpu} GPUs, not {deployment.gpu.name}")
    if tp > spec.gpus:
        raise ValueError(f"tp={tp} needs more GPUs than {spec.name} has ({spec.gpus})")
    weights = sum(weights_bytes_per_gpu(deployment).values())
    if weights > deployment.gpu.memory_total_bytes:  # a step of a deployment that cannot load is no step
        raise ValueError(f"{deployment.model.name} does not fit on {deployment.gpu.name} at tp={tp}: its weights "
                         f"take {weights / 1e9:.1f} GB a GPU of the {deployment.gpu.memory_total_bytes / 1e9:.1f} GB "
                         "it has; raise --tp or lower the precision")
    return StepParts(deployment, build_fabric(spec, deployment.gpu), load_calibration(deployment.gpu.name),
                     quickreduce=Codec.parse(quickreduce) if quickreduce else None)


def step_query(model: str, hw: str, *, tp: int, dcp: int = 1, ep: int = 1, decode: str | None = None,
               prefill: str | None = None, verify: str | None = None, drafts: int = 0,
               options: Sequence[str] = (), platform: str | None = None,
               quickreduce: str | None = None) -> dict[str, Any]:
    """One engine step of exactly these shapes: per-family launches, FLOP, bytes and time, collectives, the total."""
    parts, batch = _step(model, hw, tp, dcp, ep, decode, prefill, verify, drafts, options, platform, quickreduce)
    timed = parts.step_time(batch)
    plan = build_step(batch, parts.deployment)
    families: dict[str, dict[str, float]] = {}
    tiles: dict[str, dict[str, Any]] = {}  # by step item name: the tiled kernels' configurations, first layer's
    sources: dict[Any, str] = {}  # by kernel: where its launches' programs come from (`compiled.launch_time`)
    programs = {source.value: 0 for source in ProgramSource}
    for item in plan.kernels:
        if item.name not in tiles and (chosen := describe(item.kernel, parts.deployment.gpu)) is not None:
            tiles[item.name] = chosen
        source = sources.get(item.kernel)
        if source is None:
            source = sources[item.kernel] = timed_kernel(item.kernel, parts.deployment.gpu)[1].value
        for work in item.kernel.launches():  # type: ignore[union-attr]
            row = families.setdefault(work.family.value if work.family else "other",
                                      {"launches": 0, "compiled_launches": 0, "flop": 0.0, "bytes": 0.0,
                                       "time_s": 0.0})
            row["launches"] += 1
            row["compiled_launches"] += source == ProgramSource.COMPILED.value
            programs[source] += 1
            row["flop"] += work.flop
            row["bytes"] += work.bytes
    for name, seconds in timed.by_family_s.items():
        families[name]["time_s"] = seconds
    d = parts.deployment
    return {
        "model": d.model.name,
        "hw": d.gpu.name,
        "platform": parts.fabric.name,
        "tp": tp,
        "dcp": dcp,
        "ep": ep,
        "batch": {"prefills": [[c.tokens, c.cached] for c in batch.prefills], "decodes": len(batch.decodes),
                  "verifies": len(batch.verifies), "drafts": batch.drafts},
        "tokens": batch.tokens,
        "launch_mode": d.options.launch.value,
        "kernel_launches": timed.kernel_launches,
        # launches timed from their kernel's compiled code or from their kind's analytic program
        "programs": programs,
        "flop": sum(r["flop"] for r in families.values()),
        "bytes": sum(r["bytes"] for r in families.values()),
        "kernel_time_s": timed.kernel_s,
        "collective_time_s": timed.collective_s,
        "step_time_s": timed.total_s,
        "overlap_collectives": d.options.overlap_collectives,
        "families": families,
        "collectives": {name: {"time_s": t} for name, t in timed.by_collective_s.items()},
        "tiles": tiles,
        "options": {f.name: _plain(getattr(d.options, f.name)) for f in dataclasses.fields(KernelOptions)},
        **({"mla_decode": _mla_decode(plan, d)} if d.model.mla is not None else {}),
    }


def _mla_decode(plan: Any, d: Deployment) -> dict[str, Any]:
    """The MLA decode backend the step runs and the split-KV partitions it picked for the step's decodes and verifies
    (`kernels.mla_num_splits: auto`: the backend's heuristic; a number: that number)."""
    from workloads.layers import mla_backend

    decodes = [item for item in plan.kernels if item.name == "mla.decode"]
    splits = [item.kernel.num_splits for item in decodes if item.layer == decodes[0].layer]
    return {"backend": mla_backend(d).value, "num_splits": splits,
            "chosen_by": "backend heuristic" if d.options.mla_num_splits == 0 else "kernels.mla_num_splits"}


def step_trace(model: str, hw: str, *, tp: int, dcp: int = 1, ep: int = 1, decode: str | None = None,
               prefill: str | None = None, verify: str | None = None, drafts: int = 0,
               options: Sequence[str] = (), platform: str | None = None,
               quickreduce: str | None = None) -> dict[str, Any]:
    """The step of `step_query` as a Chrome trace: its launches in plan order on a compute and a collective track."""
    from infersim.output_paths import infersim_version

    summary = step_query(model, hw, tp=tp, dcp=dcp, ep=ep, decode=decode, prefill=prefill, verify=verify,
                         drafts=drafts, options=options, platform=platform, quickreduce=quickreduce)
    parts, batch = _step(model, hw, tp, dcp, ep, decode, prefill, verify, drafts, options, platform, quickreduce)
    d = parts.deployment
    layout = f"tp={tp}" + (f", dcp={dcp}" if dcp > 1 else "") + (f", ep={ep}" if ep > 1 else "")
    other = {
        "infersim_version": infersim_version(),
        "trace": "predicted engine step of the modelled rank",
        "cost_model": parts.calib.cost_model.value,
        "quickreduce": quickreduce,
        **{key: summary[key] for key in (
            "model", "hw", "platform", "tp", "dcp", "ep", "batch", "tokens", "launch_mode", "overlap_collectives",
            "step_time_s", "kernel_time_s", "collective_time_s", "flop", "bytes", "options")},
    }
    process = f"infersim predicted step: {d.model.name} on {d.gpu.name}, {layout}"
    placed = parts.timeline(batch)
    return chrome_trace.step_trace(placed, d.model.layers, d.options.overlap_collectives, process, other)


def _step(model: str, hw: str, tp: int, dcp: int, ep: int, decode: str | None, prefill: str | None,
          verify: str | None, drafts: int, options: Sequence[str], platform: str | None,
          quickreduce: str | None) -> tuple[StepParts, Batch]:
    """The deployment's memoized parts and the batch of one step query."""
    from infersim.collective_queries import platform_for

    parts = step_parts(model, hw, platform_for(platform or hw, tp), tp, dcp, ep, tuple(options), quickreduce,
                       chosen())
    return parts, _batch(decode, prefill, verify, drafts)


def _shape(text: str, what: str) -> tuple[int, int, int]:
    """A `--decode`/`--verify`/`--prefill` shape within the scenario's ranges: a count of sequences at most
    `serving.max_num_seqs` allows, lengths at most MAX_TOKENS; checked before the batch is built."""
    count, length, cached = parse_shape(text, what)
    for name, value, bound in (("count", count, field_range(Serving, "max_num_seqs")),
                               ("length", length, CONTEXT), ("cached prefix", cached, CONTEXT)):
        problem = bound.problem(value)
        if problem:
            raise ValueError(f"--{what} {text.strip()}: the {name}: {problem}")
    return count, length, cached


def _batch(decode: str | None, prefill: str | None, verify: str | None, drafts: int) -> Batch:
    decodes: tuple[int, ...] = ()
    verifies: tuple[int, ...] = ()
    prefills: tuple[PrefillChunk, ...] = ()
    problem = field_range(SpecDecode, "drafts").problem(drafts)
    if problem:
        raise ValueError(f"--drafts: {problem}")
    shapes = {what: _shape(text, what) for what, text in (("decode", decode), ("verify", verify),
                                                             ("prefill", prefill)) if text}
    tokens = sum(count * (length if what == "prefill" else drafts + 1 if what == "verify" else 1)
                 for what, (count, length, _) in shapes.items())
    if tokens > MAX_TOKENS:  # the scenario's step budget, serving.max_num_batched_tokens, cannot exceed it
        raise ValueError(f"the step computes {tokens} tokens, more than the {MAX_TOKENS} a step can "
                         f"(serving.max_num_batched_tokens: valid 1..{MAX_TOKENS}; {TOKENS})")
    if decode:
        count, length, _ = shapes["decode"]
        decodes = (length,) * count
    if verify:
        count, length, _ = shapes["verify"]
        verifies = (length,) * count
    if prefill:
        count, length, cached = shapes["prefill"]
        prefills = (PrefillChunk(length, cached),) * count
    if not (decodes or verifies or prefills):
        raise ValueError("give at least one of --decode, --prefill or --verify (e.g. --decode 64x32768)")
    if verifies and drafts < 1:
        raise ValueError("--verify needs --drafts N (draft tokens per verifying sequence, at least 1)")
    return Batch(prefills=prefills, decodes=decodes, verifies=verifies, drafts=drafts)


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value
