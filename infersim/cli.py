"""`infersim ...`: the command line. Parses, calls the pure layers, prints JSON or a table.

`main` is the one error boundary of every command: a user error is one line and exit 2, SIGINT exit 130 and
SIGTERM exit 143 (one line each), a closed output pipe a quiet exit, and anything else one line naming the file
that holds the traceback, exit 1."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import traceback
import typing
from collections.abc import Sequence
from typing import Any

from hwmodels.specfile import Range
from infersim import collective_queries, flags, queries, vllm_bench, workload_queries
from infersim.flags import JOBS, SEEDS, field_range, real_type, whole_type
from infersim.workload_queries import CONTEXT
from simulator.scenario import GPUS, Cache, Parallel, Serving, SpecDecode

GROUP = Range(2, 1024, GPUS)
SHARE = Range(0.0, 1.0, "a share of the traces")
INTERACTIVITY = Range(0.0, 1e9, "assumption: no one reads more than 1e9 tokens a second")
TARGET_PCT_BOUNDS = Range(0.01, 100.0, "a half-width in percent of the baseline (assumption: none finer is reachable)")

EXIT_INTERNAL_ERROR = 1
EXIT_USER_ERROR = 2
EXIT_SIGINT = 128 + signal.SIGINT  # 130, as a shell reports a command that SIGINT ended
EXIT_SIGTERM = 128 + signal.SIGTERM  # 143
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE  # 141, as a shell reports `yes | head`


class UserError(Exception):
    """A problem with the user's input: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse with its errors as one line (exit 2 through `main`), naming the command and the flag."""

    def error(self, message: str) -> typing.NoReturn:
        raise UserError(f"{self.prog}: {message} (see {self.prog} --help)")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, so that it unwinds (and removes temporary files) as on SIGINT."""


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="infersim",
        description="Performance simulator and cost model of LLM inference serving on multi-GPU nodes.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="simulate serving a scenario (default: Kimi K3 on 8x MI355X, agentic)")
    run.add_argument("scenario", nargs="?", default=None, help="scenario YAML (default: the built-in default)")
    run.add_argument("--overlay", action="append", default=[], metavar="YAML",
                     help="a design-change overlay merged onto the scenario; repeat to stack")
    run.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", dest="sets",
                     help="one scenario value, e.g. --set parallel.dcp=8")
    run.add_argument("--out", default=None, metavar="DIR",
                     help="write summary.json, requests.csv, steps.csv, report.html and scenario.yaml here, as "
                          "one set that replaces a previous run in DIR")
    run.add_argument("--force", action="store_true",
                     help="with --out: replace DIR even if it is a non-empty folder that holds no infersim run")
    run.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    run.add_argument("--format", choices=["json", "vllm"], default=None, dest="output_format",
                     help="json: as --json; vllm: print the result as `vllm bench serve --save-result` writes it "
                          "(its keys, ms), and with --out also write vllm_result.json")
    run.add_argument("--trace", default=None, metavar="FILE",
                     help="write the run's engine steps as a Chrome trace (JSON, opens in ui.perfetto.dev)")
    run.add_argument("--trace-steps", type=whole_type(flags.TRACE_STEPS), default=None, metavar="N",
                     help="with --trace: the trace holds the first N engine steps (default 2000)")
    _replicate_flags(run, "1: one run, as without the flag")
    _cost_model_flag(run)
    vllm_bench.add_arguments(run)

    comp = sub.add_parser("compare", help="predict design changes: each overlay on a base, deltas in %%")
    comp.add_argument("base", help="base scenario YAML, or the word 'default' for the built-in default")
    comp.add_argument("changes", nargs="*", metavar="CHANGE.yaml",
                      help="design-change overlays (simulator/scenarios/changes/), each merged onto the base")
    comp.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", dest="sets",
                      help="one scenario value for every run, e.g. --set workload.sessions=6")
    comp.add_argument("--json", action="store_true", help="print the comparison as one JSON object")
    comp.add_argument("--seeds", default="auto", metavar="N|auto",
                      help="replicates: seeds workload.seed + 0..N-1, each metric's mean and its paired 95%% Student "
                           "t interval against the base on the same seeds; auto (the default): 2 seeds, then one more "
                           "round by round for the base and each change whose throughput-per-GPU delta is wider than "
                           "--target-pct, up to --max-seeds")
    comp.add_argument("--jobs", default=None, metavar="J",
                      help="with --seeds: worker processes (default: the CPUs, capped by the runs)")
    comp.add_argument("--target-pct", type=real_type(TARGET_PCT_BOUNDS), default=3.0, metavar="PCT",
                      help="with --seeds auto: the 95 %% half-width of the throughput-per-GPU delta to reach, in %% "
                           "of the base (default 3)")
    comp.add_argument("--max-seeds", type=whole_type(SEEDS), default=10, metavar="N",
                      help="with --seeds auto: the most seeds a configuration runs (default 10)")
    _cost_model_flag(comp)

    swp = sub.add_parser("sweep", help="a scenario over a grid of keys, in parallel: a resumable table (Parquet, "
                                       "CSV) and the Pareto frontier")
    swp.add_argument("scenario", metavar="SCENARIO",
                     help="base scenario YAML, or the word 'default' for the built-in default")
    swp.add_argument("--grid", action="append", default=[], required=True, metavar="KEY=VALUES",
                     help="a scenario key and its values: a list 1,2,4,8, a range 0..6, a step 4..64:4 or a factor "
                          "4..512*2; repeat for the product of several keys")
    swp.add_argument("--overlay", action="append", default=[], metavar="YAML",
                     help="a design-change overlay merged onto the base; repeat to stack")
    swp.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", dest="sets",
                     help="one scenario value for every point, e.g. --set workload.sessions=6")
    swp.add_argument("--out", required=True, metavar="DIR",
                     help="write sweep.parquet, sweep.csv, sweep.html and scenario.yaml here; the same DIR again "
                          "resumes (runs only the points and seeds it lacks)")
    swp.add_argument("--seeds", default="auto", metavar="N|auto",
                     help="run each point with workload.seed + 0..N-1; auto (the default): 2 seeds, then one more "
                          "round by round for the points whose paired delta against their baseline point is wider "
                          "than --target-pct, up to --max-seeds")
    swp.add_argument("--baseline", default=None, metavar="KEY=VALUE",
                     help="the grid value every point is compared with, seed by seed (default: the last grid key "
                          "at its first value, e.g. parallel.dcp=1)")
    swp.add_argument("--target-pct", type=real_type(TARGET_PCT_BOUNDS), default=3.0, metavar="PCT",
                     help="with --seeds auto: the 95 %% half-width of a paired delta to reach, in %% of its "
                          "baseline (default 3)")
    swp.add_argument("--max-seeds", type=whole_type(SEEDS), default=10, metavar="N",
                     help="with --seeds auto: the most seeds a point runs (default 10)")
    swp.add_argument("--jobs", type=whole_type(JOBS), default=None, metavar="J",
                     help="worker processes (default: the CPUs this process may use)")
    swp.add_argument("--executor", choices=["process", "dask"], default="process",
                     help="process: a local process pool (default); dask: a Dask distributed cluster (a LocalCluster, "
                          "or --scheduler); needs pip install 'infersim[sweep]'")
    swp.add_argument("--scheduler", default=None, metavar="ADDRESS",
                     help="with --executor dask: the address of a running Dask scheduler, e.g. tcp://host:8786")
    swp.add_argument("--at-interactivity", type=real_type(INTERACTIVITY), default=None, metavar="TOK_PER_S",
                     help="also print the best configuration at this P90 interactivity (tok/s/user): the frontier "
                          "interpolated there")
    swp.add_argument("--calibration", default=None, metavar="YAML",
                     help="a calibration overlay (e.g. from infersim calibrate) on each GPU's calibration")
    swp.add_argument("--json", action="store_true", help="print the result as one JSON object")
    _cost_model_flag(swp)

    scen = sub.add_parser("scenarios", help="the built-in scenarios and design-change overlays, by name (each name "
                                            "works where a scenario or overlay file does: --overlay dcp8)")
    scen.add_argument("--json", action="store_true", help="print one JSON object")

    hw = sub.add_parser("hw", help="hardware specs: GPUs and platforms")
    hw_sub = hw.add_subparsers(dest="hw_command", required=True, metavar="ACTION")
    hw_list = hw_sub.add_parser("list", help="list GPU and platform specs")
    hw_list.add_argument("--json", action="store_true", help="print one JSON object")
    hw_show = hw_sub.add_parser("show", help="show one spec with every value's source")
    hw_show.add_argument("name", help="a GPU (h200) or platform (mi355x-8) name, or a YAML path")
    hw_show.add_argument("--json", action="store_true", help="print one JSON object")

    occ = sub.add_parser("occupancy", help="workgroups resident per CU/SM and what limits them")
    occ.add_argument("--hw", required=True, help="GPU name, e.g. mi355x, h200")
    occ.add_argument("--lds-bytes", type=whole_type(flags.KERNEL_INT), default=0,
                     help="LDS/shared memory per workgroup")
    occ.add_argument("--vgprs", type=whole_type(flags.KERNEL_INT), default=0, help="registers per thread (0: unknown)")
    occ.add_argument("--threads", type=whole_type(flags.KERNEL_INT), default=256, help="threads per workgroup")
    occ.add_argument("--json", action="store_true", help="print one JSON object")

    model = sub.add_parser("model", help="model architectures: layer types, parameters")
    model_sub = model.add_subparsers(dest="model_command", required=True, metavar="ACTION")
    model_list = model_sub.add_parser("list", help="list catalog models")
    model_list.add_argument("--json", action="store_true", help="print one JSON object")
    model_show = model_sub.add_parser("show", help="show one model: layers, experts, parameter counts")
    model_show.add_argument("name", help="a catalog model (kimi-k3) or a YAML path")
    model_show.add_argument("--json", action="store_true", help="print one JSON object")

    mem = sub.add_parser("memory", help="HBM per GPU: weights, KV and KDA state, capacity in tokens")
    mem.add_argument("--model", required=True, help="catalog model, e.g. kimi-k3")
    mem.add_argument("--hw", required=True, help="GPU name, e.g. mi355x")
    _parallel_flags(mem)
    mem.add_argument("--context", type=whole_type(CONTEXT), default=0, help="tokens of one request's history")
    mem.add_argument("--mem-fraction", type=real_type(field_range(Serving, "gpu_memory_utilization")), default=0.9,
                     help="share of the device memory (as the runtime reports it) the engine may use")
    mem.add_argument("--max-num-seqs", type=whole_type(field_range(Serving, "max_num_seqs")), default=64,
                     help="sequences whose state is held")
    mem.add_argument("--max-num-batched-tokens", type=whole_type(field_range(Serving, "max_num_batched_tokens")),
                     default=8192, help="tokens per step")
    mem.add_argument("--kda-checkpoint-tokens", type=whole_type(field_range(Cache, "kda_checkpoint_interval")),
                     default=None, metavar="N",
                     help="a cached prefix keeps a KDA state every N tokens; their bytes count against capacity")
    mem.add_argument("--row-only-weights", action="store_true",
                     help="load only the routed-output rows each rank uses (MoE routed-output ownership, "
                          "a Kimi K3 study mechanism)")
    mem.add_argument("--json", action="store_true", help="print one JSON object")

    step = sub.add_parser("step", help="one engine step as kernels per rank: counts, FLOP, bytes, kernel time")
    step.add_argument("--model", required=True, help="catalog model, e.g. kimi-k3")
    step.add_argument("--hw", required=True, help="GPU name, e.g. mi355x")
    _parallel_flags(step)
    step.add_argument("--decode", metavar="NxCONTEXT", help="N decoding sequences of CONTEXT tokens, e.g. 64x32768")
    step.add_argument("--prefill", metavar="NxTOKENS[@CACHED]", help="N prefill chunks, e.g. 2x8192@4096")
    step.add_argument("--verify", metavar="NxCONTEXT", help="N sequences verifying --drafts draft tokens each")
    step.add_argument("--drafts", type=whole_type(field_range(SpecDecode, "drafts")), default=0,
                      help="draft tokens per verifying sequence (the scenario's spec_decode.drafts)")
    step.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                      help="a key of the scenario's kernels section (the studies' mechanisms), "
                           "e.g. kda_decode_fused=true")
    step.add_argument("--platform", default=None, help="the node (default: the GPU's 8-GPU platform)")
    step.add_argument("--quickreduce", default=None, metavar="CODEC",
                      help="enable QuickReduce all-reduce with this codec (ROCm): fp, int8, int6, int4, int3, fp4")
    step.add_argument("--json", action="store_true", help="print one JSON object")
    step.add_argument("--trace", default=None, metavar="FILE",
                      help="write the step's predicted kernels and collectives as a Chrome trace (JSON, opens in "
                           "ui.perfetto.dev)")
    _cost_model_flag(step)

    codec = sub.add_parser("codec", help="an all-reduce codec's wire format (QuickReduce tiles)")
    codec.add_argument("codec", help="fp, int8, int6, int4, int3 or fp4")
    codec.add_argument("--json", action="store_true", help="print one JSON object")

    coll = sub.add_parser("collective", help="time of a collective on a platform, or a sweep over sizes")
    coll.add_argument("--hw", required=True, help="GPU (its 8-GPU platform) or platform name, e.g. mi355x, h200-2")
    coll.add_argument("--tp", type=whole_type(field_range(Parallel, "tp")), required=True, help="ranks in the group")
    coll.add_argument("--op", default="allreduce", help="allreduce, allgather, reducescatter or alltoall")
    coll.add_argument("--algo", default=None, help="ring, oneshot, twoshot, quickreduce (default: the engine's choice)")
    coll.add_argument("--codec", default=None, help="QuickReduce codec: fp, int8, int6, int4, int3, fp4")
    coll.add_argument("--bytes", default=None, metavar="SIZE", help="message size: 4KiB, 1MiB, 1GiB, 1e6")
    coll.add_argument("--sweep", default=None, metavar="LOW:HIGH", help="every power of two, e.g. 4KiB:1GiB")
    coll.add_argument("--launch", choices=["eager", "graph"], default="graph", help="launch mode (default graph)")
    coll.add_argument("--out", default=None, metavar="DIR", help="with --sweep: write a plotly chart here")
    coll.add_argument("--json", action="store_true", help="print one JSON object")

    kern = sub.add_parser("kernel", help="predict one kernel's time on one GPU")
    kern.add_argument("--hw", required=True, help="GPU name, e.g. mi355x, h200")
    kern.add_argument("kind", nargs="?", default=None,
                      help="kernel kind: " + ", ".join(queries.kernel_kinds()) + " (or --triton)")
    kern.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                      help="a kernel shape or option; repeat for each")
    kern.add_argument("--triton", default=None, metavar="FILE.py:KERNEL",
                      help="instead of a kind: your own @triton.jit kernel, compiled for the GPU and timed from its "
                           "code (needs pip install 'infersim[triton]'); give --grid and every argument with --arg. "
                           "MODULE:KERNEL names one in an importable module, e.g. the shipped examples "
                           "compiled.examples.triton_kernels:row_sums")
    kern.add_argument("--grid", default=None, metavar="X[,Y[,Z]]", help="with --triton: programs along each axis")
    kern.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE",
                      help="with --triton: a kernel argument; a tensor as dtype[shape] (bf16[4096,4096]; an integer "
                           "tensor may add =N, e.g. lens=i32[64]=8192, or =arange / =perm for distinct indices in "
                           "order or in a fixed-seed order), an int, a float or True/False; repeat for each")
    kern.add_argument("--num-warps", type=int, default=4, help="with --triton: warps per program (default 4)")
    kern.add_argument("--num-stages", type=int, default=None,
                      help="with --triton: software-pipeline stages (default Triton's: 3 on NVIDIA, 2 on AMD)")
    kern.add_argument("--launch", choices=["eager", "graph", "queued"], default="eager",
                      help="eager launches, nodes of a captured graph, or eager launches queued ahead of the GPU "
                           "(the host's cost hidden) (default eager)")
    kern.add_argument("--calibration", default=None, metavar="YAML",
                      help="a calibration overlay on the GPU's default calibration")
    kern.add_argument("--json", action="store_true", help="print one JSON object")
    _cost_model_flag(kern)
    val = sub.add_parser("validate", help="predicted against measured for every recorded row of a GPU, per family")
    val.add_argument("--hw", default=None, help="GPU whose measurements to compare, e.g. h200")
    val.add_argument("--rows", action="store_true",
                     help="with --hw or --published: also every row, measured beside predicted")
    val.add_argument("--write-report", action="store_true",
                     help="with --hw: regenerate the GPU's report, validation/REPORT.md for the H200 (REPORT_<hw>.md "
                          "for another GPU), and validation/report_<hw>.html (the plotly figure); with --serving: "
                          "validation/published/serving_summary.json, the per-GPU errors `infersim run` shows")
    val.add_argument("--links", default=None, metavar="PLATFORM",
                     help="instead: the collective-library calibration's error on the measured NCCL sweep, e.g. h200-2")
    val.add_argument("--refit", action="store_true", help="with --links: fit the calibration again and write it")
    val.add_argument("--published", action="store_true",
                     help="instead: the model against the published all-reduce tables (MK1's 8x MI300X, "
                          "rccl-tests, 8x H100 nccl-tests), AITER's fused-MoE kernel times on the MI355X and its "
                          "block-scaled FP8 GEMM times on the MI300X and MI355X")
    val.add_argument("--serving", action="store_true",
                     help="instead: published end-to-end serving results (validation/published/serving.csv), each "
                          "configuration simulated; error of throughput per GPU, TPOT and TTFT per platform")
    val.add_argument("--platform", action="append", default=None, metavar="GPU",
                     help="with --serving: only the rows of this GPU (repeatable), e.g. h200")
    val.add_argument("--html", default=None, metavar="FILE",
                     help="with --serving: also write the interactive plot of predicted against published")
    val.add_argument("--json", action="store_true", help="print one JSON object")
    _cost_model_flag(val)

    trace = sub.add_parser("trace", help="measured profiler traces (PyTorch/Kineto, Nsight Systems, rocprofv3)")
    trace_sub = trace.add_subparsers(dest="trace_command", required=True, metavar="ACTION")
    tp = trace_sub.add_parser("predict", help="each traced kernel predicted by the model; per family and per trace")
    tp.add_argument("files", nargs="+", metavar="TRACE", help="trace files (.json, .json.gz, .sqlite, .csv)")
    tp.add_argument("--hw", required=True, help="the GPU the traces ran on, e.g. h200")
    tp.add_argument("--step-times", default=None, metavar="CSV",
                    help="each trace's measured step time (columns trace, time_s_median), e.g. engine_step.csv")
    tp.add_argument("--html", default=None, metavar="FILE", help="also write a plotly page of the comparison")
    tp.add_argument("--group-size", type=whole_type(GROUP), default=None, metavar="N",
                    help="ranks of the traced collectives (default: the trace's GPUs when it holds several)")
    tp.add_argument("--model", default=None,
                    help="the catalog model the traces ran: kernels with no shapes and no size in their launch (a "
                         "graph replay) are matched, in order, to the launches of its step (give the step's batch "
                         "with --decode and --prefill, its layout with --tp, --ep, --dcp)")
    _parallel_flags(tp)
    tp.add_argument("--decode", metavar="NxCONTEXT", help="with --model: the traced step's decodes, e.g. 32x1024")
    tp.add_argument("--prefill", metavar="NxTOKENS[@CACHED]", help="with --model: the traced step's prefill chunks")
    tp.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="with --model: a key of the scenario's kernels section, e.g. mla_num_splits=4")
    tp.add_argument("--json", action="store_true", help="print one JSON object")
    _cost_model_flag(tp)

    cal = sub.add_parser("calibrate", help="fit a calibration on some traces, test it on the rest, write it")
    cal.add_argument("files", nargs="+", metavar="TRACE", help="trace files; every other one (name order) fits")
    cal.add_argument("--hw", required=True, help="the GPU the traces ran on, e.g. h200")
    cal.add_argument("--out", required=True, metavar="YAML", help="the calibration file to write")
    cal.add_argument("--step-times", default=None, metavar="CSV",
                     help="each trace's measured step time (columns trace, time_s_median): fit the graph node's "
                          "overhead and test whole steps; without it, test the traced kernel time")
    cal.add_argument("--train-share", type=real_type(SHARE), default=0.5,
                     help="share of the traces to fit on (default 0.5)")
    cal.add_argument("--json", action="store_true", help="print one JSON object")
    _cost_model_flag(cal)
    for command in (run, comp, step, val, tp):
        command.add_argument("--calibration", default=None, metavar="YAML",
                             help="a calibration overlay (e.g. from infersim calibrate) on each GPU's calibration")
    return parser


def _cost_model_flag(command: argparse.ArgumentParser) -> None:
    command.add_argument("--cost-model", choices=["cycle", "roofline"], default=None,
                         help="how kernels are timed: cycle (workgroup programs: latency chains, Little's law, "
                              "issue; the default) or roofline (the older floor with partial-grid heuristics)")


def _replicate_flags(command: argparse.ArgumentParser, default: str) -> None:
    # plain text, checked by the command: a bad count is a one-line error, not argparse's usage and error
    command.add_argument("--seeds", default=None, metavar="N",
                         help="replicates: seeds workload.seed + 0..N-1, each metric's mean and 95%% Student t "
                              f"interval over them (default {default})")
    command.add_argument("--jobs", default=None, metavar="J",
                         help="with --seeds: worker processes (default: the CPUs, capped by the runs)")


def _parallel_flags(command: argparse.ArgumentParser) -> None:
    for name, help_text in (("tp", "tensor-parallel size"), ("dcp", "decode-context-parallel size (divides tp)"),
                            ("ep", "expert-parallel size")):
        command.add_argument(f"--{name}", type=whole_type(field_range(Parallel, name)), default=1, help=help_text)


def _run(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """(JSON result, table title) of the command, timed with the chosen cost model."""
    from hwmodels.calibration import calibration_chosen, cost_model_chosen

    model = getattr(args, "cost_model", None)
    if model is not None and args.command in ("run", "compare"):
        args.sets = [*args.sets, f"cost.model={model}"]
    chosen = getattr(args, "calibration", None) if args.command != "kernel" else None
    with cost_model_chosen(model), calibration_chosen(chosen):
        return _dispatch(args)


def _dispatch(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    if args.command == "run":
        return _run_scenario(args)
    if args.command == "compare":
        from infersim.compare import compare_command

        return compare_command(args.base, args.changes, args.sets, table=not args.json, seeds=args.seeds,
                               jobs=args.jobs, target_pct=args.target_pct, max_seeds=args.max_seeds)
    if args.command == "sweep":
        from infersim.sweep import sweep_command

        return sweep_command(args)
    if args.command == "scenarios":
        return workload_queries.scenario_list(), "Built-in scenarios and overlays"
    if args.command == "hw" and args.hw_command == "list":
        return queries.hw_list(), "Hardware specs"
    if args.command == "hw":
        return queries.hw_show(args.name), f"Spec {args.name}"
    if args.command == "model" and args.model_command == "list":
        return workload_queries.model_list(), "Model catalog"
    if args.command == "model":
        return workload_queries.model_show(args.name), f"Model {args.name}"
    if args.command == "memory":
        result = workload_queries.memory_query(
            args.model, args.hw, tp=args.tp, dcp=args.dcp, ep=args.ep, context=args.context,
            mem_fraction=args.mem_fraction, max_num_seqs=args.max_num_seqs,
            max_batched_tokens=args.max_num_batched_tokens, row_only_weights=args.row_only_weights,
            kda_checkpoint_tokens=args.kda_checkpoint_tokens)
        return result, f"Memory per GPU: {args.model} on {args.hw}, TP{args.tp} DCP{args.dcp}"
    if args.command == "step":
        return _step(args)
    if args.command == "codec":
        return collective_queries.codec_query(args.codec), f"Codec {args.codec}"
    if args.command == "collective":
        return _collective(args)
    if args.command == "occupancy":
        result = queries.occupancy_query(args.hw, lds_bytes=args.lds_bytes, threads=args.threads,
                                         vgprs=args.vgprs)
        return result, f"Occupancy on {args.hw}"
    if args.command == "kernel" and args.triton is not None:
        if args.kind is not None or args.param:
            raise UserError("kernel: --triton replaces the kind and its --param; give one or the other")
        if args.grid is None:
            raise UserError("kernel --triton: give the grid with --grid X[,Y[,Z]]")
        result = queries.triton_kernel_query(args.hw, args.triton, args.grid, args.arg, num_warps=args.num_warps,
                                             num_stages=args.num_stages, launch=args.launch,
                                             calibration=args.calibration)
        return result, f"{args.triton} on {args.hw}"
    if args.command == "kernel":
        if args.kind is None:
            kinds = ", ".join(queries.kernel_kinds())
            raise UserError(f"kernel: give a kind ({kinds}) or --triton FILE.py:KERNEL")
        if args.grid is not None or args.arg:
            raise UserError("kernel: --grid and --arg go with --triton; a kind takes --param")
        params = _parse_params(args.param)
        result = queries.kernel_query(args.hw, args.kind, params, launch=args.launch,
                                      calibration=args.calibration)
        return result, f"{args.kind} on {args.hw}"
    if args.command == "validate":
        from infersim.validation_queries import validate_command

        return validate_command(args)
    if args.command == "trace":
        from infersim.trace_queries import trace_predict_query

        step = None
        if args.model is not None:
            step = {"model": args.model, "tp": args.tp, "dcp": args.dcp, "ep": args.ep, "decode": args.decode,
                    "prefill": args.prefill, "options": args.option}
        elif args.decode or args.prefill or args.option:
            raise ValueError("--decode, --prefill and --option describe the traced step of --model: give --model")
        result = trace_predict_query(args.files, args.hw, args.calibration, args.step_times, args.html,
                                     args.group_size, step=step)
        return result, f"Traces against the model on {args.hw}"
    if args.command == "calibrate":
        from infersim.trace_queries import calibrate_query

        result = calibrate_query(args.files, args.hw, args.out, args.step_times, args.train_share)
        return result, f"Calibration fitted on {result['train_traces']} traces, tested on {result['test_traces']}"
    raise UserError(f"unknown command {args.command!r}")


def _step(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from infersim import output_paths

    if args.trace is not None:
        output_paths.write_target(args.trace, "--trace")
    query = dict(tp=args.tp, dcp=args.dcp, ep=args.ep, decode=args.decode, prefill=args.prefill, verify=args.verify,
                 drafts=args.drafts, options=args.option, platform=args.platform, quickreduce=args.quickreduce)
    result = workload_queries.step_query(args.model, args.hw, **query)
    if args.trace is not None:
        _write_trace(workload_queries.step_trace(args.model, args.hw, **query), args.trace)
    return result, f"Step: {args.model} on {args.hw}, TP{args.tp}"


def _write_trace(trace: dict[str, Any], path: str) -> None:
    from infersim.outputs import write_trace

    try:
        written = write_trace(trace, path)
    except OSError as err:
        raise UserError(f"--trace {path}: cannot write: {err.strerror or err}") from None
    print(f"infersim: wrote {written}", file=sys.stderr)


def _run_scenario(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from infersim.output_paths import check_run_folder, write_target
    from infersim.progress import run_with_progress
    from infersim.replicates import count_flag, run_replicates
    from simulator.scenario import load_scenario

    seeds = count_flag("--seeds", args.seeds, 1)  # checked before anything runs
    jobs = None if args.jobs is None else count_flag("--jobs", args.jobs, 1)
    if seeds > 1 and (args.output_format == "vllm" or args.vllm_save_result):
        raise UserError("--format vllm and --save-result are one run's result: leave out --seeds, or use --json")
    if args.force and args.out is None:
        raise UserError("--force lets --out replace a folder: give --out DIR too")
    if args.out is not None:
        check_run_folder(args.out, args.force)  # fail before simulating, not after
    if args.trace_steps is not None and args.trace is None:
        raise UserError("--trace-steps bounds the trace: give --trace FILE too")
    if args.trace is not None:
        trace = write_target(args.trace, "--trace")  # fail before simulating, not after
        if args.out is not None and trace.is_relative_to(check_run_folder(args.out, args.force).absolute()):
            raise UserError(f"--trace {args.trace}: lies in --out {args.out}, whose folder the run replaces; give a "
                            "path outside it")
    if args.json and args.output_format == "vllm":
        raise UserError("--json prints infersim's summary and --format vllm the vllm bench serve result: give one")
    if args.vllm_save_result and args.out is None:
        raise UserError("--save-result writes vllm_result.json in the run's folder: give --out DIR too")
    aliases = vars(args)
    result_options = vllm_bench.result_options(aliases)  # checked before anything runs
    scenario = load_scenario(args.scenario, args.overlay, vllm_bench.alias_sets(aliases, args.sets))
    vllm_bench.check_aliases(scenario, aliases)
    result, replicate_files = ((run_with_progress(scenario), {}) if seeds == 1
                               else run_replicates(scenario, seeds, jobs))
    from simulator.simulate import deployment_of
    from validation.serving import published_check

    # the error bar of the GPU's end-to-end model: the published serving points on it, as validate last scored them
    result.summary["published_serving_check"] = published_check(deployment_of(scenario).gpu.name)
    vllm = (vllm_bench.vllm_result(result, result_options)
            if args.output_format == "vllm" or args.vllm_save_result else None)
    if args.out is not None:
        from infersim.outputs import write_outputs

        try:
            extra = {} if vllm is None else {"vllm_result.json": json.dumps(vllm, indent=2, allow_nan=False) + "\n"}
            written = write_outputs(result, args.out, {**extra, **replicate_files}, force=args.force)
        except OSError as err:
            raise UserError(f"--out {args.out}: cannot write: {err.strerror or err}") from None
        print(f"infersim: wrote {', '.join(str(p) for p in written)}", file=sys.stderr)
    if args.trace is not None:  # after --out: a run whose folder cannot be written leaves no trace either
        from infersim.outputs import run_trace

        _write_trace(run_trace(result, args.trace_steps), args.trace)
    if args.output_format is not None:
        args.json = True  # either format is one JSON object
    if seeds > 1 and not args.json:
        from infersim.replicates import replicates_layout

        return replicates_layout(result.summary), f"infersim run: {scenario.name}, {seeds} seeds"
    printed = vllm if args.output_format == "vllm" else result.summary
    return printed, f"infersim run: {scenario.name}"


def _collective(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    if (args.bytes is None) == (args.sweep is None):
        raise UserError("give exactly one of --bytes SIZE or --sweep LOW:HIGH")
    if args.out and not args.sweep:
        raise UserError("--out writes the sweep chart: give --sweep too")
    if args.out:
        from infersim.output_paths import check_folder

        check_folder(args.out, "--out")  # before the sweep is computed
    if args.bytes is not None:
        result = collective_queries.collective_query(args.hw, tp=args.tp, op=args.op, size=args.bytes,
                                                     algo=args.algo, codec=args.codec, launch=args.launch)
        return result, f"{args.op} on {result['platform']}, TP{args.tp}"
    sizes = collective_queries.sweep_sizes(args.sweep)
    sweep = collective_queries.collective_sweep(args.hw, tp=args.tp, op=args.op, sizes=sizes, launch=args.launch)
    if args.out:
        sweep["chart"] = str(collective_queries.write_sweep_chart(sweep, args.out))
    return sweep, f"{args.op} sweep on {sweep['platform']}, TP{args.tp}: time and speedup over the ring"


def _parse_params(items: Sequence[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--param {item!r}: expected KEY=VALUE")
        if key in params:
            raise UserError(f"--param {key} given twice")
        params[key.strip()] = value.strip()
    return params


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `infersim` console script: the one place errors and signals become exit statuses."""
    previous = signal.signal(signal.SIGTERM, _terminate) if _main_thread() else None
    try:
        return _main(argv)
    except BrokenPipeError:  # before OSError, which it is
        return _quiet_broken_pipe()
    except (UserError, ValueError, OSError) as err:
        print(f"infersim: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except Terminated:
        print("infersim: terminated (SIGTERM)", file=sys.stderr)
        return EXIT_SIGTERM
    except KeyboardInterrupt:
        print("infersim: interrupted", file=sys.stderr)
        return EXIT_SIGINT
    except Exception as err:  # a bug: one line here, the traceback in a file
        saved = _save_traceback()
        print(f"infersim: internal error: {type(err).__name__}: {_one_line(err)} (traceback: {saved})", file=sys.stderr)
        return EXIT_INTERNAL_ERROR
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    result, title = _run(args)
    try:
        if args.json:
            print(json.dumps(result, indent=2, sort_keys=False))
        else:
            from infersim.tables import print_result, print_sweep

            if "rows" in result and "variants" in result:
                print_sweep(title, result)
            else:
                print_result(title, result)
        sys.stdout.flush()  # a closed pipe shows here, inside the boundary, not at exit
    except BrokenPipeError:
        return _quiet_broken_pipe()
    return 0


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated()


def _one_line(err: BaseException) -> str:
    if isinstance(err, OSError) and err.filename is not None and err.strerror:
        text = f"{err.filename}: {err.strerror}"
    else:
        text = str(err) or type(err).__name__
    return " ".join(text.split())


def _quiet_broken_pipe() -> int:
    """The reader went away: send what Python still holds for stdout to /dev/null, so that exit raises nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return EXIT_BROKEN_PIPE


def _save_traceback() -> str:
    """The current exception's traceback in a file under the system's temporary folder; its path."""
    try:
        fd, path = tempfile.mkstemp(prefix="infersim-traceback-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(f"infersim {' '.join(sys.argv[1:])}\n\n")
            traceback.print_exc(file=handle)
        return path
    except OSError as err:
        return f"not saved: {err}"


if __name__ == "__main__":
    sys.exit(main())
