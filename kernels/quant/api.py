"""Interface of `quant`: FP8 / FP4 quantisation and dequantisation to bf16. Validate, allocate, dispatch.

    q, s = tilelang_ops.quant_fp8(x, 128)                            # per-token-group e4m3, fp32 scales
    q, s = tilelang_ops.quant_fp8(x, None, ue8m0=True)               # per token, power-of-two scales
    q, s = tilelang_ops.quant_fp8(x, 128, scale_layout="tma_col")    # DeepGEMM's scale layout
    y    = tilelang_ops.dequant_fp8(q, s, 128)                       # bf16; the scale layout is read
                                                                     # from s's strides
    q, s = tilelang_ops.quant_fp8_block(w)                           # 128 x 128 blocks (weights)
    y    = tilelang_ops.dequant_fp8_block(q, s)
    gs   = tilelang_ops.fp4_global_scale(x)                          # (1,) fp32, on x's device
    p, s = tilelang_ops.quant_fp4(x, global_scale=gs)                # NVFP4: group 16, e4m3 scales
    p, s = tilelang_ops.quant_fp4(x, scale_format="ue8m0")           # MX: group 32, UE8M0 bytes
    y    = tilelang_ops.dequant_fp4(p, s, global_scale=gs)           # format read from s's dtype

x, w         (T, D) bfloat16 | float16 | float32, D >= 1; rows may be strided (a view of a wider
             tensor) but the last dimension must be contiguous.
group_size   16, 32, 64 or 128 (must divide D), or None for one scale per token (quant_fp8:
             D <= 16384 on an accelerator).
q            (T, D) float8_e4m3fn, contiguous. FP8 scales: fp32 (T, D/g), row-major ("row") or
             DeepGEMM's TMA-aligned column-major layout ("tma_col": strides (1, T_pad), T_pad = T
             rounded up to 4; the padding is never written). Block scales: (ceil(N/128),
             ceil(K/128)) fp32, contiguous.
packed       (T, D/2) uint8, contiguous, two e2m1 codes per byte, the even element in the low
             nibble; its FP4 scales contiguous too.
FP4 scales   NVFP4: (T, D/16) float8_e4m3fn with a (1,) fp32 global scale tensor on x's device
             (no host sync; fp4_global_scale gives the usual amax(x) / (6 * 448), an x without
             elements counting as amax 0). MX: (T, D/32)
             uint8 UE8M0 exponents (scale = 2 ** (byte - 127)).
out, scale_out  optional caller buffers: contiguous (T, D) / (T, D/2) outputs of the output dtype;
             scale_out of the scale dtype with the layout's strides (a smaller buffer is rejected).
Dequantised outputs are (T, D) bfloat16 contiguous.

The arithmetic (and NaN / Inf behaviour) is kernels/quant/ref.py's, bit for bit. CUDA tensors run the
TileLang kernels of the `cuda` backend (no host sync, CUDA-graph capturable; on sm_90+ programmatic
dependent launches, kernels/tl_launch.py); CPU tensors are served by the reference. Invalid arguments raise TypeError or ValueError naming the argument before
anything is written; T == 0 launches nothing.
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
from kernels.quant import ref
from kernels.quant.formats import SCALE_LAYOUTS, empty_scales, scale_strides, tma_aligned_rows

__all__ = [
    "dequant_fp4",
    "dequant_fp8",
    "dequant_fp8_block",
    "fp4_global_scale",
    "quant_fp4",
    "quant_fp8",
    "quant_fp8_block",
]

# torch dtype -> the element type name the backend factories take.
DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
FP8 = torch.float8_e4m3fn
SCALE_FORMATS = ("e4m3", "ue8m0")
MAX_TOKEN_D = 16384
# Per-token-group FP8 batches up to this many rows take the CUDA decode launch shape (one vector a
# thread; H200, 7168 bf16: 1.82 / 1.89 / 2.11 / 3.35 us at T 1 / 8 / 64 / 256 against 2.25 / 2.35 /
# 2.54 / 3.49 in the shipped shape, and 7.71 against 7.21 at T 1024: kernels/quant/PERF.md).
DECODE_MAX_ROWS = 256
BLOCK = 128


def _check_group(name: str, group_size, d: int) -> int:
    """The group of a validated group_size argument (None: the row)."""
    if group_size is None:
        return d
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise TypeError(f"{name}: group_size must be an int or None, got {type(group_size).__name__}")
    if group_size not in ref.FP8_GROUPS:
        raise ValueError(f"{name}: group_size must be one of {ref.FP8_GROUPS} or None, got {group_size}")
    if d % group_size:
        raise ValueError(f"{name}: group_size {group_size} does not divide D {d}")
    return group_size


def _check_block(name: str, block) -> None:
    if block != BLOCK or isinstance(block, bool):
        raise ValueError(f"{name}: block must be {BLOCK}, got {block!r}")


def _check_width(name: str, arg: str, x) -> None:
    if x.shape[1] < 1:
        raise ValueError(f"{name}: {arg} must have at least one column, got shape {tuple(x.shape)}")


def _check_scale_out(name: str, arg: str, s, shape: tuple[int, int], dtype, like, strides: tuple[int, int] | None) -> None:
    """A caller's scale buffer: exactly `shape` and `dtype` on like's device, contiguous (strides
    None) or with exactly these strides (where a dimension has more than one element; an empty
    buffer has no layout to check)."""
    if s is None:
        return
    check_tensor(name, arg, s, dtypes=[dtype], dim=2, like=like)
    if tuple(s.shape) != shape:
        small = s.shape[0] < shape[0] or s.shape[1] < shape[1]
        what = "is too small" if small else "has the wrong shape"
        raise ValueError(f"{name}: {arg} {what}: expected {shape}, got {tuple(s.shape)}")
    check_out(name, arg, s, shape, dtype, like, strides)


def _flat_col(scale: torch.Tensor) -> torch.Tensor:
    """The storage a TMA-aligned column-major (t, g) scale tensor spans, as a 1-D view."""
    t, g = scale.shape
    return scale.as_strided(((g - 1) * tma_aligned_rows(t) + t,), (1,))


def _scale_layout_of(name: str, scale: torch.Tensor, t: int, groups: int) -> str:
    """'row' or 'tma_col' from a (t, groups) fp32 scale tensor's strides (either, when they coincide)."""
    if scale.is_contiguous():
        return "row"
    want = scale_strides(t, "tma_col")
    if all(n <= 1 or st == w for n, st, w in zip(scale.shape, scale.stride(), want)):
        return "tma_col"
    raise ValueError(f"{name}: scale must be row-major or have strides {want} (TMA-aligned columns), got {scale.stride()}")


def quant_fp8(
    x: torch.Tensor,
    group_size: int | None = 128,
    *,
    ue8m0: bool = False,
    scale_layout: str = "row",
    out: torch.Tensor | None = None,
    scale_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    name = "quant_fp8"
    check_rows(name, "x", x, DTYPES)
    _check_width(name, "x", x)
    t, d = x.shape
    group = _check_group(name, group_size, d)
    token = group_size is None
    if token and d > MAX_TOKEN_D and not is_host(x):
        raise ValueError(f"{name}: x has width {d}; per-token scales support at most {MAX_TOKEN_D}")
    check_flag(name, "ue8m0", ue8m0)
    check_choice(name, "scale_layout", scale_layout, SCALE_LAYOUTS)
    groups = d // group
    check_out(name, "out", out, (t, d), FP8, x)
    _check_scale_out(name, "scale_out", scale_out, (t, groups), torch.float32, x, scale_strides(t, scale_layout))
    check_no_overlap(name, {"out": out, "scale_out": scale_out}, {"x": x})
    q = out if out is not None else torch.empty((t, d), dtype=FP8, device=x.device)
    scale = scale_out if scale_out is not None else empty_scales(t, groups, scale_layout, x.device)
    if t == 0:
        return q, scale
    if is_host(x):
        q_ref, s_ref = ref.quant_fp8_ref(x, group, ue8m0)
        q.copy_(q_ref)
        scale.copy_(s_ref)
        return q, scale
    tl = backend_ops(name, x)
    xk, x_stride = dense_rows(x)
    align = base_alignment(xk, q)
    scale_arg = scale if scale_layout == "row" else _flat_col(scale)
    if token:
        kernel = tl.ops.quant_fp8_token_tl(d, DTYPES[x.dtype], ue8m0, scale_layout, x_stride, x_align=align, **launch_options(x))
    else:
        factory = tl.ops.quant_fp8_group_tl
        if t <= DECODE_MAX_ROWS:
            try:
                factory = tl.ops.quant_fp8_group_decode_tl
            except LookupError:  # a backend without the decode shape serves every batch with one
                pass
        kernel = factory(d, group, DTYPES[x.dtype], ue8m0, scale_layout, x_stride, x_align=align, **launch_options(x))
    kernel(xk, q, scale_arg)
    return q, scale


def dequant_fp8(
    q: torch.Tensor, scale: torch.Tensor, group_size: int | None = 128, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    name = "dequant_fp8"
    check_tensor(name, "q", q, dtypes=[FP8], dim=2, contiguous=True)
    check_rows(name, "q", q, [FP8])
    _check_width(name, "q", q)
    t, d = q.shape
    group = _check_group(name, group_size, d)
    groups = d // group
    check_tensor(name, "scale", scale, dtypes=[torch.float32], dim=2, like=q)
    if tuple(scale.shape) != (t, groups):
        raise ValueError(f"{name}: scale must have shape {(t, groups)}, got {tuple(scale.shape)}")
    layout = _scale_layout_of(name, scale, t, groups)
    check_out(name, "out", out, (t, d), torch.bfloat16, q)
    check_no_overlap(name, {"out": out}, {"q": q, "scale": scale})
    y = out if out is not None else torch.empty((t, d), dtype=torch.bfloat16, device=q.device)
    if t == 0:
        return y
    if is_host(q):
        y.copy_(ref.dequant_fp8_ref(q, scale, group))
        return y
    tl = backend_ops(name, q)
    scale_arg = scale if layout == "row" else _flat_col(scale)
    kernel = tl.ops.dequant_fp8_tl(d, group, layout, 1, x_align=base_alignment(q, y), **launch_options(q))
    kernel(q, scale_arg, y)
    return y


def quant_fp8_block(
    w: torch.Tensor,
    block: int = BLOCK,
    *,
    ue8m0: bool = False,
    out: torch.Tensor | None = None,
    scale_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    name = "quant_fp8_block"
    check_rows(name, "w", w, DTYPES)
    _check_width(name, "w", w)
    _check_block(name, block)
    check_flag(name, "ue8m0", ue8m0)
    n, k = w.shape
    shape = (-(-n // BLOCK), -(-k // BLOCK))
    check_out(name, "out", out, (n, k), FP8, w)
    _check_scale_out(name, "scale_out", scale_out, shape, torch.float32, w, None)
    check_no_overlap(name, {"out": out, "scale_out": scale_out}, {"w": w})
    q = out if out is not None else torch.empty((n, k), dtype=FP8, device=w.device)
    scale = scale_out if scale_out is not None else torch.empty(shape, dtype=torch.float32, device=w.device)
    if n == 0:
        return q, scale
    if is_host(w):
        q_ref, s_ref = ref.quant_fp8_block_ref(w, BLOCK, ue8m0)
        q.copy_(q_ref)
        scale.copy_(s_ref)
        return q, scale
    tl = backend_ops(name, w)
    wk, w_stride = dense_rows(w)
    kernel = tl.ops.quant_fp8_block_tl(k, DTYPES[w.dtype], ue8m0, w_stride, x_align=base_alignment(wk, q), **launch_options(w))
    kernel(wk, q, scale)
    return q, scale


def dequant_fp8_block(
    q: torch.Tensor, scale: torch.Tensor, block: int = BLOCK, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    name = "dequant_fp8_block"
    check_tensor(name, "q", q, dtypes=[FP8], dim=2, contiguous=True)
    check_rows(name, "q", q, [FP8])
    _check_width(name, "q", q)
    _check_block(name, block)
    n, k = q.shape
    shape = (-(-n // BLOCK), -(-k // BLOCK))
    check_tensor(name, "scale", scale, dtypes=[torch.float32], shape=shape, like=q, contiguous=True)
    check_out(name, "out", out, (n, k), torch.bfloat16, q)
    check_no_overlap(name, {"out": out}, {"q": q, "scale": scale})
    y = out if out is not None else torch.empty((n, k), dtype=torch.bfloat16, device=q.device)
    if n == 0:
        return y
    if is_host(q):
        y.copy_(ref.dequant_fp8_block_ref(q, scale, BLOCK))
        return y
    tl = backend_ops(name, q)
    kernel = tl.ops.dequant_fp8_tl(k, BLOCK, "row", BLOCK, x_align=base_alignment(q, y), **launch_options(q))
    kernel(q, scale, y)
    return y


def fp4_global_scale(x: torch.Tensor) -> torch.Tensor:
    """(1,) fp32 on x's device: max(amax(x), floor) / (6 * 448), NaN ignored; torch ops, no host sync."""
    check_rows("fp4_global_scale", "x", x, DTYPES)
    return ref.fp4_global_scale_ref(x).reshape(1)


def _fp4_group(scale_format: str) -> tuple[int, torch.dtype]:
    return (ref.FP4_E4M3_GROUP, FP8) if scale_format == "e4m3" else (ref.FP4_UE8M0_GROUP, torch.uint8)


def _check_global_scale(name: str, scale_format: str, gs, like) -> None:
    if scale_format == "ue8m0":
        if gs is not None:
            raise ValueError(f"{name}: global_scale must be None for scale_format 'ue8m0'")
        return
    if gs is None:
        raise ValueError(f"{name}: global_scale is required for scale_format 'e4m3' (see fp4_global_scale)")
    check_tensor(name, "global_scale", gs, dtypes=[torch.float32], shape=(1,), like=like)


def quant_fp4(
    x: torch.Tensor,
    *,
    scale_format: str = "e4m3",
    global_scale: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    scale_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    name = "quant_fp4"
    check_rows(name, "x", x, DTYPES)
    _check_width(name, "x", x)
    check_choice(name, "scale_format", scale_format, SCALE_FORMATS)
    group, scale_dtype = _fp4_group(scale_format)
    t, d = x.shape
    if d % group:
        raise ValueError(f"{name}: x has width {d}, not a multiple of the group size {group} of scale_format {scale_format!r}")
    _check_global_scale(name, scale_format, global_scale, x)
    check_out(name, "out", out, (t, d // 2), torch.uint8, x)
    _check_scale_out(name, "scale_out", scale_out, (t, d // group), scale_dtype, x, None)
    check_no_overlap(name, {"out": out, "scale_out": scale_out}, {"x": x, "global_scale": global_scale})
    packed = out if out is not None else torch.empty((t, d // 2), dtype=torch.uint8, device=x.device)
    scale = scale_out if scale_out is not None else torch.empty((t, d // group), dtype=scale_dtype, device=x.device)
    if t == 0:
        return packed, scale
    nvfp4 = scale_format == "e4m3"
    if is_host(x):
        p_ref, s_ref = ref.quant_fp4_e4m3_ref(x, global_scale) if nvfp4 else ref.quant_fp4_ue8m0_ref(x)
        packed.copy_(p_ref)
        scale.copy_(s_ref)
        return packed, scale
    tl = backend_ops(name, x)
    xk, x_stride = dense_rows(x)
    align = base_alignment(xk, packed)
    if nvfp4:
        tl.ops.quant_fp4_e4m3_tl(d, DTYPES[x.dtype], x_stride, x_align=align, **launch_options(x))(xk, global_scale, packed, scale)
    else:
        tl.ops.quant_fp4_ue8m0_tl(d, DTYPES[x.dtype], x_stride, x_align=align, **launch_options(x))(xk, packed, scale)
    return packed, scale


def dequant_fp4(
    packed: torch.Tensor,
    scale: torch.Tensor,
    *,
    global_scale: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    name = "dequant_fp4"
    check_tensor(name, "packed", packed, dtypes=[torch.uint8], dim=2, contiguous=True)
    check_rows(name, "packed", packed, [torch.uint8])
    _check_width(name, "packed", packed)
    check_tensor(name, "scale", scale, dtypes=[FP8, torch.uint8], dim=2, like=packed, contiguous=True)
    scale_format = "e4m3" if scale.dtype == FP8 else "ue8m0"
    group, _ = _fp4_group(scale_format)
    t, half = packed.shape
    d = 2 * half
    if d % group:
        raise ValueError(f"{name}: packed holds {d} values per row, not a multiple of the group size {group}")
    if tuple(scale.shape) != (t, d // group):
        raise ValueError(f"{name}: scale must have shape {(t, d // group)}, got {tuple(scale.shape)}")
    _check_global_scale(name, scale_format, global_scale, packed)
    check_out(name, "out", out, (t, d), torch.bfloat16, packed)
    check_no_overlap(name, {"out": out}, {"packed": packed, "scale": scale, "global_scale": global_scale})
    y = out if out is not None else torch.empty((t, d), dtype=torch.bfloat16, device=packed.device)
    if t == 0:
        return y
    if is_host(packed):
        y.copy_(ref.dequant_fp4_e4m3_ref(packed, scale, global_scale) if global_scale is not None else ref.dequant_fp4_ue8m0_ref(packed, scale))
        return y
    tl = backend_ops(name, packed)
    align = base_alignment(packed, y)
    if global_scale is not None:
        tl.ops.dequant_fp4_e4m3_tl(d, x_align=align, **launch_options(packed))(packed, scale, global_scale, y)
    else:
        tl.ops.dequant_fp4_ue8m0_tl(d, x_align=align, **launch_options(packed))(packed, scale, y)
    return y
