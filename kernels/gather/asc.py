"""Huawei Ascend 950 TileLang implementation of `gather`.

    kernel = gather_tl(D, dtype, index_dtype, x_stride)
    kernel(x, index, y)                      # y[i] = x[index[i]]; the caller allocates y

x      (n, D) of `dtype`, row stride `x_stride` >= D elements (a view of a wider tensor is fine),
       last dimension contiguous.
index  (m,) of `index_dtype` (int32 or int64), contiguous.
y      (m, D) of `dtype`, contiguous.

y[i] = x[index[i]] when 0 <= index[i] < n. Any other index (negative, >= n) writes a zero row and
issues no read of x. n and m are dynamic: one compiled kernel serves every batch size, and every
global-memory offset is computed in 64 bits, so n * x_stride and m * D may exceed 2**31. D, the
element type, the index type and x_stride are compiled in. Gather moves bits, but the element type
stays in the signature because the launcher checks it; every accepted type (fp8 included) has an
Ascend C element type, so no byte reinterpretation is needed.

Where the work runs: a pure vector (AIV) kernel, one persistent block per vector core; no Cube
work. The output is cut into tiles of `rows` consecutive rows by `chunk` columns (rows > 1 only
when a whole row fits a tile; wider rows are split into column chunks). Per tile, MTE2 brings the
tile's indices into the Unified Buffer (UB), the scalar unit reads and range-checks each one in
64 bits, MTE2 copies each valid source row segment into its UB row, a SIMD vector function writes
zeros into the UB row of each invalid index, and one 2-D MTE3 transfer stores the whole tile into
y. TileLang's auto-scheduler inserts the pipe flags and double-buffers the tile, so the store of
one tile overlaps the loads of the next.

UB budget: a tile holds at most 32 KiB (plus under 32 B of row padding), double-buffered that is
64 KiB, and the index buffer adds at most 1 KiB: at most 65 KiB of the 248 KiB UB for every D from
1 to 16384 (and beyond, since wider rows only add chunks). No SIMT region is used, so the 32 KiB
SIMT thread-context reservation does not apply. `testing/codegen_ascend.py` measures the lowered
allocation.

`threads` and `x_align` are accepted for signature parity with the CUDA factory and ignored: the
kernel has no SIMT threads, and the global-memory side of an Ascend DMA is byte-granular (only UB
addresses must be 32-byte aligned, which the tiling guarantees), so x and y need no alignment.
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import dataclasses

import tilelang
import tilelang.ascend.language as T

from kernels.static_args import row_elements

__all__ = ["DTYPES", "INDEX_DTYPES", "GatherConfig", "gather_config", "gather_shipped_configs", "gather_tl"]

# Element type names the factory accepts: the same names as the CUDA factory ("float8_e4m3" is
# TileLang's spelling of torch.float8_e4m3fn, uint8 carries packed FP4).
DTYPES = ("bfloat16", "float16", "float32", "float8_e4m3", "float8_e4m3fn", "uint8", "int32")
INDEX_DTYPES = ("int32", "int64")

# One persistent block per vector core, the count TileLang's Ascend 950 vector examples launch; a
# different count changes only the load balance, never the result.
_VECTOR_CORES = 64
# A 32 KiB tile makes each output store a long burst while two of them stay far below the UB.
_TILE_BYTES = 32 * 1024
# Caps the per-tile scalar index loop so short rows still spread over all cores at modest m.
_MAX_ROWS = 128
# UB addresses of DMA rows and vector stores must be 32-byte aligned.
_UB_ALIGN_BYTES = 32
# One SIMD vector register is 2048 bits.
_VREG_BYTES = 256


@dataclasses.dataclass(frozen=True)
class GatherConfig:
    """The static tiling of one gather kernel."""

    elem_bytes: int  # bytes per element
    chunk: int  # columns per tile; the last chunk of a row may be shorter (the DMA clamps to D)
    num_chunks: int  # column chunks per row
    pitch: int  # UB row pitch in elements: `chunk` rounded up to 32 bytes
    rows: int  # output rows per tile
    zero_vregs: int  # full vector stores that zero one UB row
    zero_tail: int  # elements of the final masked store that zeroes a UB row (0: none)
    cores: int  # persistent blocks, one per vector core
    stages: int  # UB versions of a tile the scheduler rotates


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(v: int, to: int) -> int:
    return _ceil_div(v, to) * to


def gather_config(D: int, dtype: str, x_stride: int, x_align: int = 16, threads: int | None = None) -> GatherConfig:
    """Derive the tiling from the static arguments; `x_align` and `threads` do not affect it."""
    elem = row_elements("gather", D, dtype, DTYPES, x_stride)
    align = _UB_ALIGN_BYTES // elem
    # A row wider than a tile is split into the fewest chunks that fit; rounding the chunk to 32
    # bytes lets every chunk but the last fill its UB row exactly, and the recount keeps every
    # chunk non-empty after the rounding.
    chunk = D if D * elem <= _TILE_BYTES else _round_up(_ceil_div(D, _ceil_div(D * elem, _TILE_BYTES)), align)
    num_chunks = _ceil_div(D, chunk)
    # Each UB row starts 32-byte aligned, so DMA destinations and vector stores are legal.
    pitch = _round_up(chunk, align)
    # As many whole rows as fill the tile, so one store covers them; a chunked row is alone.
    rows = 1 if num_chunks > 1 else max(1, min(_MAX_ROWS, _TILE_BYTES // (pitch * elem)))
    # An invalid index zeroes its UB row with full vector stores plus one masked store, which
    # never touches the neighbouring rows that MTE2 may be filling at the same time.
    zero_vregs, zero_tail = divmod(pitch, _VREG_BYTES // elem)
    return GatherConfig(
        elem_bytes=elem,
        chunk=chunk,
        num_chunks=num_chunks,
        pitch=pitch,
        rows=rows,
        zero_vregs=zero_vregs,
        zero_tail=zero_tail,
        cores=_VECTOR_CORES,
        # Two versions let the store of one tile overlap the loads of the next.
        stages=2,
    )


def gather_shipped_configs() -> list[tuple[int, str, str, int, int]]:
    """(D, dtype, index_dtype, x_stride, x_align) tuples covering every path of gather_config.

    Together they cover: element sizes 1, 2 and 4 (every dtype name); both index types; strided x;
    tiles of many rows (capped at 128, or limited by the 32 KiB tile), of 2 rows, of one unchunked
    row and of one chunk of a chunked row, with equal chunks and with a shorter last chunk; zero
    stores that are only a masked tail, only full vectors, and both.
    """
    return [
        (1, "float8_e4m3", "int64", 1, 16),  # 128 one-byte rows, zeroed by a masked store only
        (7, "bfloat16", "int32", 9, 16),  # strided odd row, 128 rows, masked store only
        (128, "float16", "int64", 128, 16),  # 128 rows of exactly one vector register
        (576, "float8_e4m3fn", "int32", 577, 16),  # 56 rows limited by the tile, 2 vectors + tail
        (64, "uint8", "int32", 64, 16),  # packed FP4 bytes, 128 rows
        (4096, "uint8", "int64", 5120, 16),  # strided, 8 rows of 16 vectors
        (3000, "int32", "int32", 3008, 16),  # strided, 2 rows of 46 vectors + tail
        (7168, "bfloat16", "int32", 7168, 16),  # 2 rows of 56 vectors
        (16384, "bfloat16", "int64", 16384, 16),  # one 32 KiB row per tile, unchunked
        (16384, "float32", "int32", 16384, 16),  # two equal 32 KiB chunks per row
        (12289, "float32", "int64", 12352, 16),  # strided, two chunks, the last shorter, vectors + tail
    ]


@tilelang.jit(target="ascend")
def gather_tl(D: int, dtype: str, index_dtype: str, x_stride: int, *, threads: int | None = None, x_align: int = 16):
    """Ascend gather kernel(x, index, y) for these static arguments (memoised per argument set).

    `threads` and `x_align` are ignored (see the module docstring). `gather_tl.get_tir(...)`
    returns the program without compiling it, for lowering on a machine without the toolkit.
    """
    if index_dtype not in INDEX_DTYPES:
        raise ValueError(f"gather: index_dtype {index_dtype!r} is not one of {', '.join(INDEX_DTYPES)}")
    cfg = gather_config(D, dtype, x_stride, x_align, threads)
    n = T.dynamic("n")
    m = T.dynamic("m")
    rows, chunk, num_chunks = cfg.rows, cfg.chunk, cfg.num_chunks
    lanes = _VREG_BYTES // cfg.elem_bytes
    bits = 8 * cfg.elem_bytes
    store = f"NORM_B{bits}"

    @T.prim_func
    def gather(
        x: T.StridedTensor((n, D), (x_stride, 1), dtype),
        index: T.Tensor((m,), index_dtype),
        y: T.Tensor((m, D), dtype),
    ):
        with T.Kernel(cfg.cores) as core:
            idx_ub = T.alloc_shared((rows,), index_dtype)
            tile_ub = T.alloc_shared((rows, cfg.pitch), dtype)
            # m * num_chunks < 2**31 for any y that fits in memory (chunks exist only for rows
            # wider than 32 KiB), so the tile count stays int32.
            for t in T.Persistent([T.ceildiv(m, rows) * num_chunks], cfg.cores, core, group_size=1, num_stages=cfg.stages):
                # 64-bit row ids make every GM offset below 64-bit.
                row0 = T.cast(t // num_chunks, "int64") * rows
                col0 = (t % num_chunks) * chunk
                valid_rows = T.min(rows, T.cast(m, "int64") - row0)
                T.copy(index[row0 : row0 + valid_rows], idx_ub[:valid_rows])
                for r in T.serial(rows):
                    if r < valid_rows:
                        src = T.cast(idx_ub[r], "int64")
                        if src >= 0 and src < n:
                            T.copy(x[src, col0 : col0 + chunk], tile_ub[r, :chunk])
                        else:
                            with T.SimdVF():
                                zero = T.simd.vdup(T.cast(0, dtype), dtype)
                                for v in T.serial(cfg.zero_vregs):
                                    T.simd.vsts(tile_ub[r, v * lanes], zero, dist=store)
                                if cfg.zero_tail:
                                    # The explicit extent tells the scheduler the store stays in
                                    # row r, so it is not ordered against other rows' loads.
                                    T.simd.vsts(
                                        tile_ub[r, cfg.zero_vregs * lanes],
                                        zero,
                                        T.simd.update_mask(cfg.zero_tail, bits),
                                        dist=store,
                                        extent=cfg.zero_tail,
                                    )
                T.copy(tile_ub[:valid_rows, :chunk], y[row0 : row0 + valid_rows, col0 : col0 + chunk])

    return gather
