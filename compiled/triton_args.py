"""The arguments of a user's Triton kernel as `infersim kernel --triton` takes them: tensors by datatype and shape
(an integer tensor with the value it holds), ints, floats and flags, and the grid; errors that name the bad one."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hwmodels.dtypes import Dtype

# Tensor datatypes: (Triton's name, numpy storage, the math datatype a tl.dot of them runs at)
TENSOR_DTYPES: dict[str, tuple[str, type, Dtype | None]] = {
    "bf16": ("bf16", np.uint16, Dtype.BF16), "fp16": ("fp16", np.float16, Dtype.FP16),
    "fp32": ("fp32", np.float32, Dtype.TF32), "fp64": ("fp64", np.float64, Dtype.FP32),
    "fp8e4nv": ("fp8e4nv", np.uint8, Dtype.FP8), "fp8e5": ("fp8e5", np.uint8, Dtype.FP8),
    "fp8e4b8": ("fp8e4b8", np.uint8, Dtype.FP8), "fp8e5b16": ("fp8e5b16", np.uint8, Dtype.FP8),
    "i8": ("i8", np.int8, Dtype.INT8), "u8": ("u8", np.uint8, Dtype.INT8), "i16": ("i16", np.int16, None),
    "i32": ("i32", np.int32, None), "i64": ("i64", np.int64, None), "u32": ("u32", np.uint32, None),
    "u64": ("u64", np.uint64, None),
}
_FLOAT_STORAGE = ("bf16", "fp16", "fp32", "fp64")
_TENSOR = re.compile(r"^(\w+)\[([\d,\s]*)\](?:=(-?\d+|arange|perm))?$")
# An integer tensor's values besides a constant: its element numbers 0, 1, 2, ... (`arange`), or those in an order
# drawn from a fixed seed (`perm`): index tensors that name distinct rows (sorted token ids, block tables)
INDEX_FILLS = ("arange", "perm")
PERM_SEED = 20261208


class TritonKernelError(ValueError):
    """A user's kernel, grid or arguments that cannot be predicted, and why."""


@dataclass(frozen=True)
class TensorArg:
    """A tensor argument: its datatype name (`TENSOR_DTYPES`), shape, and the value an integer tensor holds."""

    dtype: str
    shape: tuple[int, ...]
    fill: int | str = 0  # a constant, or one of INDEX_FILLS

    def values(self) -> np.ndarray | int:
        """What an integer tensor holds: its constant fill, or its elements' numbers (`arange`) in a fixed-seed
        order (`perm`), flat."""
        if self.fill == "arange":
            return np.arange(self.elements)
        if self.fill == "perm":
            return np.random.default_rng(PERM_SEED).permutation(self.elements)
        return int(self.fill)

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.elements * np.dtype(TENSOR_DTYPES[self.dtype][1]).itemsize


def parse_arg(text: str) -> tuple[str, object]:
    """`NAME=VALUE`: a tensor `dtype[d0,d1,...]` (an integer tensor may add `=N`, `=arange` or `=perm`), an int, a
    float, or a bool."""
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name.isidentifier() or not value:
        raise TritonKernelError(f"--arg {text!r}: expected NAME=VALUE, e.g. x=bf16[4096,4096], n=4096, BLOCK=128")
    found = _TENSOR.match(value)
    if found:
        dtype, dims, fill = found.groups()
        if dtype not in TENSOR_DTYPES:
            raise TritonKernelError(f"--arg {name}: unknown datatype {dtype!r} (valid: {', '.join(TENSOR_DTYPES)})")
        shape = tuple(int(d) for d in dims.replace(" ", "").split(",") if d)
        if not shape or any(d <= 0 for d in shape):
            raise TritonKernelError(f"--arg {name}: a tensor needs a shape of positive sizes, got [{dims}]")
        if fill is not None and (dtype in _FLOAT_STORAGE or dtype.startswith("fp8")):
            raise TritonKernelError(f"--arg {name}: only an integer tensor takes a fill (=N, =arange or =perm); "
                                    f"{dtype} tensors hold random values")
        if fill in INDEX_FILLS:
            top = np.iinfo(TENSOR_DTYPES[dtype][1]).max
            if math.prod(shape) - 1 > top:
                raise TritonKernelError(f"--arg {name}: ={fill} numbers {math.prod(shape)} elements, more than "
                                        f"{dtype} holds (at most {top})")
            return name, TensorArg(dtype, shape, fill)
        return name, TensorArg(dtype, shape, int(fill or 0))
    if value in ("True", "False"):
        return name, value == "True"
    for kind in (int, float):
        try:
            return name, kind(value)
        except ValueError:
            pass
    raise TritonKernelError(f"--arg {name}={value!r}: not a tensor (dtype[shape]), an int, a float or True/False")


def parse_grid(text: str) -> tuple[int, int, int]:
    """`X[,Y[,Z]]` programs along each axis."""
    try:
        dims = [int(d) for d in text.split(",")]
    except ValueError:
        raise TritonKernelError(f"--grid {text!r}: expected up to three positive integers, e.g. 128 or 64,8") from None
    if not 1 <= len(dims) <= 3 or any(d <= 0 for d in dims):
        raise TritonKernelError(f"--grid {text!r}: expected up to three positive integers, e.g. 128 or 64,8")
    return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]


def parse_args(texts: Sequence[str]) -> dict[str, object]:
    """`--arg` values by name; a name given twice is an error."""
    out: dict[str, object] = {}
    for text in texts:
        name, value = parse_arg(text)
        if name in out:
            raise TritonKernelError(f"--arg {name} is given twice")
        out[name] = value
    return out
