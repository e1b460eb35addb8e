"""The companion kernel extension: Triton kernels that run unchanged on ROCm and CUDA, each with a float64 reference."""
