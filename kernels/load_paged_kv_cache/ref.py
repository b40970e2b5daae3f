"""PyTorch reference for `load_paged_kv_cache`: gather each request's tokens out of a paged KV cache
into contiguous bf16 rows, dequantising FP4/FP8 record caches. The contract.

    rows, cu_seqlens = load_paged_kv_cache_ref(cache, block_table, seq_lens, seq_starts, num_tokens, layout="NHD")

cache        (num_blocks, block_size, W): bfloat16 rows (W = D, any D >= 1), or quantised records
             of kernels/store_kv_cache/layout.py (torch.float4_e2m1fn_x2 with W = 400, or
             torch.float8_e4m3fn with W = 656), which dequantise to D = 576.
             Per head, bfloat16: (num_blocks, block_size, H, Dh) for layout "NHD" or
             (num_blocks, H, block_size, Dh) for "HND"; a row is then a token's H x Dh values.
             Any strides (store_kv_cache writes all of these).
block_table  (B, max_blocks) int32: physical block ids of each request's logical blocks.
seq_lens     (B,) int32 | int64: tokens to load per request; a negative length counts as 0.
seq_starts   (B,) int32 | int64, or None (all 0): the first position of each request to load.
num_tokens   rows of the returned tensor; None: sum(seq_lens) (read on the host).

Request b loads positions p in [seq_starts[b], seq_starts[b] + len_b); its rows are rows
[cu_seqlens[b], cu_seqlens[b + 1]) of the output, in position order, requests in batch order.
cu_seqlens (B + 1,) int32 is the exclusive prefix sum of the (clamped) lengths; the total must stay
below 2**31.

Position p of request b lives in slot (block_table[b, p // block_size], p % block_size). The row of
a position is all zeros when that slot does not exist: p < 0, p // block_size >= max_blocks, or a
block id < 0 or >= num_blocks. Nothing outside cache or block_table is read for such a row.

Rows are (num_tokens, D), or (num_tokens, H, Dh) for a per-head cache, in the same order. They are
bit copies of bf16 cache rows, or layout.decode_records of the records (each latent value
times its group's scale in fp32, rounded once to bf16; rope copied). A NaN that dequantisation
produces (a zero code times an Inf scale, an e4m3 NaN code) may carry any payload and sign on a
backend (CUDA's conversion gives one canonical NaN): tests compare such NaNs as NaN. Rows past the total (when
num_tokens exceeds it) are zeros here; the interface leaves them untouched in a caller's `out`.
Rows of requests beyond num_tokens are not returned.
"""

from __future__ import annotations

import torch

from kernels.store_kv_cache import layout as kv_layout

__all__ = ["INDEX_DTYPES", "LAYOUTS", "check_block_stride", "check_factory_args", "cu_seqlens_ref", "load_paged_kv_cache_ref", "source_slots"]

# Element type names of seq_lens / seq_starts the backends' factories take.
INDEX_DTYPES = ("int32", "int64")
# Orders of a per-head cache: token slots then heads ("NHD"), or heads then token slots ("HND").
LAYOUTS = ("NHD", "HND")


def check_factory_args(block_size: int, lens_dtype: str, starts_dtype) -> None:
    """ValueError unless block_size is a positive int, lens_dtype one of INDEX_DTYPES and
    starts_dtype None or one of INDEX_DTYPES: the static arguments every backend factory takes."""
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"load_paged_kv_cache: block_size must be a positive int, got {block_size!r}")
    if lens_dtype not in INDEX_DTYPES:
        raise ValueError(f"load_paged_kv_cache: lens_dtype {lens_dtype!r} is not one of {', '.join(INDEX_DTYPES)}")
    if starts_dtype is not None and starts_dtype not in INDEX_DTYPES:
        raise ValueError(f"load_paged_kv_cache: starts_dtype {starts_dtype!r} is not None or one of {', '.join(INDEX_DTYPES)}")


def check_block_stride(records: kv_layout.RecordLayout, block_size: int, block_stride: int) -> None:
    """ValueError unless block_stride (bytes between a record cache's blocks) is an int covering a
    block of block_size records and a multiple of 16, so every block starts 16-byte aligned: the
    static block stride every backend's record factory takes."""
    least = block_size * records.record_bytes
    if not isinstance(block_stride, int) or block_stride < least or block_stride % 16:
        raise ValueError(
            f"load_paged_kv_cache: block_stride must be a multiple of 16 bytes of at least a block of {block_size} x {records.record_bytes}-byte records ({least}), got {block_stride!r}"
        )


def cu_seqlens_ref(seq_lens: torch.Tensor) -> torch.Tensor:
    """(B + 1,) int32 exclusive prefix sum of seq_lens clamped at 0."""
    cu = torch.zeros((seq_lens.shape[0] + 1,), dtype=torch.int64, device=seq_lens.device)
    torch.cumsum(seq_lens.to(torch.int64).clamp_min(0), 0, out=cu[1:])
    return cu.to(torch.int32)


def source_slots(
    block_table: torch.Tensor, seq_lens: torch.Tensor, seq_starts: torch.Tensor | None, num_tokens: int, block_size: int, num_blocks: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(slot, valid) per output row, both (num_tokens,): the flat cache slot (block * block_size +
    offset, int64; 0 where not valid) and whether the row has one (False: a zero row). Host-sync
    free: each row finds its request by a binary search over cu_seqlens."""
    device = block_table.device
    b, max_blocks = block_table.shape
    t = torch.arange(num_tokens, dtype=torch.int64, device=device)
    if b == 0 or max_blocks == 0:
        return torch.zeros_like(t), torch.zeros(t.shape, dtype=torch.bool, device=device)
    cu = cu_seqlens_ref(seq_lens).to(torch.int64)
    req = torch.searchsorted(cu[1:], t, right=True)
    in_batch = req < b
    req = req.clamp_max(b - 1)
    start = torch.zeros_like(t) if seq_starts is None else seq_starts.to(torch.int64)[req]
    pos = start + t - cu[req]
    j = torch.div(pos, block_size, rounding_mode="floor")
    in_table = (pos >= 0) & (j < max_blocks)
    block = block_table[req, j.clamp(0, max_blocks - 1)].to(torch.int64)
    valid = in_batch & in_table & (block >= 0) & (block < num_blocks)
    slot = torch.where(valid, block * block_size + torch.remainder(pos, block_size), 0)
    return slot, valid


def load_paged_kv_cache_ref(
    cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    seq_starts: torch.Tensor | None = None,
    num_tokens: int | None = None,
    layout: str = "NHD",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows (num_tokens, D) or (num_tokens, H, Dh) bfloat16, cu_seqlens (B + 1,) int32); see the
    module docstring."""
    if cache.dim() == 4:
        # A per-head cache is rows of H * Dh values once its slots come first.
        slots_first = cache.transpose(1, 2) if layout == "HND" else cache
        num_blocks, block_size, heads, dh = slots_first.shape
        rows, cu = load_paged_kv_cache_ref(slots_first.reshape(num_blocks, block_size, heads * dh), block_table, seq_lens, seq_starts, num_tokens)
        return rows.reshape(rows.shape[0], heads, dh), cu
    cu = cu_seqlens_ref(seq_lens)
    if num_tokens is None:
        num_tokens = int(cu[-1])
    num_blocks, block_size, width = cache.shape
    slot, valid = source_slots(block_table, seq_lens, seq_starts, num_tokens, block_size, num_blocks)
    records = kv_layout.record_layout(cache.dtype)
    if records is None:
        flat = cache.reshape(num_blocks * block_size, width)
    else:
        flat = cache.view(torch.uint8).reshape(num_blocks * block_size, width)
    picked = flat.index_select(0, slot) if flat.shape[0] else flat.new_zeros((num_tokens, width))
    rows = picked if records is None else kv_layout.decode_records(picked, records)
    return torch.where(valid[:, None], rows, torch.zeros((), dtype=rows.dtype, device=rows.device)), cu
