"""Interface of `swa_index`: the KV slots of every query token's sliding window, on device, fixed-size.

    slots, valid_len, first_block, replay_start, replay_end = tilelang_ops.swa_index(
        query_start_loc, positions, block_table, seq_lens, window=W, block_size=BS,
        pad="minus_one", out=None)                   # window, block_size: required keywords

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
                and entries whose block is unallocated or past the table or whose slot exceeds
                2**31 - 1, are the pad value ("repeat": the token's own slot when it is legal,
                else 0).
  valid_len     (T,) int32: min(pos + 1, W); 0 for padding tokens and negative positions.
  first_block   (B,) int32: min(max(0, L - W) // block_size, max_blocks), L = max(seq_lens, 0):
                block-table columns before it may be freed after this step.
  replay_start  (B,) int64: max(0, L - W); replay_end (B,) int64: L. [replay_start, replay_end)
                rebuilds the window after preemption.

CUDA tensors run one TileLang kernel per call (no host sync, every size fixed by the arguments:
CUDA-graph capturable; T, B, max_blocks and W are dynamic, one compile per block_size, pad and
index dtypes). Its grid holds tokens and requests on the y dimension, which CUDA caps at 65535
blocks: a CUDA call with T, B >= 1 needs ceil(T / 8) + ceil(B / 256) <= 65535 (T <= 524,272 for
B <= 256), else it raises ValueError naming positions (or query_start_loc, when B alone is too
many: B > 65534 * 256; check_cuda_grid). On sm_90+ the launch is a programmatic dependent one
(kernels/tl_launch.py): it overlaps the kernel before it in the stream and waits on the device for
it, so results are those of a plain launch. CPU tensors are served by the PyTorch reference. Invalid arguments raise TypeError or ValueError naming the argument before
anything is written. An empty batch (B == 0) or T == 0 launches no kernel: torch fills the outputs
with what the reference defines.
"""

from __future__ import annotations

import torch

from kernels.interface import (
    CUDA_MAX_GRID_Y,
    INDEX_DTYPES,
    backend_ops,
    check_block_table,
    check_choice,
    check_indptr,
    check_int,
    check_no_overlap,
    check_out,
    check_tensor,
    dense_table,
    is_host,
    launch_options,
)
from kernels.swa_index import ref

__all__ = ["swa_index"]

OUTPUTS = ("slots", "valid_len", "first_block", "replay_start", "replay_end")
# The CUDA kernel's grid y: rows of CUDA_TOKENS_PER_ROW tokens, then rows of CUDA_REQUESTS_PER_ROW
# requests (kernels/swa_index/cuda.py's _TOK and _THREADS; a codegen_cuda test keeps them equal).
# CUDA caps grid y at CUDA_MAX_GRID_Y blocks (kernels/interface.py).
CUDA_TOKENS_PER_ROW = 8
CUDA_REQUESTS_PER_ROW = 256


def check_cuda_grid(name: str, n_tok: int, n_req: int) -> None:
    """Raises ValueError naming positions when the CUDA kernel's grid y,
    ceil(T / CUDA_TOKENS_PER_ROW) + ceil(B / CUDA_REQUESTS_PER_ROW), exceeds CUDA_MAX_GRID_Y, or
    naming query_start_loc when the requests' rows leave no row for a token."""
    request_rows = -(-n_req // CUDA_REQUESTS_PER_ROW)
    if request_rows >= CUDA_MAX_GRID_Y:
        raise ValueError(
            f"{name}: query_start_loc has B = {n_req} requests; the CUDA kernel takes at most "
            f"{(CUDA_MAX_GRID_Y - 1) * CUDA_REQUESTS_PER_ROW} (ceil(B / {CUDA_REQUESTS_PER_ROW}) rows of grid y, "
            f"one of CUDA's {CUDA_MAX_GRID_Y} left for the tokens)"
        )
    if -(-n_tok // CUDA_TOKENS_PER_ROW) + request_rows > CUDA_MAX_GRID_Y:
        most = max(CUDA_MAX_GRID_Y - request_rows, 0) * CUDA_TOKENS_PER_ROW
        raise ValueError(
            f"{name}: positions has T = {n_tok} tokens; the CUDA kernel takes at most {most} at B = {n_req} "
            f"(ceil(T / {CUDA_TOKENS_PER_ROW}) + ceil(B / {CUDA_REQUESTS_PER_ROW}) <= {CUDA_MAX_GRID_Y}, "
            "CUDA's limit on grid y)"
        )


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
    n_req = check_indptr(name, "query_start_loc", query_start_loc)
    check_tensor(name, "positions", positions, dtypes=INDEX_DTYPES, dim=1, like=query_start_loc, contiguous=True)
    check_block_table(name, block_table, query_start_loc, n_req)
    check_tensor(name, "seq_lens", seq_lens, dtypes=INDEX_DTYPES, shape=(n_req,), like=query_start_loc, contiguous=True)
    check_int(name, "window", window, 1)
    check_int(name, "block_size", block_size, 1)
    check_choice(name, "pad", pad, ref.PADS)
    n_tok = positions.shape[0]
    # Only a CUDA launch meets the limit: the reference (CPU tensors, empty batches) launches
    # nothing, and the Ascend kernel's grid is one persistent block per vector core.
    if n_req > 0 and n_tok > 0 and query_start_loc.device.type == "cuda":
        check_cuda_grid(name, n_tok, n_req)
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
        block_size,
        pad,
        INDEX_DTYPES[query_start_loc.dtype],
        INDEX_DTYPES[positions.dtype],
        INDEX_DTYPES[seq_lens.dtype],
        **launch_options(query_start_loc),
    )
    kernel(query_start_loc, positions, dense_table(block_table), seq_lens, *outs)
    return outs
