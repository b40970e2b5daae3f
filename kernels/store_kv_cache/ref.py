"""PyTorch reference for `store_kv_cache`: the contract. Readable, runs on CPU and GPU.

    store_kv_cache_ref(kv, cache, slot_mapping)                                  # MLA latent rows
    store_kv_cache_ref(k, k_cache, slot_mapping, v=v, v_cache=v_cache, layout="HND")   # per head
    store_kv_cache_ref(..., out_of_range=counter)                                # validation mode

Writes new per-token rows into a paged cache, in place, and returns nothing. Token i goes to slot
s = slot_mapping[i], which is block s // block_size, offset s % block_size of the cache:

  * s < 0: skipped (a padding token): not written, but its row may be read (the CUDA kernel loads it).
  * s >= num_blocks * block_size: never written; when `out_of_range` (a (1,) int32 tensor) is
    given, the number of such slots is added to it.
  * Valid slots should be distinct: if two tokens share one, which row lands is unspecified.

Cache layouts (the interface chooses from the cache's dtype and rank):

  MLA latent rows    kv (T, D) bfloat16 or float16 (rows may be strided).
    plain            cache (num_blocks, block_size, D) of kv's dtype: cache[b, o] = kv[i].
    FP4              cache (num_blocks, block_size, 400) torch.float4_e2m1fn_x2, D == 576: the
                     record layout.encode_rows(kv[i], layout.FP4) (kernels/store_kv_cache/layout.py).
    FP8              cache (num_blocks, block_size, 656) torch.float8_e4m3fn, D == 576:
                     layout.encode_rows(kv[i], layout.FP8).
  Per head           k (T, H, Dh) bfloat16 or float16, cache of the same dtype:
    "NHD"            k_cache (num_blocks, block_size, H, Dh): k_cache[b, o] = k[i];
    "HND"            k_cache (num_blocks, H, block_size, Dh): k_cache[b, :, o] = k[i];
                     v / v_cache (same shapes) are written the same way when given.

`scatter_rows` is the same scatter without the slot checks (every slot must be in range): the
index_put path a torch program would run, used as the benchmark's peer.
"""

from __future__ import annotations

import torch

from kernels.store_kv_cache import layout as records

__all__ = [
    "BACKEND_DTYPES",
    "INDEX_DTYPES",
    "LAYOUTS",
    "MAX_ROW",
    "cache_rows",
    "check_row",
    "check_slots",
    "scatter_rows",
    "store_kv_cache_ref",
]

LAYOUTS = ("NHD", "HND")
# Element type names the backends' copy factories take, and those of their slot mappings.
BACKEND_DTYPES = ("bfloat16", "float16")
INDEX_DTYPES = ("int32", "int64")
# Widest token row (H * Dh elements) of the copy kernels: one CUDA block of at most 1024 lanes, each
# holding at most 16 vectors per operand; covers 128 heads of 128 and every MLA width.
MAX_ROW = 16384


def check_slots(name: str, index_dtype: str, block_size: int) -> None:
    """ValueError, naming `name`, unless index_dtype is one of INDEX_DTYPES and block_size >= 1."""
    if index_dtype not in INDEX_DTYPES:
        raise ValueError(f"{name}: index_dtype {index_dtype!r} is not one of {', '.join(INDEX_DTYPES)}")
    if block_size < 1:
        raise ValueError(f"{name}: block_size must be >= 1, got {block_size}")


def check_row(name: str, H: int, Dh: int, dtype: str) -> None:
    """ValueError, naming `name`, unless dtype is one of BACKEND_DTYPES and 1 <= H * Dh <= MAX_ROW."""
    if dtype not in BACKEND_DTYPES:
        raise ValueError(f"{name}: dtype {dtype!r} is not one of {', '.join(BACKEND_DTYPES)}")
    if H < 1 or Dh < 1 or H * Dh > MAX_ROW:
        raise ValueError(f"{name}: H * Dh must be in [1, {MAX_ROW}], got H={H}, Dh={Dh}")


def cache_rows(kv: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
    """kv's rows as the cache stores them: the rows themselves, or uint8 records for a quantised cache."""
    rec = records.record_layout(cache.dtype)
    return kv if rec is None else records.encode_rows(kv, rec)


def _block_view(cache: torch.Tensor, layout: str) -> torch.Tensor:
    """The cache indexed [block, offset, ...]: quantised caches as bytes, HND with heads moved behind."""
    view = cache.view(torch.uint8) if records.record_layout(cache.dtype) is not None else cache
    return view.transpose(1, 2) if layout == "HND" else view


def scatter_rows(kv: torch.Tensor, cache: torch.Tensor, slots: torch.Tensor, layout: str = "NHD") -> None:
    """cache[slot // block_size, slot % block_size] = row, for slots all in [0, num_blocks * block_size)."""
    view = _block_view(cache, layout)
    block_size = view.shape[1]
    slots = slots.to(torch.int64)
    view[slots // block_size, slots % block_size] = cache_rows(kv, cache)


def store_kv_cache_ref(
    kv: torch.Tensor,
    cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    *,
    v: torch.Tensor | None = None,
    v_cache: torch.Tensor | None = None,
    layout: str = "NHD",
    out_of_range: torch.Tensor | None = None,
) -> None:
    view = _block_view(cache, layout)
    num_slots = view.shape[0] * view.shape[1]
    slots = slot_mapping.to(torch.int64)
    keep = (slots >= 0) & (slots < num_slots)
    scatter_rows(kv[keep], cache, slots[keep], layout)
    if v is not None:
        scatter_rows(v[keep], v_cache, slots[keep], layout)
    if out_of_range is not None:
        out_of_range += (slots >= num_slots).sum(dtype=torch.int32).to(out_of_range.device)
