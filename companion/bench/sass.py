"""`sass-counts`: count the SASS instructions each companion kernel issues per thread, compiled for sm_90.

    python -m companion.bench sass-counts --out compiled/data/h200.csv

Each kernel configuration of the compiled table (`compiled.companion_sources.TABLE`, compiled as `case` says:
the specialisations its launches get on the GPU, pointers and the sizes the suites pass divisible by 16) is
compiled by Triton for sm_90 (no GPU needed; Triton ships ptxas and nvdisasm), disassembled and counted
(`compiled.sass_code.count`). The product compiles any other configuration the same way when it is asked for;
this table is the code of the Triton version that compiled the measured kernels. The
QuickReduce all-reduce kernels are counted as the two-GPU sweep launched them: `qr_scatter`, `qr_reduce` and
`qr_gather`, per codec, with two ranks, bf16 in and out, 4 warps. The table it writes is read by
`compiled.sass_counts`; run it with the Triton version of the measurements (their PROVENANCE.md). Beside
it the command writes each kernel's one-warp issue timeline (`warp_timeline`, from the control codes of the
instructions: stall counts and the barriers of variable-latency results, and each section's instruction
stream) as `<name>_timing.json`, which `compiled.sass_timing` evaluates with a GPU's latencies.
triton is imported inside the functions that compile, so `count` works without it.
"""

from __future__ import annotations

import argparse
import csv
import json
import re

from compiled.companion_sources import TABLE, case
from compiled.sass_code import count, warp_timeline
from compiled.sass_counts import COLUMNS
from compiled.triton_build import compile_kernel, disassemble


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="the CSV to write, e.g. compiled/data/h200.csv")
    parser.add_argument("--timing", help="the warp timelines to write (`warp_timeline`); default: the CSV's name "
                        "with _timing.json, e.g. compiled/data/h200_timing.json")


def run(args: argparse.Namespace) -> int:
    """Compile, disassemble and count every kernel configuration of the suites; write the table to args.out and
    each one's warp timeline to args.timing."""
    import triton

    rows, timings = [], []
    for kernel, config in TABLE:
        c = case(kernel, config)
        compiled = compile_kernel(c.fn, c.signature, c.constexprs, c.num_warps, c.aligned, c.num_stages)
        warps = c.num_warps
        sass, registers = disassemble(compiled)
        prologue, loop = count(sass)
        rows.append({"kernel": kernel, "config": config, "num_warps": warps, "registers": registers,
                     "shared_bytes": compiled.metadata.shared, "prologue_instructions": prologue,
                     "loop_instructions": loop, "triton": triton.__version__})
        timings.append({"kernel": kernel, "config": config, **warp_timeline(sass, 32 * warps)})
        print(rows[-1], flush=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    timing = args.timing or re.sub(r"(\.csv)?$", "_timing.json", args.out, count=1)
    with open(timing, "w") as f:  # one row a line
        f.write(f'{{"triton": {json.dumps(triton.__version__)}, "rows": [\n')
        f.write(",\n".join(json.dumps(row, separators=(",", ":")) for row in timings))
        f.write("\n]}\n")
    return 0
