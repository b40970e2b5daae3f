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

from kernels.norm import ref

__all__ = ["add_rms_norm", "rms_norm"]

# torch dtype -> the element type name the backend factories take.
DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
MAX_D = 16384
_DEVICE_BACKEND = {"cuda": "cuda", "npu": "asc"}


def _ops():
    import tilelang_ops  # deferred: tilelang_ops imports this module while it loads

    return tilelang_ops


def _span(t: torch.Tensor) -> tuple[int, int]:
    """[first byte, last byte + 1) that t's elements occupy."""
    start = t.data_ptr()
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return start, start + (last + 1) * t.element_size()


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.numel() == 0 or b.numel() == 0 or a.device != b.device:
        return False
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 < b1 and b0 < a1


def _check_x(name: str, x) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in DTYPES:
        raise TypeError(f"{name}: x has dtype {x.dtype}; expected one of {', '.join(map(str, DTYPES))}")
    if x.dim() != 2:
        raise ValueError(f"{name}: x must be 2-D (T, D), got shape {tuple(x.shape)}")
    if x.shape[1] > MAX_D:
        raise ValueError(f"{name}: x has width D = {x.shape[1]}; at most {MAX_D} is supported")
    if x.shape[1] > 1 and x.stride(1) != 1:
        raise ValueError(f"{name}: x's last dimension must be contiguous (stride 1), got strides {x.stride()}")
    if x.shape[0] > 1 and x.stride(0) < x.shape[1]:
        raise ValueError(f"{name}: x's row stride {x.stride(0)} is smaller than its width {x.shape[1]}")


def _check_like(name: str, arg: str, t, x: torch.Tensor, shape: tuple[int, ...]) -> None:
    """t must be a contiguous tensor of x's dtype and device with this shape."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: {arg} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != x.dtype:
        raise TypeError(f"{name}: {arg} has dtype {t.dtype}; expected {x.dtype} (x's dtype)")
    if tuple(t.shape) != shape:
        raise ValueError(f"{name}: {arg} must have shape {shape}, got {tuple(t.shape)}")
    if t.device != x.device:
        raise ValueError(f"{name}: {arg} is on {t.device} but x is on {x.device}")
    if not t.is_contiguous():
        raise ValueError(f"{name}: {arg} must be contiguous, got strides {t.stride()}")


def _check(name: str, x, residual, weight, eps, out) -> float:
    """Validates every argument (residual None for the plain norm); returns eps rounded to fp32."""
    _check_x(name, x)
    n, d = x.shape
    if residual is not None:
        _check_like(name, "residual", residual, x, (n, d))
    _check_like(name, "weight", weight, x, (d,))
    eps32 = ref.fp32_eps(eps, name)
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"{name}: out must be a torch.Tensor, got {type(out).__name__}")
        if tuple(out.shape) != (n, d) or out.dtype != x.dtype or out.device != x.device:
            raise ValueError(
                f"{name}: out must be {(n, d)} {x.dtype} on {x.device}, got {tuple(out.shape)} {out.dtype} on {out.device}"
            )
        if not out.is_contiguous():
            raise ValueError(f"{name}: out must be contiguous")
    if x.device.type != "cpu" and x.device.type not in _DEVICE_BACKEND:
        raise ValueError(f"{name}: tensors on {x.device} are not supported (cuda, npu or cpu)")
    # The kernels read the inputs while they write the outputs (and declare them non-aliasing).
    written = [("out", out), ("residual", residual)]
    operands = [("x", x), ("weight", weight), ("residual", residual)]
    for wname, w in written:
        for oname, o in operands:
            if w is not None and o is not None and wname != oname and _overlap(w, o):
                raise ValueError(f"{name}: {wname} overlaps {oname} in memory")
    return eps32


def _base_alignment(t: torch.Tensor) -> int:
    """Largest power of two (<= 16) dividing the data pointer: every operand's caps the vector width."""
    ptr = t.data_ptr()
    return 16 if ptr == 0 else min(16, ptr & -ptr)


def _dispatch_args(name: str, x: torch.Tensor, others: list[torch.Tensor]):
    """(tilelang_ops, x viewed for the kernel, x_stride, x_align); raises if the backend does not match."""
    tl = _ops()
    backend = _DEVICE_BACKEND[x.device.type]
    if tl.PLATFORM.tilelang_ops_backend != backend:
        raise ValueError(
            f"{name}: x is on {x.device} but tilelang_ops was built for backend {tl.PLATFORM.tilelang_ops_backend!r}"
        )
    n, d = x.shape
    # With one row the row stride is never used; declare it dense so one kernel serves.
    x_stride = x.stride(0) if n > 1 else d
    if n <= 1 and x.stride(0) != d:
        x = x.as_strided((n, d), (d, 1))
    align = min(_base_alignment(t) for t in [x, *others])
    return tl, x, x_stride, align


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, out: torch.Tensor | None = None
) -> torch.Tensor:
    eps32 = _check("rms_norm", x, None, weight, eps, out)
    n, d = x.shape
    y = out if out is not None else torch.empty((n, d), dtype=x.dtype, device=x.device)
    if n == 0 or d == 0:
        return y
    if x.device.type == "cpu":
        y.copy_(ref.rms_norm_ref(x, weight, eps32))
        return y
    tl, xk, x_stride, align = _dispatch_args("rms_norm", x, [y, weight])
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
    if x.device.type == "cpu":
        s, y_ref = ref.add_rms_norm_ref(x, residual, weight, eps32)
        residual.copy_(s)
        y.copy_(y_ref)
        return y
    tl, xk, x_stride, align = _dispatch_args("add_rms_norm", x, [y, weight, residual])
    kernel = tl.ops.add_rmsnorm_tl(d, DTYPES[x.dtype], eps32, x_stride, x_align=align)
    kernel(xk, residual, weight, y)
    return y
