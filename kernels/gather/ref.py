"""PyTorch reference for `gather`: the contract every backend matches bit for bit.

    y[i] = x[index[i]]   if 0 <= index[i] < n
    y[i] = 0             otherwise (negative or out-of-range index: a zero row, nothing read)

x: (n, D), any element type, rows may be strided (last dim contiguous). index: (m,) int32 or int64.
y: (m, D) contiguous, x's dtype, on x's device. Gather moves bits, so the reference works on a
same-size integer view: it is exact for every dtype (fp8 and NaN payloads included).
"""

from __future__ import annotations

import torch

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def gather_ref(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    n, d = x.shape
    bits = x.view(_BITS[x.element_size()]) if d > 0 else x
    valid = (index >= 0) & (index < n)
    if n == 0:
        return torch.zeros((index.shape[0], d), dtype=x.dtype, device=x.device)
    rows = bits.index_select(0, torch.where(valid, index, 0).long())
    y = torch.where(valid[:, None], rows, torch.zeros((), dtype=rows.dtype, device=rows.device))
    return y.view(x.dtype) if d > 0 else y
