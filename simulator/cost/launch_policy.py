"""Which engine steps replay captured graphs, and what the host spends per launch of the steps that do not.

The serving layer builds a policy from the engine it simulates (`simulator.engine_profiles.launch_policy`); the
cycle cost applies it (`simulator.cost.cycle.CycleCost`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchPolicy:
    """Which steps replay captured graphs, and the host's seconds per launch of those that do not.

    `graph_tokens`: a step of at most this many tokens replays graphs, vLLM's rule (0: by sequences only);
    `graph_decodes`: a decode-only step of at most this many sequences replays one, SGLang's rule (0: by tokens
    only); `eager_launch_host_s`: the host's time per launch of an eager step (None: the GPU spec's eager launch)."""

    graph_tokens: int = 0
    graph_decodes: int = 0
    eager_launch_host_s: float | None = None

    def graphed(self, prefill_tokens: int, decodes: int, tokens_per_decode: int = 1) -> bool:
        """Whether a step with these prefill tokens and decoding sequences replays captured graphs."""
        tokens = prefill_tokens + decodes * tokens_per_decode
        if self.graph_tokens:
            return tokens <= self.graph_tokens
        return not prefill_tokens and decodes <= self.graph_decodes
