"""NVIDIA TileLang implementation of `gather`.

    kernel = gather_tl(D, dtype, index_dtype, x_stride, x_align=...)
    kernel(x, index, y)                      # y[i] = x[index[i]]; the caller allocates y

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

__all__ = ["DTYPES", "INDEX_DTYPES", "GatherConfig", "gather_config", "gather_shipped_configs", "gather_tl"]

# Element type names the factory accepts, with their size in bytes. "float8_e4m3" is TileLang's
# spelling that the launcher matches against torch.float8_e4m3fn (and e4m3fnuz) tensors;
# "float8_e4m3fn" is the exact name and is accepted as well. uint8 carries packed FP4.
_ELEMENT_BYTES = {
    "bfloat16": 2,
    "float16": 2,
    "float32": 4,
    "float8_e4m3": 1,
    "float8_e4m3fn": 1,
    "uint8": 1,
    "int32": 4,
}
DTYPES = tuple(_ELEMENT_BYTES)
INDEX_DTYPES = ("int32", "int64")

# One 128-bit access per instruction is the widest global load/store a thread can issue.
_MAX_VECTOR_BYTES = 16
# Four vectors in flight per thread: enough outstanding bytes per SM to cover DRAM latency at full
# occupancy, and the one index load per row is amortised over them.
_VECTORS_PER_THREAD = 4
# An SM holds at most 32 blocks, so blocks under 64 threads cannot fill it; short rows are packed
# several to a block of at least this many threads.
_MIN_BLOCK_THREADS = 128
# Past this width a thread takes more vectors instead: larger blocks only coarsen scheduling.
_MAX_BLOCK_THREADS = 512


@dataclasses.dataclass(frozen=True)
class GatherConfig:
    """The static launch shape of one gather kernel."""

    vector_bytes: int  # bytes one thread moves per load/store instruction
    vector_elems: int  # elements in one vector
    row_vectors: int  # vectors in one row of D elements
    threads_per_row: int  # threads that share one row
    rows_per_block: int  # rows one block gathers
    steps: int  # vectors each thread moves in its row (the last step may be partial)

    @property
    def threads(self) -> int:
        return self.threads_per_row * self.rows_per_block


def _next_pow2(v: int) -> int:
    return 1 << (v - 1).bit_length()


def gather_config(
    D: int, dtype: str, x_stride: int, x_align: int, threads: int | None = None
) -> GatherConfig:
    """Derive the launch shape from the static arguments; `threads` overrides the block size."""
    if dtype not in _ELEMENT_BYTES:
        raise ValueError(f"gather: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    elem = _ELEMENT_BYTES[dtype]
    if D < 1:
        raise ValueError(f"gather: D must be >= 1, got {D}")
    if x_stride < D:
        raise ValueError(f"gather: x_stride {x_stride} is smaller than D {D}")
    if x_align not in (1, 2, 4, 8, 16) or x_align < elem:
        raise ValueError(f"gather: x_align must be a power of two in [{elem}, 16] for {dtype}, got {x_align}")
    if threads is not None and (threads % 32 or not 32 <= threads <= 1024):
        raise ValueError(f"gather: threads must be a multiple of 32 in [32, 1024], got {threads}")
    # Every row start of x and y, and the base pointers, must be aligned to the vector.
    vector_bytes = math.gcd(D * elem, x_stride * elem, x_align, _MAX_VECTOR_BYTES)
    row_vectors = D * elem // vector_bytes
    # Threads needed for a row when each moves _VECTORS_PER_THREAD vectors.
    wanted = -(-row_vectors // _VECTORS_PER_THREAD)
    if threads is None:
        # A warp multiple keeps rows like D=7168 bf16 (224 threads x 4) free of partial steps.
        threads = max(_MIN_BLOCK_THREADS, min(_MAX_BLOCK_THREADS, -(-wanted // 32) * 32))
    # Short rows take a power-of-two share of the block so several rows fit; otherwise one row
    # spans the whole block.
    group = _next_pow2(wanted)
    threads_per_row = group if group < threads and threads % group == 0 else threads
    return GatherConfig(
        vector_bytes=vector_bytes,
        vector_elems=vector_bytes // elem,
        row_vectors=row_vectors,
        threads_per_row=threads_per_row,
        rows_per_block=threads // threads_per_row,
        steps=-(-row_vectors // threads_per_row),
    )


def gather_shipped_configs() -> list[tuple[int, str, str, int, int]]:
    """(D, dtype, index_dtype, x_stride, x_align) tuples covering every path of gather_config.

    Register pressure grows with the vectors a thread moves, so for each of the 12 (element size,
    vector width) classes that some D in 1..16384 reaches, the D with the most steps is here (the
    codegen test recomputes these maxima over every D). The rest add every dtype, both index types,
    strided rows, warp-multiple and 128-thread blocks, 1 to 128 rows per block and partial steps.
    """
    return [
        # Worst case (most steps) of each class: element bytes x vector bytes.
        (15873, "uint8", "int32", 15873, 1),  # 1 x 1 B: 32 steps at the 512-thread cap
        (15362, "uint8", "int64", 15362, 2),  # 1 x 2 B: 16 steps
        (14340, "float8_e4m3", "int32", 14340, 4),  # 1 x 4 B: 8 steps
        (1000, "uint8", "int64", 1000, 8),  # 1 x 8 B: 4 steps, 4 rows of 32 threads
        (64, "uint8", "int64", 64, 16),  # 1 x 16 B: 4 steps, 128 rows of one thread
        (16383, "bfloat16", "int32", 16383, 16),  # 2 x 2 B (odd D): 32 steps
        (15362, "float16", "int32", 15362, 4),  # 2 x 4 B: 16 steps
        (14340, "bfloat16", "int64", 14340, 8),  # 2 x 8 B: 8 steps
        (4096, "bfloat16", "int64", 4096, 16),  # 2 x 16 B: 4 steps, 128 threads, one row per block
        (15873, "float32", "int64", 15873, 4),  # 4 x 4 B: 32 steps
        (15362, "int32", "int32", 15362, 8),  # 4 x 8 B: 16 steps
        (16384, "float32", "int64", 16384, 16),  # 4 x 16 B: 8 steps
        # Shapes the model runs and the remaining branches.
        (7168, "bfloat16", "int32", 7168, 16),  # 224 threads: a warp multiple, no partial step
        (2048, "float16", "int64", 7168, 16),  # strided rows, 2 rows of 64 threads
        (576, "float8_e4m3fn", "int64", 576, 16),  # MLA latent + rope in fp8: 16 threads per row, tail
        (7, "float32", "int32", 9, 16),  # odd, strided: 64 rows of 2 threads
        (1, "uint8", "int64", 1, 16),  # one byte per row
    ]


# With replayable binds inlined, `src` would be re-read from `index` at every use and each vector
# load would get a second, redundant bounds check; keeping the bind makes it one load per row.
@tilelang.jit(pass_configs={"tl.if_stmt_binding_inline_replayable_binds": False})
def gather_tl(
    D: int, dtype: str, index_dtype: str, x_stride: int, *, threads: int | None = None, x_align: int = 16
):
    """Compiled gather kernel(x, index, y) for these static arguments (memoised per argument set)."""
    if index_dtype not in INDEX_DTYPES:
        raise ValueError(f"gather: index_dtype {index_dtype!r} is not one of {', '.join(INDEX_DTYPES)}")
    cfg = gather_config(D, dtype, x_stride, x_align, threads)
    n = T.dynamic("n")
    m = T.dynamic("m")
    tpr, rows, vec = cfg.threads_per_row, cfg.rows_per_block, cfg.vector_elems

    @T.prim_func
    def gather(
        x: T.StridedTensor((n, D), (x_stride, 1), dtype),
        index: T.Tensor((m,), index_dtype),
        y: T.Tensor((m, D), dtype),
    ):
        with T.Kernel(T.ceildiv(m, rows), threads=cfg.threads) as bx:
            tx = T.get_thread_binding(0)
            lane = tx % tpr
            # 64-bit row ids make every offset below 64-bit: n * x_stride and m * D may pass 2**31.
            row = T.cast(bx * rows + tx // tpr, "int64")
            if row < m:
                src = T.cast(index[row], "int64")
                # A row takes one branch as a whole, and an invalid index never forms an address.
                if src >= 0 and src < n:
                    for s in T.unroll(cfg.steps):
                        if lane + s * tpr < cfg.row_vectors:
                            for v in T.vectorized(vec):
                                y[row, (lane + s * tpr) * vec + v] = x[src, (lane + s * tpr) * vec + v]
                else:
                    for s in T.unroll(cfg.steps):
                        if lane + s * tpr < cfg.row_vectors:
                            for v in T.vectorized(vec):
                                y[row, (lane + s * tpr) * vec + v] = T.cast(0, dtype)

    return gather
