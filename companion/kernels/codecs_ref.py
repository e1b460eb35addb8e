"""References of the codecs in `codecs`: the same byte format in numpy, and the float64 error bound of a round trip.

The numpy functions are written apart from the kernels (np.rint, an E2M1 nearest-value search, byte-wise
packing), so agreement bit for bit is evidence that both follow the format in `codecs`' docstring. The float64
reference of a round trip is the input itself; `error_bound` says how far the decoded value may be from it.
"""

from __future__ import annotations

import numpy as np
import torch

TILE_VALUES = 2048
BLOCK_VALUES = 32
BLOCKS = TILE_VALUES // BLOCK_VALUES
QMAX = {"int8": 128, "int6": 32, "int4": 8, "int3": 4, "fp4": 6}
# Bit planes of the stored code u, low bits first: (bits, byte offset); then the scales' byte offset.
PLANES = {
    "int8": ((8, 0),),
    "int6": ((4, 0), (2, 1024)),
    "int4": ((4, 0),),
    "int3": ((2, 0), (1, 512)),
    "fp4": ((4, 0),),
}
SCALES_AT = {"int8": 2048, "int6": 1536, "int4": 1024, "int3": 768, "fp4": 1024}
TILE_BYTES = {"fp": 4096, **{c: SCALES_AT[c] + 2 * BLOCKS for c in SCALES_AT}}
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
_EPS = np.float32(1e-7)  # QuickReduce: encode scale = 1 / (decode scale + 1e-7)


def _tiles(n: int) -> int:
    return -(-n // TILE_VALUES)


def _pack_plane(field: np.ndarray, bits: int) -> np.ndarray:
    """Bytes of one plane per tile [tiles, 2048 * bits / 8]: value k of a byte group at bit k * bits."""
    per_byte = 8 // bits
    groups = (field & ((1 << bits) - 1)).astype(np.uint16).reshape(field.shape[0], -1, per_byte)
    shifts = (np.arange(per_byte) * bits).astype(np.uint16)
    return (groups << shifts).sum(axis=2).astype(np.uint8)


def _unpack_plane(plane: np.ndarray, bits: int) -> np.ndarray:
    """Inverse of _pack_plane: fields [tiles, 2048] as uint32."""
    per_byte = 8 // bits
    shifts = (np.arange(per_byte) * bits).astype(np.uint32)
    fields = (plane.astype(np.uint32)[:, :, None] >> shifts) & ((1 << bits) - 1)
    return fields.reshape(plane.shape[0], TILE_VALUES)


def _e2m1_codes(a: np.ndarray) -> np.ndarray:
    """Index of the E2M1 magnitude nearest to a (>= 0, <= 6), the even index on a tie."""
    dist = np.abs(a.astype(np.float64)[..., None] - E2M1)  # exact: a has 24 significant bits
    best = dist == dist.min(axis=-1, keepdims=True)
    preference = best * (2 - np.arange(E2M1.size) % 2)  # of two tied neighbours, exactly one is even
    return preference.argmax(axis=-1).astype(np.uint32)


def quantize_ref(x: np.ndarray, codec: str) -> np.ndarray:
    """Packed tiles (uint8, ceil(n / 2048) * tile bytes) of 1-D values (fp16 or fp32), zero-padded."""
    x = np.asarray(x).astype(np.float32).ravel()
    tiles = _tiles(x.size)
    padded = np.zeros(tiles * TILE_VALUES, dtype=np.float32)
    padded[: x.size] = x
    if codec == "fp":
        return padded.astype(np.float16).view(np.uint8)
    qmax = np.float32(QMAX[codec])
    blocks = padded.reshape(tiles, BLOCKS, BLOCK_VALUES)
    absmax = np.abs(blocks).max(axis=2)
    d16 = (absmax / qmax).astype(np.float16)  # IEEE division in float32, then round to fp16
    enc = np.float32(1.0) / (d16.astype(np.float32) + _EPS)
    y = blocks * enc[:, :, None]
    if codec == "fp4":
        y = np.clip(y, np.float32(-6.0), np.float32(6.0))
        u = _e2m1_codes(np.abs(y)) | ((y < 0).astype(np.uint32) << 3)
    else:
        q = np.rint(np.clip(y, -qmax, qmax - 1))
        u = (q + qmax).astype(np.uint32)
    u = u.reshape(tiles, TILE_VALUES)
    out = np.zeros((tiles, TILE_BYTES[codec]), dtype=np.uint8)
    shift = 0
    for bits, offset in PLANES[codec]:
        plane = _pack_plane(u >> shift, bits)
        out[:, offset: offset + plane.shape[1]] = plane
        shift += bits
    out[:, SCALES_AT[codec]:] = d16.astype("<f2").view(np.uint8).reshape(tiles, 2 * BLOCKS)
    return out.ravel()


def dequantize_ref(packed: np.ndarray, codec: str, n: int) -> np.ndarray:
    """The first n decoded values (float32, before rounding to the output dtype) of packed tiles."""
    tiles = _tiles(n)
    packed = np.asarray(packed, dtype=np.uint8).reshape(tiles, TILE_BYTES[codec])
    if codec == "fp":
        return packed.copy().view("<f2").astype(np.float32).ravel()[:n]
    u = np.zeros((tiles, TILE_VALUES), dtype=np.uint32)
    shift = 0
    for bits, offset in PLANES[codec]:
        u |= _unpack_plane(packed[:, offset: offset + TILE_VALUES * bits // 8], bits) << shift
        shift += bits
    d = packed[:, SCALES_AT[codec]:].copy().view("<f2").astype(np.float32)  # [tiles, 64]
    u = u.reshape(tiles, BLOCKS, BLOCK_VALUES)
    if codec == "fp4":
        mag = E2M1.astype(np.float32)[u & 7]
        q = np.where(u >> 3 != 0, -mag, mag)
    else:
        q = (u.astype(np.int32) - QMAX[codec]).astype(np.float32)
    return (q * d[:, :, None]).ravel()[:n]


def error_bound(x: torch.Tensor, codec: str, out_dtype: torch.dtype = torch.float16) -> torch.Tensor:
    """Largest |decoded - x| allowed per value (float64) for a round trip through codec into out_dtype.

    With D = absmax / qmax of the value's block (float64): integer codecs are off by at most half a step,
    0.5 D, except near the positive clip edge (x > (qmax - 1.5) D), where code qmax - 1 is the largest and the
    error is up to x - (qmax - 1) D (QuickReduce's asymmetric range [-qmax, qmax - 1]). FP4 is off by at most
    half the E2M1 gap around |x| / D: 0.25 D below 2, 0.5 D below 4, 1.0 D up to 6 (= absmax / 6). FP is off by
    the fp16 rounding of x. Slack terms: the fp16 rounding of the scale (2^-11 relative: 2^-10 more on every
    bound, and 2^-10 of absmax at the clip edges, which it moves), the 1e-7 added before the reciprocal and
    the fp32 roundings (|x| (1.1e-7 / D + 2^-22)), and the rounding of the output to out_dtype.
    Valid while the scales are fp16 normals (D >= 2^-14) and absmax < 65504.
    """
    x = x.to(torch.float64).flatten()
    out_rel = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8, torch.float32: 2.0**-24}[out_dtype]
    if codec == "fp":
        fp16_rel = 2.0**-11  # the FP codec carries fp16
        return x.abs() * (fp16_rel + out_rel * (1 + fp16_rel)) + 2.0**-25
    n = x.numel()
    pad = _tiles(n) * TILE_VALUES - n
    blocks = torch.nn.functional.pad(x, (0, pad)).view(-1, BLOCK_VALUES)
    absmax = blocks.abs().amax(dim=1, keepdim=True)
    qmax = QMAX[codec]
    step = absmax / qmax  # D
    safe = torch.where(step > 0, step, torch.ones_like(step))
    ratio = blocks / safe
    inner = 0.5 * step * (1 + 2.0**-10)
    scale_slack = absmax * 2.0**-10  # the fp16 scale may be 2^-11 below D: the clip edges move by that much
    if codec == "fp4":
        quant = torch.where(ratio.abs() < 2, 0.5, torch.where(ratio.abs() < 4, 1.0, 2.0)) * inner
    else:
        top = torch.maximum(inner, blocks - (qmax - 1) * step + scale_slack)
        quant = torch.where(ratio > qmax - 1.5, top, torch.where(ratio < 1 - qmax, inner + scale_slack, inner))
    slack = blocks.abs() * (1.1e-7 / safe + 2.0**-22)
    bound = quant + slack + (blocks.abs() + step) * out_rel
    bound = torch.where(step > 0, bound, torch.zeros_like(bound))  # an all-zero block decodes exactly
    return bound.flatten()[:n]
