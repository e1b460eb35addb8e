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
# # Kimi K3 on 8x MI355X against 8x B300
#
# The study's metric is total tokens per second per GPU (reused input and generated output) at a P90
# interactivity of 50 tok/s/user, and tokens per dollar at the modelled TCO ($1.50 per MI355X-hour, $2.26 per
# B300-hour). Each platform runs its public recipe (`simulator/scenarios/study/`): the MI355X with CPU offload,
# DCP1 and three drafts; the B300 with DCP8 and Mooncake offload. This notebook predicts:
#
# 1. each platform's frontier of throughput per GPU (and tokens per dollar) against P90 interactivity, swept over
#    the number of concurrent agentic sessions, with 95 % intervals over seeds, and both read at 50 tok/s/user;
# 2. each mechanism of the study as a design change on the MI355X default, its deltas with their intervals;
# 3. the draft depth x DCP width sweep, and where speculative decoding stops paying.
#
# Every number is the model's prediction (no MI355X or B300 was measured); the workload is shortened to keep
# the notebook under three minutes on two cores. Figures go to `$INFERSIM_NOTEBOOK_OUT` (default
# `notebooks/figures/`). Run it as a notebook (Jupyter, or `jupytext --to ipynb --execute
# notebooks/kimi_k3_study.py`): its sweeps start worker processes, which a plain `python` run of this file
# would make import it again.

# %%
import os
import tempfile
import time
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from infersim.compare import compare, load_changes
from infersim.figure_checks import figure_problems
from infersim.pareto import frontier, read_frontier
from infersim.sweep import run_sweep
from simulator.replicates import t_interval
from simulator.scenario import SCENARIO_DIR

# figures/ beside the notebook: `jupytext --execute` and Jupyter run it in its own folder
OUT = Path(os.environ.get("INFERSIM_NOTEBOOK_OUT", "figures"))
OUT.mkdir(parents=True, exist_ok=True)
SCENARIOS = SCENARIO_DIR  # the built-in scenarios, package data: found from any folder
WORK = Path(tempfile.mkdtemp(prefix="kimi-k3-study-"))  # the sweeps' tables (resumable folders)
X, Y, COST = "interactivity_tok_per_s_per_user.p90", "total_tok_per_s_per_gpu", "tokens_per_dollar"
TARGET = 50.0  # tok/s/user at P90
started = time.monotonic()


def table(folder: Path) -> pd.DataFrame:
    rows = pd.read_parquet(folder / "sweep.parquet")
    return rows[rows["status"] == "ok"]


def per_point(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Mean and a 95 % interval half-width (Student t over the seeds) of the frontier's metrics, per point."""
    from scipy import stats

    def half(values: pd.Series) -> float:
        n = values.count()
        return float(stats.t.ppf(0.975, n - 1) * values.std(ddof=1) / n**0.5) if n > 1 else 0.0

    grouped = rows.groupby(keys)[[X, Y, COST]]
    means, halves = grouped.mean(), grouped.agg(half)
    return means.join(halves.add_suffix("_ci")).reset_index()


# %% [markdown]
# ## 1. The two platforms' frontiers
#
# Concurrent agentic sessions from 2 to 48 (six turns each on average, all started within seconds), three seeds
# per point: fewer sessions give each user more tokens per second, more sessions more throughput per GPU.

# %%
SESSIONS = "workload.sessions=2,4,8,16,24,32,48"
SHORT = ["workload.turns_mean=6", "workload.rate_per_s=4"]
platforms = {}
for name in ("mi355x", "b300"):
    folder = WORK / f"frontier-{name}"
    report = run_sweep(str(SCENARIOS / "study" / f"kimi-k3-{name}.yaml"), [SESSIONS], folder, sets=SHORT,
                       seeds=3, jobs=2, at_interactivity=TARGET)
    platforms[name] = per_point(table(folder), ["workload.sessions"])
    print(f"{name}: {report['runs']} runs in {report['wall_s']:.0f} s")

# %%
figure = make_subplots(rows=1, cols=2, subplot_titles=("throughput per GPU", "tokens per dollar"))
readings = {}
for name, points in platforms.items():
    for col, metric in ((1, Y), (2, COST)):
        figure.add_trace(go.Scatter(
            x=points[X], y=points[metric], mode="markers", name=f"{name} points", legendgroup=name,
            showlegend=col == 1, error_x={"type": "data", "array": points[f"{X}_ci"]},
            error_y={"type": "data", "array": points[f"{metric}_ci"]},
            text=[f"{s} sessions" for s in points["workload.sessions"]]), row=1, col=col)
        front = frontier(list(points[X]), list(points[metric]))
        figure.add_trace(go.Scatter(x=points[X].iloc[front], y=points[metric].iloc[front], mode="lines",
                                    name=f"{name} frontier", legendgroup=name, showlegend=col == 1),
                         row=1, col=col)
        reading = read_frontier(list(points[X]), list(points[metric]), TARGET)
        readings[(name, metric)] = None if reading is None else reading.value
for col in (1, 2):
    figure.update_xaxes(title_text="P90 interactivity (tok/s/user)", row=1, col=col)
figure.add_vline(x=TARGET, line_dash="dot", line_color="gray")
figure.update_yaxes(title_text="total tokens per GPU (tok/s)", row=1, col=1)
figure.update_yaxes(title_text="tokens per dollar (tok/$)", row=1, col=2)
figure.update_layout(title="Kimi K3 agentic serving: 8x MI355X (recipe) against 8x B300 (recipe), 95 % intervals")
assert not figure_problems(figure), figure_problems(figure)  # infersim.figure_checks
figure.write_html(OUT / "kimi_k3_frontier.html", include_plotlyjs=True)

# %% [markdown]
# Read at 50 tok/s/user, seed by seed (each seed's own frontier), with the 95 % interval over the seeds:

# %%
rows_at = []
for name in platforms:
    runs = table(WORK / f"frontier-{name}")
    for metric, label in ((Y, "tok/s/GPU"), (COST, "tokens per dollar")):
        per_seed = []
        for _, seed_rows in runs.groupby("seed"):
            reading = read_frontier(list(seed_rows[X]), list(seed_rows[metric]), TARGET)
            if reading is not None:
                per_seed.append(reading.value)
        interval = t_interval(per_seed) if len(per_seed) > 1 else None
        rows_at.append({"platform": name, "at 50 tok/s/user": label, "frontier of the means": readings[(name, metric)],
                        "mean over seeds": sum(per_seed) / len(per_seed) if per_seed else None,
                        "95 % lo": interval.lo if interval else None, "95 % hi": interval.hi if interval else None,
                        "seeds": len(per_seed)})
at_target = pd.DataFrame(rows_at)
at_target.round(0)

# %% [markdown]
# ## 2. Each mechanism as a design change, with its interval
#
# Every overlay of `simulator/scenarios/changes/` that is a mechanism of the study, on the MI355X default (16
# sessions, shortened), 6 seeds with common random numbers: the change sees the same requests, lengths and
# acceptance draws as the base. A delta whose 95 % interval covers zero is not significant.

# %%
MECHANISMS = ["dcp8", "mla-pad-split", "cpu-offload", "align-kda-checkpoints", "kda-decode-fused",
              "kda-verify-tiles4", "kda-grouped-prefill", "attnres-norm-fused", "moe-output-ownership",
              "no-dispatcher-copies", "drafts3", "quickreduce-int4"]
METRICS = {"total_tok_per_s_per_gpu": "tok/s/GPU", "ttft_s.p50": "TTFT p50", "tpot_s.p50": "TPOT p50"}
base_scenario, changes = load_changes("default", [SCENARIOS / "changes" / f"{m}.yaml" for m in MECHANISMS],
                                      ["workload.sessions=16", *SHORT])
compared = compare(base_scenario, changes, seeds=6, jobs=2)
mechanisms = pd.DataFrame([{"change": c["name"], "metric": label, "delta_pct": c["delta_ci"][m]["mean_pct"],
                            "lo_pct": c["delta_ci"][m]["lo_pct"], "hi_pct": c["delta_ci"][m]["hi_pct"],
                            "significant": c["delta_ci"][m]["significant"]}
                           for c in compared["changes"] for m, label in METRICS.items() if m in c["delta_ci"]])
figure = make_subplots(rows=1, cols=3, subplot_titles=list(METRICS.values()), shared_yaxes=True)
for col, label in enumerate(METRICS.values(), start=1):
    part = mechanisms[mechanisms["metric"] == label]
    figure.add_trace(go.Scatter(
        x=part["delta_pct"], y=part["change"], mode="markers", name=label, showlegend=False,
        marker={"color": ["black" if sig else "lightgray" for sig in part["significant"]], "size": 8},
        error_x={"type": "data", "symmetric": False, "array": part["hi_pct"] - part["delta_pct"],
                 "arrayminus": part["delta_pct"] - part["lo_pct"]}), row=1, col=col)
    figure.add_vline(x=0, line_color="gray", line_dash="dot", row=1, col=col)
    figure.update_xaxes(title_text=f"{label} change (%)", row=1, col=col)
figure.update_yaxes(title_text="design change (overlay)", row=1, col=1)
figure.update_layout(title="Kimi K3 on 8x MI355X: each mechanism's delta, mean and 95 % interval over 6 seeds "
                           "(gray: not significant)")
assert not figure_problems(figure), figure_problems(figure)  # infersim.figure_checks
figure.write_html(OUT / "kimi_k3_mechanisms.html", include_plotlyjs=True)
mechanisms.pivot(index="change", columns="metric", values="delta_pct").round(1)

# %% [markdown]
# ## 3. Draft depth x DCP width on the MI355X
#
# The MI355X default (the recipe's settings, 16 sessions) with its acceptance per position (i.i.d. per draft token,
# 2.51 tokens per cycle at two drafts: an assumption, since no per-position acceptance of Kimi K3's drafter is
# published), swept over drafts 0..7 and DCP 1, 2, 4, 8. Drafts raise each user's tokens per cycle and cost verify
# work; DCP splits each request's MLA history over the ranks and adds two collectives a layer.
#
# One seed is one draw of the agentic workload, and the draws differ by several percent in throughput: each point's
# own interval is too wide to tell the DCP widths apart. A seed draws the same requests at every point, though, so
# the difference of two points run on the same seed holds none of that spread. The sweep compares each point with
# DCP1 at the same depth, seed by seed, and adds seeds where a paired delta's 95 % half-width is above 3 %.

# %%
folder = WORK / "drafts-dcp"
report = run_sweep("default", ["spec_decode.drafts=0..7", "parallel.dcp=1,2,4,8"], folder,
                   sets=["workload.sessions=16", *SHORT], seeds=None, max_seeds=6, jobs=2)
print(f"{report['runs']} runs in {report['wall_s']:.0f} s; {report['seeds_rule']}")
grid = per_point(table(folder), ["spec_decode.drafts", "parallel.dcp"])
deltas = pd.DataFrame(report["deltas"])
figure = make_subplots(rows=1, cols=2, subplot_titles=("throughput per GPU against DCP1, seed by seed",
                                                       "P90 interactivity"))
for i, (dcp, part) in enumerate(grid.groupby("parallel.dcp")):
    colour = qualitative.Plotly[i]
    paired = deltas[deltas["parallel.dcp"] == dcp]
    if len(paired):
        figure.add_trace(go.Scatter(x=paired["spec_decode.drafts"], y=paired["delta_pct"], mode="lines+markers",
                                    error_y={"type": "data", "array": paired["half_width_pct"]}, name=f"DCP{dcp}",
                                    legendgroup=str(dcp), marker={"color": colour}, line={"color": colour},
                                    text=paired["verdict"], hovertemplate="%{y:+.1f} %: %{text}"), row=1, col=1)
    figure.add_trace(go.Scatter(x=part["spec_decode.drafts"], y=part[X], mode="lines+markers",
                                error_y={"type": "data", "array": part[f"{X}_ci"]}, name=f"DCP{dcp}",
                                legendgroup=str(dcp), showlegend=not len(paired), marker={"color": colour},
                                line={"color": colour}), row=1, col=2)
figure.add_hline(y=0.0, line_color="black", line_width=1, row=1, col=1)
for col in (1, 2):
    figure.update_xaxes(title_text="draft tokens per cycle (count)", row=1, col=col)
figure.update_yaxes(title_text="throughput per GPU vs DCP1 (%)", row=1, col=1)
figure.update_yaxes(title_text="P90 interactivity (tok/s/user)", row=1, col=2)
figure.update_layout(title="Kimi K3 on 8x MI355X: draft depth x DCP width (16 agentic sessions, 95 % intervals; "
                           "left: paired with DCP1 on the same seeds)")
assert not figure_problems(figure), figure_problems(figure)  # infersim.figure_checks
figure.write_html(OUT / "kimi_k3_drafts_dcp.html", include_plotlyjs=True)
deltas.pivot(index="spec_decode.drafts", columns="parallel.dcp", values="verdict")

# %% [markdown]
# Where speculative decoding stops paying: per DCP width, the draft depth with the most P90 interactivity, and
# the gain of each added draft (a gain whose interval covers zero has stopped paying).

# %%
best = grid.loc[grid.groupby("parallel.dcp")[X].idxmax(), ["parallel.dcp", "spec_decode.drafts", X, Y]]
steps = grid.sort_values(["parallel.dcp", "spec_decode.drafts"]).copy()
steps["interactivity gain of this draft (%)"] = 100 * steps.groupby("parallel.dcp")[X].pct_change()
steps["throughput gain of this draft (%)"] = 100 * steps.groupby("parallel.dcp")[Y].pct_change()
print(f"notebook ran in {time.monotonic() - started:.0f} s; figures in {OUT}")
best.round(1)

# %%
steps[["parallel.dcp", "spec_decode.drafts", "interactivity gain of this draft (%)",
       "throughput gain of this draft (%)"]].round(1)
