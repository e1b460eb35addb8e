"""Datatypes: storage bits and block-scale overhead, the keys of peak-rate tables."""

from __future__ import annotations

from enum import Enum

from hwmodels.choices import parse_choice


class Dtype(Enum):
    """A datatype of tensor storage or of a math unit's operands."""

    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    MXFP6 = "mxfp6"
    MXFP4 = "mxfp4"
    NVFP4 = "nvfp4"
    INT8 = "int8"

    # members are singletons compared by identity: hash them by identity too (Enum's own hash hashes the name, in
    # Python, and the serving loop hashes datatypes in every table it reads)
    __hash__ = object.__hash__

    @property
    def bits(self) -> int:
        """Storage bits per value, scales excluded."""
        return _BITS[self]

    @property
    def scale_block_values(self) -> int:
        """Values sharing one 8-bit scale (OCP MX: 32 with E8M0; NVFP4: 16 with E4M3); 0 if unscaled."""
        return _SCALE_BLOCK.get(self, 0)

    def storage_bytes(self, values: int) -> float:
        """Bytes to store `values` values, block scales included (one byte per scale block)."""
        data = values * self.bits / 8
        if self.scale_block_values:
            data += -(-values // self.scale_block_values)
        return data

    @classmethod
    def parse(cls, text: str) -> Dtype:
        """The dtype named `text`; the error lists the valid names."""
        return parse_choice(cls, text, "dtype")


_BITS = {
    Dtype.FP32: 32,
    Dtype.TF32: 32,
    Dtype.BF16: 16,
    Dtype.FP16: 16,
    Dtype.FP8: 8,
    Dtype.MXFP6: 6,
    Dtype.MXFP4: 4,
    Dtype.NVFP4: 4,
    Dtype.INT8: 8,
}
# OCP Microscaling Formats spec v1.0: block of 32 with an E8M0 scale; NVFP4: block of 16, E4M3 scale.
_SCALE_BLOCK = {Dtype.MXFP6: 32, Dtype.MXFP4: 32, Dtype.NVFP4: 16}
