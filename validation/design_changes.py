"""Design changes measured as pairs of rows that differ in one knob, and whether the model predicts each change.

A performance engineer asks the simulator "how much faster does this knob make the kernel", so the figure that
matters is the ratio of two times more than either time. Rows of one suite that share every shape field and
differ in one knob (the MLA decode split count or head padding, the KDA verify tile width, add+RMSNorm fused or
not) form a pair: the row at the knob's reference value and the row at another value. For each pair the measured
ratio (changed / reference) is set beside the predicted one; the ratio error is predicted / measured - 1, and
the sign is right when both ratios lie on the same side of 1 (both a speed-up or both a slow-down).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from validation.comparison import Comparison
from workloads.attention_kernels import MlaDecode
from workloads.kda_kernels import KdaVerify
from workloads.kernels import AddRmsNorm


@dataclass(frozen=True)
class Knob:
    """One knob of a kernel kind: the field, its reference value, and the fields a pair must share."""

    name: str
    kind: type
    field: str
    reference: object
    shape: tuple[str, ...]


KNOBS = (
    Knob("MLA decode split-KV", MlaDecode, "num_splits", 1,
         ("seqs", "context", "heads", "pad_heads_to", "kv_dtype", "block_n", "heads_per_workgroup")),
    Knob("MLA decode head padding", MlaDecode, "pad_heads_to", 0,
         ("seqs", "context", "heads", "num_splits", "kv_dtype", "block_n", "heads_per_workgroup")),
    Knob("KDA verify tile columns", KdaVerify, "tile_cols", 32, ("seqs", "positions", "heads", "head_dim",
                                                                  "store_states")),
    Knob("add+RMSNorm fusion", AddRmsNorm, "fused", False, ("tokens", "hidden", "dtype")),
)


@dataclass(frozen=True)
class Pair:
    """One measured design change: the reference row and the changed one."""

    knob: str
    change: str  # "1 -> 16"
    label: str  # the changed row's label
    measured_ratio: float  # changed time / reference time
    predicted_ratio: float

    @property
    def ratio_error(self) -> float:
        return self.predicted_ratio / self.measured_ratio - 1.0

    @property
    def right_sign(self) -> bool:
        return (self.predicted_ratio - 1.0) * (self.measured_ratio - 1.0) > 0


def _only(row: Comparison, kind: type) -> object | None:
    kernels = [k for k in row.kernels if type(k) is kind]
    return kernels[0] if len(row.kernels) == 1 and kernels else None


def pairs(rows: Sequence[Comparison]) -> list[Pair]:
    """Every pair of rows that differ in one knob only (same launch mode, same shape)."""
    found = []
    for knob in KNOBS:
        groups: dict[tuple, list[tuple[object, Comparison]]] = {}
        for row in rows:
            kernel = _only(row, knob.kind)
            if kernel is None:
                continue
            key = (row.mode, *(getattr(kernel, f) for f in knob.shape))
            groups.setdefault(key, []).append((getattr(kernel, knob.field), row))
        for members in groups.values():
            reference = [r for value, r in members if value == knob.reference]
            if len(reference) != 1:
                continue
            base = reference[0]
            for value, row in members:
                if value == knob.reference:
                    continue
                found.append(Pair(knob.name, f"{_shown(knob.reference)} -> {_shown(value)}", row.label,
                                  row.measured_s / base.measured_s, row.predicted_s / base.predicted_s))
    return found


def _shown(value: object) -> str:
    return {True: "fused", False: "unfused"}.get(value, str(value)) if isinstance(value, bool) else str(value)


def summary(found: Sequence[Pair]) -> list[dict[str, object]]:
    """Per knob and change: pairs, the median and p90 |ratio error| in %, and the share with the right sign."""
    by: dict[tuple[str, str], list[Pair]] = {}
    for pair in found:
        by.setdefault((pair.knob, pair.change), []).append(pair)
    out = []
    for (knob, change), members in sorted(by.items(), key=lambda kv: (kv[0][0], _order(kv[0][1]))):
        errors = sorted(abs(p.ratio_error) * 100 for p in members)
        out.append({
            "knob": knob, "change": change, "pairs": len(members),
            "median_measured_ratio": statistics.median(p.measured_ratio for p in members),
            "median_predicted_ratio": statistics.median(p.predicted_ratio for p in members),
            "median_abs_ratio_error_pct": statistics.median(errors),
            "p90_abs_ratio_error_pct": (statistics.quantiles(errors, n=10, method="inclusive")[-1]
                                        if len(errors) > 1 else errors[0]),
            "right_sign_share": sum(p.right_sign for p in members) / len(members),
        })
    return out


def _order(change: str) -> tuple:
    to = change.rpartition(" -> ")[2]
    return (0, int(to)) if to.isdigit() else (1, to)
