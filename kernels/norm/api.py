"""Interface of `norm`: RMSNorm, plain and with a fused residual add. Validate, allocate, dispatch.

    y = tilelang_ops.rms_norm(x, weight)                      # y = x * rsqrt(mean(x^2) + eps) * weight
    y = tilelang_ops.rms_norm(x, weight, eps=1e-5, out=y)     # into a caller-owned (T, D) buffer
    y = tilelang_ops.add_rms_norm(x, residual, weight)        # residual <- x + residual; y = rms_norm(residual)

x         (T, D) bfloat16 | float16 | float32, 1 <= D <= 16384 (D == 0 is accepted and does nothing);
          rows may be strided (a view of a wider tensor) but the last dimension must be contiguous.
weight    (D,) contiguous, of x's dtype (one rule for every dtype: a float32 weight with bf16
          activations is rejected; cast it once at load time), on x's device.
residual  (T, D) contiguous, of x's dtype, on x's device. Updated in place with x + residual
          rounded to the dtype (exactly torch's `x + residual`); y is the norm of that rounded sum.
eps       a real number; it is rounded to fp32 (as torch does when it adds a Python float to an fp32
          tensor) and must be positive and finite there. Each distinct eps compiles its own kernel.
out       optional (T, D) contiguous tensor of x's dtype on x's device.
Returns y (T, D) contiguous. out and residual must not overlap x, weight or each other.

The arithmetic is fp32 (see kernels/norm/ref.py, the contract, for the order and for NaN/Inf rows:
they propagate within their row and never beyond it). CUDA tensors run the TileLang kernel of the
`cuda` backend (no host sync, CUDA-graph capturable); CPU tensors are served by the PyTorch reference,
so code written against this interface runs unchanged without an accelerator. Invalid arguments
raise TypeError or ValueError naming the argument before anything is written; T == 0 or D == 0
launches nothing.
"""

from __future__ import annotations

import torch

from kernels.interface import backend_ops, base_alignment, check_no_overlap, check_out, check_rows, check_tensor, dense_rows, is_host
from kernels.norm import ref

__all__ = ["add_rms_norm", "rms_norm"]

# torch dtype -> the element type name the backend factories take.
DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
MAX_D = 16384


def _check(name: str, x, residual, weight, eps, out) -> float:
    """Validates every argument (residual None for the plain norm); returns eps rounded to fp32."""
    check_rows(name, "x", x, DTYPES, MAX_D)
    n, d = x.shape
    if residual is not None:
        check_tensor(name, "residual", residual, dtypes=[x.dtype], shape=(n, d), like=x, contiguous=True)
    check_tensor(name, "weight", weight, dtypes=[x.dtype], shape=(d,), like=x, contiguous=True)
    eps32 = ref.fp32_eps(eps, name)
    check_out(name, "out", out, (n, d), x.dtype, x)
    # The kernels read the inputs while they write the outputs (and declare them non-aliasing).
    check_no_overlap(name, {"out": out, "residual": residual}, {"x": x, "weight": weight})
    return eps32


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, out: torch.Tensor | None = None
) -> torch.Tensor:
    eps32 = _check("rms_norm", x, None, weight, eps, out)
    n, d = x.shape
    y = out if out is not None else torch.empty((n, d), dtype=x.dtype, device=x.device)
    if n == 0 or d == 0:
        return y
    if is_host(x):
        y.copy_(ref.rms_norm_ref(x, weight, eps32))
        return y
    tl = backend_ops("rms_norm", x)
    xk, x_stride = dense_rows(x)
    align = base_alignment(xk, y, weight)
    kernel = tl.ops.rmsnorm_tl(d, DTYPES[x.dtype], eps32, x_stride, x_align=align)
    kernel(xk, weight, y)
    return y


def add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    eps32 = _check("add_rms_norm", x, residual, weight, eps, out)
    n, d = x.shape
    y = out if out is not None else torch.empty((n, d), dtype=x.dtype, device=x.device)
    if n == 0 or d == 0:
        return y
    if is_host(x):
        s, y_ref = ref.add_rms_norm_ref(x, residual, weight, eps32)
        residual.copy_(s)
        y.copy_(y_ref)
        return y
    tl = backend_ops("add_rms_norm", x)
    xk, x_stride = dense_rows(x)
    align = base_alignment(xk, y, weight, residual)
    kernel = tl.ops.add_rmsnorm_tl(d, DTYPES[x.dtype], eps32, x_stride, x_align=align)
    kernel(xk, residual, weight, y)
    return y
