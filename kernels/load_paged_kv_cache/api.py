"""Interface of `load_paged_kv_cache`: a batch of requests' tokens out of a paged KV cache, as
contiguous bf16 rows (dequantised from FP4/FP8 record caches).

    out, cu_seqlens = tilelang_ops.load_paged_kv_cache(cache, block_table, seq_lens, num_tokens=T)
    load_paged_kv_cache(cache, block_table, seq_lens, seq_starts=starts, out=out, cu_seqlens=cu)
    load_paged_kv_cache(cache, block_table, seq_lens)        # convenience: one host sync (see below)

cache        (num_blocks, block_size, W), contiguous, num_blocks >= 1: bfloat16 rows (W = D >= 1,
             D <= 16384), or the quantised records of kernels/store_kv_cache/layout.py chosen by
             dtype (torch.float4_e2m1fn_x2 with W = 400, torch.float8_e4m3fn with W = 656; both
             give D = 576 and need a 16-byte aligned cache and out).
block_table  (B, max_blocks) int32 only, contiguous, max_blocks >= 1: physical block ids.
seq_lens     (B,) int32 | int64, contiguous: tokens per request (negative counts as 0).
seq_starts   (B,) int32 | int64 contiguous, or None (0): first position of each request to load
             (any position, not block-aligned).
num_tokens   int >= 0: rows the call may write (a CUDA-graph-safe bound on sum(seq_lens)).
out          (rows, D) bfloat16 contiguous, caller-owned; rows >= num_tokens when both are given,
             else num_tokens = rows.
cu_seqlens   (B + 1,) int32 contiguous, caller-owned, or None (allocated).
Returns (out, cu_seqlens): out[cu_seqlens[b] : cu_seqlens[b + 1]] are request b's rows in position
order (kernels/load_paged_kv_cache/ref.py is the contract: slot lookup, zero rows for positions
whose block index is past max_blocks or whose block id is outside [0, num_blocks), bit copies of
bf16 rows, layout.decode_records of records).

Capacity: the row count sum(seq_lens) lives on the device, so the caller bounds it. Rows in
[sum(seq_lens), num_tokens) are left untouched (a fresh out is torch.empty: uninitialised). A
num_tokens below the total is not detectable without a sync: rows at or past num_tokens are never
written (the last requests are cut short); cu_seqlens is still the full prefix sum. With neither
num_tokens nor out, the call reads sum(seq_lens) on the host (`.item()`: a device sync, not
CUDA-graph capturable) and sizes out exactly.

CUDA tensors run one TileLang launch of the `cuda` backend, no host sync (except the convenience
path), so the call is CUDA-graph capturable. CPU tensors are served by the reference. Invalid
arguments raise TypeError or ValueError naming the argument before anything is written. B == 0 or
num_tokens == 0 launches no kernel: cu_seqlens is computed with torch (zeros for B == 0).
"""

from __future__ import annotations

import numbers

import torch

from kernels.interface import backend_ops, base_alignment, check_device, check_no_overlap, check_out, check_tensor, is_host
from kernels.load_paged_kv_cache import ref
from kernels.store_kv_cache import layout

__all__ = ["load_paged_kv_cache"]

NAME = "load_paged_kv_cache"
# torch index dtype -> the element type name the factories take.
LENS_DTYPES = {torch.int32: "int32", torch.int64: "int64"}
CACHE_DTYPES = (torch.bfloat16, *layout.RECORDS)
MAX_D = 16384


def _check_cache(cache) -> int:
    """The output width D of a valid cache."""
    check_tensor(NAME, "cache", cache, dtypes=CACHE_DTYPES, dim=3, contiguous=True)
    check_device(NAME, cache)
    num_blocks, block_size, width = cache.shape
    if num_blocks < 1 or block_size < 1 or width < 1:
        raise ValueError(f"{NAME}: cache must have at least one block, slot and column, got shape {tuple(cache.shape)}")
    records = layout.record_layout(cache.dtype)
    if records is None:
        if width > MAX_D:
            raise ValueError(f"{NAME}: cache has row width {width}; at most {MAX_D} is supported")
        return width
    if width != records.record_bytes:
        raise ValueError(f"{NAME}: cache of {cache.dtype} must hold {records.record_bytes}-byte records (last dim), got {width}")
    return layout.WIDTH


def _check_num_tokens(num_tokens) -> None:
    if num_tokens is None:
        return
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, numbers.Integral):
        raise TypeError(f"{NAME}: num_tokens must be an int, got {type(num_tokens).__name__}")
    if num_tokens < 0:
        raise ValueError(f"{NAME}: num_tokens must be >= 0, got {num_tokens}")


def load_paged_kv_cache(
    cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    seq_starts: torch.Tensor | None = None,
    *,
    num_tokens: int | None = None,
    out: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    d = _check_cache(cache)
    check_tensor(NAME, "block_table", block_table, dtypes=[torch.int32], dim=2, like=cache, contiguous=True)
    b = block_table.shape[0]
    if block_table.shape[1] < 1:
        raise ValueError(f"{NAME}: block_table must have at least one column, got shape {tuple(block_table.shape)}")
    check_tensor(NAME, "seq_lens", seq_lens, dtypes=LENS_DTYPES, shape=(b,), like=cache, contiguous=True)
    if seq_starts is not None:
        check_tensor(NAME, "seq_starts", seq_starts, dtypes=LENS_DTYPES, shape=(b,), like=cache, contiguous=True)
    _check_num_tokens(num_tokens)
    if out is not None:
        check_tensor(NAME, "out", out, dtypes=[torch.bfloat16], dim=2, like=cache, contiguous=True)
        if out.shape[1] != d:
            raise ValueError(f"{NAME}: out must have {d} columns (the cache's row width), got {out.shape[1]}")
        if num_tokens is not None and out.shape[0] < num_tokens:
            raise ValueError(f"{NAME}: out has {out.shape[0]} rows, fewer than num_tokens {num_tokens}")
    check_out(NAME, "cu_seqlens", cu_seqlens, (b + 1,), torch.int32, cache)
    read = {"cache": cache, "block_table": block_table, "seq_lens": seq_lens, "seq_starts": seq_starts}
    check_no_overlap(NAME, {"out": out, "cu_seqlens": cu_seqlens}, read)
    records = layout.record_layout(cache.dtype)
    if records is not None and base_alignment(cache, *([] if out is None else [out])) < 16:
        raise ValueError(f"{NAME}: a {records.name} cache and out must be 16-byte aligned")

    if num_tokens is None:
        # The convenience path: the one host sync of this interface.
        num_tokens = out.shape[0] if out is not None else int(seq_lens.to(torch.int64).clamp_min(0).sum().item())
    if out is None:
        out = torch.empty((num_tokens, d), dtype=torch.bfloat16, device=cache.device)
    if cu_seqlens is None:
        cu_seqlens = torch.empty((b + 1,), dtype=torch.int32, device=cache.device)

    if b == 0 or num_tokens == 0 or is_host(cache):
        cu_seqlens.copy_(ref.cu_seqlens_ref(seq_lens))
        if b and num_tokens and is_host(cache):
            rows, _ = ref.load_paged_kv_cache_ref(cache, block_table, seq_lens, seq_starts, num_tokens)
            written = min(num_tokens, int(cu_seqlens[-1]))
            out[:written].copy_(rows[:written])
        return out, cu_seqlens

    tl = backend_ops(NAME, cache)
    block_size = cache.shape[1]
    lens_dtype = LENS_DTYPES[seq_lens.dtype]
    starts_dtype = None if seq_starts is None else LENS_DTYPES[seq_starts.dtype]
    # Rows past num_tokens are outside the kernel's view of out, so it never writes them.
    target = out[:num_tokens]
    if records is None:
        kernel = tl.ops.load_paged_kv_bf16_tl(d, block_size, lens_dtype, starts_dtype, x_align=base_alignment(cache, out))
        source = cache
    else:
        factory = tl.ops.load_paged_kv_fp4_tl if records is layout.FP4 else tl.ops.load_paged_kv_fp8_tl
        kernel = factory(block_size, lens_dtype, starts_dtype)
        source = cache.view(torch.uint8)
    kernel(source, block_table, seq_lens, seq_lens if seq_starts is None else seq_starts, target, cu_seqlens)
    return out, cu_seqlens
