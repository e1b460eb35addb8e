"""What a serving engine does around the kernels that the serving simulation follows.

Three behaviours of vLLM and SGLang decide where a request's time goes beside the kernels themselves:

- **Which steps replay captured graphs.** A replayed step pays a graph node per launch; a step the engine runs
  eagerly pays the host's time per launch: the framework's Python, the operator dispatch and the launch call.
  vLLM compiles the model and captures graphs by token count (CUDAGraphMode FULL_AND_PIECEWISE, its default since
  v0.11: a decode-only batch as one full graph, a batch with prefill tokens as graph pieces around the attention),
  up to `max_cudagraph_capture_size` tokens, by default min(2 x max_num_seqs x (1 + draft tokens), 512)
  (vllm/config/vllm.py, where the compilation config's capture sizes are set);
  larger steps run the compiled model without graphs. SGLang captures decode batches of up to
  `--cuda-graph-max-bs` requests (python/sglang/srt/model_executor/cuda_graph_runner.py) and runs every step
  with prefill tokens eagerly (its piecewise prefill graphs are opt-in, `--enable-piecewise-cuda-graph`).
- **The host's time per eager launch.** For vLLM's compiled model none is published apart from the launch itself,
  so an eager vLLM step pays the GPU spec's eager launch cost (assumption). SGLang's eager DeepSeek-V3 forward
  was measured at 82.6 ms for a prefill of one new token, and at 23.1 ms once that prefill replayed a graph
  (sgl-project/sglang#12160, the server's "forward cost" log lines): 59.5 ms of host time over the 1,804 kernel
  launches and 124 collective calls of that step in this model (`infersim step --model deepseek-v3 --hw h200
  --tp 8 --prefill 1x1`), 30.9 us a call. The same Python drives SGLang on ROCm, so the figure stands for
  every GPU (assumption).
- **How often the scheduler takes new requests.** SGLang's `--scheduler-recv-interval N` polls its input socket
  only once its counter reaches N; a decode step adds 1 and any other step 1,000, so while decoding new requests
  wait for up to N steps (python/sglang/srt/managers/scheduler_recv_skipper.py, SchedulerRecvSkipper). An idle
  scheduler loops at once, so an idle engine takes a request as it comes. (`--num-continuous-decode-steps` does
  nothing since the overlap scheduler replaced its loop, sgl-project/sglang#2095, so it has no key here.)
- **When a request sent during a step can join one.** The client's round trip is never zero, so a request sent
  as a step ends reaches the scheduler after the next step was formed: vLLM's engine core forms each step after
  the last one's outputs (one step's wait). SGLang's overlap scheduler (on by default; `--disable-overlap-schedule`
  turns it off) launches step k+1 before it processes step k's outputs, so such a request waits two steps
  (python/sglang/srt/managers/scheduler.py, event_loop_overlap). An idle engine takes a request at once.
- **Whether prefill chunks ride in decode steps**: vLLM mixes them; SGLang runs prefill-only steps first
  (server_args.py: enable_mixed_chunk False).
- **The front end around the engine.** A client's time to first token also holds the serving front end: the HTTP
  server, tokenizing the prompt the client sent as text, the hops between the front end's, the scheduler's and
  the detokenizer's processes, and the stream back. SGLang with its forward replaced by a 2.632 ms busy-wait
  answered a 128-token prompt at a median TTFT of 9.54 ms (tenstorrent/tt-inference-server#3560: `vllm bench
  serve`, one request at a time), so about 6.8 ms a request beside the forward and the prompt's tokenizing; and
  tokenizing in SGLang's OpenAI server takes about 70 ms at 100K tokens (sgl-project/sglang#13432), 0.7 us a
  prompt token. vLLM and TensorRT-LLM's OpenAI servers take the same figures (assumption: both front ends are
  Python processes that tokenize with the same Hugging Face tokenizers; no measurement of theirs was found).

TensorRT-LLM's PyTorch backend (`trtllm`): context and generation requests share a step (in-flight batching);
graphs are captured for generation-only batches up to `cuda_graph_config.max_batch_size` and context steps run
eagerly unless piecewise graphs are switched on (tensorrt_llm/llmapi/llm_args.py: CudaGraphConfig,
TorchCompileConfig); its overlap scheduler is on by default (`disable_overlap_scheduler` False), so a request sent
mid-run waits two steps as under SGLang. No host figure per launch is published for it: assumption, SGLang's (both
drive the model's PyTorch modules from Python).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.cost.cycle import LaunchPolicy  # the cost layer applies it; this module sets it
from workloads.attention_backends import ENGINES

# sgl-project/sglang#12160: DeepSeek-V3's eager forward of one new token 82.6 ms, 23.1 ms as a graph; the 59.5 ms
# between them over the 1,804 kernel launches and 124 collective calls of that step
# (tests/simulator/test_engine_profiles.py holds the count)
SGLANG_EAGER_FORWARD_S, SGLANG_GRAPH_FORWARD_S, SGLANG_PROBE_LAUNCHES = 82.6e-3, 23.1e-3, 1804 + 124
SGLANG_EAGER_LAUNCH_HOST_S = (SGLANG_EAGER_FORWARD_S - SGLANG_GRAPH_FORWARD_S) / SGLANG_PROBE_LAUNCHES

# The serving front end (module docstring): tenstorrent/tt-inference-server#3560, SGLang's median TTFT of a
# 128-token prompt with a 2.632 ms busy-wait for its forward; sgl-project/sglang#13432, ~70 ms of tokenizing at
# 100K prompt tokens
FRONT_END_MOCK_TTFT_S, FRONT_END_MOCK_FORWARD_S, FRONT_END_MOCK_PROMPT = 9.54e-3, 2.632e-3, 128
TOKENIZE_S_PER_PROMPT_TOKEN = 70e-3 / 100_000

VLLM_CAPTURE_TOKENS = 512  # vllm/config/vllm.py: max_cudagraph_capture_size at most 512 by default
# Assumption: SGLang's server_args.py sets --cuda-graph-max-bs from the GPU's memory and the TP size, 512 at TP >= 4
# on the large-memory bands (256 below TP 4); every GPU of the catalog has 80 GB or more.
SGLANG_GRAPH_MAX_BS, SGLANG_GRAPH_MAX_BS_SMALL_TP = 512, 256
# Assumption: TensorRT-LLM's generated CUDA-graph batch sizes reach 128 when the config names none
TRTLLM_GRAPH_MAX_BS = 128


RECEIVE_LAG_STEPS = {"vllm": 1, "sglang": 2, "trtllm": 2}  # step boundaries before a step takes a request sent mid-run


def launch_policy(engine: str, cuda_graph_max_bs: int, max_num_seqs: int, tp: int, drafts: int = 0
                  ) -> LaunchPolicy:
    """The engine's graph rule and eager host cost; `cuda_graph_max_bs` 0 takes the engine's default size
    (SGLang: requests a decode batch; vLLM: max_cudagraph_capture_size, tokens a step)."""
    if engine == "sglang":
        default = SGLANG_GRAPH_MAX_BS if tp >= 4 else SGLANG_GRAPH_MAX_BS_SMALL_TP
        return LaunchPolicy(graph_decodes=cuda_graph_max_bs or default,
                            eager_launch_host_s=SGLANG_EAGER_LAUNCH_HOST_S)
    if engine == "trtllm":
        return LaunchPolicy(graph_decodes=cuda_graph_max_bs or TRTLLM_GRAPH_MAX_BS,
                            eager_launch_host_s=SGLANG_EAGER_LAUNCH_HOST_S)
    if engine == "vllm":
        default = min(2 * max_num_seqs * (1 + drafts), VLLM_CAPTURE_TOKENS)
        return LaunchPolicy(graph_tokens=cuda_graph_max_bs or default)
    raise ValueError(f"unknown serving engine {engine!r} (valid: {', '.join(ENGINES)})")


@dataclass(frozen=True)
class FrontEnd:
    """The time a request spends in the serving front end, outside the engine's steps: `request_s` for each request
    (the HTTP server, the hops between processes, the stream back) and `per_prompt_token_s` for each prompt token
    (tokenizing the text the client sent)."""

    request_s: float = 0.0
    per_prompt_token_s: float = 0.0

    def seconds(self, prompt_tokens: int) -> float:
        return self.request_s + self.per_prompt_token_s * prompt_tokens


# vLLM's and TensorRT-LLM's take SGLang's figures (assumption; the module docstring says why)
_FRONT_END = FrontEnd(
    FRONT_END_MOCK_TTFT_S - FRONT_END_MOCK_FORWARD_S - FRONT_END_MOCK_PROMPT * TOKENIZE_S_PER_PROMPT_TOKEN,
    TOKENIZE_S_PER_PROMPT_TOKEN)
FRONT_ENDS = {"sglang": _FRONT_END, "vllm": _FRONT_END, "trtllm": _FRONT_END}


@dataclass
class RecvSkipper:
    """SGLang's SchedulerRecvSkipper: whether the scheduler reads new requests before its next step."""

    interval: int = 1
    counter: int = 0

    def __post_init__(self) -> None:
        self.counter = self.interval  # the skipper starts due (SchedulerRecvSkipper.__init__)

    def due(self, idle: bool) -> bool:
        """True when the scheduler takes new requests now; an idle engine always does (its loop spins at once)."""
        if self.interval <= 1 or idle or self.counter >= self.interval:
            self.counter = 0
            return True
        return False

    def stepped(self, decode_only: bool) -> None:
        """Count one step: 1 for a decode step, 1,000 for any other (SchedulerRecvSkipper's weights)."""
        self.counter += 1 if decode_only else 1000
