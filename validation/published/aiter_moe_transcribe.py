"""How `aiter_moe.csv` was transcribed from AITER's tuned fused-MoE tables (ROCm/aiter, MIT licence).

    AT=e4048607a535ace3a2b51ded31b1c8c2d45c0879:aiter/configs/model_configs   # ROCm/aiter, 2026-08-22
    git -C AITER show $AT/a8w8_blockscale_tuned_fmoe_ds_v3.csv > ds_v3.csv
    git -C AITER show $AT/kimik3_a4w4_tuned_fmoe.csv > k3.csv
    python validation/published/aiter_moe_transcribe.py ds_v3.csv k3.csv > validation/published/aiter_moe.csv

Kept: the MI355X rows (cu_num 256) of DeepSeek-V3/R1 (model_dim 7168, 257 experts: the shared one fused) and of
Kimi K3. Left out: a row whose stage times equal the previous row's of the same width exactly (the tuner's entry
for a larger token count copied from a smaller one, not a measurement of it).
"""

import csv
import sys

DTYPES = {"torch.float8_e4m3fn": "fp8", "torch.float8_e4m3fnuz": "fp8", "torch.float4_e2m1fn_x2": "mxfp4",
          "torch.bfloat16": "bf16"}
SOURCES = (("AITER-FMOE-DSV3", "deepseek-r1", lambda r: r["cu_num"] == "256" and r["model_dim"] == "7168"
            and r["expert"] == "257"),
           ("AITER-FMOE-K3", "kimi-k3", lambda r: r["cu_num"] == "256"))


def main(paths: list[str]) -> None:
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["source_id", "gpu", "cu_num", "model", "tokens", "model_dim", "inter_dim", "experts", "top_k",
                  "activation_dtype", "weight_dtype", "quant", "block_m", "stage1_us", "stage2_us", "total_us",
                  "stage1_kernel", "stage2_kernel"])
    for path, (source, model, keep) in zip(paths, SOURCES, strict=True):
        last: dict[str, tuple[str, str]] = {}
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                if not keep(r):
                    continue
                times = (r["us1"], r["us2"])
                if last.get(r["inter_dim"]) == times:
                    continue
                last[r["inter_dim"]] = times
                out.writerow([source, "mi355x", r["cu_num"], model, r["token"], r["model_dim"], r["inter_dim"],
                              r["expert"], r["topk"], DTYPES[r["q_dtype_a"]], DTYPES[r["q_dtype_w"]],
                              r["q_type"].replace("QuantType.", ""), r["block_m"], r["us1"], r["us2"], r["us"],
                              r["kernelName1"], r["kernelName2"]])


if __name__ == "__main__":
    main(sys.argv[1:])
