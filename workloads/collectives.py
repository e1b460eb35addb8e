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

    def bus_factor(self, ranks: int) -> float:
        """nccl-tests' bus-bandwidth factor (its PERFORMANCE.md): all-reduce 2(n-1)/n, the others (n-1)/n; bus
        bandwidth is the message size over the time, times this factor, comparable across group sizes."""
        share = (ranks - 1) / ranks
        return 2 * share if self is CollectiveOp.ALL_REDUCE else share


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
