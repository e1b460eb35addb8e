"""Companion-kernel tests: on a machine without a GPU the Triton kernels run in the interpreter.

TRITON_INTERPRET must be set before any kernel module is imported, so it is set here, at collection.
On a CUDA machine (`pytest tests/companion` on the H200) the same tests run the compiled kernels.

Triton's interpreter replaces triton.language's functions while it runs a kernel and puts them back after, but a
@triton.jit function of another module that an interpreted kernel calls (triton.language.standard's, whose module
sees `core`) replaces `core`'s too and nothing puts those back (Triton 3.9, `InterpretedFunction.__call__`): each
test here leaves the language as it found it (`_language_as_found`), so no test runs on another's leftovers. (A
kernel compiled later in the run is compiled in a child process: `compiled.triton_build.language_interpreted`.)
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
_ABSENT = object()


def _language_owners() -> list:
    """The modules and classes of triton.language whose attributes the interpreter replaces."""
    import triton.language as tl

    core = tl.core
    return [tl, core, tl.math, core.tensor, core.dtype, core.condition, core.tensor_descriptor_base]


@pytest.fixture(autouse=True)
def _language_as_found():
    """Whatever the test's interpreted kernels replaced in triton.language, put back after it."""
    before = [(owner, dict(vars(owner))) for owner in _language_owners()]
    yield
    for owner, found in before:
        now = dict(vars(owner))
        for name in now.keys() - found.keys():
            delattr(owner, name)
        for name, value in found.items():
            if now.get(name, _ABSENT) is not value:
                setattr(owner, name, value)


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
