# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Quantized all-reduce (QuickReduce) on 8x MI355X
#
# QuickReduce is a two-shot all-reduce over peer memory whose payload is quantized on the way out
# (int8, int6, int4, int3 or fp4 codes with a scale per 32 values; `fp` sends fp16 unquantized). This
# notebook predicts, on MI355X nodes:
#
# 1. each codec's speedup over the vendor ring (RCCL) by message size at TP2, TP4 and TP8;
# 2. the end-to-end gain per model: the same serving run with the all-reduce through a codec instead of
#    the library's choice.
#
# Every number is a prediction of the model (`infersim collective`, `infersim run`); the H200 measurements
# behind the collective model are in `validation/data/h200x2/` and `validation/NOTES.md`. Figures are written
# to `$INFERSIM_NOTEBOOK_OUT` (default `notebooks/figures/`) as offline plotly pages.

# %%
import os
import time
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from infersim.collective_queries import binary_size, collective_sweep
from infersim.figure_checks import figure_problems
from simulator.scenario import load_scenario
from simulator.simulate import simulate

# figures/ beside the notebook: `jupytext --execute` and Jupyter run it in its own folder
OUT = Path(os.environ.get("INFERSIM_NOTEBOOK_OUT", "figures"))
OUT.mkdir(parents=True, exist_ok=True)
MIB = 1 << 20
SIZES = [MIB << k for k in range(0, 11)]  # 1 MiB to 1 GiB
started = time.monotonic()

# %% [markdown]
# ## 1. Speedup over the ring, by size, at TP2, TP4 and TP8
#
# Graph-launched all-reduce of bf16 on the MI355X platform (xGMI links); `selected` is what the
# library's policy picks without QuickReduce (one-shot, two-shot or ring).

# %%
sweeps = {tp: collective_sweep("mi355x", tp=tp, op="allreduce", sizes=SIZES) for tp in (2, 4, 8)}
codecs = [v for v in sweeps[8]["variants"] if v.startswith("quickreduce-")]
figure = make_subplots(rows=1, cols=3, subplot_titles=[f"TP{tp}" for tp in sweeps], shared_yaxes=True)
for col, sweep in enumerate(sweeps.values(), start=1):
    sizes_mib = [row["bytes"] / MIB for row in sweep["rows"]]
    for variant in [*codecs, "selected"]:
        if f"{variant}_speedup" not in sweep["rows"][0]:
            continue  # int3 runs at TP2 only
        figure.add_trace(go.Scatter(x=sizes_mib, y=[row[f"{variant}_speedup"] for row in sweep["rows"]],
                                    mode="lines+markers", name=variant, legendgroup=variant, showlegend=col == 1),
                         row=1, col=col)
    figure.update_xaxes(title_text="message size", type="log", tickvals=sizes_mib[::2],
                        ticktext=[binary_size(int(s * MIB)) for s in sizes_mib[::2]], row=1, col=col)
figure.update_yaxes(title_text="speedup over the ring (x)", row=1, col=1)
figure.update_layout(title="QuickReduce codecs over the ring on MI355X, bf16 all-reduce, graph launches")
assert not figure_problems(figure), figure_problems(figure)  # infersim.figure_checks
figure.write_html(OUT / "quickreduce_speedup.html", include_plotlyjs=True)

table = pd.DataFrame([{"tp": tp, "size_MiB": row["bytes"] / MIB,
                       **{c.removeprefix("quickreduce-"): round(row[f"{c}_speedup"], 2) for c in codecs
                          if f"{c}_speedup" in row}} for tp, s in sweeps.items() for row in s["rows"]])
table[table["size_MiB"].isin([1, 16, 256, 1024])]

# %% [markdown]
# Where each codec starts to pay (the smallest size at which it beats the ring), per TP:

# %%
crossover = {}
for tp, sweep in sweeps.items():
    for c in codecs:
        wins = [row["bytes"] / MIB for row in sweep["rows"] if row.get(f"{c}_speedup", 0) > 1.0]
        crossover[(tp, c.removeprefix("quickreduce-"))] = min(wins) if wins else None
pd.Series(crossover, name="first size above 1x (MiB)").unstack()

# %% [markdown]
# ## 2. End-to-end gain per model (TP8, agentic workload, one seed)
#
# The same serving run (the default agentic workload, shortened) with the all-reduce through QuickReduce
# int4 and int8 against the library's choice, for each catalog model that serves on 8x MI355X at TP8.

# %%
MODELS = ["kimi-k3", "deepseek-v3", "llama-3.1-70b", "qwen3-235b-a22b"]
SHORT = ["workload.sessions=8", "workload.turns_mean=6"]
rows = []
for model in MODELS:
    base = None
    for codec in ("", "int8", "int4"):
        scenario = load_scenario(None, [], [f"model.name={model}", f"collectives.quickreduce={codec}",
                                            "spec_decode.drafts=0" if model != "kimi-k3" else "spec_decode.drafts=2",
                                            *SHORT])
        s = simulate(scenario).summary
        metrics = {"tok/s/GPU": s["total_tok_per_s_per_gpu"], "TTFT p50 (s)": s["ttft_s"]["p50"],
                   "TPOT p50 (s)": s["tpot_s"]["p50"]}
        base = base or metrics
        rows.append({"model": model, "all-reduce": codec or "library", **metrics,
                     **{f"{k} change (%)": 100 * (v / base[k] - 1) for k, v in metrics.items()}})
gains = pd.DataFrame(rows)
gains.round(3)

# %%
figure = go.Figure()
for codec in ("int8", "int4"):
    part = gains[gains["all-reduce"] == codec]
    figure.add_trace(go.Bar(x=part["model"], y=part["TPOT p50 (s) change (%)"], name=f"QuickReduce {codec}"))
figure.update_layout(title="End-to-end: TPOT p50 change with QuickReduce on 8x MI355X (TP8)",
                     xaxis_title="model (catalog name)", yaxis_title="TPOT p50 change (%)", barmode="group")
assert not figure_problems(figure), figure_problems(figure)  # infersim.figure_checks
figure.write_html(OUT / "quickreduce_end_to_end.html", include_plotlyjs=True)
print(f"notebook ran in {time.monotonic() - started:.0f} s; figures in {OUT}")
