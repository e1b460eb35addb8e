"""Causal attention prefill through PyTorch's scaled_dot_product_attention on the GPU: FlashAttention-2 (SDPA's
flash backend) and cuDNN's fused attention, bf16, checked against float64, then timed. `infersim kernel
attention-prefill` prices FlashAttention-3's tiles on Hopper (what vLLM and SGLang run), which cannot be installed
where this runs; cuDNN's graph-timed rows stand for it: `validation/attention_prefill.py` fits the H200's
attention-prefill efficiency on the long 128-wide rows and tests it on the others.

    python -m companion.bench.attention_prefill --out DIR    # writes DIR/attention_prefill.csv

Work counted before timing: a causal prefill of S tokens does 2 matmuls of 2 * S * (S + 1) / 2 * D flops per
(batch, head), and moves at least q, k, v and the output once (4 * B * S * H * D bf16 values). Each case is checked
on the last 64 query rows of two heads against float64 on the same inputs, then timed two ways with CUDA events after
warm-up, over two input sets in turn, and reported as the median of the samples: eagerly (a prefill step runs outside
CUDA graphs; the host's launch cost of the library call is in the sample when the kernel is shorter) and as one node
of a captured CUDA graph (`launch_mode` graph: the kernel's own time and one graph node, the host hidden).
DeepSeek-style MLA prefill shapes have query/key heads of 192 and value heads of 128 (`head_dim_v`).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import statistics
import subprocess
import sys
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

# (batch, tokens, heads, head_dim): the public Qwen1.5-0.5B forward's shape (16 x 559, 16 heads of 64), and
# per-GPU prefill shapes of served models (DeepSeek-V3/R1's 128 heads at TP8: 16 a GPU; Llama-70B's 64 at TP2 and
# TP8 ...), from 1k to 16k tokens
CASES = [(16, 559, 16, 64), (1, 1024, 16, 128), (1, 4096, 16, 128), (1, 8192, 16, 128), (1, 16384, 16, 128),
         (4, 2048, 32, 128), (1, 8192, 32, 128), (8, 1024, 32, 64), (1, 2048, 64, 64), (2, 4096, 8, 128),
         (1, 256, 16, 128), (1, 512, 16, 128), (1, 2048, 16, 128), (4, 1024, 16, 128)]
# (batch, tokens, heads, head_dim, head_dim_v): DeepSeek-V3/R1's MLA prefill at TP8 (16 of 128 heads a GPU,
# q/k of 128 + 64 rotary, v of 128)
MLA_CASES = [(1, 1024, 16, 192, 128), (1, 2048, 16, 192, 128), (1, 4096, 16, 192, 128), (1, 8192, 16, 192, 128),
             (4, 1024, 16, 192, 128), (1, 16384, 16, 192, 128), (2, 8192, 16, 192, 128)]
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
WARMUP, SAMPLES, CHECK_ROWS = 10, 40, 64
REL_ERR_MAX = 2e-2  # bf16 operands, fp32 accumulation, bf16 output (METHOD: 1e-3 to 1e-2; softmax adds a little)


def _inputs(b: int, s: int, h: int, d: int, dv: int) -> tuple[torch.Tensor, ...]:
    return tuple(torch.randn(b, h, s, width, device="cuda", dtype=torch.bfloat16) for width in (d, d, dv))


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor) -> float:
    """Largest relative error over the last CHECK_ROWS queries of heads 0 and h-1 of batch 0, against float64."""
    s, d = q.shape[2], q.shape[3]
    rows = torch.arange(s - CHECK_ROWS, s, device="cuda")
    errs = []
    for head in (0, q.shape[1] - 1):
        qq, kk, vv = (t[0, head].double() for t in (q, k, v))
        scores = (qq[rows] @ kk.t()) / d**0.5
        scores = scores.masked_fill(torch.arange(s, device="cuda")[None, :] > rows[:, None], float("-inf"))
        ref = torch.softmax(scores, dim=-1) @ vv
        got = out[0, head, rows].double()
        errs.append(float((got - ref).norm() / ref.norm()))
    return max(errs)


def _time(fn, sets: list[tuple[torch.Tensor, ...]]) -> list[float]:
    for i in range(WARMUP):
        fn(*sets[i % len(sets)])
    torch.cuda.synchronize()
    samples = []
    for i in range(SAMPLES):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        args = sets[i % len(sets)]
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e-3)
    return samples


def _graphed(fn, sets: list[tuple[torch.Tensor, ...]]) -> list:
    """One captured CUDA graph of one call per input set, as zero-argument replays."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # the warm-up a capture needs, on a side stream
        for args in sets:
            fn(*args)
    torch.cuda.current_stream().wait_stream(stream)
    graphs = []
    for args in sets:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn(*args)
        graphs.append(graph)
    return [graph.replay for graph in graphs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.split("\n")[0].strip() or "unknown"
    env = {"gpu_name": torch.cuda.get_device_name(0), "sm_count": props.multi_processor_count, "driver": driver,
           "torch": torch.__version__, "triton": "not used", "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version(), "memory_bytes": props.total_memory,
           "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    rows, failures = [], []
    for b, s, h, d, dv in [(*c, c[3]) for c in CASES] + MLA_CASES:
        sets = [_inputs(b, s, h, d, dv) for _ in range(2)]
        flop = 2 * b * h * (d + dv) * s * (s + 1) / 2
        moved = b * s * h * (3 * d + dv) * 2 if d != dv else 4 * b * s * h * d * 2
        for name, backend in BACKENDS.items():
            def fn(q, k, v, backend=backend):
                with sdpa_kernel(backend):
                    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            try:
                out = fn(*sets[0])
                torch.cuda.synchronize()
                err = _check(*sets[0], out)
                if not err < REL_ERR_MAX:
                    raise RuntimeError(f"relative error {err:.2e}")
                timed = {"eager": _time(fn, sets)}
                replays = _graphed(fn, sets)
                timed["graph"] = _time(lambda i, r=replays: r[i](), [(i,) for i in range(len(replays))])
            except Exception as exc:  # a backend that does not take the shape: recorded, the others go on
                failures.append(f"{name} {b}x{s} h{h} d{d}/{dv}: {type(exc).__name__}: "
                                f"{str(exc).splitlines()[0][:160]}")
                continue
            for mode, samples in timed.items():
                median = statistics.median(samples)
                q10, q90 = (statistics.quantiles(samples, n=10)[i] for i in (0, -1))
                rows.append({"backend": name, "batch": b, "tokens": s, "heads": h, "head_dim": d, "head_dim_v": dv,
                             "causal": True, "dtype": "bfloat16", "launch_mode": mode,
                             "time_s_median": f"{median:.6e}", "time_s_p10": f"{q10:.6e}",
                             "time_s_p90": f"{q90:.6e}", "samples": SAMPLES, "flop": f"{flop:.0f}", "bytes": moved,
                             "tflop_per_s": f"{flop / median / 1e12:.1f}", "rel_err": f"{err:.2e}",
                             "input_sets": len(sets), **env})
    path = args.out / "attention_prefill.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    for r in rows:
        print(f"{r['backend']:6s} {r['launch_mode']:5s} {r['batch']:>3}x{r['tokens']:<6} h{r['heads']:<3} "
              f"d{r['head_dim']}/{r['head_dim_v']:<4} "
              f"{float(r['time_s_median']) * 1e6:10.1f} us {r['tflop_per_s']:>7} TFLOP/s err {r['rel_err']}")
    for f in failures:
        print("FAILED", f)
    print(env)
    return 1 if not rows else 0


if __name__ == "__main__":
    sys.exit(main())
