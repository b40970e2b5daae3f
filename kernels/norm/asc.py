"""Huawei Ascend 950 TileLang implementation of `norm`: RMSNorm, plain and with a fused residual add,
each also with an FP8 (e4m3) output.

    kernel = rmsnorm_tl(D, dtype, eps, x_stride)
    kernel(x, weight, y)                     # y = x * rsqrt(mean(x^2) + eps) * weight

    kernel = add_rmsnorm_tl(D, dtype, eps, x_stride)
    kernel(x, residual, weight, y)           # residual <- x + residual (in place); y = rmsnorm(residual)

    kernel = rmsnorm_fp8_tl(D, dtype, eps, x_stride, group, ue8m0=..., scale_layout=..., with_y=...)
    kernel(x, weight, q, scale[, y])         # as the CUDA factories (kernels/norm/cuda.py)
    kernel = add_rmsnorm_fp8_tl(...)
    kernel(x, residual, weight, q, scale[, y])
    (how the FP8 pass runs on the vector core: the section at the end of this file)

x         (t, D) of `dtype` (bfloat16, float16 or float32), row stride `x_stride` >= D elements,
          last dimension contiguous.
residual  (t, D) of `dtype`, contiguous; read, then overwritten with x + residual rounded to `dtype`.
weight    (D,) of `dtype`, contiguous.
y         (t, D) of `dtype`, contiguous.

Arithmetic, as in `kernels.norm.ref`: elements are widened to fp32; the sum of squares accumulates
in a 64-lane fp32 vector register with fused multiply-adds, then one cross-lane add; mean = sum / D
(exact division); r = 1 / sqrt(mean + eps) (exact square root and division; the reference's
rsqrt may differ by an ulp of fp32, which the tests' tolerance covers); y = (x * r) * w in fp32,
rounded to nearest-even into `dtype` without saturation (an overflow gives inf, like torch). The
residual variant forms x + residual in fp32, rounds it to `dtype`, stores it and normalises the
rounded value. t is dynamic and every global-memory offset is 64-bit; D, dtype, eps (rounded to
fp32) and x_stride are compiled in.

Where the work runs: a pure vector (AIV) kernel, one persistent block per vector core, no Cube work
and no SIMT region. The weight is brought into the Unified Buffer (UB) once per core. The rows are
cut into tiles of `rows` whole rows (several short rows per tile; a row wider than the 32 KiB tile
budget is a tile by itself - rows are never split, so D needs no chunking up to 16384: the widest
case, a float32 row with its residual, is 2 x 64 KiB plus the 64 KiB weight). Per tile, MTE2 brings
x (and residual) into the UB, one SIMD vector function makes two passes over each row in the UB -
sum of squares, then scale - writing y over the x tile in place (the residual variant writes the
sum over the residual tile in the first pass and y over the x tile in the second), and MTE3 stores
the tile(s). x is read from global memory once. TileLang's auto-scheduler inserts the pipe flags
and double-buffers the tiles when two versions fit the UB (`stages`), so the stores of one tile
overlap the loads of the next.

`threads`, `x_align` and `max_steps` are accepted for signature parity with the CUDA factories and
ignored: the kernel has no SIMT threads, and the global-memory side of an Ascend DMA is
byte-granular (only UB addresses must be 32-byte aligned, which the tiling guarantees).
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import dataclasses

import tilelang
import tilelang.ascend.language as T
import tvm

from kernels.norm.ref import FP8_GROUPS, fp32_eps
from kernels.quant.formats import E4M3_MAX, SCALE_LAYOUTS, amax_floor
from kernels.static_args import row_elements

__all__ = [
    "DTYPES",
    "FP8_DTYPE",
    "MAX_D",
    "Fp8Tiling",
    "NormConfig",
    "add_rmsnorm_fp8_tl",
    "add_rmsnorm_tl",
    "fp8_config",
    "fp8_shipped_configs",
    "norm_config",
    "norm_shipped_configs",
    "rmsnorm_fp8_tl",
    "rmsnorm_tl",
]

DTYPES = ("bfloat16", "float16", "float32")
MAX_D = 16384

# One persistent block per vector core, the count TileLang's Ascend 950 vector examples launch; a
# different count changes only the load balance, never the result.
_VECTOR_CORES = 64
# Rows per tile: as many whole rows as fill 32 KiB per buffer, capped so the row loop stays short.
_TILE_BYTES = 32 * 1024
_MAX_ROWS = 64
# One SIMD vector register is 2048 bits: 64 fp32 lanes, the unit of both passes.
_LANES = 64
# UB of the Ascend 950 vector core (TileLang's auto-scheduler limit) and the share the tiles may
# take; the remainder is headroom for anything the scheduler adds.
_UB_BYTES = 248 * 1024
_UB_BUDGET = _UB_BYTES - 8 * 1024


@dataclasses.dataclass(frozen=True)
class NormConfig:
    """The static tiling of one Ascend RMSNorm kernel."""

    elem_bytes: int  # bytes per element
    pitch: int  # UB row pitch in elements: D rounded up to a vector register (64 elements)
    rows: int  # rows per tile
    full_vregs: int  # whole 64-element vector registers per row
    tail: int  # elements in the final, partial register of a row (0: none)
    buffers: int  # row tiles per stage: 1 (x; y overwrites it) or 2 (x and residual)
    stages: int  # UB versions of a tile the scheduler rotates
    cores: int  # persistent blocks, one per vector core

    @property
    def weight_bytes(self) -> int:
        return self.pitch * self.elem_bytes

    @property
    def stage_bytes(self) -> int:
        return self.buffers * self.rows * self.pitch * self.elem_bytes

    @property
    def ub_bytes(self) -> int:
        """UB the tiling allocates: every stage of every tile, plus the weight."""
        return self.stages * self.stage_bytes + self.weight_bytes


def _round_up(v: int, to: int) -> int:
    return -(-v // to) * to


def norm_config(
    D: int,
    dtype: str,
    x_stride: int,
    x_align: int = 16,
    threads: int | None = None,
    max_steps: int | None = None,
    residual: bool = False,
) -> NormConfig:
    """Derive the tiling from the static arguments (`residual`: the fused variant's, two tiles per
    stage); `x_align`, `threads` and `max_steps` do not affect it.
    """
    elem = row_elements("norm", D, dtype, DTYPES, x_stride, max_D=MAX_D)
    # Every vector access of a row (64 elements) stays inside the row's UB pitch, and every UB
    # row starts 32-byte aligned (64 elements are 128 or 256 bytes).
    pitch = _round_up(D, _LANES)
    rows = max(1, min(_MAX_ROWS, _TILE_BYTES // (pitch * elem)))
    buffers = 2 if residual else 1
    stage = buffers * rows * pitch * elem
    stages = 2 if 2 * stage + pitch * elem <= _UB_BUDGET else 1
    full_vregs, tail = divmod(D, _LANES)
    return NormConfig(
        elem_bytes=elem,
        pitch=pitch,
        rows=rows,
        full_vregs=full_vregs,
        tail=tail,
        buffers=buffers,
        stages=stages,
        cores=_VECTOR_CORES,
    )


def norm_shipped_configs() -> list[tuple[int, str, int, int]]:
    """(D, dtype, x_stride, x_align) tuples covering every path of norm_config.

    Together they cover: every dtype; strided x; tiles of 64 rows (the cap), of a few rows and of
    one row; rows that are whole registers and rows with a partial last register (tail only, and
    registers + tail); double-buffered and single-buffered tiles (the float32 16384 residual case,
    the largest footprint); the models' widths.
    """
    return [
        (16384, "float32", 16384, 16),  # one 64 KiB row; residual variant single-buffered
        (12289, "float32", 12352, 16),  # strided, 192 registers + a 1-element tail, one row
        (16384, "bfloat16", 16384, 16),  # one 32 KiB row per tile, double-buffered
        (7168, "bfloat16", 7168, 16),  # hidden size: 2 rows of 112 registers
        (7168, "float32", 7168, 16),  # one row of 112 registers
        (4096, "float16", 7168, 16),  # strided, 4 rows
        (2880, "bfloat16", 2880, 16),  # 5 rows of 45 registers
        (576, "bfloat16", 577, 16),  # strided MLA width, 28 rows of 9 registers
        (100, "float16", 100, 16),  # 64 rows (the cap) of 1 register + a 36-element tail
        (7, "float32", 9, 16),  # strided, a tail-only row, 64 rows
    ]


def _kernel_macros(cfg: NormConfig, D: int, dtype: str, eps: float):
    """SIMD pieces shared by every variant, specialised to one tiling."""
    wide = dtype != "float32"
    load_dist = "UNPK_B16" if wide else "NORM"  # 16-bit elements land in the low half of 32-bit lanes
    store_dist = "PK_B32" if wide else "NORM_B32"  # and are packed back on the way out
    eps32 = fp32_eps(eps)
    full, tail = cfg.full_vregs, cfg.tail

    def widen(vec):
        return T.simd.vcvt(vec, "float32") if wide else vec

    def narrow(vec):
        # Round to nearest-even without saturation: an overflow becomes inf, as in torch.
        return T.simd.vcvt(vec, dtype, sat=False) if wide else vec

    @T.macro
    def load_f32(buf, r, j, out):
        out[0] = widen(T.simd.vld(buf[r, j * _LANES], dist=load_dist))

    @T.macro
    def store_f32(buf, r, j, value):
        T.simd.vsts(buf[r, j * _LANES], narrow(value), dist=store_dist)

    @T.macro
    def accumulate(acc, value, partial):
        """acc += value^2; in a row's partial last register the lanes past D (UB padding, any bits)
        are zeroed first."""
        if partial:
            clean = T.simd.vsel(value, T.simd.vdup(T.float32(0), "float32"), T.simd.update_mask(tail, 32))
            T.simd.vmula(acc[0], clean, clean)
        else:
            T.simd.vmula(acc[0], value, value)

    @T.macro
    def inv_rms(acc, inv):
        """inv (every lane) = 1 / sqrt(sum of acc's lanes / D + eps)."""
        total = T.simd.vcadd(acc[0])  # lane 0
        mean = T.simd.vdiv(total, T.simd.vdup(T.float32(D), "float32"))
        root = T.simd.vsqrt(T.simd.vadds(mean, T.float32(eps32)), precision="ftz_false")
        inv[0] = T.simd.vdupv(T.simd.vdiv(T.simd.vdup(T.float32(1), "float32"), root))

    @T.macro
    def scale_row(src, dst, w_ub, r, inv, val, wv):
        """dst[r] = (src[r] * inv) * w for every register of the row (dst may be src)."""
        for j in T.serial(full + (1 if tail else 0)):
            load_f32(src, r, j, val)
            wv[0] = widen(T.simd.vld(w_ub[0, j * _LANES], dist=load_dist))
            store_f32(dst, r, j, T.simd.vmul(T.simd.vmul(val[0], inv[0]), wv[0]))

    return load_f32, store_f32, accumulate, inv_rms, scale_row


@tilelang.jit(target="ascend")
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
    """Ascend RMSNorm kernel(x, weight, y) for these static arguments (memoised per argument set).

    `threads`, `x_align` and `max_steps` are ignored (see the module docstring).
    `rmsnorm_tl.get_tir(...)` returns the program without compiling it.
    """
    cfg = norm_config(D, dtype, x_stride, x_align, threads, max_steps, residual=False)
    load_f32, _, accumulate, inv_rms, scale_row = _kernel_macros(cfg, D, dtype, eps)
    t = T.dynamic("t")
    rows, full, tail = cfg.rows, cfg.full_vregs, cfg.tail

    @T.prim_func
    def rmsnorm(
        x: T.StridedTensor((t, D), (x_stride, 1), dtype),
        weight: T.Tensor((D,), dtype),
        y: T.Tensor((t, D), dtype),
    ):
        with T.Kernel(cfg.cores) as core:
            w_ub = T.alloc_shared((1, cfg.pitch), dtype)
            tile = T.alloc_shared((rows, cfg.pitch), dtype)
            T.copy(weight[0:D], w_ub[0, :D])
            # t < 2**31, so the tile count stays int32.
            for k in T.Persistent([T.ceildiv(t, rows)], cfg.cores, core, group_size=1, num_stages=cfg.stages):
                # 64-bit row ids make every GM offset below 64-bit.
                row0 = T.cast(k, "int64") * rows
                valid = T.min(rows, T.cast(t, "int64") - row0)
                T.copy(x[row0 : row0 + valid, :], tile[:valid, :D])
                with T.SimdVF():
                    acc = T.simd.alloc_local((1,), "float32")
                    inv = T.simd.alloc_local((1,), "float32")
                    val = T.simd.alloc_local((1,), "float32")
                    wv = T.simd.alloc_local((1,), "float32")
                    for r in T.serial(valid):
                        acc[0] = T.simd.vdup(T.float32(0), "float32")
                        for j in T.serial(full):
                            load_f32(tile, r, j, val)
                            accumulate(acc, val[0], False)
                        if tail:
                            load_f32(tile, r, full, val)
                            accumulate(acc, val[0], True)
                        inv_rms(acc, inv)
                        scale_row(tile, tile, w_ub, r, inv, val, wv)
                T.copy(tile[:valid, :D], y[row0 : row0 + valid, :])

    return rmsnorm


@tilelang.jit(target="ascend")
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
    """Ascend fused kernel(x, residual, weight, y): residual <- x + residual, y = rmsnorm(residual).

    `threads`, `x_align` and `max_steps` are ignored (see the module docstring).
    """
    cfg = norm_config(D, dtype, x_stride, x_align, threads, max_steps, residual=True)
    load_f32, store_f32, accumulate, inv_rms, scale_row = _kernel_macros(cfg, D, dtype, eps)
    t = T.dynamic("t")
    rows, full, tail = cfg.rows, cfg.full_vregs, cfg.tail
    wide = dtype != "float32"

    @T.macro
    def add_step(x_tile, r_tile, r, j, acc, val, rv, partial):
        """Register j of row r: s = x + residual rounded to dtype, stored over the residual tile;
        acc += s^2 (the norm uses the rounded s)."""
        load_f32(x_tile, r, j, val)
        load_f32(r_tile, r, j, rv)
        if wide:
            s = T.simd.vcvt(T.simd.vadd(val[0], rv[0]), dtype, sat=False)
            T.simd.vsts(r_tile[r, j * _LANES], s, dist="PK_B32")
            val[0] = T.simd.vcvt(s, "float32")
        else:
            val[0] = T.simd.vadd(val[0], rv[0])
            T.simd.vsts(r_tile[r, j * _LANES], val[0], dist="NORM_B32")
        accumulate(acc, val[0], partial)

    @T.prim_func
    def add_rmsnorm(
        x: T.StridedTensor((t, D), (x_stride, 1), dtype),
        residual: T.Tensor((t, D), dtype),
        weight: T.Tensor((D,), dtype),
        y: T.Tensor((t, D), dtype),
    ):
        with T.Kernel(cfg.cores) as core:
            w_ub = T.alloc_shared((1, cfg.pitch), dtype)
            x_tile = T.alloc_shared((rows, cfg.pitch), dtype)
            r_tile = T.alloc_shared((rows, cfg.pitch), dtype)
            T.copy(weight[0:D], w_ub[0, :D])
            for k in T.Persistent([T.ceildiv(t, rows)], cfg.cores, core, group_size=1, num_stages=cfg.stages):
                row0 = T.cast(k, "int64") * rows
                valid = T.min(rows, T.cast(t, "int64") - row0)
                T.copy(x[row0 : row0 + valid, :], x_tile[:valid, :D])
                T.copy(residual[row0 : row0 + valid, :], r_tile[:valid, :D])
                with T.SimdVF():
                    acc = T.simd.alloc_local((1,), "float32")
                    inv = T.simd.alloc_local((1,), "float32")
                    val = T.simd.alloc_local((1,), "float32")
                    rv = T.simd.alloc_local((1,), "float32")
                    wv = T.simd.alloc_local((1,), "float32")
                    for r in T.serial(valid):
                        acc[0] = T.simd.vdup(T.float32(0), "float32")
                        for j in T.serial(full):
                            add_step(x_tile, r_tile, r, j, acc, val, rv, False)
                        if tail:
                            add_step(x_tile, r_tile, r, full, acc, val, rv, True)
                        inv_rms(acc, inv)
                        # The second pass reads back the sums the first one stored.
                        T.simd.mem_bar("VST_VLD")
                        scale_row(r_tile, x_tile, w_ub, r, inv, val, wv)
                T.copy(r_tile[:valid, :D], residual[row0 : row0 + valid, :])
                T.copy(x_tile[:valid, :D], y[row0 : row0 + valid, :])

    return add_rmsnorm


# ----------------------------------------------------------------------------------------------------
# FP8 output: y rounded to dtype, then quantised per group to e4m3 (kernels/norm/ref.py).
#
# The tile pass is the norm's (y is written over the x tile, rounded to dtype); a third SIMD pass per
# row reads y back, finds each group's amax (NaN lanes and lanes past D zeroed first, then a
# lane-max: vcmax over the group's lanes, the group's registers first combined with vmax), derives
# the scale with the same fp32 operations as kernels/quant/formats.py (max with the floor, an exact
# division by 448, the UE8M0 round-up as the same integer carry on the scale's bits: add 0x7FFFFF,
# mask the mantissa off), inv = 1 / scale (exact division), and converts y * inv, clamped to +-448
# with NaN kept (vsel on a self-comparison), to e4m3 with round-to-nearest-even. Groups of 16 and
# 32 share a 64-lane register: each has its own lane-range predicate, and the per-lane inverse is
# assembled with vsel. q and the scales are staged in their own UB tiles and stored by MTE3; with_y
# also stores the y tile. Verified by lowering only: no NPU was available, so the e4m3 conversion's
# NaN handling (NaN in, NaN out under saturation) and vcmax's result lane are taken from the
# instruction descriptions, not from a run.

FP8_DTYPE = "float8_e4m3"
# A UB tile's rows start 32-byte aligned: 8 fp32 scales.
_SCALE_ALIGN = 8


@dataclasses.dataclass(frozen=True)
class Fp8Tiling:
    """The FP8 output's share of one tiling: groups per register and its UB tiles."""

    group: int  # elements per scale (D: one per token)
    groups: int  # scales per row
    scale_rows: int  # rows of the UB scale tile: tile rows (row layout) or groups (tma_col)
    scale_pitch: int  # its pitch in fp32: groups or tile rows, rounded up to 8
    ub_bytes: int  # everything the kernel allocates in UB, every stage included

    @property
    def groups_per_vreg(self) -> int:
        """Groups in one 64-lane register (groups of 16 and 32, and per-token rows of D < 64); 0
        when a group fills one register or more."""
        return _LANES // self.group if self.group < _LANES else 0


def fp8_config(
    D: int,
    dtype: str,
    x_stride: int,
    group: int,
    scale_layout: str = "row",
    x_align: int = 16,
    threads: int | None = None,
    max_steps: int | None = None,
    residual: bool = False,
) -> tuple[NormConfig, Fp8Tiling]:
    """The norm's tiling plus the q and scale tiles (ValueError on bad arguments); double-buffered
    when two stages of every tile fit the UB budget."""
    if scale_layout not in SCALE_LAYOUTS:
        raise ValueError(f"norm: scale_layout must be one of {', '.join(SCALE_LAYOUTS)}, got {scale_layout!r}")
    if group != D and (group not in FP8_GROUPS or D % group):
        raise ValueError(f"norm: group must be D ({D}) or one of {FP8_GROUPS} dividing it, got {group}")
    cfg = norm_config(D, dtype, x_stride, x_align, threads, max_steps, residual)
    groups = D // group
    if scale_layout == "row":
        scale_rows, scale_pitch = cfg.rows, _round_up(groups, _SCALE_ALIGN)
    else:
        scale_rows, scale_pitch = groups, _round_up(cfg.rows, _SCALE_ALIGN)
    stage = cfg.stage_bytes + cfg.rows * cfg.pitch + scale_rows * scale_pitch * 4
    stages = 2 if 2 * stage + cfg.weight_bytes <= _UB_BUDGET else 1
    cfg = dataclasses.replace(cfg, stages=stages)
    return cfg, Fp8Tiling(group, groups, scale_rows, scale_pitch, stages * stage + cfg.weight_bytes)


def fp8_shipped_configs() -> list[tuple[int, str, int, int, int]]:
    """(D, dtype, x_stride, x_align, group) tuples covering every path of fp8_config and the kernel:
    every group size (groups sharing a register, one register, two) and one scale per token (whole
    registers, and a partial last register), both dtypes' widths, strided rows, tiles of one row and
    of many, single- and double-buffered (the fp32 16384 residual case is the largest footprint)."""
    return [
        (7168, "bfloat16", 7168, 16, 128),
        (7168, "bfloat16", 7168, 16, 7168),
        (4096, "bfloat16", 7168, 16, 64),
        (1536, "bfloat16", 1536, 16, 32),
        (576, "bfloat16", 577, 16, 16),
        (576, "float16", 576, 16, 576),  # per token: 9 registers
        (16384, "bfloat16", 16384, 16, 128),
        (16384, "float32", 16384, 16, 128),
        (16384, "float32", 16384, 16, 16),
        (2880, "float32", 2880, 16, 2880),  # per token: 45 whole registers
        (100, "float16", 100, 16, 100),  # per token: 1 register + a 36-lane tail, 64 rows
        (80, "bfloat16", 80, 16, 16),  # a partial last register of one group
        (7, "float32", 9, 16, 7),  # a tail-only row
    ]


def _fp8_macros(cfg: NormConfig, fp8: Fp8Tiling, D: int, dtype: str, ue8m0: bool, scale_layout: str):
    """The quantise pass of one row (y in the UB tile) into the q and scale tiles."""
    wide = dtype != "float32"
    load_dist = "UNPK_B16" if wide else "NORM"
    full, tail = cfg.full_vregs, cfg.tail
    group = fp8.group
    per_token = fp8.groups == 1
    per_vreg = fp8.groups_per_vreg
    vregs_per_group = group // _LANES if group >= _LANES else 0

    def load_y(tile, r, j):
        vec = T.simd.vld(tile[r, j * _LANES], dist=load_dist)
        return T.simd.vcvt(vec, "float32") if wide else vec

    def lanes(first, count):
        """Predicate of lanes [first, first + count) of a 64-lane fp32 register (update_mask, not
        pset: the code generator renders a pset only when it is bound to a variable)."""
        upto = T.simd.update_mask(first + count, 32)
        if first == 0:
            return upto
        return T.simd.pxor(upto, T.simd.update_mask(first, 32), lanes(0, _LANES))

    def clean_abs(v, mask):
        """|v| on the masked lanes with NaN lanes as 0 (fmaxf's NaN-free amax), other lanes 0."""
        zero = T.simd.vdup(T.float32(0), "float32")
        keep = T.simd.pand(T.simd.vcmp(v, v, op="eq"), mask, lanes(0, _LANES))
        return T.simd.vsel(T.simd.vabs(v), zero, keep)

    def scale_of(amax):
        """formats.group_scale on a broadcast amax: max(amax, floor) / 448 [rounded up to 2^k]."""
        floored = T.simd.vmaxs(amax, T.float32(amax_floor(E4M3_MAX)))
        scale = T.simd.vdiv(floored, T.simd.vdup(T.float32(E4M3_MAX), "float32"))
        if not ue8m0:
            return scale
        bits = tvm.tirx.reinterpret("uint32x64", scale)
        carried = T.simd.vadds(bits, T.uint32(0x007FFFFF))
        rounded = T.simd.vand(carried, T.simd.vdup(T.uint32(0xFF800000), "uint32"))
        return tvm.tirx.reinterpret("float32x64", rounded)

    def encode(v, inv):
        """e4m3 of v * inv: clamped to +-448 with NaN kept, then rounded to nearest-even."""
        scaled = T.simd.vmul(v, inv)
        clamped = T.simd.vmins(T.simd.vmaxs(scaled, T.float32(-E4M3_MAX)), T.float32(E4M3_MAX))
        kept = T.simd.vsel(clamped, scaled, T.simd.vcmp(scaled, scaled, op="eq"))
        return T.simd.vcvt(kept, FP8_DTYPE, round="ROUND_R", sat=True)

    @T.macro
    def store_scale(s_tile, r, g, scale):
        if scale_layout == "row":
            T.simd.vsts(s_tile[r, g], scale, dist="ONEPT_B32")
        else:
            T.simd.vsts(s_tile[g, r], scale, dist="ONEPT_B32")

    @T.macro
    def store_q(q_tile, r, j, v, inv, mask):
        T.simd.vsts(q_tile[r, j * _LANES], encode(v, inv), mask=mask, dist="PK4_B32")

    @T.macro
    def quantise_wide(tile, q_tile, s_tile, r, acc, val, inv):
        """Groups of one register or more (64, 128, or the whole row per token when D >= 64)."""
        all_lanes = lanes(0, _LANES)
        for g in T.serial(fp8.groups):
            acc[0] = T.simd.vdup(T.float32(0), "float32")
            for j in T.serial(vregs_per_group if not per_token else full):
                val[0] = load_y(tile, r, g * vregs_per_group + j)
                acc[0] = T.simd.vmax(acc[0], clean_abs(val[0], all_lanes))
            if per_token and tail:
                val[0] = load_y(tile, r, full)
                acc[0] = T.simd.vmax(acc[0], clean_abs(val[0], lanes(0, tail)))
            scale = scale_of(T.simd.vdupv(T.simd.vcmax(acc[0])))
            store_scale(s_tile, r, g, scale)
            inv[0] = T.simd.vdiv(T.simd.vdup(T.float32(1), "float32"), scale)
            for j in T.serial(vregs_per_group if not per_token else full):
                val[0] = load_y(tile, r, g * vregs_per_group + j)
                store_q(q_tile, r, g * vregs_per_group + j, val[0], inv[0], all_lanes)
            if per_token and tail:
                val[0] = load_y(tile, r, full)
                store_q(q_tile, r, full, val[0], inv[0], lanes(0, tail))

    @T.macro
    def quantise_vreg(q_tile, s_tile, r, j, n, val, inv):
        """The first n groups (16 or 32 lanes each) of register j: one predicate, amax and scale each;
        the per-lane inverse assembled with vsel."""
        inv[0] = T.simd.vdup(T.float32(0), "float32")
        for k in range(n):
            mask = lanes(k * group, group)
            amax = T.simd.vdupv(T.simd.vcmax(clean_abs(val[0], mask), mask))
            scale = scale_of(amax)
            store_scale(s_tile, r, j * per_vreg + k, scale)
            inv[0] = T.simd.vsel(T.simd.vdiv(T.simd.vdup(T.float32(1), "float32"), scale), inv[0], mask)
        store_q(q_tile, r, j, val[0], inv[0], lanes(0, n * group))

    @T.macro
    def quantise_narrow(tile, q_tile, s_tile, r, val, inv):
        """Groups narrower than a register (16, 32, or a per-token row of D < 64): one or more per
        register; D % group == 0, so the last register holds whole groups."""
        for j in T.serial(full):
            val[0] = load_y(tile, r, j)
            quantise_vreg(q_tile, s_tile, r, j, per_vreg, val, inv)
        if tail:
            val[0] = load_y(tile, r, full)
            quantise_vreg(q_tile, s_tile, r, full, tail // group, val, inv)

    @T.macro
    def quantise_row(tile, q_tile, s_tile, r, acc, val, inv):
        if per_vreg:
            quantise_narrow(tile, q_tile, s_tile, r, val, inv)
        else:
            quantise_wide(tile, q_tile, s_tile, r, acc, val, inv)

    return quantise_row


def _fp8_kernel(D, dtype, eps, x_stride, group, ue8m0, scale_layout, with_y, residual):
    """The prim_func of the Ascend rmsnorm_fp8_tl / add_rmsnorm_fp8_tl."""
    cfg, fp8 = fp8_config(D, dtype, x_stride, group, scale_layout, residual=residual)
    load_f32, store_f32, accumulate, inv_rms, scale_row = _kernel_macros(cfg, D, dtype, eps)
    quantise_row = _fp8_macros(cfg, fp8, D, dtype, ue8m0, scale_layout)
    t = T.dynamic("t")
    rows, full, tail = cfg.rows, cfg.full_vregs, cfg.tail
    wide = dtype != "float32"
    groups = fp8.groups
    if scale_layout == "row":
        scale_type = T.Tensor((t, groups), "float32")
    else:
        scale_type = T.StridedTensor((groups, t), (T.dynamic("t_pad"), 1), "float32")

    @T.macro
    def sum_step(x_tile, r_tile, r, j, acc, val, rv, partial):
        """Register j of row r into acc (the residual variant first forms and stores the rounded sum)."""
        if r_tile is None:
            load_f32(x_tile, r, j, val)
        else:
            load_f32(x_tile, r, j, val)
            load_f32(r_tile, r, j, rv)
            if wide:
                s = T.simd.vcvt(T.simd.vadd(val[0], rv[0]), dtype, sat=False)
                T.simd.vsts(r_tile[r, j * _LANES], s, dist="PK_B32")
                val[0] = T.simd.vcvt(s, "float32")
            else:
                val[0] = T.simd.vadd(val[0], rv[0])
                T.simd.vsts(r_tile[r, j * _LANES], val[0], dist="NORM_B32")
        accumulate(acc, val[0], partial)

    @T.macro
    def copy_scales(s_tile, scale, row0, valid):
        if scale_layout == "row":
            T.copy(s_tile[:valid, :groups], scale[row0 : row0 + valid, :])
        else:
            T.copy(s_tile[:groups, :valid], scale[:, row0 : row0 + valid])

    @T.macro
    def body(x, residual, weight, q, scale, y):
        with T.Kernel(cfg.cores) as core:
            w_ub = T.alloc_shared((1, cfg.pitch), dtype)
            x_tile = T.alloc_shared((rows, cfg.pitch), dtype)
            r_tile = T.alloc_shared((rows, cfg.pitch), dtype) if residual is not None else None
            q_tile = T.alloc_shared((rows, cfg.pitch), FP8_DTYPE)
            s_tile = T.alloc_shared((fp8.scale_rows, fp8.scale_pitch), "float32")
            T.copy(weight[0:D], w_ub[0, :D])
            for k in T.Persistent([T.ceildiv(t, rows)], cfg.cores, core, group_size=1, num_stages=cfg.stages):
                row0 = T.cast(k, "int64") * rows
                valid = T.min(rows, T.cast(t, "int64") - row0)
                T.copy(x[row0 : row0 + valid, :], x_tile[:valid, :D])
                if residual is not None:
                    T.copy(residual[row0 : row0 + valid, :], r_tile[:valid, :D])
                with T.SimdVF():
                    acc = T.simd.alloc_local((1,), "float32")
                    inv = T.simd.alloc_local((1,), "float32")
                    val = T.simd.alloc_local((1,), "float32")
                    rv = T.simd.alloc_local((1,), "float32")
                    wv = T.simd.alloc_local((1,), "float32")
                    for r in T.serial(valid):
                        acc[0] = T.simd.vdup(T.float32(0), "float32")
                        for j in T.serial(full):
                            sum_step(x_tile, r_tile, r, j, acc, val, rv, False)
                        if tail:
                            sum_step(x_tile, r_tile, r, full, acc, val, rv, True)
                        inv_rms(acc, inv)
                        if residual is not None:
                            # The second pass reads back the sums the first one stored.
                            T.simd.mem_bar("VST_VLD")
                            scale_row(r_tile, x_tile, w_ub, r, inv, val, wv)
                        else:
                            scale_row(x_tile, x_tile, w_ub, r, inv, val, wv)
                        # The quantise pass reads back the rounded y the scale pass stored.
                        T.simd.mem_bar("VST_VLD")
                        quantise_row(x_tile, q_tile, s_tile, r, acc, val, inv)
                if residual is not None:
                    T.copy(r_tile[:valid, :D], residual[row0 : row0 + valid, :])
                T.copy(q_tile[:valid, :D], q[row0 : row0 + valid, :])
                copy_scales(s_tile, scale, row0, valid)
                if y is not None:
                    T.copy(x_tile[:valid, :D], y[row0 : row0 + valid, :])

    if residual and with_y:

        @T.prim_func
        def add_rmsnorm_fp8(
            x: T.StridedTensor((t, D), (x_stride, 1), dtype),
            residual: T.Tensor((t, D), dtype),
            weight: T.Tensor((D,), dtype),
            q: T.Tensor((t, D), FP8_DTYPE),
            scale: scale_type,
            y: T.Tensor((t, D), dtype),
        ):
            body(x, residual, weight, q, scale, y)

        return add_rmsnorm_fp8
    if residual:

        @T.prim_func
        def add_rmsnorm_fp8(
            x: T.StridedTensor((t, D), (x_stride, 1), dtype),
            residual: T.Tensor((t, D), dtype),
            weight: T.Tensor((D,), dtype),
            q: T.Tensor((t, D), FP8_DTYPE),
            scale: scale_type,
        ):
            body(x, residual, weight, q, scale, None)

        return add_rmsnorm_fp8
    if with_y:

        @T.prim_func
        def rmsnorm_fp8(
            x: T.StridedTensor((t, D), (x_stride, 1), dtype),
            weight: T.Tensor((D,), dtype),
            q: T.Tensor((t, D), FP8_DTYPE),
            scale: scale_type,
            y: T.Tensor((t, D), dtype),
        ):
            body(x, None, weight, q, scale, y)

        return rmsnorm_fp8

    @T.prim_func
    def rmsnorm_fp8(
        x: T.StridedTensor((t, D), (x_stride, 1), dtype),
        weight: T.Tensor((D,), dtype),
        q: T.Tensor((t, D), FP8_DTYPE),
        scale: scale_type,
    ):
        body(x, None, weight, q, scale, None)

    return rmsnorm_fp8


@tilelang.jit(target="ascend")
def rmsnorm_fp8_tl(
    D: int,
    dtype: str,
    eps: float,
    x_stride: int,
    group: int,
    *,
    ue8m0: bool = False,
    scale_layout: str = "row",
    with_y: bool = False,
    threads: int | None = None,
    x_align: int = 16,
    max_steps: int | None = None,
):
    """Ascend RMSNorm + FP8 kernel(x, weight, q, scale[, y]); `threads`, `x_align` and `max_steps`
    are ignored (see the module docstring)."""
    return _fp8_kernel(D, dtype, eps, x_stride, group, ue8m0, scale_layout, with_y, False)


@tilelang.jit(target="ascend")
def add_rmsnorm_fp8_tl(
    D: int,
    dtype: str,
    eps: float,
    x_stride: int,
    group: int,
    *,
    ue8m0: bool = False,
    scale_layout: str = "row",
    with_y: bool = False,
    threads: int | None = None,
    x_align: int = 16,
    max_steps: int | None = None,
):
    """Ascend fused kernel(x, residual, weight, q, scale[, y]): residual <- x + residual, then the
    RMSNorm + FP8 output of the rounded sum; `threads`, `x_align` and `max_steps` are ignored."""
    return _fp8_kernel(D, dtype, eps, x_stride, group, ue8m0, scale_layout, with_y, True)
