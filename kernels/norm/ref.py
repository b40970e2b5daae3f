"""PyTorch reference for `norm`: RMSNorm, plain and with a fused residual add, optionally with an FP8
output. The contract.

    y = rms_norm_ref(x, weight, eps)                  # y = x * rsqrt(mean(x^2) + eps) * weight
    s, y = add_rms_norm_ref(x, residual, weight, eps) # s = x + residual; y = rms_norm_ref(s, weight, eps)
    q, scale, y = rms_norm_fp8_ref(x, weight, eps, group, ue8m0)
    s, q, scale, y = add_rms_norm_fp8_ref(x, residual, weight, eps, group, ue8m0)
    q, scale = quantize_fp8_ref(y, group, ue8m0)      # the FP8 step alone

x (T, D) bfloat16 | float16 | float32 (rows may be strided); weight (D,) of x's dtype. The arithmetic
is fp32 throughout, in this order:

    xf   = x widened to fp32 (exact)
    ms   = sum(xf * xf over the row) / D          fp32 sum, IEEE division
    r    = rsqrt(ms + eps)                        eps rounded to fp32
    y    = ((xf * r) * weight_fp32) rounded to x's dtype (nearest-even)

For the fused variant s = x + residual is rounded to the dtype first (torch's `x + residual`: fp32
sum, one rounding) and the norm is taken of the rounded s. A backend may sum the squares in another
(fixed) order and compute rsqrt and the mean within an fp32 ulp or two of these (torch itself uses
rsqrtf and multiplies by 1/D on CUDA): bf16/fp16 outputs then agree within 1 ULP, fp32 outputs
within a few ULP (the tests' bounds are in norm_test.py), and the residual sum is bit-exact.

Edge behaviour (IEEE arithmetic, nothing special-cased):
  * an all-zero row gives y = 0 (eps > 0 keeps r finite);
  * a row holding NaN gives an all-NaN row; a row holding +-Inf (and no NaN) has sum of squares
    inf, so r = 0: y is NaN where x is +-Inf and +-0 elsewhere. Non-finite values never leak into
    other rows;
  * the sum of squares is fp32: a row whose sum of squares exceeds the fp32 range (|x| around
    1e19 and above, reachable only with bf16/fp32 inputs) behaves like an Inf row (y = +-0), and
    squares below the fp32 subnormal range vanish (y = x * rsqrt(eps) * w).

FP8 output (e4m3, torch.float8_e4m3fn). y is the RMSNorm above, rounded to x's dtype; q quantises
exactly that rounded y, so a kernel's FP8 output equals quantising its own y (reduction error and
quantisation error stay separate). Each row is cut into groups of `group` consecutive elements
(16, 32, 64 or 128 dividing D, or D itself: one scale per token), and every group follows
kernels/quant/formats.py (the one definition of every rounding step):

    amax  = max |y| over the group, NaN ignored          formats.group_amax
    scale = max(amax, 448 * 2**-126) / 448               formats.group_scale (fp32 IEEE division)
    scale = next power of two >= scale, when ue8m0       (UE8M0: rounded up before quantising)
    inv   = 1 / scale                                    fp32 IEEE division, once per group
    q     = e4m3(y * inv)                                clamped to +-448, nearest-even, NaN kept

scale is (T, D / group) fp32 (a power of two when ue8m0). Defined edge behaviour, from the rules:
  * an all-zero group has scale 448 * 2**-126 / 448 = 2**-126 and q = 0;
  * a NaN row (y all NaN) has amax 0, so scale 2**-126, and q is NaN throughout;
  * a row holding +-Inf has y NaN at the Inf and +-0 elsewhere (above), so its groups have scale
    2**-126, q NaN where x was +-Inf and +-0 elsewhere. (An Inf in y itself, from an fp16
    overflow, gives its group scale Inf and inv 0: the group's finite values encode as +-0 and
    the Inf as NaN.)
The sign of an encoded NaN is not part of the contract (IEEE leaves a NaN result's sign open; GPUs
produce one canonical NaN): tests compare NaN codes as NaN. The scale layouts the interface offers
(row-major, or DeepGEMM's TMA-aligned column-major) are storage choices; the values are these.
"""

from __future__ import annotations

import math
import numbers
import struct

import torch

from kernels.quant import formats

# Group sizes of the per-group FP8 output (one scale per token is group = D): formats defines them
# for every quantising kernel.
FP8_GROUPS = formats.FP8_GROUPS


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    xf = x.float()
    ms = (xf * xf).sum(dim=-1, keepdim=True) / x.shape[-1]
    r = torch.rsqrt(ms + eps)
    return ((xf * r) * weight.float()).to(x.dtype)


def add_rms_norm_ref(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """(s, y): s = x + residual in x's dtype (what the kernel writes back), y = rms_norm_ref(s)."""
    s = x + residual
    return s, rms_norm_ref(s, weight, eps)


def fp32_eps(eps, name: str = "norm") -> float:
    """eps rounded to fp32 (what every backend adds). TypeError unless a real number; ValueError
    unless positive and finite in fp32. `name` prefixes the messages (the caller's function)."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"{name}: eps must be a real number, got {type(eps).__name__}")
    try:
        value = struct.unpack("<f", struct.pack("<f", float(eps)))[0]
    except OverflowError:
        value = math.inf
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name}: eps must be positive and finite in float32, got {eps!r}")
    return value


def fp8_group(d: int, group_size, name: str = "norm") -> int:
    """Elements per scale for `group_size` (None: one per token, i.e. d). TypeError naming group_size
    unless it is None or an int (not a bool); ValueError naming it unless it is one of FP8_GROUPS
    dividing d."""
    if group_size is None:
        return d
    # 128.0 == 128 would pass the membership test and reach torch's reshape as a float.
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise TypeError(f"{name}: group_size must be an int or None, got {type(group_size).__name__}")
    if group_size not in FP8_GROUPS:
        raise ValueError(f"{name}: group_size must be None (per token) or one of {FP8_GROUPS}, got {group_size!r}")
    if d % group_size:
        raise ValueError(f"{name}: group_size {group_size} does not divide the width {d}")
    return group_size


def quantize_fp8_ref(y: torch.Tensor, group: int, ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale): y (T, D) quantised to e4m3 per group of `group` elements (D % group == 0), scale
    (T, D / group) fp32 row-major, by the rules in the module docstring."""
    t, d = y.shape
    yg = y.float().reshape(t, d // group, group)
    scale = formats.group_scale(formats.group_amax(yg, dim=-1), formats.E4M3_MAX, ue8m0)
    inv = torch.ones_like(scale) / scale  # an IEEE division, as formats.py orders it
    q = formats.encode_e4m3(yg * inv[..., None]).reshape(t, d)
    return q, scale


def rms_norm_fp8_ref(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, group: int = 128, ue8m0: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, scale, y): y = rms_norm_ref(x) in x's dtype, (q, scale) = quantize_fp8_ref(y)."""
    y = rms_norm_ref(x, weight, eps)
    return (*quantize_fp8_ref(y, group, ue8m0), y)


def add_rms_norm_fp8_ref(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    group: int = 128,
    ue8m0: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(s, q, scale, y): s, y = add_rms_norm_ref(...), (q, scale) = quantize_fp8_ref(y)."""
    s, y = add_rms_norm_ref(x, residual, weight, eps)
    return (s, *quantize_fp8_ref(y, group, ue8m0), y)
