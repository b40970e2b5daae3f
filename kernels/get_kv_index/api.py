"""Interface of `get_kv_index`: the KV-cache index tensors of one engine step, on device, fixed-size.

    slot_mapping = tilelang_ops.get_slot_mapping(query_start_loc, positions, block_table,
                                                 block_size=BS, num_tokens=None, out=None)
    kv_indptr, kv_indices, kv_last_page_len = tilelang_ops.get_paged_kv_indices(
        block_table, seq_lens, block_size=BS, page_size=PS, capacity=None, out=None)
    (block_size and page_size are required keyword arguments; the others default as shown)
    batch_indices, positions = tilelang_ops.get_batch_indices_positions(
        append_indptr, seq_lens, num_tokens, out=None)

query_start_loc /  (B + 1,) int32 or int64, contiguous, non-decreasing (not checked: see ref.py).
append_indptr
positions          (P,) int32 or int64, contiguous; P >= num_tokens (a persistent buffer may be longer).
block_table        (B, max_blocks) int32, max_blocks >= 1; rows may be strided (a view of a wider
                   table), the last dimension must be contiguous. Only int32 (vLLM's and
                   FlashInfer's block tables are int32).
seq_lens           (B,) int32 or int64, contiguous.
block_size         the allocation block size of block_table (slots per block), an int in
                   [1, 2**31 - 1].
page_size          the attention kernel's page size, an int in [1, 2**31 - 1]; it must divide
                   block_size.
num_tokens         the fixed (CUDA-graph padded) output length, an int in [0, 2**31 - 1]:
                   get_slot_mapping defaults to P.
capacity           kv_indices' fixed length, an int in [0, 2**31 - 1], default B * max_blocks *
                   (block_size // page_size). That page count must itself be at most 2**31 - 1
                   (kv_indptr is int32), whatever the capacity.
out                caller-owned outputs (contiguous, exact shapes and dtypes): a tensor for
                   get_slot_mapping, a 3-tuple / 2-tuple in the order returned for the others.

Returns (the exact rules, invalid indices included, are in kernels/get_kv_index/ref.py):
  slot_mapping      (num_tokens,) int64: block_table[b, pos // block_size] * block_size + pos %
                    block_size for a token of request b, -1 for padding and invalid entries.
  kv_indptr         (B + 1,) int32; kv_indices (capacity,) int32, -1 padded and -1 for a page of
                    a negative block id or past 2**31 - 1; kv_last_page_len (B,) int32 in
                    [1, page_size], 0 for an empty request.
  batch_indices, positions  (num_tokens,) int32 each, -1 for padding and for a token whose position
                    is negative or past 2**31 - 1 (int64 seq_lens may describe one).

CUDA tensors run one TileLang kernel per call (no host sync, every size fixed by the arguments:
CUDA-graph capturable; on sm_90+ a programmatic dependent launch, kernels/tl_launch.py: it overlaps
the kernel before it and waits on the device for it). CPU tensors are served by the PyTorch
reference. Invalid arguments raise TypeError or ValueError naming the argument before anything is
written. An empty batch (B == 0) or an empty output launches no kernel: outputs are filled by
torch (-1 for indices, kv_indptr = [0]).
"""

from __future__ import annotations

import torch

from kernels.get_kv_index import ref
from kernels.interface import (
    INDEX_DTYPES,
    INT32_MAX,
    backend_ops,
    check_block_table,
    check_device,
    check_indptr,
    check_int,
    check_no_overlap,
    check_out,
    check_tensor,
    dense_table,
    is_host,
    launch_options,
)

__all__ = ["get_batch_indices_positions", "get_paged_kv_indices", "get_slot_mapping"]

PAGED_OUTPUTS = ("kv_indptr", "kv_indices", "kv_last_page_len")
APPEND_OUTPUTS = ("batch_indices", "positions")


def _outputs(name: str, fields, specs, out, like: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The caller's outputs, validated, or fresh ones."""
    if out is None:
        return tuple(torch.empty(shape, dtype=dtype, device=like.device) for shape, dtype in specs)
    if not isinstance(out, (tuple, list)) or len(out) != len(fields):
        raise TypeError(f"{name}: out must be a tuple ({', '.join(fields)}), got {type(out).__name__}")
    for field, t, (shape, dtype) in zip(fields, out, specs):
        check_out(name, f"out.{field}", t, shape, dtype, like)
    return tuple(out)


def get_slot_mapping(
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    block_table: torch.Tensor,
    *,
    block_size: int,
    num_tokens: int | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    name = "get_slot_mapping"
    n_req = check_indptr(name, "query_start_loc", query_start_loc)
    check_tensor(name, "positions", positions, dtypes=INDEX_DTYPES, dim=1, like=query_start_loc, contiguous=True)
    check_block_table(name, block_table, query_start_loc, n_req)
    check_int(name, "block_size", block_size, 1)
    n = positions.shape[0] if num_tokens is None else num_tokens
    check_int(name, "num_tokens", n, 0, min(positions.shape[0], INT32_MAX))
    check_out(name, "out", out, (n,), torch.int64, query_start_loc)
    read = {"query_start_loc": query_start_loc, "positions": positions, "block_table": block_table}
    check_no_overlap(name, {"out": out}, read)
    slots = out if out is not None else torch.empty((n,), dtype=torch.int64, device=query_start_loc.device)
    if n == 0:
        return slots
    if n_req == 0:
        return slots.fill_(-1)
    if is_host(query_start_loc):
        return slots.copy_(ref.slot_mapping_ref(query_start_loc, positions, block_table, block_size, n))
    tl = backend_ops(name, query_start_loc)
    kernel = tl.ops.slot_mapping_tl(block_size, INDEX_DTYPES[query_start_loc.dtype], INDEX_DTYPES[positions.dtype], **launch_options(positions))
    kernel(query_start_loc, positions, dense_table(block_table), slots)
    return slots


def get_paged_kv_indices(
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    block_size: int,
    page_size: int,
    capacity: int | None = None,
    out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    name = "get_paged_kv_indices"
    check_tensor(name, "seq_lens", seq_lens, dtypes=INDEX_DTYPES, dim=1, contiguous=True)
    check_device(name, "seq_lens", seq_lens)
    n_req = seq_lens.shape[0]
    check_block_table(name, block_table, seq_lens, n_req)
    check_int(name, "block_size", block_size, 1)
    check_int(name, "page_size", page_size, 1)
    if block_size % page_size:
        raise ValueError(f"{name}: page_size {page_size} does not divide block_size {block_size}")
    r = block_size // page_size
    full = n_req * block_table.shape[1] * r
    if full > INT32_MAX:
        raise ValueError(f"{name}: block_table describes {full} pages (B * max_blocks * block_size // page_size); at most 2**31 - 1 are supported")
    cap = full if capacity is None else capacity
    check_int(name, "capacity", cap, 0)
    specs = (((n_req + 1,), torch.int32), ((cap,), torch.int32), ((n_req,), torch.int32))
    outs = _outputs(name, PAGED_OUTPUTS, specs, out, seq_lens)
    written = {f"out.{f}": t for f, t in zip(PAGED_OUTPUTS, outs)}
    check_no_overlap(name, written, {"block_table": block_table, "seq_lens": seq_lens})
    kv_indptr, kv_indices, kv_last_page_len = outs
    if n_req == 0:
        kv_indptr.zero_()
        kv_indices.fill_(-1)
        return kv_indptr, kv_indices, kv_last_page_len
    if is_host(seq_lens):
        for dst, src in zip(outs, ref.paged_kv_indices_ref(block_table, seq_lens, block_size, page_size, cap)):
            dst.copy_(src)
        return kv_indptr, kv_indices, kv_last_page_len
    tl = backend_ops(name, seq_lens)
    kernel = tl.ops.paged_kv_indices_tl(block_size, page_size, INDEX_DTYPES[seq_lens.dtype], **launch_options(seq_lens))
    kernel(dense_table(block_table), seq_lens, kv_indptr, kv_indices, kv_last_page_len)
    return kv_indptr, kv_indices, kv_last_page_len


def get_batch_indices_positions(
    append_indptr: torch.Tensor,
    seq_lens: torch.Tensor,
    num_tokens: int,
    *,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    name = "get_batch_indices_positions"
    n_req = check_indptr(name, "append_indptr", append_indptr)
    check_tensor(name, "seq_lens", seq_lens, dtypes=INDEX_DTYPES, shape=(n_req,), like=append_indptr, contiguous=True)
    check_int(name, "num_tokens", num_tokens, 0)
    specs = (((num_tokens,), torch.int32), ((num_tokens,), torch.int32))
    outs = _outputs(name, APPEND_OUTPUTS, specs, out, append_indptr)
    written = {f"out.{f}": t for f, t in zip(APPEND_OUTPUTS, outs)}
    check_no_overlap(name, written, {"append_indptr": append_indptr, "seq_lens": seq_lens})
    batch_indices, positions = outs
    if num_tokens == 0:
        return batch_indices, positions
    if n_req == 0:
        batch_indices.fill_(-1)
        positions.fill_(-1)
        return batch_indices, positions
    if is_host(append_indptr):
        for dst, src in zip(outs, ref.batch_indices_positions_ref(append_indptr, seq_lens, num_tokens)):
            dst.copy_(src)
        return batch_indices, positions
    tl = backend_ops(name, append_indptr)
    kernel = tl.ops.batch_indices_positions_tl(INDEX_DTYPES[append_indptr.dtype], INDEX_DTYPES[seq_lens.dtype], **launch_options(seq_lens))
    kernel(append_indptr, seq_lens, batch_indices, positions)
    return batch_indices, positions
