"""Huawei Ascend 950 TileLang implementation of `load_paged_kv_cache`: the CUDA factories' names,
signatures and semantics (see kernels/load_paged_kv_cache/cuda.py for the operands and
kernels/load_paged_kv_cache/ref.py for the contract). Verified by lowering to AscendC only (the
codegen_ascend suite); no NPU has run it.

Where the work runs: a vector (AIV) kernel, one persistent block per vector core over tiles of
`rows` output rows. Per tile the scalar unit walks seq_lens (MTE2 brings them in chunks into the
Unified Buffer), keeps the running prefix, and records for each tile row its request and position
(the tile-0 core also stores cu_seqlens); it then fetches each valid row's block id from the block
table (one small DMA per row) and brings the row's record in with one DMA, a bf16 row with one DMA
per head (a slot's heads are not adjacent in an HND cache; plain rows are one head), each head at a
32-byte aligned pitch of the UB, as a DMA's UB address must be. One SIMT region dequantises the tile
(the portable forms of kernels/quant/tl_formats.py's expressions, with results bit-identical to the
CUDA kernel's) or zero-fills rows without a slot; MTE3 stores the rows that belong to requests (a
prefix of the tile: rows past the total stay untouched, rows at or past cap are outside the view).
Row ids, positions and cache offsets are 64-bit. `x_align` is accepted for signature parity and
ignored (global-memory DMAs are byte-granular).
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import tilelang
import tilelang.ascend.language as T

from kernels.load_paged_kv_cache.ref import INDEX_DTYPES, check_block_stride, check_factory_args
from kernels.quant import tl_formats as F
from kernels.static_args import head_staging_bytes, row_elements
from kernels.store_kv_cache import layout

__all__ = ["INDEX_DTYPES", "MAX_D", "load_paged_kv_bf16_tl", "load_paged_kv_fp4_tl", "load_paged_kv_fp8_tl", "load_paged_kv_shipped_configs", "tile_rows"]

MAX_D = 16384
_VECTOR_CORES = 64
# Output bytes per tile: whole rows up to 32 KiB, at most 32 rows (the scalar per-row work).
_TILE_BYTES = 32 * 1024
# One bf16 row's per-head staging, at most: MAX_D values, or heads of 8 values (16 bytes padded to
# 32); only narrower heads of wide rows are refused.
_STAGE_BYTES = 64 * 1024
_MAX_ROWS = 32
# Lengths brought into the UB per chunk of the scan.
_LENS_CHUNK = 1024
_SIMT_THREADS = 1024
_UB_ALIGN = 32


def tile_rows(D: int, staged: int = 0) -> int:
    """Rows per tile for output rows of D bf16 values, each staged in `staged` bf16 UB elements
    (per-head padding; 0: D)."""
    return max(1, min(_MAX_ROWS, _TILE_BYTES // (2 * max(D, staged))))


def _pad(n: int, elem_bytes: int) -> int:
    per = max(1, _UB_ALIGN // elem_bytes)
    return -(-n // per) * per


def load_paged_kv_shipped_configs() -> dict[str, list[tuple]]:
    """{factory name: [positional args + (x_align,) for bf16]}: tiles of 28 rows (576), of 32 rows
    (the cap, 128), of one row (16384); an odd width; per-head NHD and HND caches, heads padded in
    the UB (12 bytes to 32; 16 to 32 at 16384 values, the largest UB footprint) and block-strided
    rows; both index dtypes and no starts; both record layouts, dense and block-strided (one half
    of a K/V-interleaved pool)."""
    return {
        "load_paged_kv_bf16_tl": [
            (1, 576, 64, (64 * 576, 576, 576), "int32", None, 16),
            (1, 128, 16, (16 * 128, 128, 128), "int64", "int64", 16),
            (1, MAX_D, 64, (64 * MAX_D, MAX_D, MAX_D), "int32", "int32", 16),
            (1, 7, 1, (7, 7, 7), "int64", None, 16),
            (8, 128, 16, (16 * 1024, 1024, 128), "int32", None, 16),
            (8, 128, 64, (64 * 1024, 128, 64 * 128), "int64", "int32", 16),
            (1, 576, 64, (2 * 64 * 576, 576, 576), "int32", "int64", 16),
            (3, 6, 5, (180, 18, 6), "int64", None, 16),  # heads of 12 bytes, each staged at 32
            (2048, 8, 1, (16384, 16384, 8), "int32", None, 16),  # 64 KiB of staging for a 32 KiB row
        ],
        "load_paged_kv_fp4_tl": [(64, 64 * 400, "int32", "int64"), (16, 2 * 16 * 400, "int64", None)],
        "load_paged_kv_fp8_tl": [(16, 16 * 656, "int64", None), (64, 2 * 64 * 656, "int32", "int32")],
    }


def _kernel(records, D: int, block_size: int, lens_dtype: str, starts_dtype, H: int = 1, cache_strides=None):
    """The kernel of one cache layout (records None: bf16 rows of D = H * Dh values out of a
    (num_blocks, block_size, H, Dh) cache with strides (*cache_strides, 1); records: a
    (num_blocks, block_size, R) byte cache with strides (cache_strides[0], R, 1))."""
    check_factory_args(block_size, lens_dtype, starts_dtype)
    b, max_blocks, num_blocks, cap = T.dynamic("b"), T.dynamic("max_blocks"), T.dynamic("num_blocks"), T.dynamic("cap")
    starts_t = starts_dtype if starts_dtype is not None else lens_dtype
    width = D if records is None else layout.WIDTH
    R = D if records is None else records.record_bytes
    Dh = D // H
    # A DMA into the UB needs a 32-byte aligned destination, so each head of a bf16 slot lands at
    # its own padded pitch (heads of 16 * j values: no padding).
    pitch = _pad(Dh, 2)
    if records is None:
        head_staging_bytes("load_paged_kv_cache", H, Dh, "bfloat16", 1, _STAGE_BYTES)
    rows = tile_rows(width, H * pitch if records is None else 0)
    src_dtype = "bfloat16" if records is None else "uint8"
    src_elem = 2 if records is None else 1
    groups = 1 if records is None else records.groups
    threads = min(_SIMT_THREADS, rows * groups)
    rounds = -(-rows * groups // threads)
    chunk = _LENS_CHUNK

    if records is None:
        cache_t = T.StridedTensor((num_blocks, block_size, H, Dh), (*cache_strides, 1), src_dtype)
    else:
        cache_t = T.StridedTensor((num_blocks, block_size, R), (cache_strides[0], R, 1), src_dtype)

    @T.prim_func
    def load_paged_kv(
        cache: cache_t,
        block_table: T.Tensor((b, max_blocks), "int32"),
        seq_lens: T.Tensor((b,), lens_dtype),
        seq_starts: T.Tensor((b,), starts_t),
        out: T.Tensor((cap, width), "bfloat16"),
        cu_seqlens: T.Tensor((b + 1,), "int32"),
    ):
        with T.Kernel(_VECTOR_CORES) as core:
            lens_ub = T.alloc_shared((chunk,), lens_dtype)
            starts_ub = T.alloc_shared((chunk,), starts_t)
            cu_ub = T.alloc_shared((chunk,), "int32")
            req_ub = T.alloc_shared((_pad(rows, 4),), "int32")
            pos_ub = T.alloc_shared((_pad(rows, 8),), "int64")
            blk_ub = T.alloc_shared((_pad(rows, 4),), "int32")
            one_ub = T.alloc_shared((8,), "int32")
            src_ub = T.alloc_shared((rows, H, pitch), src_dtype) if records is None else T.alloc_shared((rows, _pad(R, src_elem)), src_dtype)
            y_ub = T.alloc_shared((rows, _pad(width, 2)), "bfloat16")
            carry = T.alloc_var("int32", init=0)
            written = T.alloc_var("int32", init=0)
            for k in T.Persistent([T.ceildiv(cap, rows)], _VECTOR_CORES, core, group_size=1, num_stages=1):
                t0 = k * rows
                t_end = T.min(t0 + rows, cap)
                for r in T.serial(rows):
                    req_ub[r] = -1
                    blk_ub[r] = -2
                carry = 0
                for c in T.serial(T.ceildiv(b, chunk)):
                    c0 = c * chunk
                    n = T.min(chunk, b - c0)
                    T.copy(seq_lens[c0 : c0 + n], lens_ub[:n])
                    if starts_dtype is not None:
                        T.copy(seq_starts[c0 : c0 + n], starts_ub[:n])
                    for i in T.serial(n):
                        length = T.cast(T.min(T.max(lens_ub[i], 0), 2**31 - 1), "int32")
                        cu_ub[i] = carry
                        lo = T.max(carry, t0)
                        hi = T.min(carry + length, t_end)
                        for t in T.serial(T.max(hi - lo, 0)):
                            req_ub[lo - t0 + t] = c0 + i
                            start = T.int64(0) if starts_dtype is None else T.cast(starts_ub[i], "int64")
                            pos_ub[lo - t0 + t] = start + T.cast(lo + t - carry, "int64")
                        carry = carry + length
                    if k == 0:
                        T.copy(cu_ub[:n], cu_seqlens[c0 : c0 + n])
                if k == 0:
                    cu_ub[0] = carry
                    T.copy(cu_ub[0:1], cu_seqlens[b : b + 1])
                written = 0
                for r in T.serial(rows):
                    if req_ub[r] >= 0:
                        written = written + 1
                        blk_ub[r] = -1
                        p = pos_ub[r]
                        if p >= 0 and p // block_size < T.cast(max_blocks, "int64"):
                            T.copy(block_table[req_ub[r], p // block_size : p // block_size + 1], one_ub[0:1])
                            if one_ub[0] >= 0 and one_ub[0] < num_blocks:
                                blk_ub[r] = one_ub[0]
                                if records is None:
                                    # One DMA per head: a slot's heads need not be adjacent (HND).
                                    for h in T.serial(H):
                                        T.copy(cache[T.cast(one_ub[0], "int64"), p % block_size, h, :], src_ub[r, h, :Dh])
                                else:
                                    T.copy(cache[T.cast(one_ub[0], "int64"), p % block_size, :], src_ub[r, :R])
                with T.SimtVF(threads=threads):
                    tid = T.get_thread_binding(0)
                    sc = T.alloc_var("float32")
                    for i in T.serial(rounds):
                        idx = i * threads + tid
                        if idx < rows * groups:
                            r = idx // groups
                            g = idx % groups
                            if records is None:
                                for h in T.serial(H):
                                    for e in T.serial(Dh):
                                        y_ub[r, h * Dh + e] = T.if_then_else(blk_ub[r] >= 0, src_ub[r, h, e], T.bfloat16(0))
                            else:
                                group = records.group
                                if records.scale_bytes == 1:
                                    sc = F.ue8m0_value(src_ub[r, records.scale_offset + g])
                                else:
                                    sc = T.reinterpret(
                                        T.cast(src_ub[r, records.scale_offset + 4 * g], "uint32")
                                        | T.shift_left(T.cast(src_ub[r, records.scale_offset + 4 * g + 1], "uint32"), T.uint32(8))
                                        | T.shift_left(T.cast(src_ub[r, records.scale_offset + 4 * g + 2], "uint32"), T.uint32(16))
                                        | T.shift_left(T.cast(src_ub[r, records.scale_offset + 4 * g + 3], "uint32"), T.uint32(24)),
                                        "float32",
                                    )
                                for e in T.serial(group):
                                    if records.scale_bytes == 1:
                                        byte = src_ub[r, (g * group + e) // 2]
                                        value = F.e2m1_value(T.if_then_else(e % 2 == 1, byte >> T.uint8(4), byte & T.uint8(15)))
                                    else:
                                        value = T.cast(T.reinterpret(src_ub[r, g * group + e], "float8_e4m3"), "float32")
                                    y_ub[r, g * group + e] = T.if_then_else(blk_ub[r] >= 0, T.cast(value * sc, "bfloat16"), T.bfloat16(0))
                                # The rope: the group's share of the 64 bf16 values, as little-endian byte pairs.
                                for e in T.serial(layout.ROPE // groups):
                                    at = records.rope_offset + 2 * (g * (layout.ROPE // groups) + e)
                                    bits = T.cast(src_ub[r, at], "uint16") | T.shift_left(T.cast(src_ub[r, at + 1], "uint16"), T.uint16(8))
                                    y_ub[r, layout.LATENT + g * (layout.ROPE // groups) + e] = T.if_then_else(
                                        blk_ub[r] >= 0, T.reinterpret(bits, "bfloat16"), T.bfloat16(0)
                                    )
                if written > 0:
                    T.copy(y_ub[:written, :width], out[t0 : t0 + written, :])

    return load_paged_kv


@tilelang.jit(target="ascend")
def load_paged_kv_bf16_tl(H: int, Dh: int, block_size: int, cache_strides: tuple, lens_dtype: str, starts_dtype, *, x_align: int = 16):
    """Ascend kernel(cache, block_table, seq_lens, seq_starts, out, cu_seqlens) for a bf16 cache of
    H heads of Dh values per slot, strides cache_strides."""
    row_elements("load_paged_kv_cache", H * Dh, "bfloat16", ["bfloat16"], H * Dh, max_D=MAX_D)
    if H < 1 or Dh < 1 or len(cache_strides) != 3 or min(cache_strides) < 1:
        raise ValueError(f"load_paged_kv_cache: H, Dh and the 3 cache strides must be positive, got {H}, {Dh}, {cache_strides}")
    return _kernel(None, H * Dh, block_size, lens_dtype, starts_dtype, H, tuple(cache_strides))


@tilelang.jit(target="ascend")
def load_paged_kv_fp4_tl(block_size: int, block_stride: int, lens_dtype: str, starts_dtype):
    """Ascend kernel(cache, block_table, seq_lens, seq_starts, out, cu_seqlens) for FP4 records,
    blocks block_stride bytes apart."""
    check_block_stride(layout.FP4, block_size, block_stride)
    return _kernel(layout.FP4, layout.WIDTH, block_size, lens_dtype, starts_dtype, cache_strides=(block_stride,))


@tilelang.jit(target="ascend")
def load_paged_kv_fp8_tl(block_size: int, block_stride: int, lens_dtype: str, starts_dtype):
    """Ascend kernel(cache, block_table, seq_lens, seq_starts, out, cu_seqlens) for FP8 records,
    blocks block_stride bytes apart."""
    check_block_stride(layout.FP8, block_size, block_stride)
    return _kernel(layout.FP8, layout.WIDTH, block_size, lens_dtype, starts_dtype, cache_strides=(block_stride,))
