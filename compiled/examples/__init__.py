"""Example Triton kernels as a user writes them, shipped with infersim so that `infersim kernel --triton
compiled.examples.triton_kernels:row_sums ...` runs from any folder (`triton_kernels.py`)."""
