"""The companion lab: the Triton kernels the project measures (`kernels/`) and the GPU bench that times them
(`bench/`), whose CSVs `validation/data/` keeps.

It imports torch and triton, and it may import every product package below `infersim` (the suites' cases, counts
and CSV columns of `validation`, the compiled-code readers of `compiled`); no product package imports it.
`compiled/companion_sources.py` reads the kernel files by path as compiler input. One entry point:
`python -m companion.bench {suites,collectives,quickreduce,sass-counts} ...`.
"""
