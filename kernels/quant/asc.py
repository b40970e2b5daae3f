"""Huawei Ascend 950 TileLang implementation of `quant`: the CUDA factories' names, signatures and
arithmetic (see kernels/quant/cuda.py for the operands and kernels/quant/ref.py for the contract).

Verified by lowering to AscendC only: no NPU was available, so neither the results nor the speed of
these kernels has been measured. They are a correctness-first transcription.

Where the work runs: a vector (AIV) kernel, one persistent block per vector core. Per tile of `rows`
whole rows, MTE2 brings the rows into the Unified Buffer (UB); one SIMT region gives each SIMT thread
one group (one row for per-token scales, one row of a 128 x 128 block for the block kernel), which
it reduces and quantises element by element with exactly the expressions of the CUDA kernels
(kernels/quant/tl_formats.py: the same fp32 operations in the same order, UE8M0 and e2m1 by integer
bit arithmetic on reinterpreted fp32, clamps with NaN kept); MTE3 stores the codes and the scales.
TileLang's auto-scheduler inserts the pipe flags and double-buffers the tiles. Among the points
where the Ascend side differs in form, not in result (one SIMT thread a group instead of CUDA's lane
shuffles, scalar loops instead of vectors):
  * the amax is a compare-and-select (|v| > acc ? |v| : acc), which ignores NaN by IEEE comparison
    whatever the SIMT `max` does with NaN (fmaxf semantics on CUDA give the same value);
  * DeepGEMM's column-major scale layout is written with one DMA per group column of a tile (the
    flat buffer's column j starts at j * t_pad), since the UB tile is row-major.
Global-memory DMAs are byte-granular, so `x_align` is accepted for signature parity and ignored;
UB rows are padded to 32 bytes. The block kernel reduces a block in two SIMT regions: per-row amax
into the UB, then every row's thread takes the block maximum of those 128 values.
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import dataclasses

import tilelang
import tilelang.ascend.language as T

from kernels.quant import tl_formats as F
from kernels.quant.formats import E2M1_MAX, E4M3_MAX, FP8_GROUPS, SCALE_LAYOUTS, amax_floor
from kernels.static_args import row_elements

__all__ = [
    "DTYPES",
    "FP8_GROUPS",
    "SCALE_LAYOUTS",
    "TileConfig",
    "dequant_fp4_e4m3_tl",
    "dequant_fp4_ue8m0_tl",
    "dequant_fp8_tl",
    "quant_fp4_e4m3_tl",
    "quant_fp4_ue8m0_tl",
    "quant_fp8_block_tl",
    "quant_fp8_group_tl",
    "quant_fp8_token_tl",
    "quant_shipped_configs",
    "tile_config",
]

DTYPES = ("bfloat16", "float16", "float32")
BLOCK = 128
FP8 = "float8_e4m3"

# One persistent block per vector core, as TileLang's Ascend 950 vector examples launch.
_VECTOR_CORES = 64
# Input bytes per tile: whole rows up to 32 KiB (a wider row is a tile by itself), at most 64 rows.
_TILE_BYTES = 32 * 1024
_MAX_ROWS = 64
# UB rows start 32-byte aligned (DMA and vector addresses).
_UB_ALIGN = 32
# SIMT threads of one region, at most; threads loop when a tile holds more groups.
_SIMT_THREADS = 1024
_E4M3_MIN_SCALE = 2.0**-9


@dataclasses.dataclass(frozen=True)
class TileConfig:
    """The static tiling of one Ascend row kernel."""

    rows: int  # rows per tile
    groups: int  # groups per row
    threads: int  # SIMT threads (each takes groups threads apart)
    rounds: int  # groups each thread takes, at most


def _pad(n: int, elem_bytes: float) -> int:
    """n elements rounded up so that a UB row spans whole 32-byte units."""
    per = max(1, int(_UB_ALIGN / elem_bytes))
    return -(-n // per) * per


def tile_config(D: int, group: int, elem: int) -> TileConfig:
    rows = max(1, min(_MAX_ROWS, _TILE_BYTES // (D * elem)))
    # A partial last group (dequantising a weight whose K is no multiple of 128) is a group too.
    groups = -(-D // group)
    threads = min(_SIMT_THREADS, rows * groups)
    return TileConfig(rows=rows, groups=groups, threads=threads, rounds=-(-rows * groups // threads))


def _check_layout(name: str, layout: str) -> None:
    if layout not in SCALE_LAYOUTS:
        raise ValueError(f"{name}: scale_layout {layout!r} is not one of {', '.join(SCALE_LAYOUTS)}")


def quant_shipped_configs() -> dict[str, list[tuple]]:
    """{factory name: [positional args + (x_align,)]} covering every path of the tiling: every dtype
    and group, both scale layouts, UE8M0, tiles of 64 rows (narrow rows), of a few rows and of one
    64 KiB fp32 row (the largest UB footprint), strided rows, partial edge blocks, SIMT threads that
    loop (more groups in a tile than threads). Lowering takes tens of seconds per configuration."""
    return {
        "quant_fp8_group_tl": [
            (7168, 128, "bfloat16", False, "row", 7168, 16),  # 2 rows of 56 groups
            (7168, 16, "float16", True, "tma_col", 7168, 16),  # 2 rows of 448 groups
            (576, 64, "float32", False, "tma_col", 577, 16),  # strided, 14 rows
            (576, 32, "bfloat16", True, "tma_col", 577, 16),
            (16384, 32, "float32", True, "row", 16384, 16),  # one 64 KiB row
            (128, 16, "bfloat16", False, "row", 128, 16),  # 64 rows (the cap)
            (20480, 16, "bfloat16", True, "row", 20480, 16),  # 1280 groups in one row: threads loop
        ],
        "quant_fp8_token_tl": [
            (7168, "bfloat16", False, "row", 7168, 16),
            (16384, "float32", True, "tma_col", 16384, 16),
            (576, "float16", False, "tma_col", 577, 16),
        ],
        "quant_fp8_block_tl": [(7168, "bfloat16", False, 7168, 16), (200, "float32", True, 201, 16)],
        "quant_fp4_e4m3_tl": [(7168, "bfloat16", 7168, 16), (576, "float32", 577, 16), (64, "float16", 96, 16)],
        "quant_fp4_ue8m0_tl": [(7168, "bfloat16", 7168, 16), (16384, "float32", 16384, 16), (64, "float16", 96, 16)],
        "dequant_fp8_tl": [
            (7168, 128, "row", 1, 16),
            (576, 64, "tma_col", 1, 16),
            (16384, 16, "row", 1, 16),
            (7168, 7168, "row", 1, 16),  # per token
            (7168, BLOCK, "row", BLOCK, 16),  # weight blocks
            (200, BLOCK, "row", BLOCK, 16),  # a partial edge block
            (20480, 16, "row", 1, 16),  # 1280 groups in one row: threads loop
        ],
        "dequant_fp4_e4m3_tl": [(7168, 16), (16384, 16), (64, 16)],
        "dequant_fp4_ue8m0_tl": [(7168, 16), (64, 16)],
    }


def _amax_of(acc, v):
    """max(acc, |v|) with NaN v ignored by the comparison (any NaN compares false)."""
    a = T.abs(v)
    return T.if_then_else(a > acc, a, acc)


def _store_scales(layout: str, t, groups: int):
    """MTE3 store of a (rows, groups) UB scale tile into the row-major or TMA column layout."""

    @T.macro
    def store(s_ub, scale, row0, valid):
        if layout == "row":
            T.copy(s_ub[:valid, :groups], scale[row0 : row0 + valid, :])
        else:
            tp = (T.cast(t, "int64") + 3) // 4 * 4
            for j in T.serial(groups):
                T.copy(s_ub[j, :valid], scale[j * tp + row0 : j * tp + row0 + valid])

    return store


def _scale_ub(layout: str, rows: int, groups: int):
    # The column layout keeps the tile transposed, so that each column is one contiguous DMA.
    return T.alloc_shared((rows, _pad(groups, 4)) if layout == "row" else (groups, _pad(rows, 4)), "float32")


def _scale_param(layout: str, t, groups: int):
    if layout == "row":
        return T.Tensor((t, groups), "float32")
    return T.Tensor((T.dynamic("scale_elems"),), "float32")


def _fp8_row_kernel(name: str, D: int, group: int, dtype: str, ue8m0: bool, layout: str, x_stride: int):
    elem = row_elements(name, D, dtype, DTYPES, x_stride)
    _check_layout(name, layout)
    cfg = tile_config(D, group, elem)
    t = T.dynamic("t")
    rows, groups = cfg.rows, cfg.groups
    store_scales = _store_scales(layout, t, groups)

    @T.prim_func
    def kernel(
        x: T.StridedTensor((t, D), (x_stride, 1), dtype),
        q: T.Tensor((t, D), FP8),
        scale: _scale_param(layout, t, groups),
    ):
        with T.Kernel(_VECTOR_CORES) as core:
            x_ub = T.alloc_shared((rows, _pad(D, elem)), dtype)
            q_ub = T.alloc_shared((rows, _pad(D, 1)), FP8)
            s_ub = _scale_ub(layout, rows, groups)
            for k in T.Persistent([T.ceildiv(t, rows)], _VECTOR_CORES, core, group_size=1, num_stages=2):
                # 64-bit row ids make every GM offset 64-bit.
                row0 = T.cast(k, "int64") * rows
                valid = T.min(rows, T.cast(t, "int64") - row0)
                T.copy(x[row0 : row0 + valid, :], x_ub[:valid, :D])
                with T.SimtVF(threads=cfg.threads):
                    tid = T.get_thread_binding(0)
                    amax = T.alloc_var("float32")
                    sc = T.alloc_var("float32")
                    inv = T.alloc_var("float32")
                    for i in T.serial(cfg.rounds):
                        idx = i * cfg.threads + tid
                        if idx < valid * groups:
                            r = idx // groups
                            j = idx % groups
                            amax = T.float32(0)
                            for e in T.serial(group):
                                amax = _amax_of(amax, T.cast(x_ub[r, j * group + e], "float32"))
                            sc = F.group_scale(amax, E4M3_MAX, ue8m0)
                            inv = T.float32(1) / sc
                            if layout == "row":
                                s_ub[r, j] = sc
                            else:
                                s_ub[j, r] = sc
                            for e in T.serial(group):
                                q_ub[r, j * group + e] = T.cast(F.e4m3_clamp(T.cast(x_ub[r, j * group + e], "float32") * inv), FP8)
                T.copy(q_ub[:valid, :D], q[row0 : row0 + valid, :])
                store_scales(s_ub, scale, row0, valid)

    return kernel


@tilelang.jit(target="ascend")
def quant_fp8_group_tl(D: int, group: int, dtype: str, ue8m0: bool, scale_layout: str, x_stride: int, *, x_align: int = 16):
    """Ascend kernel(x, q, scale): per-token-group FP8 e4m3 (`x_align` ignored)."""
    if group not in FP8_GROUPS or D % group:
        raise ValueError(f"quant_fp8_group: group must be one of {FP8_GROUPS} and divide D {D}, got {group}")
    return _fp8_row_kernel("quant_fp8_group", D, group, dtype, ue8m0, scale_layout, x_stride)


@tilelang.jit(target="ascend")
def quant_fp8_token_tl(D: int, dtype: str, ue8m0: bool, scale_layout: str, x_stride: int, *, x_align: int = 16):
    """Ascend kernel(x, q, scale): per-token FP8 e4m3, one SIMT thread per row (`x_align` ignored)."""
    return _fp8_row_kernel("quant_fp8_token", D, D, dtype, ue8m0, scale_layout, x_stride)


def _fp4_row_kernel(name: str, D: int, dtype: str, x_stride: int, nvfp4: bool):
    elem = row_elements(name, D, dtype, DTYPES, x_stride)
    group = 16 if nvfp4 else 32
    if D % group:
        raise ValueError(f"{name}: D {D} is not a multiple of the group size {group}")
    cfg = tile_config(D, group, elem)
    t = T.dynamic("t")
    rows, groups, half = cfg.rows, cfg.groups, D // 2
    scale_dtype = FP8 if nvfp4 else "uint8"

    @T.macro
    def body(x, gs_buf, packed, scale):
        with T.Kernel(_VECTOR_CORES) as core:
            x_ub = T.alloc_shared((rows, _pad(D, elem)), dtype)
            p_ub = T.alloc_shared((rows, _pad(half, 1)), "uint8")
            s_ub = T.alloc_shared((rows, _pad(groups, 1)), scale_dtype)
            g_ub = T.alloc_shared((8,), "float32")
            if nvfp4:
                T.copy(gs_buf[0:1], g_ub[0:1])
            for k in T.Persistent([T.ceildiv(t, rows)], _VECTOR_CORES, core, group_size=1, num_stages=2):
                row0 = T.cast(k, "int64") * rows
                valid = T.min(rows, T.cast(t, "int64") - row0)
                T.copy(x[row0 : row0 + valid, :], x_ub[:valid, :D])
                with T.SimtVF(threads=cfg.threads):
                    tid = T.get_thread_binding(0)
                    amax = T.alloc_var("float32")
                    inv = T.alloc_var("float32")
                    for i in T.serial(cfg.rounds):
                        idx = i * cfg.threads + tid
                        if idx < valid * groups:
                            r = idx // groups
                            j = idx % groups
                            amax = T.float32(0)
                            for e in T.serial(group):
                                amax = _amax_of(amax, T.cast(x_ub[r, j * group + e], "float32"))
                            if nvfp4:
                                gs = g_ub[0]
                                inv = T.max(amax, T.float32(amax_floor(E2M1_MAX))) / (T.float32(E2M1_MAX) * gs)  # s32
                                inv = T.if_then_else(T.isnan(inv), inv, T.max(inv, T.float32(_E4M3_MIN_SCALE)))
                                s_ub[r, j] = T.cast(F.e4m3_clamp(inv), FP8)
                                inv = T.float32(1) / (T.cast(s_ub[r, j], "float32") * gs)
                            else:
                                s_ub[r, j] = F.ue8m0_exponent(F.group_scale(amax, E2M1_MAX, True))
                                inv = T.float32(1) / F.ue8m0_value(s_ub[r, j])
                            for p in T.serial(group // 2):
                                lo = F.e2m1_code(T.cast(x_ub[r, j * group + 2 * p], "float32") * inv)
                                hi = F.e2m1_code(T.cast(x_ub[r, j * group + 2 * p + 1], "float32") * inv)
                                p_ub[r, j * (group // 2) + p] = lo | T.shift_left(hi, T.uint8(4))
                T.copy(p_ub[:valid, :half], packed[row0 : row0 + valid, :])
                T.copy(s_ub[:valid, :groups], scale[row0 : row0 + valid, :])

    return body, t, groups, half, scale_dtype


@tilelang.jit(target="ascend")
def quant_fp4_e4m3_tl(D: int, dtype: str, x_stride: int, *, x_align: int = 16):
    """Ascend kernel(x, global_scale, packed, scale): NVFP4 (`x_align` ignored)."""
    body, t, groups, half, scale_dtype = _fp4_row_kernel("quant_fp4_e4m3", D, dtype, x_stride, True)

    @T.prim_func
    def quant_fp4_e4m3(
        x: T.StridedTensor((t, D), (x_stride, 1), dtype),
        global_scale: T.Tensor((1,), "float32"),
        packed: T.Tensor((t, half), "uint8"),
        scale: T.Tensor((t, groups), scale_dtype),
    ):
        body(x, global_scale, packed, scale)

    return quant_fp4_e4m3


@tilelang.jit(target="ascend")
def quant_fp4_ue8m0_tl(D: int, dtype: str, x_stride: int, *, x_align: int = 16):
    """Ascend kernel(x, packed, scale): MX FP4 (`x_align` ignored)."""
    body, t, groups, half, scale_dtype = _fp4_row_kernel("quant_fp4_ue8m0", D, dtype, x_stride, False)

    @T.prim_func
    def quant_fp4_ue8m0(
        x: T.StridedTensor((t, D), (x_stride, 1), dtype),
        packed: T.Tensor((t, half), "uint8"),
        scale: T.Tensor((t, groups), scale_dtype),
    ):
        body(x, None, packed, scale)

    return quant_fp4_ue8m0


@tilelang.jit(target="ascend")
def quant_fp8_block_tl(K: int, dtype: str, ue8m0: bool, w_stride: int, *, x_align: int = 16):
    """Ascend kernel(w, q, scale): FP8 e4m3 per 128 x 128 block (`x_align` ignored)."""
    elem = row_elements("quant_fp8_block", K, dtype, DTYPES, w_stride)
    n = T.dynamic("n")
    kb = -(-K // BLOCK)

    @T.prim_func
    def quant_fp8_block(
        w: T.StridedTensor((n, K), (w_stride, 1), dtype),
        q: T.Tensor((n, K), FP8),
        scale: T.Tensor((T.ceildiv(n, BLOCK), kb), "float32"),
    ):
        with T.Kernel(_VECTOR_CORES) as core:
            w_ub = T.alloc_shared((BLOCK, _pad(BLOCK, elem)), dtype)
            q_ub = T.alloc_shared((BLOCK, BLOCK), FP8)
            r_ub = T.alloc_shared((BLOCK,), "float32")  # per-row amax of the block
            s_ub = T.alloc_shared((8,), "float32")
            for b in T.Persistent([T.ceildiv(n, BLOCK) * kb], _VECTOR_CORES, core, group_size=1, num_stages=2):
                r0 = T.cast(b // kb, "int64") * BLOCK
                c0 = (b % kb) * BLOCK
                vr = T.min(BLOCK, T.cast(n, "int64") - r0)
                vc = T.min(BLOCK, K - c0)
                T.copy(w[r0 : r0 + vr, c0 : c0 + vc], w_ub[:vr, :vc])
                with T.SimtVF(threads=BLOCK):
                    r = T.get_thread_binding(0)
                    amax = T.alloc_var("float32")
                    amax = T.float32(0)
                    if r < vr:
                        for e in T.serial(vc):
                            amax = _amax_of(amax, T.cast(w_ub[r, e], "float32"))
                    r_ub[r] = amax
                with T.SimtVF(threads=BLOCK):
                    r = T.get_thread_binding(0)
                    amax = T.alloc_var("float32")
                    amax = T.float32(0)
                    for i in T.serial(BLOCK):
                        amax = T.if_then_else(r_ub[i] > amax, r_ub[i], amax)
                    sc = F.group_scale(amax, E4M3_MAX, ue8m0)
                    if r == 0:
                        s_ub[0] = sc
                    if r < vr:
                        for e in T.serial(vc):
                            q_ub[r, e] = T.cast(F.e4m3_clamp(T.cast(w_ub[r, e], "float32") * (T.float32(1) / sc)), FP8)
                T.copy(q_ub[:vr, :vc], q[r0 : r0 + vr, c0 : c0 + vc])
                T.copy(s_ub[0:1], scale[b // kb, b % kb : b % kb + 1])

    return quant_fp8_block


def _dequant_tile(D: int, group: int) -> TileConfig:
    # Input 1 byte and output 2 bytes per element: tiles of 32 KiB of output.
    return tile_config(D, group, 2)


@tilelang.jit(target="ascend")
def dequant_fp8_tl(D: int, group: int, scale_layout: str, row_block: int, *, x_align: int = 16):
    """Ascend kernel(q, scale, y): y = bf16(fp32(q) * scale[r // row_block, c // group])."""
    _check_layout("dequant_fp8", scale_layout)
    if group < 1 or (row_block == 1 and D % group) or row_block not in (1, BLOCK) or (row_block == BLOCK and group != BLOCK):
        raise ValueError(f"dequant_fp8: unsupported group {group} / row_block {row_block} for D {D}")
    if row_block == BLOCK and scale_layout != "row":
        raise ValueError("dequant_fp8: block scales are row-major")
    cfg = _dequant_tile(D, group)
    t = T.dynamic("t")
    rows, groups = cfg.rows, cfg.groups
    scale_rows = T.ceildiv(t, BLOCK) if row_block == BLOCK else t

    def scale_at(scale, row, j):
        if row_block == BLOCK:
            return scale[row // BLOCK, j]
        if scale_layout == "row":
            return scale[row, j]
        return scale[j * ((T.cast(t, "int64") + 3) // 4 * 4) + row]

    @T.prim_func
    def dequant_fp8(
        q: T.Tensor((t, D), FP8),
        scale: T.Tensor((scale_rows, groups), "float32") if scale_layout == "row" else T.Tensor((T.dynamic("scale_elems"),), "float32"),
        y: T.Tensor((t, D), "bfloat16"),
    ):
        with T.Kernel(_VECTOR_CORES) as core:
            q_ub = T.alloc_shared((rows, _pad(D, 1)), FP8)
            y_ub = T.alloc_shared((rows, _pad(D, 2)), "bfloat16")
            for k in T.Persistent([T.ceildiv(t, rows)], _VECTOR_CORES, core, group_size=1, num_stages=2):
                row0 = T.cast(k, "int64") * rows
                valid = T.min(rows, T.cast(t, "int64") - row0)
                T.copy(q[row0 : row0 + valid, :], q_ub[:valid, :D])
                with T.SimtVF(threads=cfg.threads):
                    tid = T.get_thread_binding(0)
                    sc = T.alloc_var("float32")
                    for i in T.serial(cfg.rounds):
                        idx = i * cfg.threads + tid
                        if idx < valid * groups:
                            r = idx // groups
                            j = idx % groups
                            # Scales are read from global memory, once per group (scalar loads).
                            sc = scale_at(scale, row0 + r, j)
                            for e in T.serial(T.min(group, D - j * group)):
                                y_ub[r, j * group + e] = T.cast(T.cast(q_ub[r, j * group + e], "float32") * sc, "bfloat16")
                T.copy(y_ub[:valid, :D], y[row0 : row0 + valid, :])

    return dequant_fp8


def _dequant_fp4_kernel(name: str, D: int, nvfp4: bool):
    group = 16 if nvfp4 else 32
    if D % group:
        raise ValueError(f"{name}: D {D} is not a multiple of the group size {group}")
    cfg = _dequant_tile(D, group)
    t = T.dynamic("t")
    rows, groups, half = cfg.rows, cfg.groups, D // 2
    scale_dtype = FP8 if nvfp4 else "uint8"

    @T.macro
    def body(packed, scale, gs_buf, y):
        with T.Kernel(_VECTOR_CORES) as core:
            p_ub = T.alloc_shared((rows, _pad(half, 1)), "uint8")
            s_ub = T.alloc_shared((rows, _pad(groups, 1)), scale_dtype)
            y_ub = T.alloc_shared((rows, _pad(D, 2)), "bfloat16")
            g_ub = T.alloc_shared((8,), "float32")
            if nvfp4:
                T.copy(gs_buf[0:1], g_ub[0:1])
            for k in T.Persistent([T.ceildiv(t, rows)], _VECTOR_CORES, core, group_size=1, num_stages=2):
                row0 = T.cast(k, "int64") * rows
                valid = T.min(rows, T.cast(t, "int64") - row0)
                T.copy(packed[row0 : row0 + valid, :], p_ub[:valid, :half])
                T.copy(scale[row0 : row0 + valid, :], s_ub[:valid, :groups])
                with T.SimtVF(threads=cfg.threads):
                    tid = T.get_thread_binding(0)
                    sc = T.alloc_var("float32")
                    for i in T.serial(cfg.rounds):
                        idx = i * cfg.threads + tid
                        if idx < valid * groups:
                            r = idx // groups
                            j = idx % groups
                            sc = T.cast(s_ub[r, j], "float32") if nvfp4 else F.ue8m0_value(s_ub[r, j])
                            for e in T.serial(group):
                                byte = p_ub[r, (j * group + e) // 2]
                                code = T.if_then_else(e % 2 == 1, byte >> T.uint8(4), byte & T.uint8(15))
                                value = F.e2m1_value(code) * sc
                                y_ub[r, j * group + e] = T.cast(value * g_ub[0] if nvfp4 else value, "bfloat16")
                T.copy(y_ub[:valid, :D], y[row0 : row0 + valid, :])

    return body, t, groups, half, scale_dtype


@tilelang.jit(target="ascend")
def dequant_fp4_e4m3_tl(D: int, *, x_align: int = 16):
    """Ascend kernel(packed, scale, global_scale, y): NVFP4 -> bf16."""
    body, t, groups, half, scale_dtype = _dequant_fp4_kernel("dequant_fp4_e4m3", D, True)

    @T.prim_func
    def dequant_fp4_e4m3(
        packed: T.Tensor((t, half), "uint8"),
        scale: T.Tensor((t, groups), scale_dtype),
        global_scale: T.Tensor((1,), "float32"),
        y: T.Tensor((t, D), "bfloat16"),
    ):
        body(packed, scale, global_scale, y)

    return dequant_fp4_e4m3


@tilelang.jit(target="ascend")
def dequant_fp4_ue8m0_tl(D: int, *, x_align: int = 16):
    """Ascend kernel(packed, scale, y): MX FP4 -> bf16."""
    body, t, groups, half, scale_dtype = _dequant_fp4_kernel("dequant_fp4_ue8m0", D, False)

    @T.prim_func
    def dequant_fp4_ue8m0(
        packed: T.Tensor((t, half), "uint8"),
        scale: T.Tensor((t, groups), scale_dtype),
        y: T.Tensor((t, D), "bfloat16"),
    ):
        body(packed, scale, None, y)

    return dequant_fp4_ue8m0
