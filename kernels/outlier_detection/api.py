"""Interface of `outlier_detection`: per-row absmax and outlier flags, per-column outlier counts.

    absmax, flag, flagged_rows, count = tilelang_ops.detect_outlier_rows(x, threshold)
    detect_outlier_rows(x, threshold, out=(absmax, flag, flagged_rows, count))   # caller-owned
    counts = tilelang_ops.count_outlier_columns(x, threshold)
    count_outlier_columns(x, threshold, out=counts)

x             (T, D) bfloat16 | float16 | float32, T <= 2**31 - 1, D >= 1 (D <= 16384 in row
              mode); rows may be strided (a view of a wider tensor) but the last dimension must be
              contiguous.
threshold     a real number (rounded to float32; NaN rejected; each call then fills a (1,) device
              tensor, a tiny allocation and fill kernel), or a (1,) float32 tensor on x's device:
              the kernels read it at run time, so a tuned threshold needs no recompile and a
              captured CUDA graph sees its current value on every replay.
Row mode returns (caller-owned buffers via `out`, a 4-tuple in this order, each contiguous):
  absmax        (T,) float32: max |x| per row, NaN ignored, Inf kept.
  flag          (T,) torch.bool: the row holds NaN or +-Inf, or absmax > threshold.
  flagged_rows  (T,) int32: flagged row ids in ascending order, then -1.
  count         (1,) int32: the number of flagged rows.
Column mode returns counts (D,) int32 (caller-owned via `out`): per column, the rows with
|x[i, j]| > threshold (NaN never counts, Inf does). counts is zeroed here, then the kernel adds.
The exact rules are in kernels/outlier_detection/ref.py (the contract); outputs are bit-exact.

CUDA tensors run the TileLang kernels of the `cuda` backend. Row mode up to ONE_LAUNCH_MAX_ROWS rows
is one launch: the per-row reduction's blocks count their arrivals in a per-stream counter
(kernels/interface.py: stream_counters, zeroed once and left zero by every launch) and the last to
arrive compacts the flags. Larger batches, and the Ascend backend, take two launches (per-row
reduction, then a one-block compaction). The compaction is deterministic either way. Column mode is
a zero fill and one launch. On sm_90+ every launch is a programmatic dependent one
(kernels/tl_launch.py). No host sync anywhere, so both modes are CUDA-graph
capturable. A captured one-launch call takes zeroed counters that calls outside any capture set
aside: before capturing, make one such call on the device (of a kernel that keeps counters: this
one-launch row mode or fused_sample; RuntimeError otherwise, nothing written). A graph keeps the
counter of the stream it was captured on: do not replay it concurrently with another graph captured
on that stream or with calls on that stream. CPU tensors are served by the PyTorch reference.
Invalid arguments raise TypeError or ValueError naming the argument before anything is written.
T == 0 launches no TileLang kernel: absmax, flag and flagged_rows are empty, and count / counts are
zeroed by a torch fill (zero_) on the caller's current stream.
"""

from __future__ import annotations

import torch

from kernels.interface import (
    INT32_MAX,
    backend_ops,
    base_alignment,
    check_no_overlap,
    check_out,
    check_rows,
    check_scalar,
    dense_rows,
    is_host,
    launch_options,
    scalar_tensor,
    stream_counters,
)
from kernels.outlier_detection import ref

__all__ = ["count_outlier_columns", "detect_outlier_rows"]

# torch dtype -> the element type name the backend factories take.
DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
MAX_D = 16384
ROW_OUTPUTS = ("absmax", "flag", "flagged_rows", "count")
# Row-mode batches up to this many rows run as one launch on CUDA (the last block compacts); larger
# ones as two, where a block of 1024 threads compacts 16384 flags a step. H200, 7168 bf16, one / two
# launches: T 1 3.33 / 5.38 us, 2048 12.00 / 12.95, 4096 20.69 / 19.24 (kernels/outlier_detection/
# PERF.md, "One launch for decode batches").
ONE_LAUNCH_MAX_ROWS = 2048


def _check_x(name: str, x, max_width: int | None) -> None:
    check_rows(name, "x", x, DTYPES, max_width)
    # The kernels index rows, and flagged_rows holds row ids, in int32.
    if x.shape[0] > INT32_MAX:
        raise ValueError(f"{name}: x has {x.shape[0]} rows; at most {INT32_MAX} are supported")
    if x.shape[1] == 0:
        raise ValueError(f"{name}: x has width 0; at least 1 column is needed")


def _row_outputs(name: str, x: torch.Tensor, out) -> tuple[torch.Tensor, ...]:
    """The caller's (absmax, flag, flagged_rows, count), validated, or fresh ones."""
    n = x.shape[0]
    specs = ((n,), torch.float32), ((n,), torch.bool), ((n,), torch.int32), ((1,), torch.int32)
    if out is None:
        return tuple(torch.empty(shape, dtype=dtype, device=x.device) for shape, dtype in specs)
    if not isinstance(out, (tuple, list)) or len(out) != len(ROW_OUTPUTS):
        raise TypeError(f"{name}: out must be a tuple ({', '.join(ROW_OUTPUTS)}), got {type(out).__name__}")
    for field, t, (shape, dtype) in zip(ROW_OUTPUTS, out, specs):
        check_out(name, f"out.{field}", t, shape, dtype, x, required=True)
    return tuple(out)


def detect_outlier_rows(
    x: torch.Tensor, threshold, *, out: tuple[torch.Tensor, ...] | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    name = "detect_outlier_rows"
    _check_x(name, x, MAX_D)
    thr32 = check_scalar(name, "threshold", threshold, x, ref.fp32_threshold)
    absmax, flag, flagged_rows, count = _row_outputs(name, x, out)
    # The kernels read x and the threshold while they write the outputs (declared non-aliasing).
    written = {f"out.{field}": t for field, t in zip(ROW_OUTPUTS, (absmax, flag, flagged_rows, count))}
    read = {"x": x, "threshold": threshold}
    check_no_overlap(name, written, read)
    n, d = x.shape
    if n == 0:
        count.zero_()
        return absmax, flag, flagged_rows, count
    if is_host(x):
        for dst, src in zip((absmax, flag, flagged_rows, count), ref.outlier_rows_ref(x, threshold)):
            dst.copy_(src)
        return absmax, flag, flagged_rows, count
    tl = backend_ops(name, x)
    xk, x_stride = dense_rows(x)
    static = (d, DTYPES[x.dtype], x_stride)
    thr = scalar_tensor(threshold, thr32, x)
    if n <= ONE_LAUNCH_MAX_ROWS:
        try:
            factory = tl.ops.outlier_rows_compact_tl
        except LookupError:  # a backend without the one-launch kernel takes two launches
            pass
        else:
            arrivals = stream_counters(name, x.device, 1)
            factory(*static, x_align=base_alignment(xk), **launch_options(x))(xk, thr, absmax, flag, flagged_rows, count, arrivals)
            return absmax, flag, flagged_rows, count
    # Both kernels are built before the first writes anything.
    options = launch_options(x)
    rows, compact = tl.ops.outlier_rows_tl(*static, x_align=base_alignment(xk), **options), tl.ops.outlier_compact_tl(**options)
    rows(xk, thr, absmax, flag)
    compact(flag, flagged_rows, count)
    return absmax, flag, flagged_rows, count


def count_outlier_columns(x: torch.Tensor, threshold, *, out: torch.Tensor | None = None) -> torch.Tensor:
    name = "count_outlier_columns"
    _check_x(name, x, None)
    thr32 = check_scalar(name, "threshold", threshold, x, ref.fp32_threshold)
    n, d = x.shape
    check_out(name, "out", out, (d,), torch.int32, x)
    check_no_overlap(name, {"out": out}, {"x": x, "threshold": threshold})
    counts = out if out is not None else torch.empty((d,), dtype=torch.int32, device=x.device)
    if is_host(x) and n > 0:
        counts.copy_(ref.outlier_columns_ref(x, threshold))
        return counts
    if n == 0:
        return counts.zero_()
    tl = backend_ops(name, x)
    xk, x_stride = dense_rows(x)
    columns = tl.ops.outlier_columns_tl(d, DTYPES[x.dtype], x_stride, x_align=base_alignment(xk), **launch_options(x))
    # The kernel adds into counts; zeroed only once nothing can fail any more.
    counts.zero_()
    columns(xk, scalar_tensor(threshold, thr32, x), counts)
    return counts
