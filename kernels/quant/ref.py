"""PyTorch reference for `quant`: FP8 / FP4 quantisation and dequantisation. The contract.

Every rounding step is one of kernels/quant/formats.py (read its docstring first: amax, floor, scale,
UE8M0 rounding, e4m3 / e2m1 encodings, NaN and Inf). The arithmetic is fp32, IEEE, no fused
multiply-add; a kernel performing the same operations in the same order is bit-exact.

Inputs x (T, D) bfloat16 | float16 | float32 (rows may be strided, last dim contiguous); widened to
fp32 exactly. Dequantised outputs are bfloat16, rounded once (nearest-even) from fp32.

FP8 e4m3, per token group (g in 16, 32, 64, 128; per token: g = D; D % g == 0)
    q, scale = quant_fp8_ref(x, g, ue8m0)
    amax  = formats.group_amax over each group of g consecutive elements of a row
    scale = formats.group_scale(amax, 448, ue8m0)                 fp32 (T, D/g), row-major here
    q     = formats.encode_e4m3(x * (1 / scale))                  float8_e4m3fn (T, D)
    y     = dequant_fp8_ref(q, scale, g) = bf16(fp32(q) * scale)

  The interface also offers DeepGEMM's TMA-aligned column-major scale layout: a (T, D/g) tensor
  with strides (1, T_pad), T_pad = tma_aligned_rows(T) = T rounded up to a multiple of 4 (16 bytes
  of fp32). The values are the same; padding entries (rows T..T_pad-1) are never written.

FP8 e4m3, 128 x 128 blocks (weights; N, K need not be multiples of 128)
    q, scale = quant_fp8_block_ref(w, 128, ue8m0)
    amax over the valid elements of each block (a partial edge block uses only its elements),
    scale = formats.group_scale(amax, 448, ue8m0) fp32 (ceil(N/128), ceil(K/128)), q as above.
    dequant_fp8_block_ref(q, scale, 128) = bf16(fp32(q) * scale of the element's block)

FP4 e2m1, NVFP4 style: group 16, e4m3 scales, global fp32 scale gs ((1,) device tensor)
    packed, scale = quant_fp4_e4m3_ref(x, gs)
    amax  = formats.group_amax over each group of 16
    denom = 6.0 * gs                                             fp32, computed first
    s32   = max(amax, formats.amax_floor(6)) / denom             fp32 IEEE division
    s8    = formats.encode_e4m3(max(s32, 2**-9))                  RNE; NaN kept, so the lower bound
                                                                  2**-9 (the smallest e4m3
                                                                  subnormal, so s8 != 0) and the
                                                                  upper bound 448 are the clamp
    eff   = fp32(s8) * gs
    codes = formats.encode_e2m1(x * (1 / eff))
    packed = formats.pack_e2m1(codes)  uint8 (T, D/2), element 2i in the low nibble of byte i
    scale  = s8                         float8_e4m3fn (T, D/16)
    dequant_fp4_e4m3_ref(packed, scale, gs) = bf16((decode(code) * fp32(s8)) * gs)
  gs should be positive and finite; fp4_global_scale_ref(x) gives the usual choice
  max(amax(x), amax_floor(2688)) / 2688 (2688 = 6 * 448), computed with torch ops on x's device
  (no host sync). A NaN s32 (e.g. gs = Inf with an Inf in the group) gives s8 = NaN and all-zero
  codes; an Inf s32 clamps to 448.

FP4 e2m1, MX style: group 32, UE8M0 scales
    packed, scale = quant_fp4_ue8m0_ref(x)
    scale = formats.group_scale(amax, 6, ue8m0=True); codes = formats.encode_e2m1(x * (1 / scale))
    scale bytes = formats.ue8m0_exponent(scale)        uint8 (T, D/32): scale = 2 ** (byte - 127)
    dequant_fp4_ue8m0_ref(packed, scale) = bf16(decode(code) * 2 ** (byte - 127))

NaN / Inf (from formats.py): NaN is ignored by amax; a group holding +-Inf has an Inf scale: in FP8
its finite values become +-0 and its Inf/NaN values NaN; in FP4 (no NaN) NaN encodes as +0. In an
MX group holding +-Inf (scale byte 255) every code is 0 (+0): finite values scale to +-0, which
encode as code 0, and Inf/NaN values scale to NaN. For NVFP4, s32 = Inf clamps to 448.
1 / scale is an IEEE reciprocal (torch.reciprocal), once per group.
"""

from __future__ import annotations

import torch

from kernels.quant import formats
from kernels.quant.formats import FP8_GROUPS, tma_aligned_rows

__all__ = [
    "FP4_E4M3_GROUP",
    "FP4_UE8M0_GROUP",
    "FP8_GROUPS",
    "dequant_fp4_e4m3_ref",
    "dequant_fp4_ue8m0_ref",
    "dequant_fp8_block_ref",
    "dequant_fp8_ref",
    "fp4_global_scale_ref",
    "quant_fp4_e4m3_ref",
    "quant_fp4_ue8m0_ref",
    "quant_fp8_block_ref",
    "quant_fp8_ref",
    "tma_aligned_rows",
]

FP4_E4M3_GROUP = 16
FP4_UE8M0_GROUP = 32
# The smallest e4m3 subnormal: the lower clamp of an NVFP4 group scale (s8 is never 0).
_E4M3_MIN_SCALE = 2.0**-9
# amax of a whole tensor over which the NVFP4 global scale is taken: e2m1 max x e4m3 max.
_FP4_GLOBAL_MAX = formats.E2M1_MAX * formats.E4M3_MAX


def _groups(xf: torch.Tensor, g: int) -> torch.Tensor:
    """(T, D) -> (T, D/g, g) view of consecutive groups along the last dim."""
    t, d = xf.shape
    return xf.reshape(t, d // g, g)


def _f32(value: float, like: torch.Tensor) -> torch.Tensor:
    # A fill on like's device: no host-to-device copy, so the reference stays graph-capturable.
    return like.new_full((), value, dtype=torch.float32)


def quant_fp8_ref(x: torch.Tensor, group_size: int, ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(q (T, D) float8_e4m3fn, scale (T, D/g) fp32 row-major)."""
    xg = _groups(x.float(), group_size)
    scale = formats.group_scale(formats.group_amax(xg), formats.E4M3_MAX, ue8m0)
    q = formats.encode_e4m3(xg * torch.reciprocal(scale)[..., None])
    return q.reshape(x.shape), scale


def dequant_fp8_ref(q: torch.Tensor, scale: torch.Tensor, group_size: int) -> torch.Tensor:
    """bf16 (T, D) = fp32(q) * scale of the element's group, rounded once."""
    y = _groups(q.float(), group_size) * scale.float()[..., None]
    return y.reshape(q.shape).to(torch.bfloat16)


def _blocks(wf: torch.Tensor, block: int) -> torch.Tensor:
    """(N, K) -> (ceil(N/b), ceil(K/b), b, b), edges padded with zeros (which never raise an amax)."""
    n, k = wf.shape
    nb, kb = -(-n // block), -(-k // block)
    padded = torch.zeros((nb * block, kb * block), dtype=wf.dtype, device=wf.device)
    padded[:n, :k] = wf
    return padded.reshape(nb, block, kb, block).transpose(1, 2)


def _expand_blocks(scale: torch.Tensor, block: int, n: int, k: int) -> torch.Tensor:
    """(nb, kb) block values -> (N, K), each element getting its block's value."""
    return scale.repeat_interleave(block, 0).repeat_interleave(block, 1)[:n, :k]


def quant_fp8_block_ref(w: torch.Tensor, block: int = 128, ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(q (N, K) float8_e4m3fn, scale (ceil(N/b), ceil(K/b)) fp32)."""
    n, k = w.shape
    wf = w.float()
    amax = formats.group_amax(_blocks(wf, block).flatten(-2))
    scale = formats.group_scale(amax, formats.E4M3_MAX, ue8m0)
    q = formats.encode_e4m3(wf * _expand_blocks(torch.reciprocal(scale), block, n, k))
    return q, scale


def dequant_fp8_block_ref(q: torch.Tensor, scale: torch.Tensor, block: int = 128) -> torch.Tensor:
    n, k = q.shape
    return (q.float() * _expand_blocks(scale.float(), block, n, k)).to(torch.bfloat16)


def fp4_global_scale_ref(x: torch.Tensor) -> torch.Tensor:
    """(1,) fp32 on x's device: max(amax(x), amax_floor(2688)) / 2688, NaN ignored; no host sync.
    An empty x counts as amax 0."""
    flat = x.reshape(1, -1)
    if flat.shape[1] == 0:
        flat = torch.zeros((1, 1), dtype=torch.float32, device=x.device)
    amax = formats.group_amax(flat)
    return formats.group_scale(amax, _FP4_GLOBAL_MAX, ue8m0=False)


def _nvfp4_scales(amax: torch.Tensor, gs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(s8 float8_e4m3fn, eff fp32) of each group from its amax and the (1,) global scale."""
    denom = _f32(formats.E2M1_MAX, amax) * gs.float()
    s32 = torch.maximum(amax, _f32(formats.amax_floor(formats.E2M1_MAX), amax)) / denom
    # torch.clamp keeps NaN (as encode_e4m3 does); the upper bound 448 is encode_e4m3's clamp.
    s8 = formats.encode_e4m3(torch.clamp(s32, min=_E4M3_MIN_SCALE))
    return s8, s8.float() * gs.float()


def quant_fp4_e4m3_ref(x: torch.Tensor, global_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed uint8 (T, D/2), scale float8_e4m3fn (T, D/16)) for the (1,) fp32 global scale."""
    xg = _groups(x.float(), FP4_E4M3_GROUP)
    s8, eff = _nvfp4_scales(formats.group_amax(xg), global_scale)
    codes = formats.encode_e2m1(xg * torch.reciprocal(eff)[..., None])
    return formats.pack_e2m1(codes.reshape(x.shape)), s8


def dequant_fp4_e4m3_ref(packed: torch.Tensor, scale: torch.Tensor, global_scale: torch.Tensor) -> torch.Tensor:
    t, half = packed.shape
    values = _groups(formats.decode_e2m1(formats.unpack_e2m1(packed)), FP4_E4M3_GROUP)
    y = (values * scale.float()[..., None]) * global_scale.float()
    return y.reshape(t, 2 * half).to(torch.bfloat16)


def quant_fp4_ue8m0_ref(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed uint8 (T, D/2), scale bytes uint8 (T, D/32))."""
    xg = _groups(x.float(), FP4_UE8M0_GROUP)
    scale = formats.group_scale(formats.group_amax(xg), formats.E2M1_MAX, ue8m0=True)
    codes = formats.encode_e2m1(xg * torch.reciprocal(scale)[..., None])
    return formats.pack_e2m1(codes.reshape(x.shape)), formats.ue8m0_exponent(scale)


def dequant_fp4_ue8m0_ref(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    t, half = packed.shape
    values = _groups(formats.decode_e2m1(formats.unpack_e2m1(packed)), FP4_UE8M0_GROUP)
    y = values * formats.ue8m0_from_exponent(scale)[..., None]
    return y.reshape(t, 2 * half).to(torch.bfloat16)
