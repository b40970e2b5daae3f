"""Interface of `gather`: validate, allocate, dispatch.

    y = tilelang_ops.gather(x, index)            # y[i] = x[index[i]], a zero row for invalid index
    tilelang_ops.gather(x, index, out=y)         # into a caller-owned (m, D) contiguous buffer

x      (n, D) bfloat16 | float16 | float32 | float8_e4m3fn | uint8 (packed FP4) | int32; rows may be
       strided (a view of a wider tensor) but the last dimension must be contiguous.
index  (m,) int32 or int64, contiguous, on x's device. index < 0 or >= n gives a zero row; such
       indices never cause a read.
out    optional (m, D) contiguous tensor of x's dtype on x's device, overlapping neither x nor index
       (compared by the byte ranges they span).
Returns y (m, D) contiguous.

CUDA tensors run the TileLang kernel of the `cuda` backend (no host sync, CUDA-graph capturable;
on sm_90+ a programmatic dependent launch, kernels/tl_launch.py); CPU tensors are served by the
PyTorch reference (`kernels.gather.ref`), so code written against this
interface runs unchanged on a machine without an accelerator. Invalid arguments raise TypeError or
ValueError naming the argument before anything is written; m == 0 or D == 0 launches nothing.
"""

from __future__ import annotations

import torch

from kernels.gather import ref
from kernels.interface import INDEX_DTYPES, backend_ops, base_alignment, check_no_overlap, check_out, check_rows, check_tensor, dense_rows, is_host, launch_options

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


def _check(x, index, out) -> None:
    check_rows("gather", "x", x, DTYPES)
    check_tensor("gather", "index", index, dtypes=INDEX_DTYPES, dim=1, like=x)
    if index.shape[0] > 1 and index.stride(0) != 1:
        raise ValueError(f"gather: index must be contiguous, got stride {index.stride(0)}")
    check_out("gather", "out", out, (index.shape[0], x.shape[1]), x.dtype, x)
    check_no_overlap("gather", {"out": out}, {"x": x, "index": index})


def gather(x: torch.Tensor, index: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    _check(x, index, out)
    n, d = x.shape
    m = index.shape[0]
    y = out if out is not None else torch.empty((m, d), dtype=x.dtype, device=x.device)
    if m == 0 or d == 0:
        return y
    if is_host(x):
        y.copy_(ref.gather_ref(x, index))
        return y
    tl = backend_ops("gather", x)
    x, x_stride = dense_rows(x)
    kernel = tl.ops.gather_tl(d, DTYPES[x.dtype], INDEX_DTYPES[index.dtype], x_stride, x_align=base_alignment(x, y), **launch_options(x))
    kernel(x, index, y)
    return y
