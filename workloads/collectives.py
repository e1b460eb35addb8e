"""Collective descriptors of an engine step: what is exchanged, by whom, for what (costed in simulator/cost/)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class CollectiveOp(Enum):
    """The collectives a step issues."""

    ALL_REDUCE = "allreduce"
    ALL_GATHER = "allgather"
    REDUCE_SCATTER = "reducescatter"
    ALL_TO_ALL = "alltoall"


@dataclass(frozen=True)
class Collective:
    """One collective: `payload_bytes` is what each rank contributes (all-reduce: the whole tensor)."""

    op: CollectiveOp
    payload_bytes: float
    group_size: int
    purpose: str  # e.g. "attention output", "DCP query exchange"

    def __post_init__(self) -> None:
        if self.payload_bytes < 0:
            raise ValueError(f"payload_bytes must not be negative, got {self.payload_bytes}")
        if self.group_size < 1:
            raise ValueError(f"group_size must be at least 1, got {self.group_size}")
