"""The dense engine steps measured as ground truth: Qwen3-32B shapes on one GPU, decode and prefill.

A step is one forward pass of the whole model (64 layers, then the final norm and the LM head on each sequence's
last token) written with PyTorch operators on random bf16 weights, as an engine without fused custom kernels
runs it: residual add and RMSNorm, the fused QKV projection, per-head RMSNorm of q and k (Qwen3's), rotary
embedding, the KV-cache write, attention (PyTorch's scaled_dot_product_attention with grouped KV heads),
the output projection, the MLP (fused gate and up projection, SiLU times up, down projection). Decode steps
attend over a contiguous per-sequence KV cache of `context` tokens plus the new one; prefill steps are one
sequence of `tokens` tokens from an empty cache, causal. The bench (`python -m companion.bench
engine-step`) times each step as one CUDA graph (median of replays) and records one eager execution with the
PyTorch profiler (Chrome trace, shapes recorded); `engine_step.csv` holds the times, the traces sit beside it.
No torch import here.
"""

from __future__ import annotations

from dataclasses import dataclass

MODEL = "qwen3-32b"
DECODE, PREFILL = "decode", "prefill"
# (sequences, context tokens each): 1 to 128 sequences at 1K, and long contexts
DECODE_SHAPES = ((1, 1024), (8, 1024), (16, 1024), (32, 1024), (64, 1024), (128, 1024), (4, 4096), (1, 8192),
                 (16, 8192))
# (sequences, new tokens each), from an empty cache
PREFILL_SHAPES = ((1, 512), (1, 1024), (1, 2048), (1, 4096), (1, 8192))
RMS_EPS = 1e-6  # Qwen3's rms_norm_eps (config.json)
ROPE_THETA = 1_000_000.0  # Qwen3's rope_theta (config.json)
WEIGHT_STD = 0.02  # random weights' scale: the usual initializer range; values do not change the time
CSV = "engine_step.csv"
COLUMNS = ("model", "phase", "seqs", "tokens", "context", "layers", "launch_mode", "launches", "time_s_median",
           "time_s_p10", "time_s_p90", "samples", "eager_time_s", "trace", "gpu_name", "sm_count", "driver",
           "torch", "triton", "cuda", "date")


@dataclass(frozen=True)
class StepCase:
    """One measured step: `seqs` sequences, each decoding one token after `context` or prefilling `tokens`."""

    phase: str
    seqs: int
    tokens: int  # new tokens per sequence (1 for decode)
    context: int  # cached tokens per sequence before the step

    @property
    def label(self) -> str:
        n = self.context if self.phase == DECODE else self.tokens
        return f"{MODEL}_{self.phase}_{self.seqs}x{n}"

    @property
    def trace_name(self) -> str:
        return f"{self.label}.trace.json.gz"

    def step_args(self) -> list[str]:
        """The `infersim step` arguments of the same batch."""
        if self.phase == DECODE:
            return ["--decode", f"{self.seqs}x{self.context}"]
        return ["--prefill", f"{self.seqs}x{self.tokens}"]


def cases() -> list[StepCase]:
    """Decode steps, then prefill steps."""
    return [StepCase(DECODE, s, 1, c) for s, c in DECODE_SHAPES] + [StepCase(PREFILL, s, t, 0)
                                                                   for s, t in PREFILL_SHAPES]
