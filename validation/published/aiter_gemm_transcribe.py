"""How `aiter_gemm.csv` was transcribed from AITER's tuned block-scaled FP8 GEMM table (ROCm/aiter, MIT licence).

    AT=e4048607a535ace3a2b51ded31b1c8c2d45c0879:aiter/configs/model_configs   # ROCm/aiter, 2026-08-22
    git -C AITER show $AT/a8w8_blockscale_tuned_gemm_ds_v3.csv > gemm_ds_v3.csv
    python validation/published/aiter_gemm_transcribe.py gemm_ds_v3.csv > validation/published/aiter_gemm.csv

Kept: every MI300X row (gfx942, 304 CUs: 295), every MI355X row (gfx950, 256 CUs) whose token count M is a power of
two, and a seeded sample of SAMPLE other MI355X rows (the table holds 7,172; the sample keeps the file small).
`split_k` is the number of partial sums, 2^splitK (AITER's `gemm_a8w8_blockscale_tune.cu`: KBatch = 2^splitK).
"""

import csv
import random
import sys

GPUS = {"gfx942": "mi300x", "gfx950": "mi355x"}
SAMPLE, SEED = 600, 20261203


def _power_of_two(m: int) -> bool:
    return m & (m - 1) == 0


def main(path: str) -> None:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    others = [r for r in rows if r["gfx"] == "gfx950" and not _power_of_two(int(r["M"]))]
    sampled = {id(r) for r in random.Random(SEED).sample(others, min(SAMPLE, len(others)))}
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["source_id", "gpu", "cu_num", "m", "n", "k", "dtype", "library", "split_k", "us",
                  "kernel"])
    for r in rows:
        m = int(r["M"])
        if r["gfx"] == "gfx950" and not _power_of_two(m) and id(r) not in sampled:
            continue
        out.writerow(["AITER-GEMM-DSV3", GPUS[r["gfx"]], r["cu_num"], m, r["N"], r["K"], "fp8", r["libtype"],
                      2 ** int(r["splitK"]), r["us"], r["kernelName"]])


if __name__ == "__main__":
    main(sys.argv[1])
