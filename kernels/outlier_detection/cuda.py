"""NVIDIA TileLang implementation of `outlier_detection`: row absmax/flags, their compaction, column counts.

    rows = outlier_rows_tl(D, dtype, x_stride, x_align=...)
    rows(x, threshold, absmax, flag)             # per row: absmax, flag
    compact = outlier_compact_tl()
    compact(flag, flagged_rows, count)           # ascending flagged ids, -1 padded, and their count
    one = outlier_rows_compact_tl(D, dtype, x_stride, x_align=...)
    one(x, threshold, absmax, flag, flagged_rows, count, arrivals)   # both in one launch

    columns = outlier_columns_tl(D, dtype, x_stride, x_align=...)
    columns(x, threshold, counts)                # counts[j] += rows with |x[:, j]| > threshold
    (each factory also takes pdl=False: True builds a programmatic dependent launch,
    kernels/tl_launch.py, sm_90+)

x             (t, D) of `dtype` (bfloat16, float16 or float32), row stride `x_stride` >= D elements
              (a view of a wider tensor is fine), last dimension contiguous, base pointer aligned
              to `x_align` bytes.
threshold     (1,) float32 on the device: read by the kernels, so it can change between calls (or
              graph replays) without a recompile.
absmax        (t,) float32; flag (t,) bool; flagged_rows (t,) int32; count (1,) int32; counts (D,)
              int32. All contiguous.
arrivals      (>= 1,) int32, arrivals[0] zero before the launch; the launch leaves it zero
              (kernels/interface.py: stream_counters keeps one per stream).

Semantics are `kernels.outlier_detection.ref` (the contract), bit for bit: |x| is widened to fp32
exactly; the row max uses fmaxf, which drops NaN, so absmax ignores NaN and keeps Inf; NaN is
tracked separately; flag = NaN seen or absmax == inf or absmax > threshold. Maxima, ORs and
integer sums do not depend on the reduction order, so every output is deterministic.

The row mode has two forms. Two launches on one stream: `outlier_rows_tl` writes absmax and flag
per row, then `outlier_compact_tl`, one block of 1024 threads, walks the flags in chunks, places
each flagged id at its exclusive prefix sum (warp shuffles, then the per-warp totals from shared
memory, all in a fixed order: no atomics), pads with -1 and writes the count. One launch,
`outlier_rows_compact_tl`: the same row blocks, each counting itself in on `arrivals[0]` (one
acquire-release atomic a block), and the last to arrive runs the same compaction with its own
threads and zeroes the counter. The compaction's order, and so every output, is the same in both.
One launch wins for decode batches; from about 4096 rows one block walking every flag costs more
than the second launch (kernels/outlier_detection/PERF.md), hence api.ONE_LAUNCH_MAX_ROWS.

The column mode is one launch that adds into `counts`, which the caller zeroes first (the
interface does, with torch's zero_ on the same stream): each thread counts its column vector over
a run of rows in registers and adds its nonzero counts with integer atomicAdd (integer addition is
associative, so the totals are exact and deterministic; skipping zeros keeps atomics rare when
outliers are).

t is dynamic: one compiled kernel serves every batch size; every global offset into x is 64-bit,
so t * x_stride may exceed 2**31 (t itself, like the int32 row ids, stays below 2**31). t == 0 must
not be launched (a CUDA grid cannot be empty).
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import dataclasses
import math

import tilelang
import tilelang.language as T

from kernels.static_args import next_pow2, row_elements
from kernels.tl_launch import dependent_entry
from kernels.tl_scan import block_scan_macro

__all__ = [
    "DTYPES",
    "MAX_D",
    "ColumnsConfig",
    "RowsConfig",
    "columns_config",
    "outlier_columns_tl",
    "outlier_compact_tl",
    "outlier_rows_compact_tl",
    "outlier_rows_tl",
    "outlier_columns_shipped_configs",
    "outlier_rows_shipped_configs",
    "rows_config",
]

DTYPES = ("bfloat16", "float16", "float32")
# Widest row of the row mode: a row is split over at most one block of threads, each holding
# _MAX_STEPS vectors (up to 16 of 2 or 4 bytes when 1024 threads of 8 fall short), and 16384 covers
# every model's hidden size.
MAX_D = 16384

# One 128-bit access per instruction is the widest global load a thread can issue.
_MAX_VECTOR_BYTES = 16
_WARP = 32
_MAX_THREADS = 1024
# Row mode: vectors one thread loads before reducing them (all in flight at once: 8 x 16 B = 32
# registers of row data; a row of narrow vectors too long for a block of 8-vector threads takes
# more), and the smallest block (short rows share it).
_MAX_STEPS = 8
_BLOCK_THREADS = 128
# Compaction: one block of 1024 threads, each taking 16 consecutive flags per chunk, so a chunk is
# 16384 rows: one chunk covers a prefill batch of 16384 tokens.
_COMPACT_THREADS = 1024
_COMPACT_ROWS_PER_THREAD = 16
# One-launch row mode: the last block (cfg.threads threads, 128 for most rows) compacts 16 flags a
# thread per chunk, 2048 rows for 128 threads: a decode batch in one chunk.
_LAST_BLOCK_ROWS_PER_THREAD = 16
# Column mode: 128 threads per block; a thread counts its column vector over 64 rows, loading 8 rows
# at a time (8 vectors in flight, 32 registers of data at 16 B).
_COLUMN_THREADS = 128
_COLUMN_ROWS_PER_THREAD = 64
_COLUMN_ROWS_IN_FLIGHT = 8


def _vector_bytes(D: int, dtype: str, x_stride: int, x_align: int) -> tuple[int, int]:
    """(element bytes, vector bytes): every row start and the base pointer are vector-aligned."""
    elem = row_elements("outlier_detection", D, dtype, DTYPES, x_stride, x_align=x_align)
    return elem, math.gcd(D * elem, x_stride * elem, x_align, _MAX_VECTOR_BYTES)


@dataclasses.dataclass(frozen=True)
class RowsConfig:
    """The static launch shape of one row-mode kernel."""

    vector_elems: int  # elements one thread loads per instruction
    row_vectors: int  # vectors in one row of D elements
    threads_per_row: int  # a power of two below a warp, whole warps above
    rows_per_block: int
    steps: int  # vectors each thread loads (the last may fall past the row and is skipped)

    @property
    def threads(self) -> int:
        return self.threads_per_row * self.rows_per_block

    @property
    def warps_per_row(self) -> int:
        return max(1, self.threads_per_row // _WARP)


def rows_config(D: int, dtype: str, x_stride: int, x_align: int = 16) -> RowsConfig:
    if D > MAX_D:
        raise ValueError(f"outlier_detection: D must be at most {MAX_D} in row mode, got {D}")
    elem, vector_bytes = _vector_bytes(D, dtype, x_stride, x_align)
    row_vectors = D * elem // vector_bytes
    wanted = -(-row_vectors // _MAX_STEPS)
    # Rows of a warp or more take whole warps (at most a block: only rows of narrow vectors need
    # more steps then, up to 16 vectors of 2 or 4 bytes); shorter rows a power-of-two group of
    # lanes, so the shuffle butterfly stays inside the group.
    threads_per_row = next_pow2(wanted) if wanted <= _WARP else min(_MAX_THREADS, -(-wanted // _WARP) * _WARP)
    return RowsConfig(
        vector_elems=vector_bytes // elem,
        row_vectors=row_vectors,
        threads_per_row=threads_per_row,
        rows_per_block=max(1, _BLOCK_THREADS // threads_per_row),
        steps=-(-row_vectors // threads_per_row),
    )


@dataclasses.dataclass(frozen=True)
class ColumnsConfig:
    """The static launch shape of one column-mode kernel."""

    vector_elems: int
    row_vectors: int
    col_threads: int  # threads of a block side by side along a row (one vector each)
    row_lanes: int  # groups of col_threads in a block, each on its own rows
    col_blocks: int  # blocks side by side along a row

    @property
    def threads(self) -> int:
        return self.col_threads * self.row_lanes

    @property
    def rows_per_block(self) -> int:
        return self.row_lanes * _COLUMN_ROWS_PER_THREAD


def columns_config(D: int, dtype: str, x_stride: int, x_align: int = 16) -> ColumnsConfig:
    elem, vector_bytes = _vector_bytes(D, dtype, x_stride, x_align)
    row_vectors = D * elem // vector_bytes
    # Narrow rows put several row lanes in a block so it still has 128 threads.
    col_threads = min(_COLUMN_THREADS, next_pow2(row_vectors))
    return ColumnsConfig(
        vector_elems=vector_bytes // elem,
        row_vectors=row_vectors,
        col_threads=col_threads,
        row_lanes=_COLUMN_THREADS // col_threads,
        col_blocks=-(-row_vectors // col_threads),
    )


def outlier_rows_shipped_configs() -> list[tuple[int, str, int, int]]:
    """(D, dtype, x_stride, x_align) tuples covering every path of rows_config (and of
    columns_config up to D = MAX_D: the column mode compiles them too).

    Register pressure is the vectors a thread holds, so for each of the 7 (element size, vector
    width) classes that some D in 1..16384 and alignment reach, the case with the most row-mode
    steps (the largest D among ties) comes first; the codegen test recomputes these maxima over
    every D and alignment. (A column-mode thread always holds 8 vectors: every class is its worst
    case.) The rest add every dtype, strided rows, 1 to 32 warps per row, a non-power-of-two warp
    count, partial last steps, several rows per block, several row lanes per column block and a
    partial column block. The compaction kernel has no static arguments: one configuration.
    """
    return [
        # The worst case of each class: element bytes x vector bytes (misaligned base pointers).
        (16384, "bfloat16", 16384, 2),  # 2 x 2 B: 1024 threads per row, 16 steps
        (16384, "float16", 16384, 4),  # 2 x 4 B: 1024 threads, 8 steps
        (16384, "bfloat16", 16384, 8),  # 2 x 8 B: 512 threads, 8 steps
        (16384, "bfloat16", 16384, 16),  # 2 x 16 B: 256 threads, 8 steps
        (16384, "float32", 16384, 4),  # 4 x 4 B: 1024 threads, 16 steps
        (16384, "float32", 16384, 8),  # 4 x 8 B: 1024 threads, 8 steps
        (16384, "float32", 16384, 16),  # 4 x 16 B: 512 threads, 8 steps
        # Shapes the models run and the remaining branches.
        (16383, "float16", 16383, 16),  # odd D: 2-byte vectors, partial last step
        (7168, "bfloat16", 7168, 16),  # hidden size: 128 threads x 7 steps; 7 column blocks
        (7168, "float16", 7168, 16),
        (7168, "float32", 7168, 16),  # 224 threads (7 warps) x 8 steps; 14 column blocks
        (4096, "bfloat16", 7168, 16),  # strided rows: 2 rows of 64 threads per block
        (576, "bfloat16", 576, 16),  # MLA latent + rope: 8 rows of 16 threads x 5 steps (partial);
        #                              one column block, 72 of its 128 threads active
        (576, "float32", 577, 4),  # strided, 4-byte vectors: 96 threads (3 warps) x 6 steps
        (7, "float32", 9, 4),  # odd, strided, tiny: 128 rows of 1 thread; 16 row lanes of 8 columns
        (1, "bfloat16", 1, 2),  # one element per row: 128 row lanes of one column
    ]


def outlier_columns_shipped_configs() -> list[tuple[int, str, int, int]]:
    """The column mode's configurations: every row-mode one (same vector classes) plus rows wider
    than the row mode allows (the column mode has no width limit): the widest intermediate size and
    a vocabulary-wide row, 100+ column blocks."""
    return outlier_rows_shipped_configs() + [
        (18432, "bfloat16", 18432, 16),
        (129280, "float32", 129280, 16),
    ]


def _row_flags_macro(cfg: RowsConfig, dtype: str):
    """A T.macro row_flags(x, threshold, absmax, flag, t, bx, tx): block bx's rows' absmax and flag.
    Every thread of the block calls it (rows of several warps synchronise once)."""
    tpr, rows, steps, vec, wpr = cfg.threads_per_row, cfg.rows_per_block, cfg.steps, cfg.vector_elems, cfg.warps_per_row
    full, tail_lanes = divmod(cfg.row_vectors, tpr)
    shuffles = int(math.log2(min(tpr, _WARP)))

    @T.macro
    def load_step(x, row, lane, buf, s):
        for v in T.vectorized(vec):
            buf[s, v] = x[row, (lane + s * tpr) * vec + v]

    @T.macro
    def reduce_step(buf, amax, nan, s):
        # fmaxf drops a NaN operand, so amax never becomes NaN; NaN is remembered in `nan`.
        for v in T.unroll(vec):
            a = T.abs(T.cast(buf[s, v], "float32"))
            amax[0] = T.max(amax[0], a)
            nan[0] = nan[0] | T.cast(T.isnan(a), "int32")

    @T.macro
    def row_flags(x, threshold, absmax, flag, t, bx, tx):
        lane = tx % tpr
        # 64-bit row ids make every offset into x 64-bit: t * x_stride may pass 2**31.
        row = T.cast(bx * rows + tx // tpr, "int64")
        buf = T.alloc_local((steps, vec), dtype)
        amax = T.alloc_local((1,), "float32")
        nan = T.alloc_local((1,), "int32")
        red_max = T.alloc_shared((rows, wpr), "float32")
        red_nan = T.alloc_shared((rows, wpr), "int32")
        amax[0] = T.float32(0)
        nan[0] = 0
        if row < t:
            # Every load is issued before any use: `steps` vectors in flight per thread.
            for s in T.unroll(full):
                load_step(x, row, lane, buf, s)
            if tail_lanes:
                if lane < tail_lanes:
                    load_step(x, row, lane, buf, full)
            for s in T.unroll(full):
                reduce_step(buf, amax, nan, s)
            if tail_lanes:
                if lane < tail_lanes:
                    reduce_step(buf, amax, nan, full)
        # Butterfly within the row's lanes (inactive threads past the last row hold 0 and join).
        for i in T.unroll(shuffles):
            amax[0] = T.max(amax[0], T.shfl_xor(amax[0], 1 << i))
            nan[0] = nan[0] | T.shfl_xor(nan[0], 1 << i)
        if wpr > 1:
            if tx % _WARP == 0:
                red_max[tx // tpr, lane // _WARP] = amax[0]
                red_nan[tx // tpr, lane // _WARP] = nan[0]
            T.sync_threads()
            if lane == 0:
                for w in T.unroll(1, wpr):
                    amax[0] = T.max(amax[0], red_max[tx // tpr, w])
                    nan[0] = nan[0] | red_nan[tx // tpr, w]
        if row < t and lane == 0:
            absmax[row] = amax[0]
            flag[row] = nan[0] != 0 or T.isinf(amax[0]) or amax[0] > threshold[0]

    return row_flags


def _compact_macro(threads: int, per_thread: int):
    """A T.macro compact(flag, flagged_rows, count, t, tx) run by one block of `threads` threads:
    the flagged ids in ascending order, -1 after them, and their count. The block walks the flags
    in chunks of threads x per_thread rows, placing each flagged id at its exclusive prefix sum
    (warp shuffles, then the per-warp totals from shared memory, all in a fixed order: no atomics)."""
    chunk = threads * per_thread
    scan_block = block_scan_macro(threads // _WARP)

    @T.macro
    def compact(flag, flagged_rows, count, t, tx):
        warp, lane = tx // _WARP, tx % _WARP
        hits = T.alloc_local((per_thread,), "int32")
        mine = T.alloc_local((1,), "int32")  # this thread's flagged rows in the chunk
        scan = T.alloc_local((1,), "int32")  # inclusive prefix of `mine` within the warp
        before = T.alloc_local((1,), "int32")  # flagged rows of the chunk in lower warps
        total = T.alloc_local((1,), "int32")  # flagged rows of the chunk
        done = T.alloc_local((1,), "int32")  # flagged rows of every earlier chunk
        slot = T.alloc_local((1,), "int32")
        warp_total = T.alloc_shared((threads // _WARP,), "int32")
        done[0] = 0
        for c in T.serial(T.ceildiv(t, chunk)):
            # Thread tx takes rows [first, first + per_thread) of the chunk, in order.
            first = c * chunk + tx * per_thread
            mine[0] = 0
            for k in T.unroll(per_thread):
                hits[k] = 0
                if first + k < t:
                    hits[k] = T.cast(flag[first + k], "int32")
                mine[0] += hits[k]
            scan_block(mine, scan, before, total, warp_total, warp, lane)
            slot[0] = done[0] + before[0] + scan[0] - mine[0]
            for k in T.unroll(per_thread):
                if hits[k] != 0:
                    flagged_rows[slot[0]] = first + k
                    slot[0] += 1
            done[0] += total[0]
            # The next chunk overwrites warp_total only after every thread has read it.
            T.sync_threads()
        for c in T.serial(T.ceildiv(t, threads)):
            if c * threads + tx >= done[0] and c * threads + tx < t:
                flagged_rows[c * threads + tx] = -1
        if tx == 0:
            count[0] = done[0]

    return compact


@tilelang.jit
def outlier_rows_tl(D: int, dtype: str, x_stride: int, *, x_align: int = 16, pdl: bool = False):
    """Compiled row kernel(x, threshold, absmax, flag) for these static arguments (memoised)."""
    cfg = rows_config(D, dtype, x_stride, x_align)
    t = T.dynamic("t")
    row_flags = _row_flags_macro(cfg, dtype)

    @T.prim_func
    def outlier_rows(
        x: T.StridedTensor((t, D), (x_stride, 1), dtype),
        threshold: T.Tensor((1,), T.float32),
        absmax: T.Tensor((t,), T.float32),
        flag: T.Tensor((t,), T.bool),
    ):
        with T.Kernel(T.ceildiv(t, cfg.rows_per_block), threads=cfg.threads) as bx:
            dependent_entry(pdl)
            row_flags(x, threshold, absmax, flag, t, bx, T.get_thread_binding(0))

    return outlier_rows


@tilelang.jit
def outlier_compact_tl(*, pdl: bool = False):
    """Compiled compaction kernel(flag, flagged_rows, count): one block, deterministic order."""
    t = T.dynamic("t")
    compact = _compact_macro(_COMPACT_THREADS, _COMPACT_ROWS_PER_THREAD)

    @T.prim_func
    def outlier_compact(
        flag: T.Tensor((t,), T.bool),
        flagged_rows: T.Tensor((t,), T.int32),
        count: T.Tensor((1,), T.int32),
    ):
        with T.Kernel(1, threads=_COMPACT_THREADS) as _:
            dependent_entry(pdl)
            compact(flag, flagged_rows, count, t, T.get_thread_binding(0))

    return outlier_compact


@tilelang.jit
def outlier_rows_compact_tl(D: int, dtype: str, x_stride: int, *, x_align: int = 16, pdl: bool = False):
    """Compiled one-launch row mode kernel(x, threshold, absmax, flag, flagged_rows, count, arrivals)
    for these static arguments (memoised): outlier_rows_tl's blocks, the last of which to finish
    compacts the flags as outlier_compact_tl does. arrivals[0] must be zero before the launch and is
    zero after it."""
    cfg = rows_config(D, dtype, x_stride, x_align)
    t, A = T.dynamic("t"), T.dynamic("arrival_slots")
    row_flags = _row_flags_macro(cfg, dtype)
    compact = _compact_macro(cfg.threads, _LAST_BLOCK_ROWS_PER_THREAD)

    @T.prim_func
    def outlier_rows_compact(
        x: T.StridedTensor((t, D), (x_stride, 1), dtype),
        threshold: T.Tensor((1,), T.float32),
        absmax: T.Tensor((t,), T.float32),
        flag: T.Tensor((t,), T.bool),
        flagged_rows: T.Tensor((t,), T.int32),
        count: T.Tensor((1,), T.int32),
        arrivals: T.Tensor((A,), T.int32),
    ):
        blocks = T.ceildiv(t, cfg.rows_per_block)
        with T.Kernel(blocks, threads=cfg.threads) as bx:
            dependent_entry(pdl)
            tx = T.get_thread_binding(0)
            arrived = T.alloc_local((1,), "int32")
            last = T.alloc_shared((1,), "int32")
            row_flags(x, threshold, absmax, flag, t, bx, tx)
            # Release and acquire without fences: the barrier orders the block's flag writes before
            # thread 0's acquire-release add at GPU scope (cumulative), and the last block's flag
            # reads after that add (whose acquire also drops the SM's stale L1 lines).
            T.sync_threads()
            if tx == 0:
                arrived[0] = T.atomic_add(arrivals[0], 1, memory_order="acq_rel", return_prev=True)
                last[0] = T.cast(arrived[0] == blocks - 1, "int32")
                if arrived[0] == blocks - 1:
                    # Every block has arrived: none touches the counter again in this launch.
                    arrivals[0] = 0
            T.sync_threads()
            if last[0] != 0:
                compact(flag, flagged_rows, count, t, tx)

    return outlier_rows_compact


@tilelang.jit
def outlier_columns_tl(D: int, dtype: str, x_stride: int, *, x_align: int = 16, pdl: bool = False):
    """Compiled column kernel(x, threshold, counts), adding into counts (zeroed by the caller)."""
    cfg = columns_config(D, dtype, x_stride, x_align)
    t = T.dynamic("t")
    vec, cols, lanes = cfg.vector_elems, cfg.col_threads, cfg.row_lanes
    groups = _COLUMN_ROWS_PER_THREAD // _COLUMN_ROWS_IN_FLIGHT

    @T.prim_func
    def outlier_columns(
        x: T.StridedTensor((t, D), (x_stride, 1), dtype),
        threshold: T.Tensor((1,), T.float32),
        counts: T.Tensor((D,), T.int32),
    ):
        with T.Kernel(T.ceildiv(t, cfg.rows_per_block), cfg.col_blocks, threads=cfg.threads) as (bx, by):
            dependent_entry(pdl)
            tx = T.get_thread_binding(0)
            col_vector = by * cols + tx % cols
            # Row lane tx // cols takes rows first, first + lanes, ...: a block reads whole row
            # segments, so the warps' loads stay coalesced.
            first = T.cast(bx, "int64") * cfg.rows_per_block + tx // cols
            buf = T.alloc_local((_COLUMN_ROWS_IN_FLIGHT, vec), dtype)
            hits = T.alloc_local((vec,), "int32")
            thr = T.alloc_local((1,), "float32")
            for v in T.unroll(vec):
                hits[v] = 0
            if col_vector < cfg.row_vectors:
                thr[0] = threshold[0]
                for g in T.serial(groups):
                    for r in T.unroll(_COLUMN_ROWS_IN_FLIGHT):
                        if first + (g * _COLUMN_ROWS_IN_FLIGHT + r) * lanes < t:
                            for v in T.vectorized(vec):
                                buf[r, v] = x[first + (g * _COLUMN_ROWS_IN_FLIGHT + r) * lanes, col_vector * vec + v]
                    for r in T.unroll(_COLUMN_ROWS_IN_FLIGHT):
                        if first + (g * _COLUMN_ROWS_IN_FLIGHT + r) * lanes < t:
                            for v in T.unroll(vec):
                                # NaN compares false: it never counts.
                                hits[v] += T.cast(T.abs(T.cast(buf[r, v], "float32")) > thr[0], "int32")
                for v in T.unroll(vec):
                    if hits[v] != 0:
                        T.atomic_add(counts[col_vector * vec + v], hits[v])

    return outlier_columns
