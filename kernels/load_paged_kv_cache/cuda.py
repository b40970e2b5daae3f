"""NVIDIA TileLang implementation of `load_paged_kv_cache`: paged cache -> contiguous bf16 rows.

    load = load_paged_kv_bf16_tl(H, Dh, block_size, cache_strides, lens_dtype, starts_dtype, x_align=...)
    load = load_paged_kv_fp4_tl(block_size, block_stride, lens_dtype, starts_dtype)
    load = load_paged_kv_fp8_tl(block_size, block_stride, lens_dtype, starts_dtype)
    load(cache, block_table, seq_lens, seq_starts, out, cu_seqlens)
    (each factory also takes pdl=False: True builds a programmatic dependent launch,
    kernels/tl_launch.py, sm_90+)

cache        bf16: (num_blocks, block_size, H, Dh) bfloat16 with strides (*cache_strides, 1), base
             aligned to x_align bytes: rows of D = H * Dh values (H = 1 for plain rows), the
             "NHD" per-head cache itself or an "HND" one as its transpose(1, 2) view; blocks may
             be strided.
             fp4 / fp8: (num_blocks, block_size, R) uint8 with strides (block_stride, R, 1), the
             byte view of a record cache (kernels/store_kv_cache/layout.py: R = 400 / 656),
             16-byte aligned, block_stride a multiple of 16 (ref.check_block_stride).
block_table  (B, max_blocks) int32, contiguous.
seq_lens     (B,) of lens_dtype (int32 or int64). seq_starts: (B,) of starts_dtype; starts_dtype
             None means every start is 0, and the kernel never reads seq_starts (the interface
             passes seq_lens there, so the signature stays fixed).
out          (cap, D) bfloat16 contiguous (D = H * Dh, or 576 for records), aligned like the cache.
cu_seqlens   (B + 1,) int32.

Semantics are kernels.load_paged_kv_cache.ref, bit for bit: output row t < cap of request b
(cu_seqlens[b] <= t < cu_seqlens[b + 1]) is position p = start_b + t - cu_seqlens[b], read from
slot (block_table[b, p // block_size], p % block_size); a zero row when p < 0, p // block_size >=
max_blocks or the block id is outside [0, num_blocks) (then neither the cache nor block_table
past its row is read). Rows t >= sum(seq_lens) are never written, and neither is anything at or
past row cap: a too-small `out` loses the requests' last rows, nothing else. Negative lengths count
as 0; the total must stay below 2**31 (the prefix is int32; a larger one gives wrong cu_seqlens
and rows, still never an access outside a buffer). Dequantisation is layout.decode_records: e2m1
or e4m3 value times the group's scale (UE8M0 byte 2**(e - 127) / fp32) in fp32, rounded once to
bf16; rope and bf16 rows are bit copies.

B, max_blocks, num_blocks and cap are dynamic: one compiled kernel serves every batch. Offsets
into the cache are 64-bit (num_blocks * block_size * R may pass 2**31), and so are output rows.
cap == 0 must not be launched (a CUDA grid cannot be empty).

One launch, no workspace. The output row count is data-dependent but bounded by cap, so the grid
covers cap in tiles of `tile_rows` rows. Each block first finds the requests of its own tile: it
scans seq_lens in chunks of one length per thread (warp shuffles, per-warp totals through shared
memory, a running carry: an exclusive prefix in a fixed order, no atomics), and the thread of a
request whose range meets the tile records (request, position) for those rows in shared memory;
block 0 also writes cu_seqlens. Then one thread per tile row looks its slot up in the block table,
and the rows are copied (loads of a thread all issued before its stores) with 128-bit accesses
where the row allows. The scan costs every block B lengths from L2 (B / threads loads per thread
and two barriers per chunk): negligible for a few thousand requests against the 16+ rows of
576 x 2 bytes a block moves. A two-phase design (cu_seqlens first, then a row kernel
binary-searching it) would add a launch and a dependent global read per row, which matters most
at decode sizes, where the launch is the cost.

Work per row: bf16 rows are split like outlier_detection's rows (up to 8 vectors per thread, 16
for rows past 8192 values at 2-byte vectors; a power-of-two lane group below a warp, whole warps
above). A record takes one lane per 16 bytes of
latent codes (16 lanes for FP4, a warp for FP8), and lanes 0..7 copy one 16-byte piece of the rope
each. The latent is dequantised in 8-value output vectors dealt round-robin: lane l of n makes
vectors l, l + n, ... (FP4: one 32-bit word of 8 codes and one UE8M0 byte each; FP8: 8 e4m3 bytes
and one fp32 scale), so every store instruction of a row group writes whole 32-byte sectors. Giving
each lane its own contiguous 16 bytes of codes instead makes every store write half sectors: on the
H200 the FP4 load then moved 2.4x the L2 write sectors of its output and was L2-bound (137 us for
64 x 2048 tokens against 67 us round-robin; kernels/load_paged_kv_cache/PERF.md). A thread issues
the reads of both its rows before it decodes either, and an FP4 code becomes an fp32 through the
denormal trick on its nibble in the word (tl_formats.e2m1_nibble_value: shifts, a mask, an exact
multiply), which took the issue-bound FP4 load from 67 to 60 us. The record is read through typed
views of the same buffer (T.view: uint32 code words, e4m3 codes, fp32 scales, bf16 rope), so every
section moves as whole vectors.
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import dataclasses
import math

import tilelang
import tilelang.language as T

from kernels.load_paged_kv_cache.ref import INDEX_DTYPES, check_block_stride, check_factory_args
from kernels.quant import tl_formats as F
from kernels.static_args import next_pow2, row_elements
from kernels.store_kv_cache import layout
from kernels.tl_launch import dependent_entry
from kernels.tl_scan import block_scan_macro

__all__ = [
    "INDEX_DTYPES",
    "MAX_D",
    "LoadConfig",
    "bf16_config",
    "load_paged_kv_bf16_tl",
    "load_paged_kv_fp4_tl",
    "load_paged_kv_fp8_tl",
    "load_paged_kv_shipped_configs",
    "record_config",
]

# Widest bf16 row: a row lives in one block (at most 1024 threads of at most 16 vectors).
MAX_D = 16384

_MAX_VECTOR_BYTES = 16
_WARP = 32
_MAX_THREADS = 1024
# Vectors one thread holds in flight (8 x 16 B = 32 registers), as outlier_detection's rows.
_MAX_STEPS = 8
_BLOCK_THREADS = 256
# Tile = this many passes of the block over rows: the per-block scan of seq_lens is paid once per
# two passes, while a decode batch of a few thousand rows still spreads over every SM.
_PASSES = 2
_INT32_MAX = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class LoadConfig:
    """The static launch shape of one load kernel."""

    vector_elems: int  # bf16 elements of one output vector
    row_vectors: int  # output vectors in one row (bf16 rows; records: lanes with latent work)
    threads_per_row: int
    rows_per_block: int  # rows one pass copies
    steps: int  # vectors each thread copies (the last may fall past the row and is skipped)
    head_vectors: int = 0  # bf16 rows: vectors in one head's Dh values

    @property
    def threads(self) -> int:
        return self.threads_per_row * self.rows_per_block

    @property
    def tile_rows(self) -> int:
        return self.rows_per_block * _PASSES


def bf16_config(H: int, Dh: int, cache_strides, x_align: int = 16) -> LoadConfig:
    """Launch shape of the bf16 kernel: vectors as wide as Dh, the cache's strides and the
    alignment allow (a vector never spans two heads)."""
    row_elements("load_paged_kv_cache", H * Dh, "bfloat16", ["bfloat16"], H * Dh, max_D=MAX_D, x_align=x_align)
    if H < 1 or Dh < 1 or len(cache_strides) != 3 or min(cache_strides) < 1:
        raise ValueError(f"load_paged_kv_cache: H, Dh and the 3 cache strides must be positive, got {H}, {Dh}, {cache_strides}")
    vector_bytes = math.gcd(_MAX_VECTOR_BYTES, x_align, 2 * Dh, *(2 * s for s in cache_strides))
    head_vectors = 2 * Dh // vector_bytes
    row_vectors = H * head_vectors
    wanted = -(-row_vectors // _MAX_STEPS)
    tpr = next_pow2(wanted) if wanted <= _WARP else min(_MAX_THREADS, -(-wanted // _WARP) * _WARP)
    return LoadConfig(
        vector_elems=vector_bytes // 2,
        row_vectors=row_vectors,
        threads_per_row=tpr,
        rows_per_block=max(1, _BLOCK_THREADS // tpr),
        steps=-(-row_vectors // tpr),
        head_vectors=head_vectors,
    )


def record_config(records: layout.RecordLayout) -> LoadConfig:
    """Launch shape of a record kernel: one lane per 16 bytes of latent codes."""
    lanes = records.latent_bytes // _MAX_VECTOR_BYTES
    return LoadConfig(vector_elems=8, row_vectors=lanes, threads_per_row=lanes, rows_per_block=_BLOCK_THREADS // lanes, steps=1)


def load_paged_kv_shipped_configs() -> dict[str, list[tuple]]:
    """{factory name: [positional args + (x_align,) for bf16]} covering every path: plain bf16 rows
    (H = 1, the interface's canonical strides) of 16-byte vectors split over 16 lanes with a
    partial last step (576), whole steps (512), two warps per row (4096), the most steps (16384
    at 2-byte vectors: 1024 threads x 16), an odd width (7: a lane a row, so a 512-row tile and
    two metadata rounds per thread); per-head caches: NHD, HND (its transpose view), block-strided MLA rows (one half
    of a K/V-interleaved allocation), 128 heads x 128, odd heads at 4-byte vectors; both index
    dtypes for lengths and starts, no starts, block sizes 1, 5, 16, 64; both record layouts, dense
    and block-strided."""
    return {
        "load_paged_kv_bf16_tl": [
            (1, 576, 64, (64 * 576, 576, 576), "int32", None, 16),
            (1, 512, 16, (16 * 512, 512, 512), "int64", "int64", 16),
            (1, 4096, 64, (64 * 4096, 4096, 4096), "int32", "int32", 16),
            (1, 128, 1, (128, 128, 128), "int64", "int32", 16),
            (1, MAX_D, 64, (64 * MAX_D, MAX_D, MAX_D), "int32", None, 2),
            (1, 7, 64, (64 * 7, 7, 7), "int64", "int64", 2),
            (8, 128, 16, (16 * 1024, 1024, 128), "int32", None, 16),
            (8, 128, 64, (64 * 1024, 128, 64 * 128), "int64", "int32", 16),
            (1, 576, 64, (2 * 64 * 576, 576, 576), "int32", "int64", 16),
            (128, 128, 16, (16 * MAX_D, MAX_D, 128), "int32", None, 16),
            (3, 6, 5, (2 * 5 * 18, 18, 6), "int64", None, 4),
        ],
        "load_paged_kv_fp4_tl": [(64, 64 * 400, "int32", None), (16, 16 * 400, "int64", "int64"), (64, 2 * 64 * 400, "int64", None)],
        "load_paged_kv_fp8_tl": [(64, 64 * 656, "int64", "int32"), (16, 2 * 16 * 656 + 16, "int32", None)],
    }


def _tile_rows_macro(cfg: LoadConfig, block_size: int, starts_dtype, b, max_blocks, num_blocks, cap):
    """The prologue every load kernel shares. It fills, per tile row r, row_id[r] with the source
    block (-2: past the total or cap, untouched; -1: a zero row) and row_at[r] with the offset in
    that block; block 0 writes cu_seqlens. Both arrays first hold (request, position) and are
    rewritten in place by the row's own thread, so no thread reads what another overwrites."""
    tile, threads = cfg.tile_rows, cfg.threads
    warps = threads // _WARP
    scan_block = block_scan_macro(warps)
    rounds = -(-tile // threads)

    @T.macro
    def tile_rows(seq_lens, seq_starts, block_table, cu_seqlens, bx, tx, row_id, row_at):
        lane = tx % _WARP
        warp = tx // _WARP
        warp_total = T.alloc_shared((warps,), "int32")
        mine = T.alloc_local((1,), "int32")
        scan = T.alloc_local((1,), "int32")
        before = T.alloc_local((1,), "int32")
        total = T.alloc_local((1,), "int32")
        carry = T.alloc_local((1,), "int32")
        blk = T.alloc_local((1,), "int32")
        off = T.alloc_local((1,), "int64")
        phys = T.alloc_local((1,), "int32")
        t0 = bx * tile
        t_end = T.min(t0 + tile, cap)
        for i in T.unroll(rounds):
            if i * threads + tx < tile:
                row_id[i * threads + tx] = -1
        carry[0] = 0
        T.sync_threads()
        for c in T.serial(T.ceildiv(b, threads)):
            req = c * threads + tx
            mine[0] = 0
            if req < b:
                mine[0] = T.cast(T.min(T.max(seq_lens[req], 0), _INT32_MAX), "int32")
            scan_block(mine, scan, before, total, warp_total, warp, lane)
            excl = carry[0] + before[0] + scan[0] - mine[0]
            if req < b:
                if bx == 0:
                    cu_seqlens[req] = excl
                lo = T.max(excl, t0)
                hi = T.min(excl + mine[0], t_end)
                if hi > lo:
                    start = T.int64(0) if starts_dtype is None else T.cast(seq_starts[req], "int64")
                    for k in T.serial(hi - lo):
                        row_id[lo - t0 + k] = req
                        row_at[lo - t0 + k] = start + T.cast(lo + k - excl, "int64")
            carry[0] += total[0]
            # The next chunk overwrites warp_total only after every thread has read it.
            T.sync_threads()
        if bx == 0 and tx == 0:
            cu_seqlens[b] = carry[0]
        for i in T.unroll(rounds):
            r = i * threads + tx
            if r < tile:
                blk[0] = -2
                off[0] = T.int64(0)
                if row_id[r] >= 0:
                    blk[0] = -1
                    p = row_at[r]
                    # A negative position or one past the table never reaches block_table.
                    if p >= 0 and p // block_size < T.cast(max_blocks, "int64"):
                        # Read once: the id is compared, then kept.
                        phys[0] = block_table[row_id[r], p // block_size]
                        if phys[0] >= 0 and phys[0] < num_blocks:
                            blk[0] = phys[0]
                            off[0] = p % block_size
                row_id[r] = blk[0]
                row_at[r] = off[0]
        T.sync_threads()

    return tile_rows


def _signature_dtypes(lens_dtype: str, starts_dtype):
    return lens_dtype, starts_dtype if starts_dtype is not None else lens_dtype


@tilelang.jit
def load_paged_kv_bf16_tl(H: int, Dh: int, block_size: int, cache_strides: tuple, lens_dtype: str, starts_dtype, *, x_align: int = 16, pdl: bool = False):
    """Compiled kernel(cache, block_table, seq_lens, seq_starts, out, cu_seqlens) for a bf16 cache
    of H heads of Dh values per slot, strides cache_strides (memoised per argument set)."""
    check_factory_args(block_size, lens_dtype, starts_dtype)
    cfg = bf16_config(H, Dh, cache_strides, x_align)
    b, max_blocks, num_blocks, cap = T.dynamic("b"), T.dynamic("max_blocks"), T.dynamic("num_blocks"), T.dynamic("cap")
    lens_t, starts_t = _signature_dtypes(lens_dtype, starts_dtype)
    tpr, rows, steps, vec, hv = cfg.threads_per_row, cfg.rows_per_block, cfg.steps, cfg.vector_elems, cfg.head_vectors
    full, tail_lanes = divmod(cfg.row_vectors, tpr)
    prologue = _tile_rows_macro(cfg, block_size, starts_dtype, b, max_blocks, num_blocks, cap)

    def head(j):
        # One head: every vector is in head 0 (no division in the index).
        return 0 if H == 1 else j // hv

    def at(j):
        return (j if H == 1 else j % hv) * vec

    @T.prim_func
    def load_paged_kv_bf16(
        cache: T.StridedTensor((num_blocks, block_size, H, Dh), (*cache_strides, 1), "bfloat16"),
        block_table: T.Tensor((b, max_blocks), "int32"),
        seq_lens: T.Tensor((b,), lens_t),
        seq_starts: T.Tensor((b,), starts_t),
        out: T.Tensor((cap, H * Dh), "bfloat16"),
        cu_seqlens: T.Tensor((b + 1,), "int32"),
    ):
        with T.Kernel(T.ceildiv(cap, cfg.tile_rows), threads=cfg.threads) as bx:
            dependent_entry(pdl)
            tx = T.get_thread_binding(0)
            lane = tx % tpr
            row_id = T.alloc_shared((cfg.tile_rows,), "int32")
            row_at = T.alloc_shared((cfg.tile_rows,), "int64")
            buf = T.alloc_local((_PASSES, steps, vec), "bfloat16")
            prologue(seq_lens, seq_starts, block_table, cu_seqlens, bx, tx, row_id, row_at)
            # Every pass's loads are issued before any store: nvcc may not move a load above a
            # store to out itself when the pointers are not __restrict__ (the PDL builds').
            for ps in T.unroll(_PASSES):
                r = ps * rows + tx // tpr
                # 64-bit block ids make every offset below 64-bit.
                blk = T.cast(row_id[r], "int64")
                if blk >= 0:
                    for s in T.unroll(steps):
                        if s < full or lane < tail_lanes:
                            for v in T.vectorized(vec):
                                buf[ps, s, v] = cache[blk, row_at[r], head(lane + s * tpr), at(lane + s * tpr) + v]
            for ps in T.unroll(_PASSES):
                r = ps * rows + tx // tpr
                row = T.cast(bx * cfg.tile_rows + r, "int64")
                if row_id[r] >= 0:
                    for s in T.unroll(steps):
                        if s < full or lane < tail_lanes:
                            for v in T.vectorized(vec):
                                out[row, (lane + s * tpr) * vec + v] = buf[ps, s, v]
                elif row_id[r] == -1:
                    for s in T.unroll(steps):
                        if s < full or lane < tail_lanes:
                            for v in T.vectorized(vec):
                                out[row, (lane + s * tpr) * vec + v] = T.bfloat16(0)

    return load_paged_kv_bf16


def _record_kernel(records: layout.RecordLayout, block_size: int, block_stride: int, lens_dtype: str, starts_dtype, pdl: bool):
    """The record kernel of one layout: the shared prologue, then `dequant(lane, ...)` per row."""
    check_factory_args(block_size, lens_dtype, starts_dtype)
    check_block_stride(records, block_size, block_stride)
    cfg = record_config(records)
    b, max_blocks, num_blocks, cap = T.dynamic("b"), T.dynamic("max_blocks"), T.dynamic("num_blocks"), T.dynamic("cap")
    lens_t, starts_t = _signature_dtypes(lens_dtype, starts_dtype)
    R, tpr, rows = records.record_bytes, cfg.threads_per_row, cfg.rows_per_block
    width = layout.WIDTH
    rope_lanes = layout.ROPE * 2 // _MAX_VECTOR_BYTES
    rope_elem = records.rope_offset // 2  # the rope's first bf16 element in a record
    fp4 = records.group == 32
    vectors = (32 if fp4 else 16) // 8  # 8-value output vectors of one lane (16 bytes of codes)
    prologue = _tile_rows_macro(cfg, block_size, starts_dtype, b, max_blocks, num_blocks, cap)

    def typed(cache, dtype: str, size: int):
        # The cache's bytes as `dtype` elements, blocks still block_stride bytes apart.
        return T.view(cache, (num_blocks, block_size, R // size), dtype, strides=(block_stride // size, R // size, 1))

    @T.prim_func
    def load_paged_kv_records(
        cache: T.StridedTensor((num_blocks, block_size, R), (block_stride, R, 1), "uint8"),
        block_table: T.Tensor((b, max_blocks), "int32"),
        seq_lens: T.Tensor((b,), lens_t),
        seq_starts: T.Tensor((b,), starts_t),
        out: T.Tensor((cap, width), "bfloat16"),
        cu_seqlens: T.Tensor((b + 1,), "int32"),
    ):
        with T.Kernel(T.ceildiv(cap, cfg.tile_rows), threads=cfg.threads) as bx:
            dependent_entry(pdl)
            tx = T.get_thread_binding(0)
            lane = tx % tpr
            row_id = T.alloc_shared((cfg.tile_rows,), "int32")
            row_at = T.alloc_shared((cfg.tile_rows,), "int64")
            # Each pass's reads land in registers before any pass decodes: two rows' loads in flight.
            if fp4:
                codes = T.alloc_local((_PASSES, vectors), "uint32")  # 8 e2m1 codes per word
            else:
                codes = T.alloc_local((_PASSES, vectors * 8), "float8_e4m3")
            rope = T.alloc_local((_PASSES, 8), "bfloat16")
            vals = T.alloc_local((8,), "bfloat16")
            sc = T.alloc_local((_PASSES, vectors), "float32")
            words = typed(cache, "uint32", 4)
            e4m3 = typed(cache, "float8_e4m3", 1)
            scales_f32 = typed(cache, "float32", 4)
            rope_bf16 = typed(cache, "bfloat16", 2)
            prologue(seq_lens, seq_starts, block_table, cu_seqlens, bx, tx, row_id, row_at)
            for ps in T.unroll(_PASSES):
                r = ps * rows + tx // tpr
                blk = T.cast(row_id[r], "int64")
                off = row_at[r]
                if blk >= 0:
                    for i in T.unroll(vectors):
                        j = lane + tpr * i
                        group = j * 8 // records.group
                        if fp4:
                            codes[ps, i] = words[blk, off, j]
                            sc[ps, i] = F.ue8m0_value(cache[blk, off, records.scale_offset + group])
                        else:
                            for v in T.vectorized(8):
                                codes[ps, i * 8 + v] = e4m3[blk, off, j * 8 + v]
                            sc[ps, i] = scales_f32[blk, off, records.scale_offset // 4 + group]
                    if lane < rope_lanes:
                        for v in T.vectorized(8):
                            rope[ps, v] = rope_bf16[blk, off, rope_elem + lane * 8 + v]
            for ps in T.unroll(_PASSES):
                r = ps * rows + tx // tpr
                blk = row_id[r]
                row = T.cast(bx * cfg.tile_rows + r, "int64")
                if blk >= 0:
                    for i in T.unroll(vectors):
                        for v in T.unroll(8):
                            if fp4:
                                value = F.e2m1_nibble_value(codes[ps, i], v)
                            else:
                                value = T.cast(codes[ps, i * 8 + v], "float32")
                            vals[v] = T.cast(value * sc[ps, i], "bfloat16")
                        for v in T.vectorized(8):
                            out[row, (lane + tpr * i) * 8 + v] = vals[v]
                    if lane < rope_lanes:
                        for v in T.vectorized(8):
                            out[row, layout.LATENT + lane * 8 + v] = rope[ps, v]
                elif blk == -1:
                    for i in T.unroll(vectors):
                        for v in T.vectorized(8):
                            out[row, (lane + tpr * i) * 8 + v] = T.bfloat16(0)
                    if lane < rope_lanes:
                        for v in T.vectorized(8):
                            out[row, layout.LATENT + lane * 8 + v] = T.bfloat16(0)

    return load_paged_kv_records


@tilelang.jit
def load_paged_kv_fp4_tl(block_size: int, block_stride: int, lens_dtype: str, starts_dtype, *, pdl: bool = False):
    """Compiled kernel(cache, block_table, seq_lens, seq_starts, out, cu_seqlens) for an FP4
    record cache (layout.FP4, read as uint8, blocks block_stride bytes apart), dequantised to
    (cap, 576) bf16."""
    return _record_kernel(layout.FP4, block_size, block_stride, lens_dtype, starts_dtype, pdl)


@tilelang.jit
def load_paged_kv_fp8_tl(block_size: int, block_stride: int, lens_dtype: str, starts_dtype, *, pdl: bool = False):
    """Compiled kernel(cache, block_table, seq_lens, seq_starts, out, cu_seqlens) for an FP8
    record cache (layout.FP8, read as uint8, blocks block_stride bytes apart), dequantised to
    (cap, 576) bf16."""
    return _record_kernel(layout.FP8, block_size, block_stride, lens_dtype, starts_dtype, pdl)
