"""QuickReduce all-reduce codecs as Triton kernels: 2048-value tiles, 32-value blocks with one fp16 scale each.

Format (the QuickReduce study; reference/hardware_and_models.md part C.1, sources S27a and S39). Per block of 32 values:
absmax = max |x| (fp32); decode scale d = fp16(absmax / qmax) with qmax = 128 (INT8), 32 (INT6), 8 (INT4),
4 (INT3) or 6 (FP4), divided with IEEE rounding; encode scale e = 1 / (fp32(d) + 1e-7), also IEEE-rounded.
Integer codecs: q = round-half-even(clip(x * e, -qmax, qmax - 1)), stored biased as u = q + qmax. FP4 (E2M1):
a = |clip(x * e, -6, 6)| rounds to the nearest of 0, 0.5, 1, 1.5, 2, 3, 4, 6 (ties to the even code), stored
sign-magnitude as u = sign << 3 | code. Decoding gives (u - qmax) * d, or +-E2M1(code) * d. Clipping before
rounding equals QuickReduce's rint-then-clamp for integer bounds, and keeps the rounding out of reach of FMA
contraction, so the GPU and the numpy reference (`codecs_ref`) produce the same bits. The FP codec carries fp16
(bf16 input is rounded to fp16, as vLLM's default cast does). The float64 reference of a round trip is the input
itself, within `codecs_ref.error_bound`.

Byte layout of one tile (little-endian; our own, not QuickReduce's thread-interleaved one; the sizes match
`workloads.codecs.Codec.tile_bytes`). Value v of the tile (block v // 32) sits in each bit plane in order: a
plane of b bits per value holds value v at bit (v % (8 // b)) * b of plane byte v // (8 // b). Then the 64 fp16
scales, block b at byte data_bytes + 2 * b.

    codec  planes (byte offset: bits of u)                          scales at  tile bytes
    fp     0: the 2048 values as fp16 (no scales)                           -        4096
    int8   0: u (8 bits)                                                  2048       2176
    int6   0: u & 15 (4 bits), 1024: u >> 4 (2 bits)                     1536       1664
    int4   0: u (4 bits)                                                  1024       1152
    int3   0: u & 3 (2 bits), 512: u >> 2 (1 bit)                          768        896
    fp4    0: sign << 3 | code (4 bits)                                   1024       1152

The kernels write and read the planes as 32-bit words (8 // b * 4 values per word), which on a little-endian
GPU is the byte layout above; every plane offset and tile size is a multiple of 128 bytes, so a tile starting at
a 4-byte-aligned address keeps every word aligned. Launchers: one program per tile, `num_warps` warps; the last
tile of a ragged input is zero-padded when encoded (those values decode to 0 and are not written back).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

CODECS = ("fp", "int8", "int6", "int4", "int3", "fp4")
CODEC_ID = {name: i for i, name in enumerate(CODECS)}
TILE_VALUES = 2048
BLOCK_VALUES = 32
NUM_WARPS = 8  # 256 threads per tile, as QuickReduce's workgroup (8 values per thread)

_TILE_BYTES = {"fp": 4096, "int8": 2176, "int6": 1664, "int4": 1152, "int3": 896, "fp4": 1152}
_OUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def tile_bytes(codec: str) -> int:
    """Bytes of one encoded 2048-value tile."""
    if codec not in _TILE_BYTES:
        raise ValueError(f"unknown codec {codec!r}; valid: {', '.join(CODECS)}")
    return _TILE_BYTES[codec]


@triton.jit
def _round_half_even(y):
    """Round fp32 to the nearest integer, ties to even, with floor only (no vendor rint needed)."""
    f = tl.floor(y)
    r = y - f
    odd = (f - 2.0 * tl.floor(0.5 * f)) != 0.0
    return f + tl.where((r > 0.5) | ((r == 0.5) & odd), 1.0, 0.0)


@triton.jit
def _block_scales(v, QMAX: tl.constexpr):
    """Per block of v [64, 32]: the fp16 decode scale absmax / QMAX and the fp32 encode scale 1 / (d + 1e-7)."""
    absmax = tl.max(tl.abs(v), axis=1)
    d16 = tl.math.div_rn(absmax, tl.full([64], QMAX, tl.float32)).to(tl.float16)
    enc = tl.math.div_rn(tl.full([64], 1.0, tl.float32), d16.to(tl.float32) + 1e-7)
    return d16, enc


@triton.jit
def _store_plane(dst_ptr, OFFSET: tl.constexpr, u, BITS: tl.constexpr):
    """Pack the low BITS bits of u [64, 32] (uint32), value order kept, into 64 * BITS words at byte OFFSET."""
    PER_WORD: tl.constexpr = 32 // BITS
    fields = tl.reshape(u & ((1 << BITS) - 1), [64 * BITS, PER_WORD])
    shifts = (tl.arange(0, PER_WORD) * BITS).to(tl.uint32)
    words = tl.sum(fields << shifts[None, :], axis=1)
    tl.store((dst_ptr + OFFSET).to(tl.pointer_type(tl.uint32)) + tl.arange(0, 64 * BITS), words)


@triton.jit
def _load_plane(src_ptr, OFFSET: tl.constexpr, BITS: tl.constexpr):
    """The BITS-bit fields of a plane written by _store_plane, as uint32 [64, 32]."""
    PER_WORD: tl.constexpr = 32 // BITS
    words = tl.load((src_ptr + OFFSET).to(tl.pointer_type(tl.uint32)) + tl.arange(0, 64 * BITS))
    shifts = (tl.arange(0, PER_WORD) * BITS).to(tl.uint32)
    fields = (words[:, None] >> shifts[None, :]) & ((1 << BITS) - 1)
    return tl.reshape(fields, [64, 32])


@triton.jit
def _encode_int(v, QMAX: tl.constexpr):
    """Biased integer codes u = q + QMAX (uint32 [64, 32]) and fp16 scales [64] of v [64, 32]."""
    d16, enc = _block_scales(v, QMAX)
    y = tl.minimum(tl.maximum(v * enc[:, None], -QMAX), QMAX - 1.0)
    q = _round_half_even(y)
    return (q + QMAX).to(tl.int32).to(tl.uint32), d16


@triton.jit
def _encode_fp4(v):
    """E2M1 nibbles sign << 3 | code (uint32 [64, 32]) and fp16 scales [64] of v [64, 32], scale absmax / 6."""
    d16, enc = _block_scales(v, 6.0)
    y = tl.minimum(tl.maximum(v * enc[:, None], -6.0), 6.0)
    a = tl.abs(y)
    # Thresholds are the midpoints of 0, 0.5, 1, 1.5, 2, 3, 4, 6; '>=' where the tie goes up to an even code.
    code = ((a > 0.25).to(tl.int32) + (a >= 0.75).to(tl.int32) + (a > 1.25).to(tl.int32)
            + (a >= 1.75).to(tl.int32) + (a > 2.5).to(tl.int32) + (a >= 3.5).to(tl.int32) + (a > 5.0).to(tl.int32))
    sign = (y < 0.0).to(tl.int32)
    return (code | (sign << 3)).to(tl.uint32), d16


@triton.jit
def encode_tile(values, dst_ptr, CODEC: tl.constexpr):
    """Encode fp32 values [2048] into the tile at dst_ptr (uint8, 4-byte aligned): tile_bytes(codec) bytes."""
    if CODEC == 0:
        tl.store(dst_ptr.to(tl.pointer_type(tl.float16)) + tl.arange(0, 2048), values.to(tl.float16))
    else:
        v = tl.reshape(values, [64, 32])
        if CODEC == 1:
            u, d16 = _encode_int(v, 128.0)
            _store_plane(dst_ptr, 0, u, 8)
            SCALES: tl.constexpr = 2048
        elif CODEC == 2:
            u, d16 = _encode_int(v, 32.0)
            _store_plane(dst_ptr, 0, u, 4)
            _store_plane(dst_ptr, 1024, u >> 4, 2)
            SCALES: tl.constexpr = 1536
        elif CODEC == 3:
            u, d16 = _encode_int(v, 8.0)
            _store_plane(dst_ptr, 0, u, 4)
            SCALES: tl.constexpr = 1024
        elif CODEC == 4:
            u, d16 = _encode_int(v, 4.0)
            _store_plane(dst_ptr, 0, u, 2)
            _store_plane(dst_ptr, 512, u >> 2, 1)
            SCALES: tl.constexpr = 768
        else:
            u, d16 = _encode_fp4(v)
            _store_plane(dst_ptr, 0, u, 4)
            SCALES: tl.constexpr = 1024
        tl.store((dst_ptr + SCALES).to(tl.pointer_type(tl.float16)) + tl.arange(0, 64), d16)


@triton.jit
def _unbias(u, QMAX: tl.constexpr):
    """Signed integer values (fp32) of biased codes u = q + QMAX."""
    return (u.to(tl.int32) - QMAX).to(tl.float32)


@triton.jit
def _decode_fp4(u):
    """E2M1 magnitudes of nibbles u [64, 32] with their signs: 0, 0.5, 1, 1.5, 2, 3, 4, 6."""
    code = (u & 7).to(tl.int32)
    e = code >> 1
    m = code & 1
    halves = tl.where(e == 0, m, (2 + m) << (tl.maximum(e, 1) - 1))  # the magnitude in units of 0.5
    mag = halves.to(tl.float32) * 0.5
    return tl.where((u >> 3) != 0, -mag, mag)


@triton.jit
def decode_tile(src_ptr, CODEC: tl.constexpr):
    """Decode the tile at src_ptr (uint8, 4-byte aligned) into fp32 values [2048]."""
    if CODEC == 0:
        out = tl.load(src_ptr.to(tl.pointer_type(tl.float16)) + tl.arange(0, 2048)).to(tl.float32)
    else:
        if CODEC == 1:
            q = _unbias(_load_plane(src_ptr, 0, 8), 128)
            SCALES: tl.constexpr = 2048
        elif CODEC == 2:
            q = _unbias(_load_plane(src_ptr, 0, 4) | (_load_plane(src_ptr, 1024, 2) << 4), 32)
            SCALES: tl.constexpr = 1536
        elif CODEC == 3:
            q = _unbias(_load_plane(src_ptr, 0, 4), 8)
            SCALES: tl.constexpr = 1024
        elif CODEC == 4:
            q = _unbias(_load_plane(src_ptr, 0, 2) | (_load_plane(src_ptr, 512, 1) << 2), 4)
            SCALES: tl.constexpr = 768
        else:
            q = _decode_fp4(_load_plane(src_ptr, 0, 4))
            SCALES: tl.constexpr = 1024
        d = tl.load((src_ptr + SCALES).to(tl.pointer_type(tl.float16)) + tl.arange(0, 64)).to(tl.float32)
        out = tl.reshape(q * d[:, None], [2048])
    return out


@triton.jit
def _bf16_bits(v):
    """Bits of fp32 v rounded to bf16, nearest even (finite v); by hand because the interpreter truncates."""
    u = v.to(tl.uint32, bitcast=True)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).to(tl.uint16)


@triton.jit
def _quantize_kernel(x_ptr, out_ptr, n, CODEC: tl.constexpr, TILE_BYTES: tl.constexpr):
    """One program per tile: load 2048 values (zero past n), encode them to the tile's packed bytes."""
    tile = tl.program_id(0).to(tl.int64)
    offs = tile * 2048 + tl.arange(0, 2048)
    values = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    encode_tile(values, out_ptr + tile * TILE_BYTES, CODEC)


@triton.jit
def _dequantize_kernel(src_ptr, y_ptr, n, CODEC: tl.constexpr, TILE_BYTES: tl.constexpr):
    """One program per tile: decode the tile, store its values below n in y's dtype."""
    tile = tl.program_id(0).to(tl.int64)
    values = decode_tile(src_ptr + tile * TILE_BYTES, CODEC)
    offs = tile * 2048 + tl.arange(0, 2048)
    if y_ptr.dtype.element_ty == tl.bfloat16:
        tl.store(y_ptr.to(tl.pointer_type(tl.uint16)) + offs, _bf16_bits(values), mask=offs < n)
    else:
        tl.store(y_ptr + offs, values.to(y_ptr.dtype.element_ty), mask=offs < n)


def _tiles(n: int) -> int:
    return -(-n // TILE_VALUES)


def quantize_into(x: torch.Tensor, out: torch.Tensor, codec: str, num_warps: int = NUM_WARPS) -> None:
    """Encode x (1-D fp16 or bf16, contiguous) into out (uint8, ceil(n / 2048) * tile bytes), no allocation."""
    if x.dim() != 1 or x.dtype not in (torch.float16, torch.bfloat16) or not x.is_contiguous():
        raise ValueError(f"quantize wants a contiguous 1-D fp16 or bf16 tensor, got {tuple(x.shape)} {x.dtype}")
    _check_packed(out, codec, x.numel())
    if x.numel():
        _quantize_kernel[(_tiles(x.numel()),)](
            x, out, x.numel(), CODEC=CODEC_ID[codec], TILE_BYTES=tile_bytes(codec), num_warps=num_warps)


def dequantize_into(packed: torch.Tensor, y: torch.Tensor, codec: str, num_warps: int = NUM_WARPS) -> None:
    """Decode packed tiles into y (1-D fp16, bf16 or fp32, contiguous; its length is the value count)."""
    if y.dim() != 1 or y.dtype not in _OUT_DTYPES or not y.is_contiguous():
        raise ValueError(f"dequantize writes a contiguous 1-D fp16, bf16 or fp32 tensor, got {tuple(y.shape)} "
                         f"{y.dtype}")
    _check_packed(packed, codec, y.numel())
    if y.numel():
        _dequantize_kernel[(_tiles(y.numel()),)](
            packed, y, y.numel(), CODEC=CODEC_ID[codec], TILE_BYTES=tile_bytes(codec), num_warps=num_warps)


def _check_packed(packed: torch.Tensor, codec: str, n: int) -> None:
    size = _tiles(n) * tile_bytes(codec)
    if packed.dtype != torch.uint8 or packed.dim() != 1 or packed.numel() != size or not packed.is_contiguous():
        raise ValueError(f"{codec}: {n} values need {size} packed bytes (contiguous 1-D uint8), got "
                         f"{tuple(packed.shape)} {packed.dtype}")


def quantize(x: torch.Tensor, codec: str, num_warps: int = NUM_WARPS) -> torch.Tensor:
    """Packed uint8 tiles (ceil(n / 2048) * tile_bytes bytes) of a 1-D fp16 or bf16 tensor."""
    out = torch.empty(_tiles(x.numel()) * tile_bytes(codec), dtype=torch.uint8, device=x.device)
    quantize_into(x.contiguous(), out, codec, num_warps)
    return out


def dequantize(packed: torch.Tensor, codec: str, n: int, dtype: torch.dtype = torch.float16,
               num_warps: int = NUM_WARPS) -> torch.Tensor:
    """The first n values of packed tiles, as a 1-D tensor of dtype (fp16, bf16 or fp32)."""
    y = torch.empty(n, dtype=dtype, device=packed.device)
    dequantize_into(packed.contiguous(), y, codec, num_warps)
    return y
