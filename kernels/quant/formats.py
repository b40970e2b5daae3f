"""Scale and element formats shared by every quantising kernel (quant, norm's FP8 output, KV cache).

This module is the contract for how a group of values becomes a scale and codes; each backend has
one TileLang transcription (kernels/quant/tl_formats.py for CUDA) and the references use these
functions, so there is one definition of every rounding step. All arithmetic is fp32, with IEEE
rounding and no fused multiply-add, so a kernel that performs the same operations in the same order
is bit-exact.

A group's scale, for an output format with largest finite value F (e4m3: 448, e2m1: 6):

    amax  = max |x| over the group, NaN ignored (the semantics of fmaxf), +-Inf included
    amax  = max(amax, F * 2**-126)              the floor: scale >= 2**-126 (normal), 1/scale finite
    scale = amax / F                            fp32 IEEE division
    scale = ue8m0_round_up(scale)               when UE8M0 is asked: the next power of two >= scale
    inv   = 1 / scale                           fp32 IEEE division, once per group
    code  = encode(x * inv)                     per element

Encodings:
  * e4m3 (torch.float8_e4m3fn): x * inv clamped to [-448, 448] (NaN stays NaN), then rounded to
    nearest-even. A group holding +-Inf has scale Inf and inv 0: its finite values encode as +-0,
    its Inf and NaN values as NaN (0x7F / 0xFF).
  * e2m1 (FP4, values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives): round to nearest, ties to
    the even code, magnitudes above 6 saturate to 6. The sign bit is set when x * inv < 0 (so a
    small negative value encodes as -0, code 8). NaN encodes as +0 (code 0): FP4 has no NaN.
    Two codes per byte, the even-indexed element in the low nibble.

Scale storage:
  * fp32 scales hold `scale` itself (a power of two when UE8M0 was asked);
  * UE8M0 bytes (FP4 group-32, the MX convention) hold the biased exponent of the power-of-two
    scale: scale = 2 ** (byte - 127). ue8m0_round_up keeps scales normal, so bytes are 1..254
    (255 only for an Inf group, whose scale is Inf).

Scale layouts (fp32 scales of a (T, D) tensor, G = D / group per row):
  * "row": a contiguous (T, G) tensor;
  * "tma_col": DeepGEMM's TMA-aligned column-major layout, a (T, G) view with strides (1, T_pad) of
    a (G, T_pad) buffer, T_pad = tma_aligned_rows(T) (T rounded up to 4 fp32 = 16 bytes); the
    padding rows T..T_pad-1 are never written.

Dequantisation multiplies each decoded value by its scale(s) in fp32 and rounds once to the output
dtype.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "E2M1_MAX",
    "E4M3_MAX",
    "FP8_GROUPS",
    "SCALE_LAYOUTS",
    "amax_floor",
    "decode_e2m1",
    "encode_e2m1",
    "empty_scales",
    "encode_e4m3",
    "group_amax",
    "group_scale",
    "pack_e2m1",
    "scale_strides",
    "tma_aligned_rows",
    "ue8m0_exponent",
    "ue8m0_from_exponent",
    "ue8m0_round_up",
    "ue8m0_split",
    "unpack_e2m1",
]

E4M3_MAX = 448.0
E2M1_MAX = 6.0
# Elements that share one FP8 scale along a row (besides one scale per token).
FP8_GROUPS = (16, 32, 64, 128)
SCALE_LAYOUTS = ("row", "tma_col")
# DeepGEMM pads the token dimension of column-major scales to 16 bytes (4 fp32) for TMA.
_TMA_ALIGN_ROWS = 4

# Decision boundaries between neighbouring e2m1 magnitudes (0, 0.5, 1, 1.5, 2, 3, 4, 6), with the
# code a tie goes to (the even one): (boundary, tie rounds up).
_E2M1_BOUNDARIES = ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False), (3.5, True), (5.0, False))


def amax_floor(fmt_max: float) -> float:
    """The smallest amax a scale is computed from: fmt_max * 2**-126 (exact in fp32)."""
    return fmt_max * 2.0**-126


def ue8m0_split(fmt_max: float) -> tuple[int, int]:
    """(p, m) with fmt_max = (1 + m / 2**23) * 2**p: what a kernel needs to take a UE8M0 scale from
    the exponent bits of max(amax, floor) instead of dividing. RN(a / fmt_max) <= 2**k exactly when
    a <= fmt_max * 2**k, since no fp32 lies between fmt_max * 2**k and the quotient's rounding
    boundary fmt_max * 2**k * (1 + 2**-24); so for finite a the scale's byte is a's biased exponent
    less p, plus one when a's mantissa field exceeds m (Inf: 255)."""
    mantissa, exponent = math.frexp(fmt_max)
    m = (2 * mantissa - 1) * 2**23
    if m != int(m):
        raise ValueError(f"fmt_max {fmt_max} has more than 24 significant bits")
    return exponent - 1, int(m)


def group_amax(xf: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """fp32 max |x| along dim, NaN ignored (an all-NaN group gives 0)."""
    a = xf.float().abs()
    # (torch.nan_to_num would also turn +Inf into the largest finite value: Inf must stay Inf.)
    return torch.where(torch.isnan(a), torch.zeros((), dtype=a.dtype, device=a.device), a).amax(dim=dim)


def ue8m0_round_up(scale: torch.Tensor) -> torch.Tensor:
    """The smallest power of two >= scale, for positive normal fp32 scales (Inf stays Inf)."""
    bits = scale.float().contiguous().view(torch.int32)
    # Adding a mantissa of all ones carries into the exponent unless the mantissa is already zero.
    rounded = (bits + 0x007FFFFF) & ~0x007FFFFF
    return rounded.view(torch.float32)


def group_scale(amax: torch.Tensor, fmt_max: float, ue8m0: bool) -> torch.Tensor:
    """fp32 scale of each group from its amax, as the module docstring orders it (no host sync)."""
    # A device tensor divisor, not a Python float: torch on CUDA turns division by a host scalar
    # into multiplication by its reciprocal, which is not the IEEE quotient.
    divisor = amax.new_full((), fmt_max, dtype=torch.float32)
    scale = amax.float().clamp_min(amax_floor(fmt_max)) / divisor
    return ue8m0_round_up(scale) if ue8m0 else scale


def ue8m0_exponent(scale: torch.Tensor) -> torch.Tensor:
    """uint8 biased exponent of power-of-two fp32 scales (scale == 2 ** (byte - 127))."""
    return ((scale.float().contiguous().view(torch.int32) >> 23) & 0xFF).to(torch.uint8)


def ue8m0_from_exponent(byte: torch.Tensor) -> torch.Tensor:
    """fp32 power of two 2 ** (byte - 127) from uint8 exponents (byte 0, never produced, decodes to 0)."""
    return (byte.to(torch.int32) << 23).view(torch.float32)


def encode_e4m3(v: torch.Tensor) -> torch.Tensor:
    """fp32 values (already multiplied by inv) -> torch.float8_e4m3fn, clamped to +-448, NaN kept."""
    v = v.float()
    clamped = torch.where(torch.isnan(v), v, v.clamp(-E4M3_MAX, E4M3_MAX))
    return clamped.to(torch.float8_e4m3fn)


def encode_e2m1(v: torch.Tensor) -> torch.Tensor:
    """fp32 values (already multiplied by inv) -> uint8 codes 0..15 (bit 3 the sign), one per value."""
    v = v.float()
    a = v.abs()
    code = torch.zeros(v.shape, dtype=torch.uint8, device=v.device)
    for boundary, tie_up in _E2M1_BOUNDARIES:
        code += (a >= boundary if tie_up else a > boundary).to(torch.uint8)
    return code | ((v < 0).to(torch.uint8) << 3)


def decode_e2m1(code: torch.Tensor) -> torch.Tensor:
    """uint8 codes 0..15 -> fp32 values, built from the bits (no lookup table to copy to the device):
    magnitude codes 2..7 are 2 ** ((m >> 1) - 1) * (1 + (m & 1) / 2), code 1 is 0.5, code 0 zero."""
    c = code.to(torch.int32)
    m = c & 7
    normal = (((m >> 1) + 126) << 23) | ((m & 1) << 22)
    magnitude = torch.where(m >= 2, normal, torch.where(m == 1, normal.new_full((), 126 << 23), 0))
    return (magnitude | ((c >> 3) << 31)).view(torch.float32)


def pack_e2m1(code: torch.Tensor) -> torch.Tensor:
    """(..., 2n) uint8 codes -> (..., n) bytes, element 2i in the low nibble of byte i."""
    return code[..., 0::2] | (code[..., 1::2] << 4)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """(..., n) bytes -> (..., 2n) uint8 codes (inverse of pack_e2m1)."""
    return torch.stack((packed & 0xF, packed >> 4), dim=-1).flatten(-2)


def tma_aligned_rows(t: int) -> int:
    """T_pad of the "tma_col" scale layout: t rounded up to a multiple of 4."""
    return -(-t // _TMA_ALIGN_ROWS) * _TMA_ALIGN_ROWS


def scale_strides(t: int, layout: str) -> tuple[int, int] | None:
    """Strides a (t, G) fp32 scale tensor must have: None for "row" (contiguous), (1, T_pad) for "tma_col"."""
    return None if layout == "row" else (1, tma_aligned_rows(t))


def empty_scales(t: int, groups: int, layout: str, device) -> torch.Tensor:
    """An uninitialised (t, groups) fp32 scale tensor in `layout`."""
    if layout == "row":
        return torch.empty((t, groups), dtype=torch.float32, device=device)
    return torch.empty((groups, tma_aligned_rows(t)), dtype=torch.float32, device=device).t()[:t]
