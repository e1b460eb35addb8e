"""All-reduce codecs: the QuickReduce wire format, so a quantized collective knows its bytes per tile."""

from __future__ import annotations

from enum import Enum

from hwmodels.choices import parse_choice

# Source for every constant below: the QuickReduce study's codec table, from vLLM's QuickReduce kernels
# [S27a] and the INT3/FP4 codec sources [S39] (tags: hwmodels/specs/SOURCES.md): blocks of 32 values
# share one fp16 scale; a tile is 2048 values (4096 B of fp16) per 256-thread workgroup; tiles on the
# wire are FP 4096, INT8 2176, INT6 1664, INT4 1152, INT3 896 and FP4 (fork) 1152 bytes.
_TILE_VALUES = 2048
_BLOCK_VALUES = 32
_SCALE_BYTES = 2  # one fp16 scale per block


class Codec(Enum):
    """A QuickReduce codec: how 2048-value tiles of fp16 activations are packed for the wire."""

    FP = "fp"
    INT8 = "int8"
    INT6 = "int6"
    INT4 = "int4"
    INT3 = "int3"
    FP4 = "fp4"

    @property
    def bits_per_value(self) -> int:
        """Storage bits of one value's data, scales excluded (FP sends fp16 as is)."""
        return _BITS[self]

    @property
    def block_values(self) -> int:
        """Values that share one scale."""
        return _BLOCK_VALUES

    @property
    def tile_values(self) -> int:
        """Values per tile, which one 256-thread workgroup packs."""
        return _TILE_VALUES

    @property
    def scale_bytes_per_block(self) -> int:
        """Bytes of scale per block: an fp16 scale, or none for the uncompressed FP codec."""
        return 0 if self is Codec.FP else _SCALE_BYTES

    @property
    def tile_bytes(self) -> int:
        """Bytes of one tile on the wire: packed data plus one scale per block."""
        data_bytes = self.tile_values * self.bits_per_value // 8
        return data_bytes + self.tile_values // self.block_values * self.scale_bytes_per_block

    def wire_bytes(self, values: int) -> int:
        """Bytes on the wire for `values` values; a partial last tile is sent whole."""
        if values < 0:
            raise ValueError(f"values must not be negative, got {values}")
        return -(-values // self.tile_values) * self.tile_bytes

    @classmethod
    def parse(cls, text: str) -> Codec:
        """The codec named `text`; the error lists the valid names."""
        return parse_choice(cls, text, "codec")


_BITS = {
    Codec.FP: 16,
    Codec.INT8: 8,
    Codec.INT6: 6,
    Codec.INT4: 4,
    Codec.INT3: 3,  # a 2-bit plane plus a 1-bit plane
    Codec.FP4: 4,  # E2M1
}
