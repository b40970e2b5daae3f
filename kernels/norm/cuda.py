"""NVIDIA TileLang implementation of `norm`: RMSNorm, plain and with a fused residual add.

    kernel = rmsnorm_tl(D, dtype, eps, x_stride, x_align=...)
    kernel(x, weight, y)                     # y = x * rsqrt(mean(x^2) + eps) * weight

    kernel = add_rmsnorm_tl(D, dtype, eps, x_stride, x_align=...)
    kernel(x, residual, weight, y)           # residual <- x + residual (in place); y = rmsnorm(residual)

x         (t, D) of `dtype` (bfloat16, float16 or float32), row stride `x_stride` >= D elements (a
          view of a wider tensor is fine), last dimension contiguous.
residual  (t, D) of `dtype`, contiguous; read, then overwritten with x + residual rounded to `dtype`.
weight    (D,) of `dtype`, contiguous.
y         (t, D) of `dtype`, contiguous.
All base pointers must be aligned to `x_align` bytes (the caller folds them into one number).

Arithmetic, as `kernels.norm.ref` (the contract) orders it: every element is widened to fp32; the
sum of squares is accumulated in fp32 (per-lane fused multiply-adds, then a fixed-order tree across
lanes, threads and warps: deterministic, the same for every run and batch size); the mean is that
sum divided by D (IEEE division); r = rsqrtf(mean + eps) with eps rounded to fp32; y = (x * r) * w
in fp32, rounded to nearest-even into `dtype`. The residual variant first forms s = x + residual in
fp32, rounds it to `dtype` (exactly what torch's `x + residual` does), stores it, and normalises
the rounded s. Against the reference only the summation order differs (and, when the reference runs
on CUDA, torch's multiplication by 1/D in place of the division). No fast-math: no flush to zero.

t is dynamic: one compiled kernel serves every batch size; every global offset is computed in 64
bits, so t * x_stride may exceed 2**31. D, the element type, eps, x_stride and x_align are compiled
in (eps is a compile-time constant: one kernel per distinct eps, which models keep fixed). t == 0
must not be launched (a CUDA grid cannot be empty).

Where the work runs: each row is split over `threads_per_row` threads that each hold `steps`
16-byte vectors (narrower when alignment forces it) of the row in registers. A thread loads all
its vectors first, accumulates their squares, the row's threads reduce with warp shuffles and, for
rows wider than a warp, one shared-memory exchange of the per-warp sums (every thread adds them in
the same order, so all get the same total); then each thread scales the values it still holds and
stores them. x (and residual) are read from global memory exactly once; the weight is read in the
scale pass, after the barrier (from L2 once the first blocks have fetched it; at decode sizes that is
a second memory round trip; loading it with x would hold a weight vector per step in registers,
which spills at the register cap below for several widths). Short rows put
several rows in a block. `__launch_bounds__(threads, 1024 / threads)` caps registers at 64 per
thread so that about 1024 threads (several rows) are resident per SM.

A future FP8-output variant adds its own factory reusing `norm_config` and the macros below; these
two factories stay unchanged.
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import dataclasses
import math

import tilelang
import tilelang.language as T
import tvm

from kernels.norm.ref import fp32_eps

__all__ = ["DTYPES", "MAX_D", "NormConfig", "add_rmsnorm_tl", "norm_config", "norm_shipped_configs", "rmsnorm_tl"]

# Element type names the factories accept (the activations' and the weight's).
DTYPES = ("bfloat16", "float16", "float32")
# Widest row: the row lives in registers, so the register budget bounds D.
MAX_D = 16384

# One 128-bit access per instruction is the widest global load/store a thread can issue.
_MAX_VECTOR_BYTES = 16
# Registers of row data one thread holds, at most: 32. The compiler keeps the row widened to fp32
# between the two passes (one register per element), and the fused variant also holds its residual
# vectors while they load (x and residual words together). With 16-byte vectors: 4 vectors of
# bf16/fp16 (either variant), 8 of fp32, 4 of fp32 with a residual; a 7168-wide bf16 row takes 224
# threads, a 16384-wide one 512.
_MAX_ROW_REGISTERS = 32
# Vectors one thread holds, at most (binds only for narrow vectors, i.e. odd D or unaligned data).
_MAX_STEPS = 8
# Short rows share a block of at least this many threads.
_BLOCK_THREADS = 128
_MAX_THREADS = 1024
# Resident threads per SM the register budget is sized for (64 registers per thread): with
# `__launch_bounds__(threads, 1024 / threads)` enough rows are in flight to cover DRAM latency.
_RESIDENT_THREADS = 1024
_WARP = 32


@dataclasses.dataclass(frozen=True)
class NormConfig:
    """The static launch shape of one RMSNorm kernel."""

    vector_bytes: int  # bytes one thread moves per load/store instruction
    vector_elems: int  # elements in one vector
    row_vectors: int  # vectors in one row of D elements
    threads_per_row: int  # threads that share a row (a power of two below a warp, whole warps above)
    rows_per_block: int  # rows one block normalises
    steps: int  # vectors each thread holds (the last may fall past the row and is skipped)
    min_blocks_per_sm: int  # second argument of __launch_bounds__ (caps registers per thread)

    @property
    def threads(self) -> int:
        return self.threads_per_row * self.rows_per_block

    @property
    def warps_per_row(self) -> int:
        return max(1, self.threads_per_row // _WARP)


def _next_pow2(v: int) -> int:
    return 1 << (v - 1).bit_length()


def norm_config(
    D: int,
    dtype: str,
    x_stride: int,
    x_align: int = 16,
    threads: int | None = None,
    max_steps: int | None = None,
    residual: bool = False,
) -> NormConfig:
    """Derive the launch shape from the static arguments (`residual`: the fused variant's).

    `threads` is the smallest block (short rows share it; a power of two in [32, 1024]) and
    `max_steps` the most vectors a thread holds (tuning knobs; None takes the defaults above).
    """
    if dtype not in DTYPES:
        raise ValueError(f"norm: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    if not 1 <= D <= MAX_D:
        raise ValueError(f"norm: D must be in [1, {MAX_D}], got {D}")
    if x_stride < D:
        raise ValueError(f"norm: x_stride {x_stride} is smaller than D {D}")
    elem = tvm.DataType(dtype).bits // 8
    if x_align not in (1, 2, 4, 8, 16) or x_align < elem:
        raise ValueError(f"norm: x_align must be a power of two in [{elem}, 16] for {dtype}, got {x_align}")
    block = threads or _BLOCK_THREADS
    if block & (block - 1) or not _WARP <= block <= _MAX_THREADS:
        raise ValueError(f"norm: threads must be a power of two in [32, 1024], got {block}")
    if max_steps is not None and not 1 <= max_steps <= 32:
        raise ValueError(f"norm: max_steps must be in [1, 32], got {max_steps}")
    # Every row start of x, residual and y, and every base pointer, is aligned to the vector.
    vector_bytes = math.gcd(D * elem, x_stride * elem, x_align, _MAX_VECTOR_BYTES)
    vector_elems = vector_bytes // elem
    row_vectors = D * elem // vector_bytes
    inputs = 2 if residual else 1  # (t, D) operands each thread loads
    widened = _MAX_ROW_REGISTERS // vector_elems
    loaded = _MAX_ROW_REGISTERS * 4 // (vector_bytes * inputs)
    steps_cap = max_steps or max(1, min(_MAX_STEPS, widened, loaded))
    wanted = -(-row_vectors // steps_cap)  # threads one row needs at `steps_cap` vectors each
    # Rows of a warp or more take whole warps; shorter rows a power-of-two group of lanes, so the
    # shuffle butterfly stays inside the group.
    threads_per_row = _next_pow2(wanted) if wanted <= _WARP else min(_MAX_THREADS, -(-wanted // _WARP) * _WARP)
    rows_per_block = max(1, block // threads_per_row)
    threads = threads_per_row * rows_per_block
    return NormConfig(
        vector_bytes=vector_bytes,
        vector_elems=vector_elems,
        row_vectors=row_vectors,
        threads_per_row=threads_per_row,
        rows_per_block=rows_per_block,
        steps=-(-row_vectors // threads_per_row),
        min_blocks_per_sm=max(1, _RESIDENT_THREADS // threads),
    )


def norm_shipped_configs() -> list[tuple[int, str, int, int]]:
    """(D, dtype, x_stride, x_align) tuples covering every path of norm_config.

    Register pressure grows with the row elements a thread holds (steps x vector elements), so
    for each of the 7 (element size, vector width) classes that some D in 1..16384 and alignment
    reaches, the case with the most steps (the largest D among ties) is here; the codegen test
    recomputes these maxima over every D and alignment. The rest add every dtype, the models'
    widths, strided rows, 1 to 64 rows per block, 1 to 32 warps per row, a row of a non-power-of-two
    number of warps and partial last steps.
    """
    return [
        # The worst case of each class: element bytes x vector bytes (misaligned base pointers).
        (16384, "bfloat16", 16384, 2),  # 2 x 2 B: 1024 threads (32 warps), 16 steps
        (16384, "float16", 16384, 4),  # 2 x 4 B: 1024 threads, 8 steps
        (16384, "bfloat16", 16384, 8),  # 2 x 8 B: 512 threads, 8 steps
        (16384, "bfloat16", 16384, 16),  # 2 x 16 B: 512 threads, 4 steps
        (16384, "float32", 16384, 4),  # 4 x 4 B: 1024 threads, 16 steps
        (16384, "float32", 16384, 8),  # 4 x 8 B: 1024 threads, 8 steps
        (16384, "float32", 16384, 16),  # 4 x 16 B: 512 threads x 8 steps (residual: 1024 x 4)
        # Shapes the models run and the remaining branches.
        (16383, "float16", 16383, 16),  # odd D: 2-byte vectors, partial last step
        (7168, "bfloat16", 7168, 16),  # hidden size: 224 threads (7 warps) x 4 steps
        (7168, "float16", 7168, 16),
        (7168, "float32", 7168, 16),  # 224 threads x 8 steps (residual: 448 x 4)
        (4096, "bfloat16", 7168, 16),  # strided rows: 128 threads x 4 steps
        (2880, "bfloat16", 2880, 16),  # odd multiple of 64: 96 threads x 4 steps, partial
        (1536, "bfloat16", 1536, 16),  # 64 threads x 3 steps, 2 rows per block
        (576, "bfloat16", 576, 16),  # MLA latent + rope: one warp x 3 steps, partial, 4 rows per block
        (576, "float32", 577, 4),  # strided, 4-byte vectors
        (128, "float16", 128, 16),  # 4 threads per row, 32 rows per block
        (7, "float32", 9, 4),  # odd, strided, tiny: 1 thread per row, 128 rows per block
    ]


def _kernel_macros(cfg: NormConfig, D: int, dtype: str, eps: float):
    """The pieces every RMSNorm variant shares, specialised to one configuration.

    Vector `lane + s * tpr` of a row belongs to step s of lane `lane`. The first `full` steps cover
    whole rows of lanes and need no bounds check; when the row's vectors do not fill the last step,
    only its first `tail_lanes` lanes take it (one check per macro, not one per step).
    """
    tpr, vec, rv = cfg.threads_per_row, cfg.vector_elems, cfg.row_vectors
    wpr = cfg.warps_per_row
    full, tail_lanes = divmod(rv, tpr)
    shuffles = int(math.log2(min(tpr, _WARP)))
    eps32 = fp32_eps(eps)

    @T.macro
    def load_step(src, row, lane, buf, s):
        for v in T.vectorized(vec):
            buf[s, v] = src[row, (lane + s * tpr) * vec + v]

    @T.macro
    def load_row(src, row, lane, buf):
        """buf[s] = vector `lane + s * tpr` of row `row` of src, for every vector in the row."""
        # All loads are issued before any use, so a thread has `steps` vectors in flight.
        for s in T.unroll(full):
            load_step(src, row, lane, buf, s)
        if tail_lanes:
            if lane < tail_lanes:
                load_step(src, row, lane, buf, full)

    @T.macro
    def add_step(dst, row, lane, buf, rbuf, s):
        # s = x + residual in fp32, rounded to dtype, kept in buf and stored to dst.
        for v in T.vectorized(vec):
            buf[s, v] = T.cast(T.cast(buf[s, v], "float32") + T.cast(rbuf[s, v], "float32"), dtype)
        for v in T.vectorized(vec):
            dst[row, (lane + s * tpr) * vec + v] = buf[s, v]

    @T.macro
    def add_rows(dst, row, lane, buf, rbuf):
        """buf += rbuf (rounded to dtype), stored into dst's row."""
        for s in T.unroll(full):
            add_step(dst, row, lane, buf, rbuf, s)
        if tail_lanes:
            if lane < tail_lanes:
                add_step(dst, row, lane, buf, rbuf, full)

    @T.macro
    def square_step(buf, acc, s):
        for v in T.unroll(vec):
            acc[v] += T.cast(buf[s, v], "float32") * T.cast(buf[s, v], "float32")

    @T.macro
    def inv_rms(buf, active, tx, red, inv):
        """inv = rsqrt(mean of the row's squares + eps), the same value in every thread of the row.

        Inactive threads (past the last row) contribute zeros but still take part in the shuffles
        and the barrier.
        """
        lane = tx % tpr
        acc = T.alloc_local((vec,), "float32")
        for v in T.vectorized(vec):
            acc[v] = T.float32(0)
        if active:
            for s in T.unroll(full):
                square_step(buf, acc, s)
            if tail_lanes:
                if lane < tail_lanes:
                    square_step(buf, acc, full)
        inv[0] = acc[0]
        for v in T.unroll(1, vec):
            inv[0] += acc[v]
        # Butterfly within the row's lanes of a warp (groups of tpr lanes when tpr < 32).
        for i in T.unroll(shuffles):
            inv[0] += T.shfl_xor(inv[0], 1 << i)
        if wpr > 1:
            if tx % _WARP == 0:
                red[tx // tpr, lane // _WARP] = inv[0]
            T.sync_threads()
            inv[0] = red[tx // tpr, 0]
            for i in T.unroll(1, wpr):
                inv[0] += red[tx // tpr, i]
        inv[0] = T.rsqrt(inv[0] / T.float32(D) + T.float32(eps32))

    @T.macro
    def store_step(dst, weight, row, lane, buf, inv, wbuf, s):
        for v in T.vectorized(vec):
            wbuf[v] = weight[(lane + s * tpr) * vec + v]
        for v in T.vectorized(vec):
            dst[row, (lane + s * tpr) * vec + v] = T.cast(
                T.cast(buf[s, v], "float32") * inv[0] * T.cast(wbuf[v], "float32"), dtype
            )

    @T.macro
    def store_scaled(dst, weight, row, lane, buf, inv):
        """dst[row] = (buf * inv) * weight, rounded to dtype, for the vectors this thread holds."""
        wbuf = T.alloc_local((vec,), dtype)
        for s in T.unroll(full):
            store_step(dst, weight, row, lane, buf, inv, wbuf, s)
        if tail_lanes:
            if lane < tail_lanes:
                store_step(dst, weight, row, lane, buf, inv, wbuf, full)

    return load_row, add_rows, inv_rms, store_scaled


@tilelang.jit
def rmsnorm_tl(
    D: int,
    dtype: str,
    eps: float,
    x_stride: int,
    *,
    threads: int | None = None,
    x_align: int = 16,
    max_steps: int | None = None,
):
    """Compiled RMSNorm kernel(x, weight, y) for these static arguments (memoised per argument set)."""
    cfg = norm_config(D, dtype, x_stride, x_align, threads, max_steps, residual=False)
    load_row, add_rows, inv_rms, store_scaled = _kernel_macros(cfg, D, dtype, eps)
    t = T.dynamic("t")
    tpr, rows, steps, vec = cfg.threads_per_row, cfg.rows_per_block, cfg.steps, cfg.vector_elems

    @T.prim_func
    def rmsnorm(
        x: T.StridedTensor((t, D), (x_stride, 1), dtype),
        weight: T.Tensor((D,), dtype),
        y: T.Tensor((t, D), dtype),
    ):
        with T.Kernel(T.ceildiv(t, rows), threads=cfg.threads) as bx:
            T.annotate_min_blocks_per_sm(cfg.min_blocks_per_sm)
            tx = T.get_thread_binding(0)
            lane = tx % tpr
            # 64-bit row ids make every offset below 64-bit: t * x_stride may pass 2**31.
            row = T.cast(bx * rows + tx // tpr, "int64")
            buf = T.alloc_local((steps, vec), dtype)
            red = T.alloc_shared((rows, cfg.warps_per_row), "float32")
            inv = T.alloc_local((1,), "float32")
            if row < t:
                load_row(x, row, lane, buf)
            inv_rms(buf, row < t, tx, red, inv)
            if row < t:
                store_scaled(y, weight, row, lane, buf, inv)

    return rmsnorm


@tilelang.jit
def add_rmsnorm_tl(
    D: int,
    dtype: str,
    eps: float,
    x_stride: int,
    *,
    threads: int | None = None,
    x_align: int = 16,
    max_steps: int | None = None,
):
    """Compiled fused kernel(x, residual, weight, y): residual <- x + residual, y = rmsnorm(residual)."""
    cfg = norm_config(D, dtype, x_stride, x_align, threads, max_steps, residual=True)
    load_row, add_rows, inv_rms, store_scaled = _kernel_macros(cfg, D, dtype, eps)
    t = T.dynamic("t")
    tpr, rows, steps, vec = cfg.threads_per_row, cfg.rows_per_block, cfg.steps, cfg.vector_elems

    @T.prim_func
    def add_rmsnorm(
        x: T.StridedTensor((t, D), (x_stride, 1), dtype),
        residual: T.Tensor((t, D), dtype),
        weight: T.Tensor((D,), dtype),
        y: T.Tensor((t, D), dtype),
    ):
        with T.Kernel(T.ceildiv(t, rows), threads=cfg.threads) as bx:
            T.annotate_min_blocks_per_sm(cfg.min_blocks_per_sm)
            tx = T.get_thread_binding(0)
            lane = tx % tpr
            row = T.cast(bx * rows + tx // tpr, "int64")
            buf = T.alloc_local((steps, vec), dtype)
            rbuf = T.alloc_local((steps, vec), dtype)
            red = T.alloc_shared((rows, cfg.warps_per_row), "float32")
            inv = T.alloc_local((1,), "float32")
            if row < t:
                load_row(x, row, lane, buf)
                load_row(residual, row, lane, rbuf)
                # s = x + residual rounded to dtype, stored back, and kept (rounded) for the norm.
                add_rows(residual, row, lane, buf, rbuf)
            inv_rms(buf, row < t, tx, red, inv)
            if row < t:
                store_scaled(y, weight, row, lane, buf, inv)

    return add_rmsnorm
