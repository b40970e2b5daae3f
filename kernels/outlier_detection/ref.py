"""PyTorch reference for `outlier_detection`: per-row absmax and outlier flags, and per-column counts.
The contract.

    absmax, flag, flagged_rows, count = outlier_rows_ref(x, threshold)
    counts = outlier_columns_ref(x, threshold)

x          (T, D) bfloat16 | float16 | float32, D >= 1; rows may be strided (last dim contiguous).
threshold  a Python real number, rounded to float32 (`fp32_threshold`), or a (1,) float32 tensor on
           x's device (what the kernels take: a device scalar, so retuning it at run time neither
           recompiles a kernel nor invalidates a captured CUDA graph).

Every comparison is in float32 on |x| widened exactly from x's dtype (so bf16/fp16/fp32 inputs
compare exactly against the fp32 threshold):

Row mode
    absmax[i]       float32, max over j of |x[i, j]|, ignoring NaN (CUDA fmaxf semantics): +-Inf
                    gives inf, a row whose only values are NaN gives 0, an all-zero row gives 0.
    flag[i]         torch.bool: row i holds a non-finite value (NaN or +-Inf) OR absmax[i] > threshold.
                    A NaN threshold flags only non-finite rows; a negative one flags every row.
    flagged_rows    (T,) int32: the ids of the flagged rows in ascending order, then -1 up to T.
    count           (1,) int32: the number of flagged rows.
    No host synchronisation: the compaction is a prefix sum (cumsum) and a scatter, never
    `nonzero`, so the reference itself is CUDA-graph capturable and torch.compile traces it whole.

Column mode (LLM.int8-style outlier channels)
    counts[j]       (D,) int32: the number of rows i with |x[i, j]| > threshold. NaN never counts
                    (the comparison is false); +-Inf counts unless the threshold is +inf.

Everything is exact (maxima, comparisons and integer counts), so every backend matches this bit for
bit, whatever order it reduces in; the compacted list is deterministic (ascending ids).
"""

from __future__ import annotations

import math
import numbers
import struct

import torch


def fp32_threshold(threshold, name: str = "outlier_detection") -> float:
    """A Python threshold rounded to float32 (what every backend compares with). TypeError unless a
    real number (bool excluded); ValueError if NaN. Values beyond the fp32 range become +-inf."""
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
        raise TypeError(f"{name}: threshold must be a real number or a (1,) float32 tensor, got {type(threshold).__name__}")
    try:
        value = float(threshold)
    except OverflowError:  # an int or Fraction beyond a double's range
        value = math.inf if threshold > 0 else -math.inf
    if math.isnan(value):
        raise ValueError(f"{name}: threshold must not be NaN")
    try:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


def _threshold_tensor(x: torch.Tensor, threshold) -> torch.Tensor:
    if isinstance(threshold, torch.Tensor):
        return threshold.to(device=x.device, dtype=torch.float32).reshape(1)
    return torch.full((1,), fp32_threshold(threshold), dtype=torch.float32, device=x.device)


def outlier_rows_ref(x: torch.Tensor, threshold) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(absmax (T,) float32, flag (T,) bool, flagged_rows (T,) int32, count (1,) int32)."""
    n = x.shape[0]
    thr = _threshold_tensor(x, threshold)
    a = x.float().abs()
    nan = torch.isnan(a)
    absmax = torch.where(nan, 0.0, a).amax(dim=1)
    flag = nan.any(dim=1) | torch.isinf(absmax) | (absmax > thr)
    # Flagged row i goes to slot (number of flagged rows before it); the others to a spare slot n.
    slot = torch.where(flag, torch.cumsum(flag, 0) - 1, n)
    ids = torch.arange(n, dtype=torch.int32, device=x.device)
    flagged_rows = torch.full((n + 1,), -1, dtype=torch.int32, device=x.device).scatter_(0, slot, ids)[:n]
    count = flag.sum(dtype=torch.int32).reshape(1)
    return absmax, flag, flagged_rows, count


def outlier_columns_ref(x: torch.Tensor, threshold) -> torch.Tensor:
    """counts (D,) int32: rows whose |x[:, j]| exceeds the threshold, per column j."""
    thr = _threshold_tensor(x, threshold)
    return (x.float().abs() > thr).sum(dim=0, dtype=torch.int32)
