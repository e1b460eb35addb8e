"""The scheduling policy of one engine step, like vLLM's: decodes first, then chunked prefill, FCFS admission.

The policy is a function of the running and waiting sequences, the KV block manager and the
budgets; it reserves KV blocks (the only state it touches) and returns what the step computes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from simulator.kvcache import KVCache


@dataclass(eq=False, slots=True)  # identity: list membership and removal must not compare fields
class Sequence:
    """One request inside the engine: how much of its prompt is computed and how much it has generated."""

    index: int  # position in the request stream
    request_id: int
    session_id: int
    turn: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    hashes: np.ndarray
    cached_tokens: int = 0
    prefill_target: int = 0  # tokens to prefill: the prompt, plus what it had generated if preempted
    computed_tokens: int = 0  # of prefill_target, tokens whose KV exists (cached or computed)
    generated: int = 0  # output tokens committed so far
    reserved_tokens: int = 0  # tokens the KV blocks held so far can take without growing
    sent_s: float = -1.0  # when the client sent it: its arrival, or later when a concurrency slot freed
    scheduled_s: float = -1.0
    first_token_s: float = -1.0
    preemptions: int = 0

    def __post_init__(self) -> None:
        self.prefill_target = self.prefill_target or self.prompt_tokens

    @property
    def context_tokens(self) -> int:
        """Tokens of history a decode attends to."""
        return self.computed_tokens + self.generated - (self.prefill_target - self.prompt_tokens)

    @property
    def prefilling(self) -> bool:
        return self.computed_tokens < self.prefill_target


@dataclass(frozen=True)
class Budget:
    """Per-step limits: sequences in flight and tokens computed (vLLM's two scheduler knobs)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    tokens_per_decode: int = 1  # tokens a decoding sequence computes and holds KV for in one step (drafts + 1)
    # True: prefill chunks ride in the decode step (vLLM's chunked prefill). False: a step with prefill work to do
    # prefills only and the decodes wait for the next (SGLang's default: prefill first, --enable-mixed-chunk off)
    mixed_prefill: bool = True


@dataclass
class Decision:
    """What one step computes."""

    prefills: list[tuple[Sequence, int]] = field(default_factory=list)  # (sequence, new tokens this step)
    decodes: list[Sequence] = field(default_factory=list)
    admitted: list[Sequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)


def schedule(running: list[Sequence], waiting: deque[Sequence], kv: KVCache, budget: Budget, now_s: float) -> Decision:
    """Decodes first (growing their KV, preempting the newest sequence when blocks run out), then
    continuing prefills, then new sequences in arrival order while sequences, tokens and blocks last. A prefill-first
    budget (`Budget.mixed_prefill` False) runs a step of prefills alone whenever it has any, its decodes after."""
    decision = Decision()
    tokens_left = budget.max_num_batched_tokens
    per_decode = budget.tokens_per_decode
    prefill_first = not budget.mixed_prefill and _prefill_pending(running, waiting, budget)
    if not prefill_first:  # else a prefill-only step: the decodes wait
        tokens_left = _decodes(running, waiting, kv, per_decode, tokens_left, decision)
    for seq in running:
        if seq.computed_tokens < seq.prefill_target and tokens_left > 0:  # prefilling (inlined: every step)
            chunk = min(seq.prefill_target - seq.computed_tokens, tokens_left)
            decision.prefills.append((seq, chunk))
            tokens_left -= chunk
    while waiting and tokens_left > 0 and len(running) < budget.max_num_seqs:
        seq = waiting[0]
        cached = kv.allocate(seq.request_id, seq.hashes, seq.prefill_target)
        if cached is None:
            if not running:
                raise ValueError(f"request {seq.request_id} ({seq.prefill_target} prompt tokens) does not fit "
                                 f"in the KV cache ({kv.capacity_blocks} blocks of {kv.block_tokens} tokens)")
            break
        waiting.popleft()
        seq.computed_tokens = cached
        _reserve(seq, seq.prefill_target, kv.block_tokens)
        if seq.preemptions == 0:
            seq.cached_tokens = cached
        if seq.scheduled_s < 0:
            seq.scheduled_s = now_s
        running.append(seq)
        decision.admitted.append(seq)
        chunk = min(seq.prefill_target - seq.computed_tokens, tokens_left)
        decision.prefills.append((seq, chunk))
        tokens_left -= chunk
    if prefill_first and not decision.prefills:  # the KV pool turned the waiting away: the decodes run
        _decodes(running, waiting, kv, per_decode, tokens_left, decision)
    return decision


def _decodes(running: list[Sequence], waiting: deque[Sequence], kv: KVCache, per_decode: int, tokens_left: int,
             decision: Decision) -> int:
    """Schedule the decodes (preempting where blocks run out); the tokens left of the step's budget."""
    if _schedule_decodes_at_once(running, kv, per_decode, tokens_left, decision):
        return tokens_left - len(decision.decodes) * per_decode
    return _schedule_decodes(running, waiting, kv, per_decode, tokens_left, decision)


def _prefill_pending(running: list[Sequence], waiting: deque[Sequence], budget: Budget) -> bool:
    """Whether a prefill-first engine has prefill work this step: a sequence still prefilling, or a waiting one it
    could admit (the KV pool may still turn it away; then the step has no prefill and the decodes run)."""
    if any(s.computed_tokens < s.prefill_target for s in running):
        return True
    return bool(waiting) and len(running) < budget.max_num_seqs


def _schedule_decodes_at_once(running: list[Sequence], kv: KVCache, per_decode: int, tokens_left: int,
                              decision: Decision) -> bool:
    """The usual step: every decode fits the budget and the KV pool; one block request for all that grow.

    Gives what `_schedule_decodes` gives whenever it applies (False, and no change, otherwise).
    """
    decodes = [s for s in running if s.computed_tokens >= s.prefill_target]
    if len(decodes) * per_decode > tokens_left:
        return False
    growing, needed = [], []
    for s in decodes:
        need = s.computed_tokens + s.generated - s.prefill_target + s.prompt_tokens + per_decode  # context_tokens + ...
        if need > s.reserved_tokens:
            growing.append(s)
            needed.append(need)
    if growing and not kv.grow_many([s.request_id for s in growing], needed):
        return False
    for s, need in zip(growing, needed, strict=True):
        _reserve(s, need, kv.block_tokens)
    decision.decodes = decodes
    return True


def _schedule_decodes(running: list[Sequence], waiting: deque[Sequence], kv: KVCache, per_decode: int,
                      tokens_left: int, decision: Decision) -> int:
    """Decodes one at a time, preempting the newest sequence when blocks run out; the tokens left after them."""
    for seq in list(running):
        if seq.prefilling:
            continue
        needed = seq.context_tokens + per_decode
        while needed > seq.reserved_tokens and not kv.grow(seq.request_id, needed):
            victim = next((s for s in reversed(running) if s is not seq), None)
            if victim is None:
                raise ValueError(f"request {seq.request_id} needs more KV blocks than the GPU holds "
                                 f"({seq.context_tokens + per_decode} tokens)")
            _preempt(victim, running, waiting, kv, decision)
        if seq not in running:
            continue
        if needed > seq.reserved_tokens:
            _reserve(seq, needed, kv.block_tokens)
        if tokens_left < per_decode:
            break
        decision.decodes.append(seq)
        tokens_left -= per_decode
    return tokens_left


def _reserve(seq: Sequence, tokens: int, block_tokens: int) -> None:
    """Record that the KV blocks held for `seq` now take `tokens` (whole blocks of `block_tokens`)."""
    seq.reserved_tokens = -(-tokens // block_tokens) * block_tokens


def _preempt(victim: Sequence, running: list[Sequence], waiting: deque[Sequence], kv: KVCache,
             decision: Decision) -> None:
    """Recompute-style preemption: drop the KV, restart the prompt (with what it generated) later."""
    kv.preempt(victim.request_id)
    running.remove(victim)
    victim.preemptions += 1
    victim.computed_tokens = 0
    victim.prefill_target = victim.prompt_tokens + victim.generated
    waiting.appendleft(victim)
    decision.preempted.append(victim)
