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
# # Calibration: the H200 measurements, predicted against measured, and what a calibration file changes
#
# 1. **Kernel suites and probes** (`validation/data/h200/*.csv`): every measured row beside the cycle-level
#    model's prediction and the older roofline's. No constant of the model was fitted to these rows (the
#    probes set the hardware constants), so every row is held out.
# 2. **Whole engine steps** (`validation/data/h200/engine_step/`): Qwen3-32B decode and prefill steps
#    graph-timed on one H200 and traced with the PyTorch profiler; every traced kernel predicted.
# 3. **A calibration fitted on half of the steps** and tested on the other half: what it changes.
#
# Figures go to `$INFERSIM_NOTEBOOK_OUT` (default `notebooks/figures/`).

# %%
import csv
import os
import statistics
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

import validation
from hwmodels.calibration import cost_model_chosen, load_calibration
from hwmodels.spec import load_gpu
from infersim.figure_checks import figure_problems
from traces.formats import read_trace
from traces.predict import TraceCalibrator, family_totals, predict_trace
from validation.report import compare_all

# figures/ beside the notebook: `jupytext --execute` and Jupyter run it in its own folder
OUT = Path(os.environ.get("INFERSIM_NOTEBOOK_OUT", "figures"))
OUT.mkdir(parents=True, exist_ok=True)
STEPS = Path(validation.__file__).parent / "data" / "h200" / "engine_step"  # package data: found from any folder

# %% [markdown]
# ## 1. Kernel suites: cycle-level model against the roofline

# %%
cycle = compare_all("h200")
with cost_model_chosen("roofline"):
    roofline = compare_all("h200")
rows = pd.DataFrame([{"family": c.group, "row": c.label, "measured_s": c.measured_s, "cycle_s": c.predicted_s,
                      "roofline_s": r.predicted_s} for c, r in zip(cycle, roofline, strict=True)])
rows["cycle_error_pct"] = 100 * (rows["cycle_s"] / rows["measured_s"] - 1)
rows["roofline_error_pct"] = 100 * (rows["roofline_s"] / rows["measured_s"] - 1)
per_family = rows.groupby("family").agg(
    rows=("row", "count"), cycle_median_abs_pct=("cycle_error_pct", lambda e: e.abs().median()),
    cycle_signed_median_pct=("cycle_error_pct", "median"),
    roofline_median_abs_pct=("roofline_error_pct", lambda e: e.abs().median()))
print(f"all rows: cycle-level median |error| {rows['cycle_error_pct'].abs().median():.1f} %, "
      f"roofline {rows['roofline_error_pct'].abs().median():.1f} %")
per_family.round(1)

# %%
figure = go.Figure()
for name, column in (("cycle-level", "cycle_s"), ("roofline", "roofline_s")):
    figure.add_trace(go.Scatter(x=rows["measured_s"] * 1e6, y=rows[column] * 1e6, mode="markers", name=name,
                                text=rows["family"] + ": " + rows["row"], marker={"size": 5}))
low, high = rows["measured_s"].min() * 1e6 / 2, rows["measured_s"].max() * 1e6 * 2
figure.add_trace(go.Scatter(x=[low, high], y=[low, high], mode="lines", name="predicted = measured",
                            line={"dash": "dot", "color": "gray"}))
figure.update_layout(title="H200: every measured kernel row against the model", xaxis_title="measured (µs)",
                     yaxis_title="predicted (µs)", xaxis_type="log", yaxis_type="log")
assert not figure_problems(figure), figure_problems(figure)  # infersim.figure_checks
figure.write_html(OUT / "calibration_kernel_rows.html", include_plotlyjs=True)

# %% [markdown]
# ## 2. Whole engine steps, kernel by kernel

# %%
gpu, base = load_gpu("h200"), load_calibration("h200")
with open(STEPS / "engine_step.csv", newline="") as f:
    measured = {r["trace"]: float(r["time_s_median"]) for r in csv.DictReader(f)}
names = sorted(measured)
predictions = {n: predict_trace(read_trace(STEPS / n), gpu, base) for n in names}
steps = pd.DataFrame([{"step": n.removeprefix("qwen3-32b_").removesuffix(".trace.json.gz"),
                       "measured_s": measured[n], "predicted_s": p.predicted_step_s,
                       "unmatched_pct": 100 * p.unmatched_share} for n, p in predictions.items()])
steps["error_pct"] = 100 * (steps["predicted_s"] / steps["measured_s"] - 1)
families = pd.DataFrame([{"family": t.family, "launches": t.groups, "traced_s": t.traced_s,
                          "predicted_s": t.predicted_s, "error_pct": t.error_pct}
                         for t in family_totals(list(predictions.values())).values()])
print(f"whole steps: median |error| {steps['error_pct'].abs().median():.1f} %")
families.round(4)

# %% [markdown]
# ## 3. A calibration fitted on every other step, tested on the rest

# %%
train = names[0::2]
test = names[1::2]
fitter = TraceCalibrator().fit([predictions[n] for n in train], [measured[n] for n in train])
calibrated = fitter.calibration(base, f"fitted on {len(train)} steps")
after = {n: predict_trace(read_trace(STEPS / n), gpu, calibrated) for n in test}
check = pd.DataFrame([{"step": n.removeprefix("qwen3-32b_").removesuffix(".trace.json.gz"),
                       "before_pct": 100 * (predictions[n].predicted_step_s / measured[n] - 1),
                       "after_pct": 100 * (after[n].predicted_step_s / measured[n] - 1)} for n in test])
print(f"test half: median |error| {check['before_pct'].abs().median():.2f} % before, "
      f"{check['after_pct'].abs().median():.2f} % after; fitted factors:")
print({f"{f}.{b}": round(v, 3) for f, t in fitter.family_time_scale_.items() for b, v in t.items()},
      f"graph node {fitter.launch_graph_node_s_ * 1e6:.2f} µs")
assert statistics.median(check["after_pct"].abs()) <= statistics.median(check["before_pct"].abs())
check.round(2)

# %%
figure = make_subplots(rows=1, cols=2, subplot_titles=("test steps: error before and after",
                                                       "per family over all steps: predicted over traced"))
figure.add_trace(go.Bar(x=check["step"], y=check["before_pct"], name="before"), row=1, col=1)
figure.add_trace(go.Bar(x=check["step"], y=check["after_pct"], name="after"), row=1, col=1)
figure.add_trace(go.Bar(x=families["family"], y=families["predicted_s"] / families["traced_s"],
                        name="predicted / traced"), row=1, col=2)
figure.update_xaxes(title_text="step (phase_SEQSxTOKENS)", row=1, col=1)
figure.update_yaxes(title_text="step error (%)", row=1, col=1)
figure.update_xaxes(title_text="kernel family (infersim name)", row=1, col=2)
figure.update_yaxes(title_text="predicted over traced (ratio)", row=1, col=2)
figure.update_layout(title="H200 engine steps: the model and a calibration fitted on half of them", barmode="group")
assert not figure_problems(figure), figure_problems(figure)  # infersim.figure_checks
figure.write_html(OUT / "calibration_engine_steps.html", include_plotlyjs=True)
