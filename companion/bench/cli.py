"""`python -m companion.bench COMMAND ...`: the bench's one entry point, a sub-command per kind of run."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence

# sub-command -> (module, help); each module has add_arguments(parser) and run(args) -> exit status
COMMANDS = {
    "suites": ("companion.bench.suites", "time the kernel suites on one CUDA GPU, one CSV per suite"),
    "collectives": ("companion.bench.collectives", "NCCL collectives between the GPUs of one host"),
    "quickreduce": ("companion.bench.quickreduce",
                    "the quantized two-shot all-reduce through every codec, beside NCCL"),
    "sass-counts": ("companion.bench.sass", "count each kernel's SASS instructions (compiled, no GPU)"),
    "probes": ("companion.bench.probes",
               "microbenchmarks of the cost model's hardware constants, one CSV per probe"),
    "gemm-choices": ("companion.bench.gemm_choices",
                     "which kernels cuBLAS runs for each GEMM shape (profiler names, grids), one CSV"),
    "gemm-floor": ("companion.bench.gemm_floor",
                   "the fixed cost of a cuBLAS GEMM: GEMMs too small to do any work, graph-timed, one CSV"),
    "kernel-split": ("companion.bench.kernel_split",
                     "each kernel's duration inside one MLA decode call (attention, merge), from the profiler"),
    "user-kernels": ("companion.bench.user_kernels",
                     "the example user kernels (compiled/examples/triton_kernels.py), graph-timed, one CSV"),
    "engine-step": ("companion.bench.engine_step",
                    "whole dense engine steps (Qwen3-32B shapes), graph-timed and traced with the PyTorch profiler"),
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m companion.bench",
                                description="Time the companion kernels and the collectives; write the CSVs.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module).add_arguments(command)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return importlib.import_module(COMMANDS[args.command][0]).run(args)
