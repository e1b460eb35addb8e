"""The bench: times the suites' kernels and the collectives on CUDA GPUs and writes the CSVs of `validation/data/`.

    python -m companion.bench suites --suite all --out DIR       # one CSV per kernel suite
    python -m companion.bench suites --suite gemm --list         # the planned cases, no GPU needed
    python -m companion.bench collectives --out DIR              # NCCL between the GPUs of one host
    python -m companion.bench quickreduce --out DIR              # our quantized all-reduce beside NCCL
    python -m companion.bench sass-counts --out FILE.csv         # SASS instruction counts, no GPU

What each command writes, and how, is in its module: `suites`, `collectives`, `quickreduce`, `sass`.
"""
