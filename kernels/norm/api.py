"""Interface of `norm`: RMSNorm, plain and with a fused residual add, optionally with an FP8 output.
Validate, allocate, dispatch.

    y = tilelang_ops.rms_norm(x, weight)                      # y = x * rsqrt(mean(x^2) + eps) * weight
    y = tilelang_ops.rms_norm(x, weight, eps=1e-5, out=y)     # into a caller-owned (T, D) buffer
    y = tilelang_ops.add_rms_norm(x, residual, weight)        # residual <- x + residual; y = rms_norm(residual)
    q, scale = tilelang_ops.rms_norm_fp8(x, weight)           # y quantised to e4m3, one scale per 128
    q, scale, y = tilelang_ops.add_rms_norm_fp8(x, residual, weight, group_size=None, ue8m0=True,
                                                scale_layout="tma_col", return_y=True)

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

FP8 output (rms_norm_fp8, add_rms_norm_fp8; keyword-only options):
group_size    16, 32, 64 or 128 dividing D (default 128), or None for one scale per token.
ue8m0         scales rounded up to a power of two before quantising (DeepGEMM's UE8M0 recipe);
              they are still stored as fp32.
scale_layout  "row": scale is (T, D / group) contiguous. "tma_col": DeepGEMM's TMA-aligned
              column-major layout, a (T, D / group) view with strides (1, T_pad), T_pad = T rounded
              up to a multiple of 4 (the storage holds D / group columns of T_pad; the entries of
              rows T..T_pad-1 are left unwritten).
return_y      also write and return the bf16 (x's dtype) y; q is the same either way.
out           optional (T, D) contiguous torch.float8_e4m3fn tensor for q.
scale_out     optional float32 (T, D / group) tensor in the chosen layout (contiguous for "row";
              strides (1, T_pad) for "tma_col", dimensions of size 1 exempt) for the scales.
y_out         optional (T, D) contiguous tensor of x's dtype for y; only with return_y.
Returns (q, scale), or (q, scale, y) with return_y. q and scale are exactly y (as returned)
quantised per group by kernels/quant/formats.py (see kernels/norm/ref.py for the rules and the
NaN/Inf/zero rows). No output may overlap an input or another output.

The arithmetic is fp32 (see kernels/norm/ref.py, the contract, for the order and for NaN/Inf rows:
they propagate within their row and never beyond it). CUDA tensors run the TileLang kernel of the
`cuda` backend (no host sync, CUDA-graph capturable; on sm_90+ a programmatic dependent launch,
kernels/tl_launch.py: it overlaps the kernel before it and waits on the device for it); CPU tensors
are served by the PyTorch reference, so code written against this interface runs unchanged without
an accelerator. Invalid arguments raise TypeError or ValueError naming the argument before anything
is written; T == 0 or D == 0 launches nothing.
"""

from __future__ import annotations

import torch

from kernels.interface import (
    backend_ops,
    base_alignment,
    check_choice,
    check_flag,
    check_no_overlap,
    check_out,
    check_rows,
    check_tensor,
    dense_rows,
    is_host,
    launch_options,
)
from kernels.norm import ref
from kernels.quant.formats import SCALE_LAYOUTS, empty_scales, scale_strides

__all__ = ["add_rms_norm", "add_rms_norm_fp8", "rms_norm", "rms_norm_fp8"]

# torch dtype -> the element type name the backend factories take.
DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
MAX_D = 16384
FP8 = torch.float8_e4m3fn


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
    kernel = tl.ops.rmsnorm_tl(d, DTYPES[x.dtype], eps32, x_stride, x_align=align, **launch_options(x))
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
    kernel = tl.ops.add_rmsnorm_tl(d, DTYPES[x.dtype], eps32, x_stride, x_align=align, **launch_options(x))
    kernel(xk, residual, weight, y)
    return y


def _check_scale_out(name: str, scale_out, n: int, groups: int, layout: str, like: torch.Tensor) -> None:
    check_out(name, "scale_out", scale_out, (n, groups), torch.float32, like, strides=scale_strides(n, layout))


def _fp8_options(name: str, d: int, group_size, ue8m0, scale_layout, return_y, y_out) -> int:
    """Validates the FP8 options; returns the group (elements per scale; d per token)."""
    group = ref.fp8_group(d, group_size, name)
    check_flag(name, "ue8m0", ue8m0)
    check_flag(name, "return_y", return_y)
    check_choice(name, "scale_layout", scale_layout, SCALE_LAYOUTS)
    if y_out is not None and not return_y:
        raise ValueError(f"{name}: y_out is given but return_y is False")
    return group


def _check_fp8(name, x, residual, weight, eps, group_size, ue8m0, scale_layout, return_y, out, scale_out, y_out):
    """Validates every argument of the FP8 functions; returns (eps rounded to fp32, group, groups)."""
    check_rows(name, "x", x, DTYPES, MAX_D)
    n, d = x.shape
    if residual is not None:
        check_tensor(name, "residual", residual, dtypes=[x.dtype], shape=(n, d), like=x, contiguous=True)
    check_tensor(name, "weight", weight, dtypes=[x.dtype], shape=(d,), like=x, contiguous=True)
    eps32 = ref.fp32_eps(eps, name)
    group = _fp8_options(name, d, group_size, ue8m0, scale_layout, return_y, y_out)
    groups = d // group if group else 0
    check_out(name, "out", out, (n, d), FP8, x)
    _check_scale_out(name, scale_out, n, groups, scale_layout, x)
    check_out(name, "y_out", y_out, (n, d), x.dtype, x)
    check_no_overlap(
        name, {"out": out, "scale_out": scale_out, "y_out": y_out, "residual": residual}, {"x": x, "weight": weight}
    )
    return eps32, group, groups


def _fp8_outputs(x, groups, scale_layout, return_y, out, scale_out, y_out):
    """(q, scale, y or None): the caller's buffers, or new ones (scale in the requested layout)."""
    n, d = x.shape
    q = out if out is not None else torch.empty((n, d), dtype=FP8, device=x.device)
    scale = scale_out if scale_out is not None else empty_scales(n, groups, scale_layout, x.device)
    y = None
    if return_y:
        y = y_out if y_out is not None else torch.empty((n, d), dtype=x.dtype, device=x.device)
    return q, scale, y


def _fp8_launch(name, x, residual, weight, eps32, group, ue8m0, scale_layout, q, scale, y):
    """Dispatches one FP8 kernel on x's device (n >= 1, d >= 1)."""
    tl = backend_ops(name, x)
    xk, x_stride = dense_rows(x)
    # The kernel moves q in vectors of as many bytes as x's vectors have elements: q's alignment
    # caps x's vector width at its own (in elements).
    operands = [t for t in (xk, weight, residual, y) if t is not None]
    align = min(base_alignment(*operands), base_alignment(q) * x.element_size(), 16)
    static = dict(ue8m0=ue8m0, scale_layout=scale_layout, with_y=y is not None, x_align=align)
    factory = tl.ops.rmsnorm_fp8_tl if residual is None else tl.ops.add_rmsnorm_fp8_tl
    kernel = factory(x.shape[1], DTYPES[x.dtype], eps32, x_stride, group, **static, **launch_options(x))
    # "tma_col" kernels take the (groups, T) transpose, whose row stride is T_pad.
    scale_k = scale if scale_layout == "row" else scale.t()
    inputs = [xk] if residual is None else [xk, residual]
    kernel(*inputs, weight, q, scale_k, *([] if y is None else [y]))


def rms_norm_fp8(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    group_size: int | None = 128,
    ue8m0: bool = False,
    scale_layout: str = "row",
    return_y: bool = False,
    out: torch.Tensor | None = None,
    scale_out: torch.Tensor | None = None,
    y_out: torch.Tensor | None = None,
):
    return _norm_fp8(
        "rms_norm_fp8", x, None, weight, eps, group_size, ue8m0, scale_layout, return_y, out, scale_out, y_out
    )


def add_rms_norm_fp8(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    group_size: int | None = 128,
    ue8m0: bool = False,
    scale_layout: str = "row",
    return_y: bool = False,
    out: torch.Tensor | None = None,
    scale_out: torch.Tensor | None = None,
    y_out: torch.Tensor | None = None,
):
    return _norm_fp8(
        "add_rms_norm_fp8", x, residual, weight, eps, group_size, ue8m0, scale_layout, return_y, out, scale_out, y_out
    )


def _norm_fp8(name, x, residual, weight, eps, group_size, ue8m0, scale_layout, return_y, out, scale_out, y_out):
    """Both FP8 functions (residual None: the plain norm): validate, allocate, then the reference on
    the host or the backend's kernel."""
    eps32, group, groups = _check_fp8(
        name, x, residual, weight, eps, group_size, ue8m0, scale_layout, return_y, out, scale_out, y_out
    )
    q, scale, y = _fp8_outputs(x, groups, scale_layout, return_y, out, scale_out, y_out)
    n, d = x.shape
    if n and d:
        if is_host(x):
            _fp8_reference(x, residual, weight, eps32, group, ue8m0, q, scale, y)
        else:
            _fp8_launch(name, x, residual, weight, eps32, group, ue8m0, scale_layout, q, scale, y)
    return (q, scale, y) if return_y else (q, scale)


def _fp8_reference(x, residual, weight, eps32, group, ue8m0, q, scale, y) -> None:
    """The reference's results copied into the outputs (and the residual sum into residual)."""
    if residual is None:
        q_ref, scale_ref, y_ref = ref.rms_norm_fp8_ref(x, weight, eps32, group, ue8m0)
    else:
        s, q_ref, scale_ref, y_ref = ref.add_rms_norm_fp8_ref(x, residual, weight, eps32, group, ue8m0)
        residual.copy_(s)
    q.copy_(q_ref)
    scale.copy_(scale_ref)
    if y is not None:
        y.copy_(y_ref)
