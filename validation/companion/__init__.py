"""The companion kernel extension: the Triton kernels (`kernels/`) and the GPU bench that times them (`bench/`).

It imports torch and triton, and it may import the product side of `validation` (the suites' cases, counts and
CSV columns); the product side never imports it. One entry point:
`python -m validation.companion.bench {suites,collectives,quickreduce,sass-counts} ...`.
"""
