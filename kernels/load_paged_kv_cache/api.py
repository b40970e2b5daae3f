"""Interface of `load_paged_kv_cache`: a batch of requests' tokens out of a paged KV cache, as
contiguous bf16 rows (dequantised from FP4/FP8 record caches).

    out, cu_seqlens = tilelang_ops.load_paged_kv_cache(cache, block_table, seq_lens, num_tokens=T)
    load_paged_kv_cache(cache, block_table, seq_lens, seq_starts=starts, out=out, cu_seqlens=cu)
    load_paged_kv_cache(cache, block_table, seq_lens)        # convenience: one host sync (see below)
    load_paged_kv_cache(k_cache, block_table, seq_lens, num_tokens=T, layout="HND")  # per head

cache        num_blocks, block_size >= 1; the caches store_kv_cache writes:
             (num_blocks, block_size, D) bfloat16 rows, 1 <= D <= 16384;
             per head, bfloat16: (num_blocks, block_size, H, Dh) for layout "NHD" or
             (num_blocks, H, block_size, Dh) for "HND", 1 <= H * Dh <= 16384;
             both dense within each block, blocks at any stride of at least one block (a view of
             one layer of a pool, or of K in a K/V-interleaved allocation);
             or the quantised records of kernels/store_kv_cache/layout.py chosen by dtype
             (torch.float4_e2m1fn_x2 with W = 400, torch.float8_e4m3fn with W = 656; both give
             D = 576), dense within each block, blocks at any stride of at least one block that
             is a multiple of 16 bytes; the cache and out 16-byte aligned.
layout       "NHD" (default) or "HND": the order of a per-head cache; other caches take "NHD".
block_table  (B, max_blocks) int32 only, contiguous, max_blocks >= 1: physical block ids.
seq_lens     (B,) int32 | int64, contiguous: tokens per request (negative counts as 0).
seq_starts   (B,) int32 | int64 contiguous, or None (0): first position of each request to load
             (any position, not block-aligned).
num_tokens   int >= 0: rows the call may write (a CUDA-graph-safe bound on sum(seq_lens)).
out          (rows, D), or (rows, H, Dh) for a per-head cache, bfloat16 contiguous, caller-owned;
             rows >= num_tokens when both are given, else num_tokens = rows.
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
path), so the call is CUDA-graph capturable; on sm_90+ it is a programmatic dependent launch
(kernels/tl_launch.py). CPU tensors are served by the reference. Invalid
arguments raise TypeError or ValueError naming the argument before anything is written. B == 0 or
num_tokens == 0 launches no kernel: cu_seqlens is computed with torch (zeros for B == 0).
"""

from __future__ import annotations

import numbers

import torch

from kernels.interface import (
    backend_ops,
    base_alignment,
    canonical_strides,
    check_block_dense,
    check_choice,
    check_device,
    check_no_overlap,
    check_out,
    check_tensor,
    is_host,
    launch_options,
)
from kernels.load_paged_kv_cache import ref
from kernels.store_kv_cache import layout as record_formats

__all__ = ["load_paged_kv_cache"]

NAME = "load_paged_kv_cache"
# torch index dtype -> the element type name the factories take.
LENS_DTYPES = {torch.int32: "int32", torch.int64: "int64"}
CACHE_DTYPES = (torch.bfloat16, *record_formats.RECORDS)
MAX_D = 16384


def _check_cache(cache, layout: str) -> tuple[int, ...]:
    """The row shape of a valid cache: (D,), or (H, Dh) for a per-head cache."""
    check_tensor(NAME, "cache", cache, dtypes=CACHE_DTYPES)
    records = record_formats.record_layout(cache.dtype)
    if cache.dim() == 4 and records is None:
        check_device(NAME, "cache", cache)
        check_block_dense(NAME, "cache", cache)
        num_blocks, a, b, dh = cache.shape
        block_size, heads = (a, b) if layout == "NHD" else (b, a)
        if min(num_blocks, block_size, heads, dh) < 1:
            raise ValueError(f"{NAME}: cache must have at least one block, slot, head and column, got shape {tuple(cache.shape)}")
        if heads * dh > MAX_D:
            raise ValueError(f"{NAME}: cache has rows of H * Dh = {heads * dh} values; at most {MAX_D} are supported")
        return heads, dh
    if layout != "NHD":
        raise ValueError(f"{NAME}: layout {layout!r} applies to per-head caches (4-D); a cache of rows is (num_blocks, block_size, W)")
    check_tensor(NAME, "cache", cache, dim=3)
    check_device(NAME, "cache", cache)
    num_blocks, block_size, width = cache.shape
    if num_blocks < 1 or block_size < 1 or width < 1:
        raise ValueError(f"{NAME}: cache must have at least one block, slot and column, got shape {tuple(cache.shape)}")
    if records is None:
        check_block_dense(NAME, "cache", cache)
        if width > MAX_D:
            raise ValueError(f"{NAME}: cache has row width {width}; at most {MAX_D} is supported")
        return (width,)
    if width != records.record_bytes:
        raise ValueError(f"{NAME}: cache of {cache.dtype} must hold {records.record_bytes}-byte records (last dim), got {width}")
    check_block_dense(NAME, "cache", cache)
    # A record is read with 16-byte vectors, so every block must start on a 16-byte boundary.
    if num_blocks > 1 and cache.stride(0) % 16:
        raise ValueError(f"{NAME}: a {records.name} cache's block stride must be a multiple of 16 bytes, got {cache.stride(0)}")
    return (record_formats.WIDTH,)


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
    layout: str = "NHD",
) -> tuple[torch.Tensor, torch.Tensor]:
    check_choice(NAME, "layout", layout, ref.LAYOUTS)
    row_shape = _check_cache(cache, layout)
    check_tensor(NAME, "block_table", block_table, dtypes=[torch.int32], dim=2, like=cache, contiguous=True)
    b = block_table.shape[0]
    if block_table.shape[1] < 1:
        raise ValueError(f"{NAME}: block_table must have at least one column, got shape {tuple(block_table.shape)}")
    check_tensor(NAME, "seq_lens", seq_lens, dtypes=LENS_DTYPES, shape=(b,), like=cache, contiguous=True)
    if seq_starts is not None:
        check_tensor(NAME, "seq_starts", seq_starts, dtypes=LENS_DTYPES, shape=(b,), like=cache, contiguous=True)
    _check_num_tokens(num_tokens)
    if out is not None:
        check_tensor(NAME, "out", out, dtypes=[torch.bfloat16], dim=1 + len(row_shape), like=cache, contiguous=True)
        if tuple(out.shape[1:]) != row_shape:
            raise ValueError(f"{NAME}: out must be (rows, {', '.join(map(str, row_shape))}) (a cache row's shape), got {tuple(out.shape)}")
        if num_tokens is not None and out.shape[0] < num_tokens:
            raise ValueError(f"{NAME}: out has {out.shape[0]} rows, fewer than num_tokens {num_tokens}")
    check_out(NAME, "cu_seqlens", cu_seqlens, (b + 1,), torch.int32, cache)
    read = {"cache": cache, "block_table": block_table, "seq_lens": seq_lens, "seq_starts": seq_starts}
    check_no_overlap(NAME, {"out": out, "cu_seqlens": cu_seqlens}, read)
    records = record_formats.record_layout(cache.dtype)
    if records is not None and base_alignment(cache, *([] if out is None else [out])) < 16:
        raise ValueError(f"{NAME}: a {records.name} cache and out must be 16-byte aligned")

    if num_tokens is None:
        # The convenience path: the one host sync of this interface.
        num_tokens = out.shape[0] if out is not None else int(seq_lens.to(torch.int64).clamp_min(0).sum().item())
    if out is None:
        out = torch.empty((num_tokens, *row_shape), dtype=torch.bfloat16, device=cache.device)
    if cu_seqlens is None:
        cu_seqlens = torch.empty((b + 1,), dtype=torch.int32, device=cache.device)

    if b == 0 or num_tokens == 0 or is_host(cache):
        cu_seqlens.copy_(ref.cu_seqlens_ref(seq_lens))
        if b and num_tokens and is_host(cache):
            rows, _ = ref.load_paged_kv_cache_ref(cache, block_table, seq_lens, seq_starts, num_tokens, layout)
            written = min(num_tokens, int(cu_seqlens[-1]))
            out[:written].copy_(rows[:written])
        return out, cu_seqlens

    tl = backend_ops(NAME, cache)
    lens_dtype = LENS_DTYPES[seq_lens.dtype]
    starts_dtype = None if seq_starts is None else LENS_DTYPES[seq_starts.dtype]
    # Rows past num_tokens are outside the kernel's view of out, so it never writes them.
    target = out[:num_tokens].view(num_tokens, -1)
    if records is None:
        # Every bf16 cache is (num_blocks, block_size, H, Dh) to the kernel: plain rows are one head,
        # an HND cache is its NHD transpose (only the strides differ).
        slots_first = cache.unsqueeze(2) if cache.dim() == 3 else (cache.transpose(1, 2) if layout == "HND" else cache)
        source = canonical_strides(slots_first)
        _, block_size, heads, dh = source.shape
        kernel = tl.ops.load_paged_kv_bf16_tl(heads, dh, block_size, tuple(source.stride()[:3]), lens_dtype, starts_dtype, x_align=base_alignment(cache, out), **launch_options(cache))
    else:
        factory = tl.ops.load_paged_kv_fp4_tl if records is record_formats.FP4 else tl.ops.load_paged_kv_fp8_tl
        source = canonical_strides(cache.view(torch.uint8))
        kernel = factory(cache.shape[1], source.stride(0), lens_dtype, starts_dtype, **launch_options(cache))
    kernel(source, block_table, seq_lens, seq_lens if seq_starts is None else seq_starts, target, cu_seqlens)
    return out, cu_seqlens
