"""Huawei Ascend 950 TileLang implementation of `outlier_detection`: row absmax/flags, their
compaction, column counts. Verified by lowering to AscendC only (codegen_ascend suite: every
configuration lowers and its Unified Buffer footprint fits); no NPU has run it.

    rows = outlier_rows_tl(D, dtype, x_stride)
    rows(x, threshold, absmax, flag)             # per row: absmax, flag
    compact = outlier_compact_tl()
    compact(flag, flagged_rows, count)           # ascending flagged ids, -1 padded, and their count

    columns = outlier_columns_tl(D, dtype, x_stride)
    columns(x, threshold, counts)                # counts[j] += rows with |x[:, j]| > threshold

x             (t, D) of `dtype` (bfloat16, float16 or float32), row stride `x_stride` >= D
              elements, last dimension contiguous.
threshold     (1,) float32 in global memory (read at run time: no recompile per threshold).
absmax        (t,) float32; flag (t,) bool; flagged_rows (t,) int32; count (1,) int32; counts (D,)
              int32. All contiguous.

Semantics are `kernels.outlier_detection.ref`, bit for bit: elements are widened to fp32 exactly
and their absolute values taken; NaN lanes are replaced by 0 before the max (so absmax ignores
NaN whatever the hardware max does with NaN) and recorded in a second register; flag = NaN seen or
absmax == inf or absmax > threshold. t is dynamic; every global-memory offset into x is 64-bit.

Where the work runs (pure vector (AIV) kernels, no Cube work, no SIMT region):
  * rows: one persistent block per vector core over tiles of whole rows (several short rows per
    32 KiB tile, a wide row alone), as `norm` tiles them. One SIMD vector function reduces each
    row in the UB to its max and NaN marker (64 fp32 lanes, then one cross-lane max) and stores
    them into per-tile UB vectors; the scalar unit turns them into flags; MTE3 stores both.
  * compaction: a second launch on one core (it needs every row's flag, and cores cannot wait for
    each other inside one launch without a cross-core barrier). The scalar unit walks the flags
    tile by tile in order and appends flagged ids to a UB buffer that MTE3 stores at the running
    count, then stores the -1 padding and the count. Deterministic, no atomics.
  * columns: one persistent block per vector core over column chunks; a core owns its chunk for
    every row, so its counts need no atomics: it loads the chunk's counts, adds (|x| > threshold)
    per row in int32 registers while MTE2 streams row tiles of the chunk, and stores them back
    (adding into `counts`, as the CUDA kernel does, so the interface zeroes it first on both).

UB budget (measured on the lowered kernels by testing/codegen_ascend.py): rows at most 2 x 32 KiB
tiles (64 KiB for a float32 row of 16384) plus a few hundred bytes; compaction 40 KiB of flags
and ids; columns 2 x 32 KiB tiles plus the chunk's counts.

`x_align` is accepted for signature parity with the CUDA factories and ignored: the global-memory
side of an Ascend DMA is byte-granular (only UB addresses must be 32-byte aligned, which the
tiling guarantees).
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import dataclasses

import tilelang
import tilelang.ascend.language as T

from kernels.static_args import row_elements

__all__ = [
    "DTYPES",
    "MAX_D",
    "ColumnsConfig",
    "RowsConfig",
    "columns_config",
    "outlier_columns_tl",
    "outlier_compact_tl",
    "outlier_rows_tl",
    "outlier_columns_shipped_configs",
    "outlier_rows_shipped_configs",
    "rows_config",
]

DTYPES = ("bfloat16", "float16", "float32")
# The same limit as the CUDA row mode (a row is never split across tiles here).
MAX_D = 16384

# One persistent block per vector core, the count TileLang's Ascend 950 vector examples launch; a
# different count changes only the load balance, never the result.
_VECTOR_CORES = 64
# A 32 KiB tile makes each DMA a long burst while two of them stay far below the UB.
_TILE_BYTES = 32 * 1024
# Caps the per-tile row loops (vector and scalar) so short rows still spread over all cores.
_MAX_ROWS = 64
# One SIMD vector register is 2048 bits: 64 fp32 lanes, the unit of every pass.
_LANES = 64
# Compaction: flags (bool, 1 byte) and ids (int32) per tile: 8 KiB + 32 KiB.
_COMPACT_ROWS = 8192
# Column chunks: whole registers, D split so that every core gets one, at most 1024 columns (wider
# rows make more chunks than cores); a tile of a chunk holds at most 128 rows.
_MAX_CHUNK = 1024
_MAX_COLUMN_ROWS = 128


def _round_up(v: int, to: int) -> int:
    return -(-v // to) * to


@dataclasses.dataclass(frozen=True)
class RowsConfig:
    """The static tiling of one Ascend row-mode kernel."""

    pitch: int  # UB row pitch in elements: D rounded up to a vector register
    rows: int  # rows per tile
    full_vregs: int  # whole 64-element registers per row
    tail: int  # elements in the final, partial register of a row (0: none)


def rows_config(D: int, dtype: str, x_stride: int, x_align: int = 16) -> RowsConfig:
    """The tiling of the row mode; `x_align` does not affect it."""
    elem = row_elements("outlier_detection", D, dtype, DTYPES, x_stride)
    if D > MAX_D:
        raise ValueError(f"outlier_detection: D must be at most {MAX_D} in row mode, got {D}")
    pitch = _round_up(D, _LANES)
    full_vregs, tail = divmod(D, _LANES)
    return RowsConfig(pitch=pitch, rows=max(1, min(_MAX_ROWS, _TILE_BYTES // (pitch * elem))), full_vregs=full_vregs, tail=tail)


@dataclasses.dataclass(frozen=True)
class ColumnsConfig:
    """The static tiling of one Ascend column-mode kernel."""

    chunk: int  # columns per task (a multiple of 64); the last chunk of a row may be shorter
    num_chunks: int
    rows: int  # rows per tile of one chunk

    @property
    def vregs(self) -> int:
        return self.chunk // _LANES


def columns_config(D: int, dtype: str, x_stride: int, x_align: int = 16) -> ColumnsConfig:
    """The tiling of the column mode; `x_align` does not affect it."""
    elem = row_elements("outlier_detection", D, dtype, DTYPES, x_stride)
    # Enough chunks for every core when D allows, each a whole number of registers.
    chunk = min(_MAX_CHUNK, _round_up(-(-D // _VECTOR_CORES), _LANES))
    return ColumnsConfig(
        chunk=chunk,
        num_chunks=-(-D // chunk),
        rows=max(1, min(_MAX_COLUMN_ROWS, _TILE_BYTES // (chunk * elem))),
    )


def outlier_rows_shipped_configs() -> list[tuple[int, str, int, int]]:
    """(D, dtype, x_stride, x_align) tuples covering every path of rows_config (and of
    columns_config up to D = MAX_D: the column mode lowers them too).

    Together they cover: every dtype; strided x; row tiles of 64 rows (the cap), of a few rows and
    of one row (the largest footprint, float32 16384); rows of whole registers, of registers plus a
    tail, and of a tail only; column chunks of 64 columns up to 256, equal chunks and a shorter
    last one, a single chunk, column tiles of 128 rows (the cap) and fewer. The compaction kernel
    has no static arguments: one configuration.
    """
    return [
        (16384, "float32", 16384, 16),  # one 64 KiB row per tile; 64 chunks of 256 columns x 32 rows
        (12289, "float32", 12352, 16),  # strided, 192 registers + a 1-element tail; shorter last chunk
        (16384, "bfloat16", 16384, 16),  # one 32 KiB row per tile; 64 chunks of 256 x 64 rows
        (7168, "bfloat16", 7168, 16),  # hidden size: 2 rows of 112 registers; 56 chunks of 128
        (7168, "float16", 7168, 16),
        (4096, "bfloat16", 7168, 16),  # strided, 4 rows; 64 chunks of 64 columns
        (576, "float32", 577, 16),  # strided MLA width, 14 rows of 9 registers; 9 chunks of 64
        (100, "float16", 100, 16),  # 64 rows (the cap) of 1 register + a 36-element tail; 2 chunks
        (7, "bfloat16", 9, 16),  # strided, a tail-only row; one chunk of 7 columns, 128 rows
    ]


def outlier_columns_shipped_configs() -> list[tuple[int, str, int, int]]:
    """The column mode's configurations: every row-mode one plus rows wider than the row mode
    allows (the column mode has no width limit): an intermediate size and a vocabulary-wide row,
    whose chunks reach the 1024-column cap."""
    return outlier_rows_shipped_configs() + [
        (18432, "bfloat16", 18432, 16),  # 58 chunks of 320 columns, 51 rows per tile
        (129280, "float32", 129280, 16),  # 127 chunks of 1024 (the cap), the last shorter; 8 rows
    ]


def _widen(dtype: str):
    """(UB load distribution, function widening a loaded register to fp32) for `dtype`."""
    if dtype == "float32":
        return "NORM", lambda vec: vec
    # 16-bit elements land in the low half of 32-bit lanes and convert exactly.
    return "UNPK_B16", lambda vec: T.simd.vcvt(vec, "float32")


@tilelang.jit(target="ascend")
def outlier_rows_tl(D: int, dtype: str, x_stride: int, *, x_align: int = 16):
    """Ascend row kernel(x, threshold, absmax, flag) for these static arguments (memoised).

    `outlier_rows_tl.get_tir(...)` returns the program without compiling it.
    """
    cfg = rows_config(D, dtype, x_stride, x_align)
    t = T.dynamic("t")
    rows, full, tail = cfg.rows, cfg.full_vregs, cfg.tail
    dist, widen = _widen(dtype)
    # Per-tile results are vectors of `rows` fp32 values, padded to 32 bytes for the DMA.
    res_pitch = _round_up(rows, 8)

    @T.macro
    def absorb(tile, r, j, amax, nan, valid_lanes):
        """amax = max(amax, |x|) with NaN lanes (and lanes past D) as 0; nan = 1 where x is NaN."""
        zero = T.simd.vdup(T.float32(0), "float32")
        a = T.simd.vsel(T.simd.vabs(widen(T.simd.vld(tile[r, j * _LANES], dist=dist))), zero, valid_lanes)
        is_nan = T.simd.vcmp(a, a, op="ne")
        amax[0] = T.simd.vmax(amax[0], T.simd.vsel(zero, a, is_nan))
        nan[0] = T.simd.vmax(nan[0], T.simd.vsel(T.simd.vdup(T.float32(1), "float32"), zero, is_nan))

    @T.prim_func
    def outlier_rows(
        x: T.StridedTensor((t, D), (x_stride, 1), dtype),
        threshold: T.Tensor((1,), T.float32),
        absmax: T.Tensor((t,), T.float32),
        flag: T.Tensor((t,), T.bool),
    ):
        with T.Kernel(_VECTOR_CORES) as core:
            thr_ub = T.alloc_shared((8,), "float32")
            tile = T.alloc_shared((rows, cfg.pitch), dtype)
            amax_ub = T.alloc_shared((res_pitch,), "float32")
            nan_ub = T.alloc_shared((res_pitch,), "float32")
            flag_ub = T.alloc_shared((_round_up(rows, 32),), "bool")
            T.copy(threshold[0:1], thr_ub[0:1])
            # t < 2**31, so the tile count stays int32.
            for k in T.Persistent([T.ceildiv(t, rows)], _VECTOR_CORES, core, group_size=1, num_stages=2):
                # 64-bit row ids make every GM offset below 64-bit.
                row0 = T.cast(k, "int64") * rows
                valid = T.min(rows, T.cast(t, "int64") - row0)
                T.copy(x[row0 : row0 + valid, :], tile[:valid, :D])
                with T.SimdVF():
                    amax = T.simd.alloc_local((1,), "float32")
                    nan = T.simd.alloc_local((1,), "float32")
                    for r in T.serial(valid):
                        amax[0] = T.simd.vdup(T.float32(0), "float32")
                        nan[0] = T.simd.vdup(T.float32(0), "float32")
                        for j in T.serial(full):
                            absorb(tile, r, j, amax, nan, T.simd.pset(32))
                        if tail:
                            absorb(tile, r, full, amax, nan, T.simd.update_mask(tail, 32))
                        # The cross-lane max lands in lane 0, the one point stored.
                        T.simd.vsts(amax_ub[r], T.simd.vcmax(amax[0]), dist="ONEPT_B32")
                        T.simd.vsts(nan_ub[r], T.simd.vcmax(nan[0]), dist="ONEPT_B32")
                for r in T.serial(valid):
                    flag_ub[r] = nan_ub[r] != 0 or T.isinf(amax_ub[r]) or amax_ub[r] > thr_ub[0]
                T.copy(amax_ub[:valid], absmax[row0 : row0 + valid])
                T.copy(flag_ub[:valid], flag[row0 : row0 + valid])

    return outlier_rows


@tilelang.jit(target="ascend")
def outlier_compact_tl():
    """Ascend compaction kernel(flag, flagged_rows, count): one core, ascending ids, no atomics."""
    t = T.dynamic("t")
    n = _COMPACT_ROWS

    @T.prim_func
    def outlier_compact(
        flag: T.Tensor((t,), T.bool),
        flagged_rows: T.Tensor((t,), T.int32),
        count: T.Tensor((1,), T.int32),
    ):
        with T.Kernel(1) as _:
            flag_ub = T.alloc_shared((n,), "bool")
            ids_ub = T.alloc_shared((n,), "int32")
            done = T.alloc_var("int32", init=0)  # flagged rows of every earlier tile
            found = T.alloc_var("int32", init=0)  # flagged rows of this tile so far
            for c in T.serial(T.ceildiv(t, n)):
                valid = T.min(n, t - c * n)
                T.copy(flag[c * n : c * n + valid], flag_ub[:valid])
                found = 0
                for i in T.serial(valid):
                    if flag_ub[i]:
                        ids_ub[found] = c * n + i
                        found += 1
                if found > 0:
                    T.copy(ids_ub[:found], flagged_rows[done : done + found])
                done += found
            # -1 padding of [done, t), a tile of ids at a time, then the count.
            for i in T.serial(n):
                ids_ub[i] = -1
            for c in T.serial(T.ceildiv(t - done, n)):
                T.copy(ids_ub[: T.min(n, t - done - c * n)], flagged_rows[done + c * n : done + c * n + T.min(n, t - done - c * n)])
            ids_ub[0] = done
            T.copy(ids_ub[0:1], count[0:1])

    return outlier_compact


@tilelang.jit(target="ascend")
def outlier_columns_tl(D: int, dtype: str, x_stride: int, *, x_align: int = 16):
    """Ascend column kernel(x, threshold, counts), adding into counts (zeroed by the caller)."""
    cfg = columns_config(D, dtype, x_stride, x_align)
    t = T.dynamic("t")
    chunk, rows = cfg.chunk, cfg.rows
    dist, widen = _widen(dtype)

    @T.prim_func
    def outlier_columns(
        x: T.StridedTensor((t, D), (x_stride, 1), dtype),
        threshold: T.Tensor((1,), T.float32),
        counts: T.Tensor((D,), T.int32),
    ):
        with T.Kernel(_VECTOR_CORES) as core:
            thr_ub = T.alloc_shared((8,), "float32")
            cnt_ub = T.alloc_shared((chunk,), "int32")
            tile = T.alloc_shared((rows, chunk), dtype)
            T.copy(threshold[0:1], thr_ub[0:1])
            for task in T.Persistent([cfg.num_chunks], _VECTOR_CORES, core, group_size=1, num_stages=1):
                col0 = task * chunk
                width = T.min(chunk, D - col0)
                T.copy(counts[col0 : col0 + width], cnt_ub[:width])
                for k in T.serial(T.ceildiv(t, rows)):
                    row0 = T.cast(k, "int64") * rows
                    valid = T.min(rows, T.cast(t, "int64") - row0)
                    T.copy(x[row0 : row0 + valid, col0 : col0 + width], tile[:valid, :width])
                    with T.SimdVF():
                        acc = T.simd.alloc_local((1,), "int32")
                        thr = T.simd.alloc_local((1,), "float32")
                        thr[0] = T.simd.vld(thr_ub[0], dist="BRC_B32")
                        one = T.simd.vdup(T.int32(1), "int32")
                        zero = T.simd.vdup(T.int32(0), "int32")
                        for j in T.serial(cfg.vregs):
                            acc[0] = T.simd.vld(cnt_ub[j * _LANES], dist="NORM")
                            for r in T.serial(valid):
                                a = T.simd.vabs(widen(T.simd.vld(tile[r, j * _LANES], dist=dist)))
                                # NaN compares false; lanes past `width` count garbage but are never stored.
                                hit = T.simd.vcmp(a, thr[0], op="gt")
                                acc[0] = T.simd.vadd(acc[0], T.simd.vsel(one, zero, hit))
                            T.simd.vsts(cnt_ub[j * _LANES], acc[0], dist="NORM_B32")
                T.copy(cnt_ub[:width], counts[col0 : col0 + width])

    return outlier_columns
