"""One engine step as an ordered list of kernels and collectives per rank.

A batch holds prefill chunks (new tokens after a cached prefix), decodes (one token each) and
speculative verifies (k+1 positions each). Tensor-parallel ranks are symmetric: every rank runs the
same list, with its share of heads, experts and (under DCP) history positions; the busiest DCP rank
holds ceil(context / dcp) positions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum

from workloads.collectives import Collective
from workloads.deployment import Deployment
from workloads.kernel_base import KernelKind


@dataclass(frozen=True)
class PrefillChunk:
    """`tokens` new prompt tokens of one sequence, after `cached` tokens already in its KV cache."""

    tokens: int
    cached: int = 0

    def __post_init__(self) -> None:
        if self.tokens < 1 or self.cached < 0:
            raise ValueError(f"a prefill chunk needs tokens >= 1 and cached >= 0, got {self.tokens}, {self.cached}")


@dataclass(frozen=True)
class Batch:
    """What one step computes: prefill chunks, decodes and verifies, by context length."""

    prefills: tuple[PrefillChunk, ...] = ()
    decodes: tuple[int, ...] = ()  # context length (history before the new token) of each decode
    verifies: tuple[int, ...] = ()  # context length of each sequence verifying `drafts` draft tokens
    drafts: int = 0  # draft tokens per verifying sequence (scenario key spec_decode.drafts)

    def __post_init__(self) -> None:
        if min(self.decodes, default=0) < 0 or min(self.verifies, default=0) < 0:
            raise ValueError("context lengths must not be negative")
        if self.verifies and self.drafts < 1:
            raise ValueError("verifies need drafts >= 1")
        if not (self.prefills or self.decodes or self.verifies):
            raise ValueError("an empty batch has no step")

    @property
    def verify_positions(self) -> int:
        """Positions each verifying sequence computes: its drafts and the bonus token."""
        return self.drafts + 1

    @property
    def tokens(self) -> int:
        """Tokens the dense layers process this step."""
        return sum(c.tokens for c in self.prefills) + len(self.decodes) + len(self.verifies) * self.verify_positions

    @property
    def sampled_tokens(self) -> int:
        """Positions whose logits are computed: each decode, each verify position, each prefill's last."""
        return len(self.prefills) + len(self.decodes) + len(self.verifies) * self.verify_positions


class Depends(Enum):
    """What a step item's cost depends on; the cost layer memoizes the item's time by exactly that."""

    TOKENS = "tokens"  # the batch's token count
    SAMPLED = "sampled"  # the positions whose logits are computed
    PREFILLS = "prefills"  # the prefill chunks' new-token counts
    PREFILL_HISTORY = "prefill_history"  # the prefill chunks and their cached prefixes
    DECODES = "decodes"  # how many decodes and verifies there are, and the drafts
    DECODE_HISTORY = "decode_history"  # the decodes' and verifies' context lengths too

    __hash__ = object.__hash__  # identity, as `Dtype`'s: members are singletons


@dataclass(frozen=True)
class StepItem:
    """One entry of a rank's step: a kernel, or a collective with the ranks of its group."""

    layer: int  # 1-based layer, 0 before the stack, layers + 1 after it
    name: str  # what it computes, e.g. "mla.q_b", "moe.routed_up"
    depends: Depends  # what of the batch its cost depends on
    kernel: KernelKind | None = None
    collective: Collective | None = None

    def __post_init__(self) -> None:
        if (self.kernel is None) == (self.collective is None):
            raise ValueError("a step item is either a kernel or a collective")


@dataclass(frozen=True)
class StepPlan:
    """The ordered items every rank runs for one batch."""

    deployment: Deployment
    batch: Batch
    items: tuple[StepItem, ...] = field(repr=False)

    @property
    def kernels(self) -> list[StepItem]:
        return [i for i in self.items if i.kernel is not None]

    @property
    def collectives(self) -> list[StepItem]:
        return [i for i in self.items if i.collective is not None]



_SHAPE = re.compile(r"^\s*(\d{1,18})\s*x\s*(\d{1,18})\s*(?:@\s*(\d{1,18}))?\s*$")  # 18 digits: any int64


def parse_shape(text: str, what: str) -> tuple[int, int, int]:
    """'64x32768' -> (64, 32768, 0); a prefill may add '@CACHED': '2x8192@4096' -> (2, 8192, 4096)."""
    match = _SHAPE.match(text)
    if match is None:
        raise ValueError(f"--{what} {text[:60]!r}: expected COUNTxLENGTH of whole numbers, e.g. 64x32768" +
                         (" or COUNTxTOKENS@CACHED" if what == "prefill" else ""))
    count, length, cached = (int(g) if g else 0 for g in match.groups())
    if cached and what != "prefill":
        raise ValueError(f"--{what} {text!r}: only a prefill has a cached prefix (@CACHED)")
    if count < 1:
        raise ValueError(f"--{what} {text!r}: the count must be at least 1")
    return count, length, cached
