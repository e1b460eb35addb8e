"""Measured GPU work read and predicted: profiler traces and collective sweeps against the model, and the
calibrations fitted on them.

Product functionality a user runs on their own measurements: `infersim trace predict` and `infersim calibrate`
(`formats/`: a profiler trace read into one record, whatever wrote it; `matching`: traced kernels mapped to
infersim kernel kinds; `predict`: a trace predicted kernel by kernel, and a calibration overlay fitted on
traces) and `infersim validate --links` (`calibrate_links`: a platform's collective-library protocols fitted on
a measured NCCL sweep). It sits above the model (hwmodels, workloads, compiled, simulator) and below
`validation/`, whose recorded data and report use it; it imports neither validation/ nor a GPU framework.
"""
