"""Interface of `store_kv_cache`: write new per-token KV rows into a paged cache, in place.

    tilelang_ops.store_kv_cache(kv, cache, slot_mapping)                 # MLA latent rows
    tilelang_ops.store_kv_cache(k, k_cache, slot_mapping, v=v, v_cache=v_cache, layout="HND")
    tilelang_ops.store_kv_cache(kv, cache, slot_mapping, out_of_range=counter)   # validation mode

kv             MLA latent rows: (T, D) bfloat16 or float16 (float16 only into a plain cache), rows
               may be strided (a view of a wider tensor), last dimension contiguous.
               Per head: k (T, H, Dh) bfloat16 or float16, any positive token and head strides
               (no broadcast views), last dimension contiguous; 1 <= H * Dh <= 16384 (and 1 <= D <= 16384 for plain MLA rows).
cache          the layout follows the cache's dtype and rank (kernels/store_kv_cache/ref.py):
               (num_blocks, block_size, D) of kv's dtype: rows stored as they are;
               (num_blocks, block_size, 400) torch.float4_e2m1fn_x2: FP4 records of 576-wide rows;
               (num_blocks, block_size, 656) torch.float8_e4m3fn: FP8 records (DeepSeek-V3.2);
               per head (num_blocks, block_size, H, Dh) ("NHD") or (num_blocks, H, block_size, Dh)
               ("HND") of k's dtype; block_size >= 1. The byte layouts are
               kernels/store_kv_cache/layout.py. Each block must be dense (one contiguous run of
               memory); blocks may be strided, so a cache can be a view of a larger allocation (K
               and V interleaved per block, one layer of a multi-layer pool).
slot_mapping   (T,) int32 or int64 on kv's device, contiguous: slot = block * block_size + offset.
               slot < 0 skips the token (padding); slot >= num_blocks * block_size is never
               written. Valid slots must be distinct: what a shared slot ends up holding is
               unspecified (several threads write a row, so it may mix the rows' bytes).
v, v_cache     per-head caches only: V rows written in the same launch as K; v has k's shape,
               dtype and strides, v_cache k_cache's. Both or neither. v_cache may interleave with
               k_cache (same allocation) as long as no block of one overlaps a block of the other.
layout         "NHD" (default) or "HND": the per-head cache's order; MLA caches take "NHD".
out_of_range   optional (1,) int32 tensor on kv's device: the number of slots >= num_blocks *
               block_size is added to it on the device (no host sync), so a serving loop can
               check its slot mappings without stopping. The caller zeroes it.

Returns None. Quantised records are bit-exact against layout.encode_rows; plain rows are copied bit
for bit. CUDA tensors run one TileLang launch of the `cuda` backend (K and V together), with no host
sync and no allocation, so it is CUDA-graph capturable; on sm_90+ a programmatic dependent launch
(kernels/tl_launch.py: it overlaps the kernel before it and waits on the device for it); CPU tensors
are served by the reference. Invalid arguments raise TypeError or ValueError naming the argument
before anything is written. T == 0 launches nothing.
"""

from __future__ import annotations

import torch

from kernels.interface import (
    INDEX_DTYPES,
    backend_ops,
    base_alignment,
    canonical_strides,
    check_block_dense,
    check_choice,
    check_device,
    check_no_overlap,
    check_rows,
    check_tensor,
    dense_rows,
    is_host,
    launch_options,
    overlaps,
)
from kernels.store_kv_cache import layout as records
from kernels.store_kv_cache import ref

__all__ = ["store_kv_cache"]

NAME = "store_kv_cache"
# torch dtype -> the element type name the copy factories take.
DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16"}
CACHE_DTYPES = (torch.bfloat16, torch.float16, *records.RECORDS)
MAX_ROW = ref.MAX_ROW
LAYOUTS = ref.LAYOUTS

def _blocks_disjoint(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two caches of equal shape and strides (dense blocks) share no byte: true when their
    spans do not meet, or when b's blocks sit in the gaps between a's (an interleaved allocation)."""
    if not overlaps(a, b):
        return True
    block = a[0].numel() * a.element_size()
    pitch = a.stride(0) * a.element_size()
    shift = abs(b.data_ptr() - a.data_ptr()) % pitch if a.shape[0] > 1 else abs(b.data_ptr() - a.data_ptr())
    return shift >= block and (a.shape[0] == 1 or pitch - shift >= block)

def _check_block_size(cache: torch.Tensor, block_size: int) -> None:
    # The CPU reference would store nothing into a cache without slots; the kernels reject it.
    if block_size < 1:
        raise ValueError(f"{NAME}: cache has block_size 0 (shape {tuple(cache.shape)}); a block must hold at least one slot")

def _check_mla(kv, cache, v, v_cache, layout: str) -> None:
    rec = records.record_layout(cache.dtype)
    if rec is not None:
        check_rows(NAME, "kv", kv, [torch.bfloat16])
        if kv.shape[1] != records.WIDTH:
            raise ValueError(f"{NAME}: kv must be (T, {records.WIDTH}) for a {rec.name} cache, got {tuple(kv.shape)}")
        width = rec.record_bytes
    else:
        check_rows(NAME, "kv", kv, [cache.dtype], MAX_ROW)
        width = kv.shape[1]
        if width < 1:
            raise ValueError(f"{NAME}: kv has width 0; 1 to {MAX_ROW} elements per token are supported")
    check_tensor(NAME, "cache", cache, dim=3, like=kv)
    if cache.shape[2] != width:
        raise ValueError(f"{NAME}: cache must be (num_blocks, block_size, {width}) for kv {tuple(kv.shape)}, got {tuple(cache.shape)}")
    _check_block_size(cache, cache.shape[1])
    if v is not None or v_cache is not None:
        raise ValueError(f"{NAME}: v and v_cache are for per-head caches (kv of shape (T, H, Dh))")
    if layout != "NHD":
        raise ValueError(f"{NAME}: layout {layout!r} applies to per-head caches; an MLA cache is (num_blocks, block_size, width)")

def _check_heads(kv, cache, v, v_cache, layout: str) -> None:
    check_tensor(NAME, "kv", kv, dtypes=DTYPES, dim=3)
    check_device(NAME, "kv", kv)
    t, h, dh = kv.shape
    if dh > 1 and kv.stride(2) != 1:
        raise ValueError(f"{NAME}: kv's last dimension must be contiguous (stride 1), got strides {kv.stride()}")
    if any(size > 1 and stride < 1 for size, stride in zip(kv.shape, kv.stride())):
        raise ValueError(f"{NAME}: kv's token and head strides must be positive (no broadcast views), got {kv.stride()}")
    if h * dh > MAX_ROW or h * dh == 0:
        raise ValueError(f"{NAME}: kv has H * Dh = {h * dh}; 1 to {MAX_ROW} elements per token are supported")
    check_tensor(NAME, "cache", cache, dtypes=[kv.dtype], dim=4, like=kv)
    nb, a, b, d = cache.shape
    heads, block_size = (b, a) if layout == "NHD" else (a, b)
    if heads != h or d != dh:
        order = "(num_blocks, block_size, H, Dh)" if layout == "NHD" else "(num_blocks, H, block_size, Dh)"
        raise ValueError(f"{NAME}: cache must be {order} = (*, *, {h}, {dh}) for layout {layout!r}, got {tuple(cache.shape)}")
    _check_block_size(cache, block_size)
    if (v is None) != (v_cache is None):
        raise ValueError(f"{NAME}: v and v_cache go together (got {'v' if v is not None else 'v_cache'} alone)")
    if v is not None:
        check_tensor(NAME, "v", v, dtypes=[kv.dtype], shape=tuple(kv.shape), like=kv)
        if v.stride() != kv.stride() and t > 0:
            raise ValueError(f"{NAME}: v must have kv's strides {kv.stride()}, got {v.stride()}")
        check_tensor(NAME, "v_cache", v_cache, dtypes=[kv.dtype], shape=tuple(cache.shape), like=kv)
        if v_cache.stride() != cache.stride():
            raise ValueError(f"{NAME}: v_cache must have cache's strides {cache.stride()}, got {v_cache.stride()}")

def store_kv_cache(
    kv: torch.Tensor,
    cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    *,
    v: torch.Tensor | None = None,
    v_cache: torch.Tensor | None = None,
    layout: str = "NHD",
    out_of_range: torch.Tensor | None = None,
) -> None:
    check_choice(NAME, "layout", layout, LAYOUTS)
    check_tensor(NAME, "kv", kv)
    check_tensor(NAME, "cache", cache, dtypes=CACHE_DTYPES)
    if kv.dim() == 2:
        _check_mla(kv, cache, v, v_cache, layout)
    elif kv.dim() == 3:
        _check_heads(kv, cache, v, v_cache, layout)
    else:
        raise ValueError(f"{NAME}: kv must be (T, D) latent rows or (T, H, Dh) per-head rows, got shape {tuple(kv.shape)}")
    if cache.dim() and cache.stride(-1) != 1 and cache.shape[-1] > 1:
        raise ValueError(f"{NAME}: cache's last dimension must be contiguous (stride 1), got strides {cache.stride()}")
    check_block_dense(NAME, "cache", cache)
    if v_cache is not None:
        check_block_dense(NAME, "v_cache", v_cache)
    check_tensor(NAME, "slot_mapping", slot_mapping, dtypes=INDEX_DTYPES, shape=(kv.shape[0],), like=kv, contiguous=True)
    if out_of_range is not None:
        check_tensor(NAME, "out_of_range", out_of_range, dtypes=[torch.int32], shape=(1,), like=kv, contiguous=True)
    read = {"kv": kv, "v": v, "slot_mapping": slot_mapping}
    check_no_overlap(NAME, {"cache": cache, "out_of_range": out_of_range}, read)
    if v_cache is not None:
        check_no_overlap(NAME, {"v_cache": v_cache, "out_of_range": out_of_range}, read)
        if not _blocks_disjoint(cache, v_cache):
            raise ValueError(f"{NAME}: v_cache overlaps cache in memory")
    if kv.shape[0] == 0:
        return
    if is_host(kv):
        ref.store_kv_cache_ref(kv, cache, slot_mapping, v=v, v_cache=v_cache, layout=layout, out_of_range=out_of_range)
        return
    _launch(backend_ops(NAME, kv), kv, cache, slot_mapping, v, v_cache, layout, out_of_range)

def _launch(tl, kv, cache, slot_mapping, v, v_cache, layout, out_of_range) -> None:
    index_dtype = INDEX_DTYPES[slot_mapping.dtype]
    checked = "_checked" if out_of_range is not None else ""
    extra = (out_of_range,) if out_of_range is not None else ()
    options = launch_options(kv)
    rec = records.record_layout(cache.dtype)
    if rec is not None:
        kv_rows, kv_stride = dense_rows(kv)
        cache_bytes = canonical_strides(cache.view(torch.uint8))
        factory = getattr(tl.ops, f"store_kv_{rec.name}{checked}_tl")
        kernel = factory(index_dtype, cache.shape[1], kv_stride, cache_bytes.stride(0), x_align=base_alignment(kv_rows, cache_bytes), **options)
        kernel(kv_rows, slot_mapping, cache_bytes, *extra)
        return
    if kv.dim() == 2:
        k, k_cache = kv.unsqueeze(1), cache.unsqueeze(2)
    else:
        # An HND cache is its NHD transpose to the kernel: only the strides differ.
        k, k_cache = kv, (cache.transpose(1, 2) if layout == "HND" else cache)
    k, k_cache = canonical_strides(k), canonical_strides(k_cache)
    _, h, dh = k.shape
    static = (h, dh, DTYPES[kv.dtype], index_dtype, k_cache.shape[1], tuple(k.stride()[:2]), tuple(k_cache.stride()[:3]))
    if v is None:
        kernel = getattr(tl.ops, f"store_kv{checked}_tl")(*static, x_align=base_alignment(k, k_cache), **options)
        kernel(k, slot_mapping, k_cache, *extra)
        return
    v_view = canonical_strides(v)
    vc = canonical_strides(v_cache.transpose(1, 2) if layout == "HND" else v_cache)
    kernel = getattr(tl.ops, f"store_kv_pair{checked}_tl")(*static, x_align=base_alignment(k, k_cache, v_view, vc), **options)
    kernel(k, v_view, slot_mapping, k_cache, vc, *extra)
