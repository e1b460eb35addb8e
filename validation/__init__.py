"""Ground truth: measured kernel and collective times (`validation/data/`) and the model's error against them.

The product side, used by `infersim validate`: the suites' cases with their counted FLOP and bytes and their
mapping of a measured row to an infersim kernel kind (`suites/`), the predicted-vs-measured report
(`report`, `report_document`, `comparison`, `collective_report`) and the comparison with published figures
(`published_collectives`). Reading, matching and predicting profiler traces and fitting calibrations on
measurements are the product package `traces/`, which this one imports. It imports neither torch nor triton
and never the companion lab (`companion/`: the Triton kernels and the GPU bench that recorded the data), which
imports it.
"""
