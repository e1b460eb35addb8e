"""A trace's kernels matched to a model's engine step by their order, for traces that record no sizes.

A CUDA or HIP graph replay (how vLLM and SGLang run their decode steps) records each kernel's name and duration
but no launching operator, no shapes and no grid: nothing in the trace says how large a GEMM was. What the user
knows is the step: the model, its parallel layout and the batch (`infersim trace predict --model ... --decode
...`). The step's plan (`workloads.layers.build_step`) lists its launches in the order the engine runs them, layer
by layer, so the trace's kernels and the plan's launches are two sequences of the same program.

Both are reduced to coarse classes (a GEMM, a grouped expert GEMM, attention, a norm, a pointwise kernel or copy,
a collective, a linear-attention recurrence; "other" for what the plan does not model, such as routing and top-k
kernels) and aligned by the longest common subsequence of classes: the most kernels matched in order, a traced
kernel matched only to a planned launch of its own class, skipping what either side has and the other does not
(an engine's fused kernels, its routing helpers). A trace that holds several steps of the same shape is aligned
against the plan repeated as often. A matched kernel takes its planned launch's kind and size, and is predicted as
that launch. Durations play no part in the alignment, so the match cannot flatter the model's error.

How sure a match is: the class agrees and the order is the plan's, but where several launches of one class sit
between the same neighbours (two pointwise kernels in a row), which of them a kernel took is not known; the
share of each class matched is reported (`AlignmentSummary`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from compiled.launch_time import launch_works
from hwmodels.spec import GPU
from hwmodels.work import Family
from traces.formats import TracedKernel
from workloads.collectives import Collective
from workloads.kernel_base import KernelKind
from workloads.step import StepPlan

# Coarse classes of kernel names, tried in order (the grouped expert GEMMs before the GEMMs, whose names they share)
_NAME_CLASSES = (
    # an MoE's routing, top-k and finalize helpers, and sampling: work the plan does not hold as launches
    ("other", re.compile(r"routing|finalize|topk|top_k|sort|histogram|bitmatrix|argmax|sampl|_combined_", re.I)),
    ("collective", re.compile(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|"
                              r"cross_device_reduce|quickreduce|custom_ar|multimem", re.I)),
    ("moe", re.compile(r"matmul_ogs|fused_moe|moe_gemm|grouped_?gemm|grouped_mm|bmm_.*dynBatch|ck_moe|fmoe|"
                       r"moe_mlp", re.I)),
    ("recurrent", re.compile(r"kda|gated_delta|fused_recurrent|chunk_gla|chunk_delta", re.I)),
    ("attention", re.compile(r"flash_fwd|flash_attn|flashattn|fmha|attention|_attn|attn_fwd|mla_decode|flash_mla|"
                             r"paged_att|sdpa|reduce_segments|merge_attn|decode_attention", re.I)),
    ("gemm", re.compile(r"nvjet|gemm|Cijk_|cutlass|xmma|wgmma|matmul|splitKreduce|sgemm|hgemm", re.I)),
    ("norm", re.compile(r"rms_?norm|layer_?norm", re.I)),
    ("pointwise", re.compile(r"elementwise|rotary|rope|act_and_mul|silu|gelu|copy|cache|quant|triton_poi|"
                             r"fill|scale|cat_?array|gather|index|memcpy|memset|embedding", re.I)),
)
_FAMILY_CLASSES = {
    Family.GEMM: "gemm", Family.MOE_GEMM: "moe", Family.ATTENTION_PREFILL: "attention",
    Family.MLA_DECODE: "attention", Family.KDA_PREFILL: "recurrent", Family.KDA_DECODE: "recurrent",
    Family.KDA_VERIFY: "recurrent", Family.NORM: "norm", Family.ELEMENTWISE: "pointwise",
    Family.COPY: "pointwise", Family.CODEC: "pointwise",
}
ALIGNED = "model step order"  # `KernelGroup.method` of a kernel matched here


def name_class(name: str) -> str:
    """The coarse class of a traced kernel by its name ("other" when no pattern says)."""
    for klass, pattern in _NAME_CLASSES:
        if pattern.search(name):
            return klass
    return "other"


@dataclass(frozen=True)
class Planned:
    """One launch of the step's plan: the item it belongs to, which of the kind's launches it is, and its class."""

    layer: int
    item: str  # the plan item's name, e.g. "mla.q_b"
    kind: KernelKind | None  # None for a collective
    launch: int  # index into the kind's launches (0 for a collective)
    klass: str
    collective: Collective | None = None
    family: str = "collective"  # the launch's infersim family (a calibration's key)


def planned_launches(plan: StepPlan, gpu: GPU) -> list[Planned]:
    """The plan's launches in the order the engine issues them, each with its coarse class."""
    out = []
    for item in plan.items:
        if item.kernel is None:
            out.append(Planned(item.layer, item.name, None, 0, "collective", item.collective))
            continue
        for i, work in enumerate(launch_works(item.kernel, gpu)):
            if work.workgroups > 0:
                out.append(Planned(item.layer, item.name, item.kernel, i,
                                   _FAMILY_CLASSES.get(work.family, "other") if work.family else "other",
                                   family=work.family.value if work.family else "other"))
    return out


# What a pairing of each class is worth: where the two sequences can pair one launch or another (an engine that
# fuses the activation into its expert GEMM leaves the plan's activation or its up projection unpaired), the
# alignment keeps the launches that hold the step's time
WEIGHTS = {"moe": 4, "gemm": 4, "attention": 4, "recurrent": 4, "collective": 3, "norm": 2, "pointwise": 1,
           "other": 0}


def lcs_pairs(traced: Sequence[str], planned: Sequence[str]) -> list[tuple[int, int]]:
    """(traced index, planned index) of a heaviest common subsequence of the two class sequences, in order (each
    pair worth its class's `WEIGHTS`).

    The table is filled a row at a time with numpy (a row is the running maximum of the row above and its diagonal
    plus the weight where the classes agree), then walked back from the end, preferring to pair over to skip."""
    n, m = len(traced), len(planned)
    if not n or not m:
        return []
    names = sorted(set(traced) | set(planned))
    codes = {c: i for i, c in enumerate(names)}
    worth = np.array([WEIGHTS.get(c, 1) for c in names], dtype=np.int32)
    a = np.array([codes[c] for c in traced], dtype=np.int32)
    b = np.array([codes[c] for c in planned], dtype=np.int32)
    table = np.zeros((n + 1, m + 1), dtype=np.int32)
    for i in range(1, n + 1):
        above = table[i - 1]
        candidate = np.maximum(above[1:], above[:-1] + (b == a[i - 1]) * worth[a[i - 1]])
        table[i, 1:] = np.maximum.accumulate(candidate)
    pairs = []
    i, j = n, m
    while i > 0 and j > 0:
        w = int(worth[a[i - 1]])
        if a[i - 1] == b[j - 1] and w > 0 and table[i, j] == table[i - 1, j - 1] + w:
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif table[i - 1, j] >= table[i, j - 1]:
            i -= 1
        else:
            j -= 1
    return pairs[::-1]


@dataclass(frozen=True)
class AlignmentSummary:
    """What the alignment matched: per class, the traced kernels and how many of them took a planned launch; the
    plan's repeats (steps in the trace) and launches per step."""

    steps: int
    planned_per_step: int
    traced_by_class: dict[str, int]
    matched_by_class: dict[str, int]


def align(kernels: Sequence[TracedKernel], plan: StepPlan, gpu: GPU
          ) -> tuple[dict[int, Planned], AlignmentSummary]:
    """The kernels (by index into `kernels`) that took a planned launch, and the summary. Only GPU kernels take part
    (copies and fills are not in a plan); a trace of several steps meets the plan repeated as often."""
    planned = planned_launches(plan, gpu)
    indices = [i for i, k in enumerate(kernels) if k.kind == "kernel"]
    classes = [name_class(kernels[i].name) for i in indices]
    if not planned or not indices:
        return {}, AlignmentSummary(0, len(planned), {}, {})
    per_step = sum(p.klass != "other" for p in planned) or 1
    known = sum(c != "other" for c in classes)
    steps = max(1, round(known / per_step))
    repeated = planned * steps
    pairs = lcs_pairs(classes, [p.klass for p in repeated])
    matched = {indices[t]: repeated[p] for t, p in pairs if classes[t] != "other"}
    traced_by_class: dict[str, int] = {}
    matched_by_class: dict[str, int] = {}
    for t, klass in enumerate(classes):
        traced_by_class[klass] = traced_by_class.get(klass, 0) + 1
        if indices[t] in matched:
            matched_by_class[klass] = matched_by_class.get(klass, 0) + 1
    return matched, AlignmentSummary(steps, len(planned), traced_by_class, matched_by_class)
