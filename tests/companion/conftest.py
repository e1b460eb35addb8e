"""Companion-kernel tests: on a machine without a GPU the Triton kernels run in the interpreter.

TRITON_INTERPRET must be set before any kernel module is imported, so it is set here, at collection.
On a CUDA machine (`pytest tests/companion` on the H200) the same tests run the compiled kernels.
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def device() -> str:
    """Where the kernels run: the GPU when there is one, else the CPU under the Triton interpreter."""
    return DEVICE


@pytest.fixture
def rng() -> torch.Generator:
    """A fresh, seeded generator per test (inputs are random normal, never zeros)."""
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"rng seed {seed}")  # shown by pytest when the test fails, to reproduce it
    return torch.Generator().manual_seed(seed)
