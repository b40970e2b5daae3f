"""PyTorch reference for `norm`: RMSNorm, plain and with a fused residual add. The contract.

    y = rms_norm_ref(x, weight, eps)                  # y = x * rsqrt(mean(x^2) + eps) * weight
    s, y = add_rms_norm_ref(x, residual, weight, eps) # s = x + residual; y = rms_norm_ref(s, weight, eps)

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
"""

from __future__ import annotations

import math
import numbers
import struct

import torch


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
