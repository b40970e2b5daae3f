"""Interface of `gather`: validate, allocate, dispatch.

    y = tilelang_ops.gather(x, index)            # y[i] = x[index[i]], a zero row for invalid index
    tilelang_ops.gather(x, index, out=y)         # into a caller-owned (m, D) contiguous buffer

x      (n, D) bfloat16 | float16 | float32 | float8_e4m3fn | uint8 (packed FP4) | int32; rows may be
       strided (a view of a wider tensor) but the last dimension must be contiguous.
index  (m,) int32 or int64, contiguous, on x's device. index < 0 or >= n gives a zero row; such
       indices never cause a read.
out    optional (m, D) contiguous tensor of x's dtype on x's device.
Returns y (m, D) contiguous.

CUDA tensors run the TileLang kernel of the `cuda` backend (no host sync, CUDA-graph capturable);
CPU tensors are served by the PyTorch reference (`kernels.gather.ref`), so code written against this
interface runs unchanged on a machine without an accelerator. Invalid arguments raise TypeError or
ValueError naming the argument before anything is written; m == 0 or D == 0 launches nothing.
"""

from __future__ import annotations

import torch

from kernels.gather import ref

__all__ = ["gather"]

# torch dtype -> the element type name the backend factories take.
DTYPES = {
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
    torch.float32: "float32",
    torch.float8_e4m3fn: "float8_e4m3",
    torch.uint8: "uint8",
    torch.int32: "int32",
}
INDEX_DTYPES = {torch.int32: "int32", torch.int64: "int64"}
_DEVICE_BACKEND = {"cuda": "cuda", "npu": "asc"}


def _ops():
    import tilelang_ops  # deferred: tilelang_ops imports this module while it loads

    return tilelang_ops


def _check(x: torch.Tensor, index: torch.Tensor, out: torch.Tensor | None) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"gather: x must be a torch.Tensor, got {type(x).__name__}")
    if not isinstance(index, torch.Tensor):
        raise TypeError(f"gather: index must be a torch.Tensor, got {type(index).__name__}")
    if x.dtype not in DTYPES:
        raise TypeError(f"gather: x has dtype {x.dtype}; expected one of {', '.join(map(str, DTYPES))}")
    if index.dtype not in INDEX_DTYPES:
        raise TypeError(f"gather: index has dtype {index.dtype}; expected torch.int32 or torch.int64")
    if x.dim() != 2:
        raise ValueError(f"gather: x must be 2-D (n, D), got shape {tuple(x.shape)}")
    if index.dim() != 1:
        raise ValueError(f"gather: index must be 1-D (m,), got shape {tuple(index.shape)}")
    if index.device != x.device:
        raise ValueError(f"gather: index is on {index.device} but x is on {x.device}")
    if x.shape[1] > 1 and x.stride(1) != 1:
        raise ValueError(f"gather: x's last dimension must be contiguous (stride 1), got strides {x.stride()}")
    if x.shape[0] > 1 and x.stride(0) < x.shape[1]:
        raise ValueError(f"gather: x's row stride {x.stride(0)} is smaller than its width {x.shape[1]}")
    if index.shape[0] > 1 and index.stride(0) != 1:
        raise ValueError(f"gather: index must be contiguous, got stride {index.stride(0)}")
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"gather: out must be a torch.Tensor, got {type(out).__name__}")
        expected = (index.shape[0], x.shape[1])
        if tuple(out.shape) != expected or out.dtype != x.dtype or out.device != x.device:
            raise ValueError(
                f"gather: out must be {expected} {x.dtype} on {x.device}, "
                f"got {tuple(out.shape)} {out.dtype} on {out.device}"
            )
        if not out.is_contiguous():
            raise ValueError("gather: out must be contiguous")
    backend = _DEVICE_BACKEND.get(x.device.type)
    if x.device.type != "cpu" and backend is None:
        raise ValueError(f"gather: tensors on {x.device} are not supported (cuda, npu or cpu)")


def _base_alignment(t: torch.Tensor) -> int:
    """Largest power of two (<= 16) dividing the data pointer: x's and y's cap the vector width."""
    ptr = t.data_ptr()
    return 16 if ptr == 0 else min(16, ptr & -ptr)


def gather(x: torch.Tensor, index: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    _check(x, index, out)
    n, d = x.shape
    m = index.shape[0]
    y = out if out is not None else torch.empty((m, d), dtype=x.dtype, device=x.device)
    if m == 0 or d == 0:
        return y
    if x.device.type == "cpu":
        y.copy_(ref.gather_ref(x, index))
        return y
    tl = _ops()
    backend = _DEVICE_BACKEND[x.device.type]
    if tl.PLATFORM.tilelang_ops_backend != backend:
        raise ValueError(
            f"gather: x is on {x.device} but tilelang_ops was built for backend "
            f"{tl.PLATFORM.tilelang_ops_backend!r}"
        )
    # With one row (or none) the row stride is never used; declare it dense so one kernel serves.
    x_stride = x.stride(0) if n > 1 else d
    if n <= 1 and x.stride(0) != d:
        x = x.as_strided((n, d), (d, 1))
    align = min(_base_alignment(x), _base_alignment(y))
    kernel = tl.ops.gather_tl(d, DTYPES[x.dtype], INDEX_DTYPES[index.dtype], x_stride, x_align=align)
    kernel(x, index, y)
    return y
