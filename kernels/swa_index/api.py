"""Interface of `swa_index`: the KV slots of every query token's sliding window, on device, fixed-size.

    slots, valid_len, first_block, replay_start, replay_end = tilelang_ops.swa_index(
        query_start_loc, positions, block_table, seq_lens, window=W, block_size=64,
        pad="minus_one", out=None)

query_start_loc  (B + 1,) int32 or int64, contiguous, non-decreasing (not checked: see ref.py).
positions        (T,) int32 or int64, contiguous: each query token's position; MTP tokens of one
                 request have consecutive positions. Tokens in no request are padding.
block_table      (B, max_blocks) int32 only, max_blocks >= 1; rows may be strided (a view of a
                 wider table), the last dimension must be contiguous.
seq_lens         (B,) int32 or int64, contiguous: each request's KV length after this step.
window           W, an int in [1, 2**31 - 1]: the layer's sliding window (itself included).
block_size       slots per block of block_table, an int in [1, 2**31 - 1].
pad              "minus_one" (pad and invalid entries are -1) or "repeat" (they hold a legal slot:
                 the token's own slot, or 0; for attention kernels that reject -1).
out              caller-owned outputs (contiguous, exact shapes and dtypes), a 5-tuple in the
                 order returned.

Returns (the exact rules, invalid indices included, are in kernels/swa_index/ref.py):
  slots         (T, W) int32: column j < valid_len[i] is the slot of position
                pos - valid_len[i] + 1 + j (ascending; the last one is the token's own); the rest,
                and entries whose block is unallocated or past the table, are the pad value.
  valid_len     (T,) int32: min(pos + 1, W); 0 for padding tokens and negative positions.
  first_block   (B,) int32: min(max(0, L - W) // block_size, max_blocks), L = max(seq_lens, 0):
                block-table columns before it may be freed after this step.
  replay_start  (B,) int64: max(0, L - W); replay_end (B,) int64: L. [replay_start, replay_end)
                rebuilds the window after preemption.

CUDA tensors run one TileLang kernel per call (no host sync, every size fixed by the arguments:
CUDA-graph capturable; T, B, max_blocks and W are dynamic, one compile per block_size, pad and
index dtypes). CPU tensors are served by the PyTorch reference. Invalid arguments raise TypeError
or ValueError naming the argument before anything is written. An empty batch (B == 0) or T == 0
launches no kernel: torch fills the outputs with what the reference defines.
"""

from __future__ import annotations

import torch

from kernels.interface import INDEX_DTYPES, backend_ops, check_choice, check_no_overlap, check_out, check_tensor, is_host
from kernels.swa_index import ref

__all__ = ["swa_index"]

OUTPUTS = ("slots", "valid_len", "first_block", "replay_start", "replay_end")


def _check_int(name: str, arg: str, value, low: int, high: int = ref.INT32_MAX) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: {arg} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name}: {arg} must be in [{low}, {high}], got {value}")


def _check_block_table(name: str, block_table, n_req: int, like: torch.Tensor) -> None:
    check_tensor(name, "block_table", block_table, dtypes=[torch.int32], dim=2, like=like)
    rows, max_blocks = block_table.shape
    if rows != n_req:
        raise ValueError(f"{name}: block_table has {rows} rows; expected B = {n_req}")
    if max_blocks == 0:
        raise ValueError(f"{name}: block_table has 0 columns; max_blocks must be >= 1")
    if max_blocks > 1 and block_table.stride(1) != 1:
        raise ValueError(f"{name}: block_table's last dimension must be contiguous (stride 1), got strides {block_table.stride()}")
    if rows > 1 and block_table.stride(0) < max_blocks:
        raise ValueError(f"{name}: block_table's row stride {block_table.stride(0)} is smaller than max_blocks {max_blocks}")


def _dense_table(block_table: torch.Tensor) -> torch.Tensor:
    """block_table with strides a kernel accepts: a single row's stride is never used, so it is
    declared dense (torch may report any stride for a one-row view)."""
    rows, max_blocks = block_table.shape
    if rows <= 1 and block_table.stride() != (max_blocks, 1):
        return block_table.as_strided((rows, max_blocks), (max_blocks, 1))
    return block_table


def swa_index(
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    window: int,
    block_size: int,
    pad: str = "minus_one",
    out: tuple[torch.Tensor, ...] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    name = "swa_index"
    check_tensor(name, "query_start_loc", query_start_loc, dtypes=INDEX_DTYPES, dim=1, contiguous=True)
    if query_start_loc.device.type not in ("cpu", "cuda", "npu"):
        raise ValueError(f"{name}: tensors on {query_start_loc.device} are not supported (cuda, npu or cpu)")
    if query_start_loc.shape[0] == 0:
        raise ValueError(f"{name}: query_start_loc must have B + 1 >= 1 entries, got shape (0,)")
    n_req = query_start_loc.shape[0] - 1
    check_tensor(name, "positions", positions, dtypes=INDEX_DTYPES, dim=1, like=query_start_loc, contiguous=True)
    _check_block_table(name, block_table, n_req, query_start_loc)
    check_tensor(name, "seq_lens", seq_lens, dtypes=INDEX_DTYPES, shape=(n_req,), like=query_start_loc, contiguous=True)
    _check_int(name, "window", window, 1)
    _check_int(name, "block_size", block_size, 1)
    check_choice(name, "pad", pad, ref.PADS)
    n_tok = positions.shape[0]
    specs = (
        ((n_tok, window), torch.int32),
        ((n_tok,), torch.int32),
        ((n_req,), torch.int32),
        ((n_req,), torch.int64),
        ((n_req,), torch.int64),
    )
    device = query_start_loc.device
    if out is None:
        outs = tuple(torch.empty(shape, dtype=dtype, device=device) for shape, dtype in specs)
    else:
        if not isinstance(out, (tuple, list)) or len(out) != len(OUTPUTS):
            raise TypeError(f"{name}: out must be a tuple ({', '.join(OUTPUTS)}), got {type(out).__name__}")
        for field, t, (shape, dtype) in zip(OUTPUTS, out, specs):
            check_out(name, f"out.{field}", t, shape, dtype, query_start_loc)
        outs = tuple(out)
    read = {"query_start_loc": query_start_loc, "positions": positions, "block_table": block_table, "seq_lens": seq_lens}
    check_no_overlap(name, {f"out.{f}": t for f, t in zip(OUTPUTS, outs)}, read)
    if n_req == 0 or n_tok == 0 or is_host(query_start_loc):
        # The reference launches no TileLang kernel: CPU tensors, or an empty batch on a device.
        for dst, src in zip(outs, ref.swa_index_ref(query_start_loc, positions, block_table, seq_lens, window, block_size, pad)):
            dst.copy_(src)
        return outs
    tl = backend_ops(name, query_start_loc)
    kernel = tl.ops.swa_index_tl(
        block_size, pad, INDEX_DTYPES[query_start_loc.dtype], INDEX_DTYPES[positions.dtype], INDEX_DTYPES[seq_lens.dtype]
    )
    kernel(query_start_loc, positions, _dense_table(block_table), seq_lens, *outs)
    return outs
