"""`engine-step`: time whole dense engine steps (Qwen3-32B shapes, random bf16 weights) and trace them.

    python -m companion.bench engine-step --out DIR          # every case; DIR defaults to $OUT
    python -m companion.bench engine-step --only decode_8x1024 prefill_1x512
    python -m companion.bench engine-step --list             # the planned cases, no GPU needed

What a step computes, and the cases, are in `validation.engine_steps`. Per case: the step is checked (its first
layer against the same operators in float32, and the graph's logits against the eager step's), captured as
one CUDA graph and timed by replays (a sleep kernel ahead of each sample hides the host; median, p10 and p90
of the samples), timed once eagerly, then one eager step runs under `torch.profiler` with `record_shapes` and
its Chrome trace is written gzipped (`<label>.trace.json.gz`). Writes `engine_step.csv` when every case has
run (the failed ones are listed and the status is 1).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import tempfile
import time
import traceback
from pathlib import Path

from companion.bench.output import report_failures, start_timing
from validation import engine_steps as spec
from validation.measure_output import write_csv_atomic

GRAPH_SAMPLES = 20
LONG_STEP_S = 0.2  # steps longer than this take fewer samples
LONG_SAMPLES = 7
CHECK_REL_ERR = 3e-2  # bf16 layer against float32 operators: ||a - b|| / ||b||
GRAPH_CHECK_FACTOR = 4  # the graph's logits against the eager step's, in units of two eager steps' difference


class Qwen3Dense:
    """A dense GQA decoder's weights (random bf16) and its step, written with PyTorch operators."""

    def __init__(self, torch, model, device: str = "cuda"):
        g = model.gqa
        self.t, self.device = torch, device
        self.hidden, self.layers, self.heads, self.kv_heads = model.hidden_size, model.layers, g.heads, g.kv_heads
        self.head_dim, self.inter, self.vocab = g.head_dim, model.intermediate_size, model.vocab_size
        qkv = (self.heads + 2 * self.kv_heads) * self.head_dim

        def rand(*shape):
            return torch.empty(*shape, device=device, dtype=torch.bfloat16).normal_(0.0, spec.WEIGHT_STD)

        def ones(n):
            return (1.0 + 0.1 * torch.randn(n, device=device)).to(torch.bfloat16)

        self.embed, self.lm_head, self.final_norm = rand(self.vocab, self.hidden), rand(self.vocab, self.hidden), ones(
            self.hidden)
        self.w = [{"qkv": rand(qkv, self.hidden), "o": rand(self.hidden, self.heads * self.head_dim),
                   "gate_up": rand(2 * self.inter, self.hidden), "down": rand(self.hidden, self.inter),
                   "ln1": ones(self.hidden), "ln2": ones(self.hidden), "q_norm": ones(self.head_dim),
                   "k_norm": ones(self.head_dim)} for _ in range(self.layers)]
        inv = 1.0 / spec.ROPE_THETA ** (torch.arange(0, self.head_dim, 2, device=device).float() / self.head_dim)
        self.inv_freq = inv

    def rope_tables(self, positions):
        """cos and sin [tokens, 1, head_dim] in bf16 for the positions (computed once per step, outside the layers)."""
        t = self.t
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = t.cat((freqs, freqs), dim=-1)[:, None, :]
        return emb.cos().to(t.bfloat16), emb.sin().to(t.bfloat16)

    def _rope(self, x, cos, sin):
        half = self.head_dim // 2
        rotated = self.t.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def layer(self, i, x, res, cos, sin, cache, seqs, tokens, context):
        """One decoder layer on x [seqs * tokens, hidden]; returns (mlp output, residual)."""
        f, w = self.t.nn.functional, self.w[i]
        res = x if res is None else res + x
        h = f.rms_norm(res, (self.hidden,), w["ln1"], spec.RMS_EPS)
        qkv = f.linear(h, w["qkv"])
        q_len, kv_len = self.heads * self.head_dim, self.kv_heads * self.head_dim
        q, k, v = qkv.split([q_len, kv_len, kv_len], dim=-1)
        q = f.rms_norm(q.view(-1, self.heads, self.head_dim), (self.head_dim,), w["q_norm"], spec.RMS_EPS)
        k = f.rms_norm(k.view(-1, self.kv_heads, self.head_dim), (self.head_dim,), w["k_norm"], spec.RMS_EPS)
        q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
        k_cache, v_cache = cache[i]  # [seqs, kv_heads, context + tokens, head_dim]
        new = slice(context, context + tokens)
        k_cache[:, :, new] = k.view(seqs, tokens, self.kv_heads, self.head_dim).transpose(1, 2)
        v_cache[:, :, new] = v.view(seqs, tokens, self.kv_heads, self.head_dim).transpose(1, 2)
        qh = q.view(seqs, tokens, self.heads, self.head_dim).transpose(1, 2)
        attn = f.scaled_dot_product_attention(qh, k_cache, v_cache, is_causal=tokens > 1, enable_gqa=True)
        o = f.linear(attn.transpose(1, 2).reshape(seqs * tokens, q_len), w["o"])
        res = res + o
        h = f.rms_norm(res, (self.hidden,), w["ln2"], spec.RMS_EPS)
        gate, up = f.linear(h, w["gate_up"]).chunk(2, dim=-1)
        return f.linear(f.silu(gate) * up, w["down"]), res

    def step(self, ids, positions, cache, seqs, tokens, context):
        """Logits [seqs, vocab] of each sequence's last token."""
        f = self.t.nn.functional
        cos, sin = self.rope_tables(positions)
        x, res = f.embedding(ids, self.embed), None
        for i in range(self.layers):
            x, res = self.layer(i, x, res, cos, sin, cache, seqs, tokens, context)
        h = f.rms_norm(res + x, (self.hidden,), self.final_norm, spec.RMS_EPS)
        last = h.view(seqs, tokens, self.hidden)[:, -1]
        return f.linear(last, self.lm_head)


def _inputs(torch, m: Qwen3Dense, case: spec.StepCase):
    """Token ids, positions and a KV cache holding `context` random tokens per sequence (room for the new ones)."""
    n = case.context + case.tokens
    ids = torch.randint(0, m.vocab, (case.seqs * case.tokens,), device=m.device)
    positions = (case.context + torch.arange(case.tokens, device=m.device)).repeat(case.seqs)
    cache = [tuple(torch.randn(case.seqs, m.kv_heads, n, m.head_dim, device=m.device, dtype=torch.bfloat16)
                   for _ in range(2)) for _ in range(m.layers)]
    return ids, positions, cache


def _check_first_layer(torch, m: Qwen3Dense, case: spec.StepCase, ids, positions, cache) -> float:
    """||bf16 layer 0 - float32 layer 0|| / ||float32||, on copies of the cache; raises if over the bound."""
    f = torch.nn.functional
    x = f.embedding(ids, m.embed)
    cos, sin = m.rope_tables(positions)
    c16 = [tuple(c.clone() for c in cache[0])]
    out16, _ = m.layer(0, x, None, cos, sin, c16, case.seqs, case.tokens, case.context)
    w16 = m.w[0]
    m.w[0] = {k: v.float() for k, v in w16.items()}
    try:
        c32 = [tuple(c.float() for c in cache[0])]
        out32, _ = m.layer(0, x.float(), None, cos.float(), sin.float(), c32, case.seqs, case.tokens, case.context)
    finally:
        m.w[0] = w16
    err = float((out16.float() - out32).norm() / out32.norm())
    if not err < CHECK_REL_ERR:
        raise RuntimeError(f"{case.label}: first layer's relative error {err:.3e} >= {CHECK_REL_ERR}")
    return err


def _rel(torch, a, b) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def _graph_times(torch, graph, samples: int) -> list[float]:
    from companion.bench.timing import SLEEP_CYCLES

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    for s, e in zip(starts, ends, strict=True):
        torch.cuda._sleep(SLEEP_CYCLES)
        s.record()
        graph.replay()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e-3 for s, e in zip(starts, ends, strict=True)]


def _gpu_events(trace_json: Path) -> int:
    """Kernels, copies and fills in a Chrome trace of the PyTorch profiler: the launches a graph of the step holds."""
    with open(trace_json) as f:
        events = json.load(f)["traceEvents"]
    return sum(1 for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))


def _measure(torch, m: Qwen3Dense, case: spec.StepCase, env: dict, out: Path) -> dict:
    from companion.bench.timing import capture_graph, provenance
    from validation.measure_output import percentile

    ids, positions, cache = _inputs(torch, m, case)
    err = _check_first_layer(torch, m, case, ids, positions, cache)

    def body():
        return m.step(ids, positions, cache, case.seqs, case.tokens, case.context)

    eager, again = body(), body()
    torch.cuda.synchronize()
    if not torch.isfinite(eager).all():
        raise RuntimeError(f"{case.label}: the eager step's logits are not finite")
    logits = {}
    graph = capture_graph(lambda: logits.__setitem__("out", body()))  # the last call is the captured one
    graph.replay()
    torch.cuda.synchronize()
    # Two eager steps may differ (split-KV attention reduces in any order, and 64 random layers amplify it): the
    # graph must agree with the eager step as closely as the eager step agrees with itself.
    noise, diff = _rel(torch, again, eager), _rel(torch, logits["out"], eager)
    if not diff <= max(GRAPH_CHECK_FACTOR * noise, CHECK_REL_ERR):
        raise RuntimeError(f"{case.label}: the graph's logits differ from the eager step's by {diff:.2e} "
                           f"(two eager steps: {noise:.2e})")
    first = _graph_times(torch, graph, 3)
    samples = LONG_SAMPLES if min(first) > LONG_STEP_S else GRAPH_SAMPLES
    times = _graph_times(torch, graph, samples)
    del graph
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    body()
    end.record()
    torch.cuda.synchronize()
    eager_s = start.elapsed_time(end) * 1e-3
    trace = out / case.trace_name
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
        body()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        launches = _gpu_events(raw)
        part = trace.with_name(trace.name + ".part")
        with open(raw, "rb") as src, gzip.open(part, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
        os.replace(part, trace)
    med = percentile(times, 50)
    print(f"{case.label}: graph {med * 1e3:.3f} ms (p10 {percentile(times, 10) * 1e3:.3f}, "
          f"p90 {percentile(times, 90) * 1e3:.3f}, {samples} samples, {launches} launches), "
          f"eager {eager_s * 1e3:.3f} ms, layer-0 rel err {err:.1e}", flush=True)
    cache.clear()
    torch.cuda.empty_cache()
    return {"model": spec.MODEL, "phase": case.phase, "seqs": case.seqs, "tokens": case.tokens,
            "context": case.context, "layers": m.layers, "launch_mode": "graph", "launches": launches,
            "time_s_median": med, "time_s_p10": percentile(times, 10), "time_s_p90": percentile(times, 90),
            "samples": samples, "eager_time_s": eager_s, "trace": case.trace_name, **provenance(env)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: $OUT)")
    parser.add_argument("--only", nargs="+", default=None, metavar="PHASE_SxN",
                        help="cases by label without the model, e.g. decode_8x1024 prefill_1x512")
    parser.add_argument("--list", action="store_true", help="print the planned cases and exit (no GPU)")


def run(args: argparse.Namespace) -> int:
    cases = spec.cases()
    if args.only:
        wanted = {f"{spec.MODEL}_{o}" for o in args.only}
        unknown = wanted - {c.label for c in cases}
        if unknown:
            valid = " ".join(c.label.removeprefix(spec.MODEL + "_") for c in cases)
            print(f"bench engine-step: unknown case(s) {sorted(unknown)} (valid: {valid})")
            return 2
        cases = [c for c in cases if c.label in wanted]
    if args.list:
        for c in cases:
            print(c.label, " ".join(c.step_args()))
        return 0
    started = start_timing(args.out, "bench engine-step")
    if isinstance(started, int):
        return started
    out, env = started
    import torch

    from workloads.model import load_model

    t0 = time.monotonic()
    m = Qwen3Dense(torch, load_model(spec.MODEL))
    torch.cuda.synchronize()
    print(f"weights: {sum(p.numel() for layer in m.w for p in layer.values()) / 1e9:.2f}B parameters in the layers, "
          f"{time.monotonic() - t0:.1f} s", flush=True)
    rows, failures = [], []
    for case in cases:
        try:
            with torch.no_grad():
                rows.append(_measure(torch, m, case, env, out))
        except Exception as e:  # a failed case must not stop the others
            failures.append(f"{case.label}: {e}")
            traceback.print_exc()
            torch.cuda.empty_cache()
    if rows:
        write_csv_atomic(out / spec.CSV, spec.COLUMNS, rows)
    print(f"engine-step: {len(rows)} cases in {time.monotonic() - t0:.0f} s; "
          f"slowest sample spread {max((r['time_s_p90'] / r['time_s_p10'] for r in rows), default=math.nan):.3f}")
    return report_failures("bench engine-step", failures)
