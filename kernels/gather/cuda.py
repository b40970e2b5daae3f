"""NVIDIA TileLang implementation of `gather`.

    kernel = gather_tl(D, dtype, index_dtype, x_stride, x_align=...)
    kernel(x, index, y)                      # y[i] = x[index[i]]; the caller allocates y
    (gather_tl also takes pdl=False: True builds a programmatic dependent launch,
    kernels/tl_launch.py, sm_90+)

x      (n, D) of `dtype`, row stride `x_stride` >= D elements (a view of a wider tensor is fine),
       last dimension contiguous, base pointer aligned to `x_align` bytes.
index  (m,) of `index_dtype` (int32 or int64), contiguous.
y      (m, D) of `dtype`, contiguous; its base pointer must be aligned like x's (the caller folds
       both pointers into `x_align`).

y[i] = x[index[i]] when 0 <= index[i] < n. Any other index (negative, >= n) writes a zero row and
reads nothing from x. n and m are dynamic: one compiled kernel serves every batch size, and every
offset is computed in 64 bits, so n * x_stride and m * D may exceed 2**31. D, the element type,
the index type, x_stride and x_align are compiled in. Gather moves bits, so only the element size
matters; the element type is still part of the signature because the launcher checks it. m == 0
must not be launched (a CUDA grid cannot be empty).
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import dataclasses
import math

import tilelang
import tilelang.language as T

from kernels.static_args import next_pow2, row_elements
from kernels.tl_launch import dependent_entry

__all__ = ["DTYPES", "INDEX_DTYPES", "GatherConfig", "gather_config", "gather_shipped_configs", "gather_tl"]

# Element type names the factory accepts. "float8_e4m3" is TileLang's spelling that the launcher
# matches against torch.float8_e4m3fn tensors; "float8_e4m3fn" is accepted as well. uint8 carries
# packed FP4.
DTYPES = ("bfloat16", "float16", "float32", "float8_e4m3", "float8_e4m3fn", "uint8", "int32")
INDEX_DTYPES = ("int32", "int64")

# One 128-bit access per instruction is the widest global load/store a thread can issue.
_MAX_VECTOR_BYTES = 16
# Two vectors per thread and 128-thread blocks, measured on an H200 (tools/gpu/gather_tuning.py)
# against 1/4/8 vectors and 256-thread blocks: best or within 1% at n=65536, m=32768 for D = 576,
# 4096 and 7168 bf16, and at decode sizes (m = 1..256, D = 7168) within 0.05 us of the best.
# Small per-thread work spreads a wide row over several blocks, so a handful of decode rows still
# occupies many SMs; the loads of one thread are all issued before its stores.
_VECTORS_PER_THREAD = 2
# Rows needing more threads than one block are split across blocks (the grid's second dimension);
# shorter rows take a power-of-two share of a block, several rows to a block.
_BLOCK_THREADS = 128


@dataclasses.dataclass(frozen=True)
class GatherConfig:
    """The static launch shape of one gather kernel."""

    vector_bytes: int  # bytes one thread moves per load/store instruction
    vector_elems: int  # elements in one vector
    row_vectors: int  # vectors in one row of D elements
    threads_per_row: int  # threads of one block that share a row
    rows_per_block: int  # rows one block gathers
    col_blocks: int  # blocks that share one row (each takes a contiguous run of its vectors)
    steps: int  # vectors each thread moves (the last may fall past the row and is skipped)

    @property
    def threads(self) -> int:
        return self.threads_per_row * self.rows_per_block


def gather_config(
    D: int,
    dtype: str,
    x_stride: int,
    x_align: int,
    threads: int | None = None,
    vectors_per_thread: int | None = None,
) -> GatherConfig:
    """Derive the launch shape from the static arguments.

    `threads` caps the block size and `vectors_per_thread` the vectors per thread (tuning knobs;
    None takes the defaults above).
    """
    elem = row_elements("gather", D, dtype, DTYPES, x_stride, x_align=x_align)
    if threads is not None and (threads % 32 or not 32 <= threads <= 1024):
        raise ValueError(f"gather: threads must be a multiple of 32 in [32, 1024], got {threads}")
    vpt = vectors_per_thread or _VECTORS_PER_THREAD
    if not 1 <= vpt <= 32:
        raise ValueError(f"gather: vectors_per_thread must be in [1, 32], got {vpt}")
    block = threads or _BLOCK_THREADS
    # Every row start of x and y, and the base pointers, must be aligned to the vector.
    vector_bytes = math.gcd(D * elem, x_stride * elem, x_align, _MAX_VECTOR_BYTES)
    row_vectors = D * elem // vector_bytes
    wanted = -(-row_vectors // vpt)  # threads one row needs at `vpt` vectors each
    if wanted > block:
        # A wide row: whole blocks, as many as the row needs.
        threads_per_row, rows_per_block, col_blocks = block, 1, -(-wanted // block)
    else:
        threads_per_row = next_pow2(wanted)
        rows_per_block, col_blocks = max(1, block // threads_per_row), 1
    return GatherConfig(
        vector_bytes=vector_bytes,
        vector_elems=vector_bytes // elem,
        row_vectors=row_vectors,
        threads_per_row=threads_per_row,
        rows_per_block=rows_per_block,
        col_blocks=col_blocks,
        steps=-(-row_vectors // (threads_per_row * col_blocks)),
    )


def gather_shipped_configs() -> list[tuple[int, str, str, int, int]]:
    """(D, dtype, index_dtype, x_stride, x_align) tuples covering every path of gather_config.

    Register pressure grows with the vectors a thread moves, so for each of the 12 (element size,
    vector width) classes that some D in 1..16384 reaches, the D with the most steps is here (the
    codegen test recomputes these maxima over every D). The rest add every dtype, both index types,
    strided rows, rows split over blocks, 1 to 128 rows per block and partial steps.
    """
    return [
        # The widest row of each class: element bytes x vector bytes (2 steps, the most blocks).
        (16129, "uint8", "int32", 16129, 1),  # 1 x 1 B: 64 blocks per row, byte-aligned base
        (15874, "uint8", "int64", 15874, 2),  # 1 x 2 B
        (15364, "float8_e4m3", "int32", 15364, 4),  # 1 x 4 B
        (14344, "uint8", "int64", 14344, 8),  # 1 x 8 B
        (12304, "float8_e4m3fn", "int32", 12304, 16),  # 1 x 16 B
        (16129, "bfloat16", "int64", 16129, 16),  # 2 x 2 B (odd D)
        (15874, "float16", "int32", 15874, 16),  # 2 x 4 B
        (15364, "bfloat16", "int64", 15364, 8),  # 2 x 8 B
        (14344, "bfloat16", "int32", 14344, 16),  # 2 x 16 B
        (16129, "float32", "int64", 16129, 16),  # 4 x 4 B
        (15874, "int32", "int32", 15874, 16),  # 4 x 8 B
        (15364, "float32", "int64", 15364, 16),  # 4 x 16 B
        # Shapes the model runs and the remaining branches.
        (7168, "bfloat16", "int64", 7168, 16),  # hidden size: 4 blocks of 128 threads per row
        (2048, "float16", "int64", 7168, 16),  # strided rows, exactly one block per row
        (576, "bfloat16", "int32", 576, 16),  # MLA latent + rope: 2 rows of 64 threads per block
        (7, "float32", "int32", 9, 16),  # odd, strided: 32 rows of 4 threads
        (1, "uint8", "int64", 1, 16),  # one byte per row, 128 rows per block
    ]


# With replayable binds inlined, `src` would be re-read from `index` at every use and each vector
# load would get a second, redundant bounds check; keeping the bind makes it one load per row.
@tilelang.jit(pass_configs={"tl.if_stmt_binding_inline_replayable_binds": False})
def gather_tl(
    D: int,
    dtype: str,
    index_dtype: str,
    x_stride: int,
    *,
    threads: int | None = None,
    x_align: int = 16,
    vectors_per_thread: int | None = None,
    pdl: bool = False,
):
    """Compiled gather kernel(x, index, y) for these static arguments (memoised per argument set)."""
    if index_dtype not in INDEX_DTYPES:
        raise ValueError(f"gather: index_dtype {index_dtype!r} is not one of {', '.join(INDEX_DTYPES)}")
    cfg = gather_config(D, dtype, x_stride, x_align, threads, vectors_per_thread)
    n = T.dynamic("n")
    m = T.dynamic("m")
    tpr, rows, vec = cfg.threads_per_row, cfg.rows_per_block, cfg.vector_elems

    @T.prim_func
    def gather(
        x: T.StridedTensor((n, D), (x_stride, 1), dtype),
        index: T.Tensor((m,), index_dtype),
        y: T.Tensor((m, D), dtype),
    ):
        with T.Kernel(T.ceildiv(m, rows), cfg.col_blocks, threads=cfg.threads) as (bx, by):
            dependent_entry(pdl)
            tx = T.get_thread_binding(0)
            # This thread's first vector: blocks of one row take consecutive runs of tpr * steps.
            first = by * (tpr * cfg.steps) + tx % tpr
            # 64-bit row ids make every offset below 64-bit: n * x_stride and m * D may pass 2**31.
            row = T.cast(bx * rows + tx // tpr, "int64")
            if row < m:
                src = T.cast(index[row], "int64")
                # A row takes one branch as a whole, and an invalid index never forms an address.
                if src >= 0 and src < n:
                    # All loads first, then all stores: the loads are predicated, so they cannot be
                    # hoisted past a store on their own, and issuing them together keeps `steps`
                    # vectors in flight per thread instead of one.
                    buf = T.alloc_local((cfg.steps, vec), dtype)
                    for s in T.unroll(cfg.steps):
                        if first + s * tpr < cfg.row_vectors:
                            for v in T.vectorized(vec):
                                buf[s, v] = x[src, (first + s * tpr) * vec + v]
                    for s in T.unroll(cfg.steps):
                        if first + s * tpr < cfg.row_vectors:
                            for v in T.vectorized(vec):
                                y[row, (first + s * tpr) * vec + v] = buf[s, v]
                else:
                    for s in T.unroll(cfg.steps):
                        if first + s * tpr < cfg.row_vectors:
                            for v in T.vectorized(vec):
                                y[row, (first + s * tpr) * vec + v] = T.cast(0, dtype)

    return gather
