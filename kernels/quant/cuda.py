"""NVIDIA TileLang implementation of `quant`: FP8 / FP4 quantisation and dequantisation to bf16.

    quant_fp8_group_tl(D, group, dtype, ue8m0, scale_layout, x_stride, x_align=...)(x, q, scale)
    quant_fp8_group_decode_tl(...)                   # the same, in the launch shape for decode batches
    quant_fp8_token_tl(D, dtype, ue8m0, scale_layout, x_stride, x_align=...)(x, q, scale)
    quant_fp8_block_tl(K, dtype, ue8m0, w_stride, x_align=...)(w, q, scale)
    quant_fp4_e4m3_tl(D, dtype, x_stride, x_align=...)(x, global_scale, packed, scale)
    quant_fp4_ue8m0_tl(D, dtype, x_stride, x_align=...)(x, packed, scale)
    dequant_fp8_tl(D, group, scale_layout, row_block, x_align=...)(q, scale, y)
    dequant_fp4_e4m3_tl(D, x_align=...)(packed, scale, global_scale, y)
    dequant_fp4_ue8m0_tl(D, x_align=...)(packed, scale, y)
    (each factory also takes pdl=False: True builds a programmatic dependent launch,
    kernels/tl_launch.py, sm_90+)

x / w     (t, D) / (n, K) of `dtype` (bfloat16, float16, float32), row stride x_stride / w_stride
          >= D elements, last dimension contiguous.
q         (t, D) float8_e4m3 contiguous. packed: (t, D/2) uint8 contiguous, low nibble first.
scale     fp32 (t, D/group) row-major, or for scale_layout "tma_col" a flat fp32 buffer of
          (D/group - 1) * t_pad + t elements (t_pad = t rounded up to 4; element (i, j) at
          j * t_pad + i: DeepGEMM's TMA-aligned column-major layout, read through its storage;
          the padding is never written). Block scales: (ceil(n/128), ceil(K/128)) fp32. FP4
          scales: (t, D/16) float8_e4m3 (NVFP4, with a (1,) fp32 global_scale) or (t, D/32) uint8
          UE8M0 exponents (MX). y: (t, D) bfloat16 contiguous.
All base pointers must be aligned to `x_align` bytes (the caller folds them into one number).

The arithmetic is kernels/quant/ref.py's, step for step, through kernels/quant/tl_formats.py's
transcription of formats.py: fmaxf amax (NaN ignored), the floor, an IEEE division by the format
maximum, UE8M0 by integer bit arithmetic, one IEEE reciprocal per group, one multiply per element,
a saturating round-to-nearest-even conversion (e4m3: +-Inf and overflow to +-448, NaN kept) or the
e2m1 encoder. No fused multiply-add can form (the encoder's one addition follows an fmaxf), no
fast-math. The results are bit-exact against the reference. Some steps differ in form, not in
value. Through fp32 denormals (the kernels keep them since they never use fast-math): e2m1 codes
decode by tl_formats.e2m1_value_denormal, and bf16 / fp16 MX FP4 encodes by
tl_formats.e2m1_code_denormal, whose one multiply per element is by inv * 2**-126 (by inv, then
2**-126, in groups whose scale exceeds 2**23). NVFP4 takes a group's inv from a per-block table of
the IEEE reciprocals of (e4m3 code * global scale), one per code; where 6 * global scale lies in
_NVFP4_FAST_DIVISOR it divides the amax by it with tl_formats.markstein_quotient, and there (up to
the dtype's _NVFP4_WORD_DIVISOR_MAX) encodes bf16 / fp16 eight codes at a time with
tl_formats.e2m1_word, each product formed as fma(x, inv, +0.0): the product's value, with -0.0
made +0.0.

t (and n) are dynamic: one compiled kernel serves every batch size; every global offset is 64-bit.
t == 0 must not be launched (a CUDA grid cannot be empty).

Where the work runs (row kernels): a row is cut into chunks of `chunk` elements (one 16-byte vector
of the input when alignment allows; NVFP4's is its group of 16); `group_lanes` consecutive lanes
hold the chunks of one group, so a group's amax is a butterfly of log2(group_lanes) warp shuffles
(bf16 FP4 takes each lane's part on the packed pairs, tl_formats.pairs_abs_max). Each thread takes `steps`
chunks of its row, `threads_per_row` apart (coalesced), issues all their loads before any
arithmetic or store, reduces, then quantises and stores; rows too long for one block are split over
`col_blocks` blocks (the grid's second dimension), short rows share a block. The per-token kernel
reduces over the whole row instead (shuffles, then one shared-memory exchange across warps), so its
row lives in one block (D <= 16384, like norm). The block kernel gives one 128 x 128 block to one
256-thread block. Dequantisation is element-wise over the same chunks.
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import dataclasses
import math

import tilelang
import tilelang.language as T

from kernels.quant import tl_formats as F
from kernels.quant.formats import E2M1_MAX, E4M3_MAX, FP8_GROUPS, SCALE_LAYOUTS, amax_floor
from kernels.tl_launch import dependent_entry
from kernels.static_args import next_pow2, row_elements

__all__ = [
    "DTYPES",
    "FP8_GROUPS",
    "MAX_TOKEN_D",
    "SCALE_LAYOUTS",
    "RowConfig",
    "dequant_fp4_e4m3_tl",
    "dequant_fp4_ue8m0_tl",
    "dequant_fp8_tl",
    "quant_fp4_e4m3_tl",
    "quant_fp4_ue8m0_tl",
    "quant_fp8_block_tl",
    "quant_fp8_group_decode_tl",
    "quant_fp8_group_tl",
    "quant_fp8_token_tl",
    "quant_shipped_configs",
    "row_config",
]

DTYPES = ("bfloat16", "float16", "float32")
# The per-token kernel keeps a whole row in one block's registers (norm's bound).
MAX_TOKEN_D = 16384
BLOCK = 128  # edge of a weight block
FP8 = "float8_e4m3"

# One 128-bit access per instruction is the widest global load/store a thread can issue.
_MAX_VECTOR_BYTES = 16
# Input bytes one thread holds in flight (4 x 16-byte vectors): with 256-thread blocks and the
# ~1500 resident threads per SM that ~40 registers allow, ~96 KiB per SM are in flight, enough to
# cover DRAM latency at H200 bandwidth; more would only add registers.
_THREAD_BYTES = 64
# A decode batch has too few rows to fill the SMs: one 16-byte vector a thread spreads a row over
# several blocks (4 for 7168 bf16), so the loads of a row are issued from several SMs at once
# (H200, 7168 bf16, T 1: 1.82 us against 2.25 with 64 bytes; kernels/quant/PERF.md).
_DECODE_THREAD_BYTES = 16
_BLOCK_THREADS = 256
_MAX_THREADS = 1024
_WARP = 32
# Smallest NVFP4 group scale: the smallest e4m3 subnormal (ref._E4M3_MIN_SCALE).
_E4M3_MIN_SCALE = 2.0**-9


@dataclasses.dataclass(frozen=True)
class RowConfig:
    """The static launch shape of one row kernel."""

    vector_elems: int  # elements of one vector access of the widest operand
    chunk: int  # elements one lane takes per step (whole vectors)
    group_lanes: int  # consecutive lanes that share a group (1 for element-wise kernels)
    row_chunks: int  # chunks in one row
    threads_per_row: int  # lanes of one block that share a row
    rows_per_block: int
    col_blocks: int  # blocks that share a row (each takes a run of threads_per_row * steps chunks)
    steps: int  # chunks each thread takes (the last may fall past the row and is skipped)

    @property
    def threads(self) -> int:
        return self.threads_per_row * self.rows_per_block

    @property
    def vectors_per_chunk(self) -> int:
        return self.chunk // self.vector_elems


def row_config(
    D: int, group: int, elem: int, x_stride: int, x_align: int, *, min_chunk: int = 1, token: bool = False, thread_bytes: int = _THREAD_BYTES
) -> RowConfig:
    """Launch shape of a row kernel over (t, D) rows of `elem`-byte elements (the widest operand).

    `group` elements share a scale (D % group == 0; `token`: the group is the row); `min_chunk`
    is the fewest elements a lane takes (2 for FP4: a lane writes whole bytes); `thread_bytes` the
    input bytes a thread holds in flight (fewer spread a row over more blocks: decode batches).
    """
    # Vectors of every operand stay aligned: x_align folds the outputs' base pointers (one byte per
    # element or less), so it may be below the input's element size: one element per vector then.
    vector_bytes = math.gcd(D * elem, x_stride * elem, max(x_align, elem), _MAX_VECTOR_BYTES)
    vec = vector_bytes // elem
    # A group spans at most a warp: wider groups (narrow vectors) give each lane several vectors.
    group_vectors = D // vec if token else group // vec
    per_lane = max(1, min_chunk // vec, -(-group_vectors // _WARP) if not token else 1)
    chunk = per_lane * vec
    row_chunks = D // chunk
    group_lanes = 1 if token else max(1, group // chunk)
    steps_cap = max(1, thread_bytes // (chunk * elem))
    wanted = -(-row_chunks // steps_cap)
    if token:
        # Whole row in one block: shuffles within a power-of-two lane group, or whole warps.
        threads_per_row = next_pow2(wanted) if wanted <= _WARP else min(_MAX_THREADS, -(-wanted // _WARP) * _WARP)
        col_blocks = 1
    elif wanted > _BLOCK_THREADS:
        threads_per_row, col_blocks = _BLOCK_THREADS, -(-wanted // _BLOCK_THREADS)
    else:
        threads_per_row, col_blocks = max(group_lanes, next_pow2(wanted)), 1
    rows_per_block = max(1, _BLOCK_THREADS // threads_per_row)
    return RowConfig(
        vector_elems=vec,
        chunk=chunk,
        group_lanes=group_lanes,
        row_chunks=row_chunks,
        threads_per_row=threads_per_row,
        rows_per_block=rows_per_block,
        col_blocks=col_blocks,
        steps=-(-row_chunks // (threads_per_row * col_blocks)),
    )


def quant_shipped_configs() -> dict[str, list[tuple]]:
    """{factory name: [positional args + (x_align,)]} covering every path of the factories.

    Per factory: every input dtype and group; 16-byte vectors at 1536, 7168 and 16384 (a few steps
    a thread; several rows per block, one block per row or several blocks per row); misaligned
    data: 576 (MLA) with 2-byte and 4096 with 4-byte vectors, so a lane holds several vectors of a
    group and FP4 lanes pair elements across vectors; strided rows; both scale layouts; UE8M0.
    """
    fp8_group = [
        (D, g, dt, u8, lay, s, a)
        for (D, s, a) in [(7168, 7168, 16), (576, 577, 2), (16384, 16384, 16), (1536, 4096, 16)]
        for g in FP8_GROUPS
        if D % g == 0
        for dt in ("bfloat16", "float32")
        for u8, lay in [(False, "row"), (True, "tma_col")]
    ] + [(128, 128, "float16", False, "row", 128, 16), (4096, 128, "float16", True, "row", 7168, 4)]
    fp8_token = [
        (D, dt, u8, lay, s, a)
        for (D, s, a) in [(7168, 7168, 16), (16384, 16384, 16), (576, 577, 2), (128, 128, 16)]
        for dt in DTYPES
        for u8, lay in [(False, "row"), (True, "tma_col")]
    ] + [(16384, "bfloat16", False, "row", 16384, 2)]  # the most steps: 2-byte vectors, 512 threads x 32
    fp8_block = [(K, dt, u8, s, a) for (K, s, a) in [(7168, 7168, 16), (200, 201, 2), (4096, 4096, 4)] for dt in DTYPES for u8 in (False, True)]
    fp4 = [(D, dt, s, a) for (D, s, a) in [(7168, 7168, 16), (576, 577, 2), (16384, 16384, 16), (64, 96, 16)] for dt in DTYPES]
    dequant_fp8 = [
        (D, g, lay, rb, a)
        for (D, a) in [(7168, 16), (576, 2), (16384, 16), (1536, 4)]
        for g in FP8_GROUPS
        if D % g == 0
        for lay, rb in [("row", 1), ("tma_col", 1)]
    ] + [(K, BLOCK, "row", BLOCK, a) for (K, a) in [(7168, 16), (200, 2), (1000, 16)]]
    dequant_fp8 += [(7168, 7168, "row", 1, 16), (576, 576, "tma_col", 1, 1)]  # per token (group = D)
    dequant_fp4 = [(D, a) for (D, a) in [(7168, 16), (576, 2), (16384, 16), (64, 16)]]
    return {
        "quant_fp8_group_tl": fp8_group,
        "quant_fp8_group_decode_tl": fp8_group,
        "quant_fp8_token_tl": fp8_token,
        "quant_fp8_block_tl": fp8_block,
        "quant_fp4_e4m3_tl": fp4,
        "quant_fp4_ue8m0_tl": fp4,
        "dequant_fp8_tl": dequant_fp8,
        "dequant_fp4_e4m3_tl": dequant_fp4,
        "dequant_fp4_ue8m0_tl": dequant_fp4,
    }


def _row_macros(cfg: RowConfig):
    """Loads and the group reduction every quantising row kernel shares.

    Chunk `c` of a row (elements c * chunk ...) belongs to step s of lane `lane` in column block
    `by` when c = by * threads_per_row * steps + s * threads_per_row + lane; chunks past the row
    are skipped, and a group's lanes are all in or all out (threads_per_row is a multiple of
    group_lanes).
    """
    tpr, steps, chunk, vec = cfg.threads_per_row, cfg.steps, cfg.chunk, cfg.vector_elems
    shuffles = int(math.log2(cfg.group_lanes))

    @T.macro
    def load_chunks(x, row, first, buf):
        # All loads are issued before any use: `steps` chunks in flight per thread.
        for s in T.unroll(steps):
            if first + s * tpr < cfg.row_chunks:
                for i in T.unroll(cfg.vectors_per_chunk):
                    for v in T.vectorized(vec):
                        buf[s, i * vec + v] = x[row, (first + s * tpr) * chunk + i * vec + v]

    @T.macro
    def group_amax(buf, active, first, amax, pairs):
        """amax[s] = max |x| over step s's group (the same value in every lane of the group), x the
        cast of buf[s, e]; `pairs` (a bfloat16 buf): one max per pair on their 32-bit words
        (pairs_abs_max; the kernel's prelude needs CUDA_PRELUDE). Inactive lanes contribute 0 but
        take part in every shuffle (full-warp masks)."""
        for s in T.unroll(steps):
            amax[s] = T.float32(0)
            if active and first + s * tpr < cfg.row_chunks:
                if pairs:
                    words = T.view(buf, (steps, chunk // 2), "uint32")
                    amax[s] = F.pairs_abs_max([words[s, q] for q in range(chunk // 2)])
                else:
                    for e in T.unroll(chunk):
                        amax[s] = F.abs_max(amax[s], T.cast(buf[s, e], "float32"))
        for i in T.unroll(shuffles):
            for s in T.unroll(steps):
                amax[s] = T.max(amax[s], T.shfl_xor(amax[s], 1 << i))

    @T.macro
    def encode_fp8(buf, s, inv, out):
        """out = e4m3(x * inv) for step s's chunk (unrolled: registers, not a stack array)."""
        for e in T.unroll(chunk):
            out[e] = F.e4m3(T.cast(buf[s, e], "float32") * inv)

    @T.macro
    def store_chunk(dst, row, c, out):
        for i in T.unroll(cfg.vectors_per_chunk):
            for v in T.vectorized(vec):
                dst[row, c * chunk + i * vec + v] = out[i * vec + v]

    return load_chunks, group_amax, encode_fp8, store_chunk


def _scale_store(layout: str, t):
    """scale[row, group] = value in the chosen layout (tma_col: flat, column j at j * t_pad)."""

    @T.macro
    def store(scale, row, group, value):
        if layout == "row":
            scale[row, group] = value
        else:
            scale[T.cast(group, "int64") * ((T.cast(t, "int64") + 3) // 4 * 4) + row] = value

    return store


def _scale_buffer(layout: str, t, groups: int):
    """The scale parameter's shape: (t, groups) row-major, or the flat column-major storage."""
    if layout == "row":
        return T.Tensor((t, groups), "float32")
    return T.Tensor((T.dynamic("scale_elems"),), "float32")


def _check_layout(name: str, layout: str) -> None:
    if layout not in SCALE_LAYOUTS:
        raise ValueError(f"{name}: scale_layout {layout!r} is not one of {', '.join(SCALE_LAYOUTS)}")


@tilelang.jit
def quant_fp8_group_tl(D: int, group: int, dtype: str, ue8m0: bool, scale_layout: str, x_stride: int, *, x_align: int = 16, pdl: bool = False):
    """Compiled kernel(x, q, scale): per-token-group FP8 e4m3 quantisation (group in 16..128)."""
    return _quant_fp8_group_func(D, group, dtype, ue8m0, scale_layout, x_stride, x_align, _THREAD_BYTES, pdl)


@tilelang.jit
def quant_fp8_group_decode_tl(D: int, group: int, dtype: str, ue8m0: bool, scale_layout: str, x_stride: int, *, x_align: int = 16, pdl: bool = False):
    """quant_fp8_group_tl's kernel in the launch shape for decode batches: one 16-byte vector a
    thread, a row spread over several blocks. Same arguments, same results."""
    return _quant_fp8_group_func(D, group, dtype, ue8m0, scale_layout, x_stride, x_align, _DECODE_THREAD_BYTES, pdl)


def _quant_fp8_group_func(D: int, group: int, dtype: str, ue8m0: bool, scale_layout: str, x_stride: int, x_align: int, thread_bytes: int, pdl: bool):
    """The per-token-group FP8 prim_func both launch shapes compile; thread_bytes: input bytes a
    thread holds in flight."""
    elem = row_elements("quant_fp8_group", D, dtype, DTYPES, x_stride, x_align=x_align, align_below_element=True)
    _check_layout("quant_fp8_group", scale_layout)
    if group not in FP8_GROUPS or D % group:
        raise ValueError(f"quant_fp8_group: group must be one of {FP8_GROUPS} and divide D {D}, got {group}")
    cfg = row_config(D, group, elem, x_stride, x_align, thread_bytes=thread_bytes)
    load_chunks, group_amax, encode_fp8, store_chunk = _row_macros(cfg)
    t = T.dynamic("t")
    groups = D // group
    store_scale = _scale_store(scale_layout, t)
    tpr, rows, steps, chunk, gl = cfg.threads_per_row, cfg.rows_per_block, cfg.steps, cfg.chunk, cfg.group_lanes

    @T.prim_func
    def quant_fp8_group(
        x: T.StridedTensor((t, D), (x_stride, 1), dtype),
        q: T.Tensor((t, D), FP8),
        scale: _scale_buffer(scale_layout, t, groups),
    ):
        with T.Kernel(T.ceildiv(t, rows), cfg.col_blocks, threads=cfg.threads) as (bx, by):
            dependent_entry(pdl)
            tx = T.get_thread_binding(0)
            lane = tx % tpr
            first = by * (tpr * steps) + lane
            # 64-bit row ids make every offset below 64-bit: t * x_stride may pass 2**31.
            row = T.cast(bx * rows + tx // tpr, "int64")
            buf = T.alloc_local((steps, chunk), dtype)
            amax = T.alloc_local((steps,), "float32")
            sc = T.alloc_local((2,), "float32")  # scale, 1 / scale: computed once per group
            out = T.alloc_local((chunk,), FP8)
            if row < t:
                load_chunks(x, row, first, buf)
            group_amax(buf, row < t, first, amax, False)
            if row < t:
                for s in T.unroll(steps):
                    c = first + s * tpr
                    if c < cfg.row_chunks:
                        sc[0] = F.group_scale(amax[s], E4M3_MAX, ue8m0)
                        sc[1] = F.scale_reciprocal(sc[0], ue8m0)
                        encode_fp8(buf, s, sc[1], out)
                        store_chunk(q, row, c, out)
                        if lane % gl == 0:
                            store_scale(scale, row, c // gl, sc[0])

    return quant_fp8_group


@tilelang.jit
def quant_fp8_token_tl(D: int, dtype: str, ue8m0: bool, scale_layout: str, x_stride: int, *, x_align: int = 16, pdl: bool = False):
    """Compiled kernel(x, q, scale): per-token FP8 e4m3 quantisation (one scale per row)."""
    elem = row_elements("quant_fp8_token", D, dtype, DTYPES, x_stride, x_align=x_align, align_below_element=True)
    _check_layout("quant_fp8_token", scale_layout)
    if D > MAX_TOKEN_D:
        raise ValueError(f"quant_fp8_token: D must be <= {MAX_TOKEN_D}, got {D}")
    cfg = row_config(D, D, elem, x_stride, x_align, token=True)
    load_chunks, _, encode_fp8, store_chunk = _row_macros(cfg)
    t = T.dynamic("t")
    store_scale = _scale_store(scale_layout, t)
    tpr, rows, steps, chunk = cfg.threads_per_row, cfg.rows_per_block, cfg.steps, cfg.chunk
    warps = max(1, tpr // _WARP)
    shuffles = int(math.log2(min(tpr, _WARP)))

    @T.prim_func
    def quant_fp8_token(
        x: T.StridedTensor((t, D), (x_stride, 1), dtype),
        q: T.Tensor((t, D), FP8),
        scale: _scale_buffer(scale_layout, t, 1),
    ):
        with T.Kernel(T.ceildiv(t, rows), threads=cfg.threads) as bx:
            dependent_entry(pdl)
            tx = T.get_thread_binding(0)
            lane = tx % tpr
            row = T.cast(bx * rows + tx // tpr, "int64")
            buf = T.alloc_local((steps, chunk), dtype)
            amax = T.alloc_local((1,), "float32")
            sc = T.alloc_local((2,), "float32")
            out = T.alloc_local((chunk,), FP8)
            red = T.alloc_shared((rows, warps), "float32")
            amax[0] = T.float32(0)
            if row < t:
                load_chunks(x, row, lane, buf)
                for s in T.unroll(steps):
                    if lane + s * tpr < cfg.row_chunks:
                        for e in T.unroll(chunk):
                            amax[0] = F.abs_max(amax[0], T.cast(buf[s, e], "float32"))
            for i in T.unroll(shuffles):
                amax[0] = T.max(amax[0], T.shfl_xor(amax[0], 1 << i))
            if warps > 1:
                if tx % _WARP == 0:
                    red[tx // tpr, lane // _WARP] = amax[0]
                T.sync_threads()
                for w in T.unroll(warps):
                    amax[0] = T.max(amax[0], red[tx // tpr, w])
            if row < t:
                sc[0] = F.group_scale(amax[0], E4M3_MAX, ue8m0)
                sc[1] = F.scale_reciprocal(sc[0], ue8m0)
                for s in T.unroll(steps):
                    c = lane + s * tpr
                    if c < cfg.row_chunks:
                        encode_fp8(buf, s, sc[1], out)
                        store_chunk(q, row, c, out)
                if lane == 0:
                    store_scale(scale, row, 0, sc[0])

    return quant_fp8_token


# NVFP4's first division by Markstein's correction (tl_formats.markstein_quotient) when 6 * gs lies
# here: a group's e4m3 scale depends on its quotient only between the clamp 2**-9 and the
# saturation at 448, where then no step of the correction underflows or overflows (below and
# above, the clamp and the saturation give the same code whatever the quotient's last bit).
# Checked against the IEEE quotient in float64 for every fp32 a whose quotient lies in [2**-11,
# 2**11], for 26 divisors across the range (kernels/quant/PERF.md). Other divisors divide.
_NVFP4_FAST_DIVISOR = (2.0**-90, 2.0**90)
# The fast path encodes bfloat16 and float16 with tl_formats.e2m1_word, whose signs are the
# products' sign bits: no nonzero x * inv may round to -0.0 there. bfloat16's smallest x, 2**-133,
# needs inv > 2**-17, which 6 * gs <= 2**10 gives (inv >= 6 / (448 * 2**10) > 2**-16.3); float16's,
# 2**-24, needs nothing beyond _NVFP4_FAST_DIVISOR.
_NVFP4_WORD_DIVISOR_MAX = {"bfloat16": 2.0**10, "float16": _NVFP4_FAST_DIVISOR[1]}


@T.macro
def nvfp4_divisor(gs, nv):
    """nv[0] = 6 * gs (the reference's divisor), nv[1] = its IEEE reciprocal: once per thread."""
    nv[0] = T.float32(E2M1_MAX) * gs
    nv[1] = T.float32(1) / nv[0]


@T.macro
def nvfp4_reciprocals(gs, recip, tx, threads):
    """recip[code] = 1 / (e4m3 value of code * gs), the IEEE reciprocal, for the 128 non-negative
    e4m3 codes (0x7F is NaN): every group's inv is one of them (ref._nvfp4_scales). The caller
    synchronises the block before reading it."""
    for i in T.unroll(-(-128 // threads)):
        if tx + i * threads < 128:
            code = T.cast(tx + i * threads, "uint8")
            recip[tx + i * threads] = T.float32(1) / (T.cast(T.reinterpret(code, FP8), "float32") * gs)


@T.macro
def nvfp4_scales(amax, nv, recip, s8, inv, markstein):
    """s8[0] (e4m3) and inv[0] = 1 / eff of an NVFP4 group (ref._nvfp4_scales, step for step): the
    quotient by nv (nvfp4_divisor; by markstein_quotient when `markstein`), the reciprocal from
    recip (nvfp4_reciprocals). Neither has a division's slow-path branch."""
    a = T.max(amax, T.float32(amax_floor(E2M1_MAX)))
    inv[0] = F.markstein_quotient(a, nv[0], nv[1]) if markstein else a / nv[0]  # s32
    # Lower clamp with NaN kept (torch.clamp); the saturating conversion adds the upper bound.
    inv[0] = T.if_then_else(T.isnan(inv[0]), inv[0], T.max(inv[0], T.float32(_E4M3_MIN_SCALE)))
    s8[0] = F.e4m3(inv[0])
    # The saturating conversion keeps NaN's sign: both NaN codes read the NaN entry.
    inv[0] = recip[T.cast(T.reinterpret(s8[0], "uint8") & T.uint8(0x7F), "int32")]


def _fp4_factory(name: str, nvfp4: bool):
    group = 16 if nvfp4 else 32
    scale_dtype = FP8 if nvfp4 else "uint8"

    def build(D: int, dtype: str, x_stride: int, *, x_align: int = 16, pdl: bool = False):
        elem = row_elements(name, D, dtype, DTYPES, x_stride, x_align=x_align, align_below_element=True)
        if D % group:
            raise ValueError(f"{name}: D {D} is not a multiple of the group size {group}")
        # NVFP4: a lane takes whole groups (16 elements: its scale computed once, no shuffle).
        cfg = row_config(D, group, elem, x_stride, x_align, min_chunk=group if nvfp4 else 2)
        load_chunks, group_amax, _, _ = _row_macros(cfg)
        t = T.dynamic("t")
        tpr, rows, steps, chunk, gl = cfg.threads_per_row, cfg.rows_per_block, cfg.steps, cfg.chunk, cfg.group_lanes
        half = chunk // 2
        words = -(-half // 4)  # 8 codes per uint32
        # The denormal encoder needs a power-of-two inv and inputs of at most 11 significant bits.
        denormal = not nvfp4 and dtype != "float32"
        # NVFP4's fast path: whole words of codes from bf16 / fp16 (e2m1_word), up to this divisor.
        word_divisor_max = _NVFP4_WORD_DIVISOR_MAX.get(dtype) if nvfp4 and chunk % 8 == 0 else None
        fast_max = _NVFP4_FAST_DIVISOR[1] if word_divisor_max is None else word_divisor_max

        def code(x, sc, fast):
            """uint32 e2m1 code of x * inv (sc: mx_fp4_scales' or nvfp4_scales' registers); fast: one
            multiply, by e2m1_code_denormal's multiplier (its scale is at most 2**23)."""
            if not denormal:
                return T.cast(F.e2m1_code(x * sc[0]), "uint32")
            if fast:
                return F.e2m1_code_denormal(x, sc[1], sc[2])
            return F.e2m1_code_denormal(x * sc[0], T.float32(2.0**-126), T.float32(-0.0))

        @T.macro
        def encode(buf, s, sc, pkw, fast):
            """pkw = step s's codes, 8 per word: the pair q in byte q % 4 of word q // 4, low nibble first."""
            for w in T.unroll(words):
                pkw[w] = T.uint32(0)
            for q in T.unroll(half):
                lo, hi = code(F.widen(buf, s, 2 * q), sc, fast), code(F.widen(buf, s, 2 * q + 1), sc, fast)
                pkw[q // 4] = pkw[q // 4] + F.e2m1_pair_bits(lo, hi, q)

        @T.macro
        def encode_words(buf, s, inv, pkw):
            """pkw = step s's codes by e2m1_word, x * inv as __fmaf_rn(x, inv, +0.0) (its precondition)."""
            for w in T.unroll(words):
                pkw[w] = F.e2m1_word([
                    T.call_pure_extern("float32", "__fmaf_rn", F.widen(buf, s, 8 * w + j), inv, T.float32(0)) for j in range(8)
                ])

        @T.macro
        def quantise_groups(buf, amax, nv, recip, s8, sc, pkw, pk, packed, scale, row, first, lane, markstein):
            """Every group of the row's chunks this thread holds: its scale into scale, its codes into
            packed. `markstein`: NVFP4's quotient by nvfp4_scales' Markstein path, and its codes by
            encode_words where the input allows."""
            for s in T.unroll(steps):
                c = first + s * tpr
                if c < cfg.row_chunks:
                    if nvfp4:
                        nvfp4_scales(amax[s], nv, recip, s8, sc, markstein)
                    else:
                        F.mx_fp4_scales(amax[s], s8, sc)
                    if markstein and word_divisor_max is not None:
                        encode_words(buf, s, sc[0], pkw)
                    elif denormal and dtype == "bfloat16":
                        # bf16 scales above 2**23 underflow the multiplier: two multiplies then.
                        if sc[1] != T.float32(0) or sc[0] == T.float32(0):
                            encode(buf, s, sc, pkw, True)
                        else:
                            encode(buf, s, sc, pkw, False)
                    else:
                        # float16 scales are at most 2**14 (65504 / 6 rounded up): always fast.
                        encode(buf, s, sc, pkw, True)
                    for p in T.vectorized(half):
                        packed[row, c * half + p] = pk[p]
                    if lane % gl == 0:
                        scale[row, c // gl] = s8[0]

        @T.macro
        def body(x, gs_buf, packed, scale):
            with T.Kernel(T.ceildiv(t, rows), cfg.col_blocks, threads=cfg.threads, prelude=F.CUDA_PRELUDE) as (bx, by):
                dependent_entry(pdl)
                tx = T.get_thread_binding(0)
                lane = tx % tpr
                first = by * (tpr * steps) + lane
                row = T.cast(bx * rows + tx // tpr, "int64")
                buf = T.alloc_local((steps, chunk), dtype)
                amax = T.alloc_local((steps,), "float32")
                gs = T.alloc_local((1,), "float32")
                s8 = T.alloc_local((1,), scale_dtype)  # the stored scale (e4m3, or the UE8M0 byte)
                sc = T.alloc_local((3,), "float32")  # inv, e2m1_denormal_multiplier(inv), e2m1_sign_threshold
                pkw = T.alloc_local((words,), "uint32")
                pk = T.view(pkw, (4 * words,), "uint8")
                nv = T.alloc_local((2,), "float32") if nvfp4 else None  # 6 * gs and its reciprocal
                recip = T.alloc_shared((128,), "float32") if nvfp4 else None  # 1 / (code * gs) per e4m3 code
                if nvfp4:
                    gs[0] = gs_buf[0]
                if row < t:
                    load_chunks(x, row, first, buf)
                if nvfp4:
                    # While the row loads: the divisor, and the reciprocal of every e4m3 scale.
                    nvfp4_divisor(gs[0], nv)
                    nvfp4_reciprocals(gs[0], recip, tx, cfg.threads)
                    T.sync_threads()
                group_amax(buf, row < t, first, amax, dtype == "bfloat16")
                if row < t:
                    if not nvfp4:
                        quantise_groups(buf, amax, nv, recip, s8, sc, pkw, pk, packed, scale, row, first, lane, False)
                    elif nv[0] >= T.float32(_NVFP4_FAST_DIVISOR[0]) and nv[0] <= T.float32(fast_max):
                        # One branch per thread (the same for the whole launch): two copies of the
                        # loop, neither with a division in it.
                        quantise_groups(buf, amax, nv, recip, s8, sc, pkw, pk, packed, scale, row, first, lane, True)
                    else:
                        quantise_groups(buf, amax, nv, recip, s8, sc, pkw, pk, packed, scale, row, first, lane, False)

        return body, t, D // group, D // 2, scale_dtype

    return build


_fp4_e4m3_body = _fp4_factory("quant_fp4_e4m3", nvfp4=True)
_fp4_ue8m0_body = _fp4_factory("quant_fp4_ue8m0", nvfp4=False)


@tilelang.jit
def quant_fp4_e4m3_tl(D: int, dtype: str, x_stride: int, *, x_align: int = 16, pdl: bool = False):
    """Compiled kernel(x, global_scale, packed, scale): NVFP4 (group 16, e4m3 scales, global scale)."""
    body, t, groups, half_d, scale_dtype = _fp4_e4m3_body(D, dtype, x_stride, x_align=x_align, pdl=pdl)

    @T.prim_func
    def quant_fp4_e4m3(
        x: T.StridedTensor((t, D), (x_stride, 1), dtype),
        global_scale: T.Tensor((1,), "float32"),
        packed: T.Tensor((t, half_d), "uint8"),
        scale: T.Tensor((t, groups), scale_dtype),
    ):
        body(x, global_scale, packed, scale)

    return quant_fp4_e4m3


@tilelang.jit
def quant_fp4_ue8m0_tl(D: int, dtype: str, x_stride: int, *, x_align: int = 16, pdl: bool = False):
    """Compiled kernel(x, packed, scale): MX FP4 (group 32, UE8M0 exponent bytes)."""
    body, t, groups, half_d, scale_dtype = _fp4_ue8m0_body(D, dtype, x_stride, x_align=x_align, pdl=pdl)

    @T.prim_func
    def quant_fp4_ue8m0(
        x: T.StridedTensor((t, D), (x_stride, 1), dtype),
        packed: T.Tensor((t, half_d), "uint8"),
        scale: T.Tensor((t, groups), scale_dtype),
    ):
        body(x, None, packed, scale)

    return quant_fp4_ue8m0


@tilelang.jit
def quant_fp8_block_tl(K: int, dtype: str, ue8m0: bool, w_stride: int, *, x_align: int = 16, pdl: bool = False):
    """Compiled kernel(w, q, scale): FP8 e4m3 with one scale per 128 x 128 block of w (n, K).

    One 256-thread block per weight block: `lanes` lanes cover the block's 128 columns with one
    vector each, 256 / lanes rows at a time, `passes` times; every load is issued first, the amax
    is reduced by shuffles within each warp and one shared-memory exchange across the 8 warps.
    """
    elem = row_elements("quant_fp8_block", K, dtype, DTYPES, w_stride, x_align=x_align, align_below_element=True)
    vec = math.gcd(K * elem, w_stride * elem, max(x_align, elem), _MAX_VECTOR_BYTES) // elem
    lanes = BLOCK // vec
    rows_per_pass = _BLOCK_THREADS // lanes
    passes = BLOCK // rows_per_pass
    warps = _BLOCK_THREADS // _WARP
    n = T.dynamic("n")
    kb = -(-K // BLOCK)

    @T.prim_func
    def quant_fp8_block(
        w: T.StridedTensor((n, K), (w_stride, 1), dtype),
        q: T.Tensor((n, K), FP8),
        scale: T.Tensor((T.ceildiv(n, BLOCK), kb), "float32"),
    ):
        with T.Kernel(T.ceildiv(n, BLOCK), kb, threads=_BLOCK_THREADS) as (bx, by):
            dependent_entry(pdl)
            tx = T.get_thread_binding(0)
            col = by * BLOCK + (tx % lanes) * vec
            buf = T.alloc_local((passes, vec), dtype)
            amax = T.alloc_local((1,), "float32")
            sc = T.alloc_local((2,), "float32")  # scale, 1 / scale
            out = T.alloc_local((vec,), FP8)
            red = T.alloc_shared((warps,), "float32")
            amax[0] = T.float32(0)
            for p in T.unroll(passes):
                r = T.cast(bx * BLOCK + p * rows_per_pass + tx // lanes, "int64")
                if r < n and col < K:
                    for v in T.vectorized(vec):
                        buf[p, v] = w[r, col + v]
            for p in T.unroll(passes):
                r = T.cast(bx * BLOCK + p * rows_per_pass + tx // lanes, "int64")
                if r < n and col < K:
                    for v in T.unroll(vec):
                        amax[0] = F.abs_max(amax[0], T.cast(buf[p, v], "float32"))
            for i in T.unroll(5):
                amax[0] = T.max(amax[0], T.shfl_xor(amax[0], 1 << i))
            if tx % _WARP == 0:
                red[tx // _WARP] = amax[0]
            T.sync_threads()
            for i in T.unroll(warps):
                amax[0] = T.max(amax[0], red[i])
            sc[0] = F.group_scale(amax[0], E4M3_MAX, ue8m0)
            sc[1] = F.scale_reciprocal(sc[0], ue8m0)
            for p in T.unroll(passes):
                r = T.cast(bx * BLOCK + p * rows_per_pass + tx // lanes, "int64")
                if r < n and col < K:
                    for v in T.unroll(vec):
                        out[v] = F.e4m3(T.cast(buf[p, v], "float32") * sc[1])
                    for v in T.vectorized(vec):
                        q[r, col + v] = out[v]
            if tx == 0:
                scale[bx, by] = sc[0]

    return quant_fp8_block


def _dequant_config(name: str, D: int, x_align: int, min_chunk: int) -> RowConfig:
    row_elements(name, D, "bfloat16", ["bfloat16"], D, x_align=x_align, align_below_element=True)
    # Vectors are sized by the bf16 output (the widest operand); element-wise, so a group of 1.
    return row_config(D, 1, 2, D, x_align, min_chunk=min_chunk)


@tilelang.jit
def dequant_fp8_tl(D: int, group: int, scale_layout: str, row_block: int, *, x_align: int = 16, pdl: bool = False):
    """Compiled kernel(q, scale, y): y = bf16(fp32(q) * scale), the scale of element (r, c) at
    [r // row_block, c // group] (row_block 1: per-token-group scales; 128 with group 128: the
    128 x 128 block scales of a weight, whose K need not be a multiple of 128)."""
    _check_layout("dequant_fp8", scale_layout)
    if group < 1 or (row_block == 1 and D % group) or row_block not in (1, BLOCK) or (row_block == BLOCK and group != BLOCK):
        raise ValueError(f"dequant_fp8: unsupported group {group} / row_block {row_block} for D {D}")
    if row_block == BLOCK and scale_layout != "row":
        raise ValueError("dequant_fp8: block scales are row-major")
    cfg = _dequant_config("dequant_fp8", D, x_align, 1)
    t = T.dynamic("t")
    groups = -(-D // group)
    tpr, rows, steps, chunk, vec = cfg.threads_per_row, cfg.rows_per_block, cfg.steps, cfg.chunk, cfg.vector_elems

    @T.macro
    def scale_at(scale, row, c):
        if row_block == BLOCK:
            return scale[row // BLOCK, (c * chunk) // group]
        if scale_layout == "row":
            return scale[row, (c * chunk) // group]
        return scale[T.cast((c * chunk) // group, "int64") * ((T.cast(t, "int64") + 3) // 4 * 4) + row]

    scale_rows = T.ceildiv(t, BLOCK) if row_block == BLOCK else t

    @T.prim_func
    def dequant_fp8(
        q: T.Tensor((t, D), FP8),
        scale: T.Tensor((scale_rows, groups), "float32") if scale_layout == "row" else T.Tensor((T.dynamic("scale_elems"),), "float32"),
        y: T.Tensor((t, D), "bfloat16"),
    ):
        with T.Kernel(T.ceildiv(t, rows), cfg.col_blocks, threads=cfg.threads) as (bx, by):
            dependent_entry(pdl)
            tx = T.get_thread_binding(0)
            first = by * (tpr * steps) + tx % tpr
            row = T.cast(bx * rows + tx // tpr, "int64")
            buf = T.alloc_local((steps, chunk), FP8)
            sc = T.alloc_local((steps,), "float32")
            if row < t:
                for s in T.unroll(steps):
                    c = first + s * tpr
                    if c < cfg.row_chunks:
                        for i in T.unroll(cfg.vectors_per_chunk):
                            for v in T.vectorized(vec):
                                buf[s, i * vec + v] = q[row, c * chunk + i * vec + v]
                        sc[s] = scale_at(scale, row, c)
                for s in T.unroll(steps):
                    c = first + s * tpr
                    if c < cfg.row_chunks:
                        for i in T.unroll(cfg.vectors_per_chunk):
                            for v in T.vectorized(vec):
                                y[row, c * chunk + i * vec + v] = T.cast(T.cast(buf[s, i * vec + v], "float32") * sc[s], "bfloat16")

    return dequant_fp8


def _dequant_fp4_body(name: str, D: int, x_align: int, nvfp4: bool, pdl: bool):
    group = 16 if nvfp4 else 32
    if D % group:
        raise ValueError(f"{name}: D {D} is not a multiple of the group size {group}")
    cfg = _dequant_config(name, D, x_align, 2)
    t = T.dynamic("t")
    tpr, rows, steps, chunk, vec = cfg.threads_per_row, cfg.rows_per_block, cfg.steps, cfg.chunk, cfg.vector_elems
    half = chunk // 2

    @T.macro
    def body(packed, scale, gs_buf, y):
        with T.Kernel(T.ceildiv(t, rows), cfg.col_blocks, threads=cfg.threads) as (bx, by):
            dependent_entry(pdl)
            tx = T.get_thread_binding(0)
            first = by * (tpr * steps) + tx % tpr
            row = T.cast(bx * rows + tx // tpr, "int64")
            buf = T.alloc_local((steps, half), "uint8")
            sc = T.alloc_local((steps,), "float32")
            if row < t:
                for s in T.unroll(steps):
                    c = first + s * tpr
                    if c < cfg.row_chunks:
                        for p in T.vectorized(half):
                            buf[s, p] = packed[row, c * half + p]
                        if nvfp4:
                            sc[s] = T.cast(scale[row, (c * chunk) // group], "float32")
                        else:
                            sc[s] = F.ue8m0_value(scale[row, (c * chunk) // group])
                gs = gs_buf[0] if nvfp4 else T.float32(1)
                for s in T.unroll(steps):
                    c = first + s * tpr
                    if c < cfg.row_chunks:
                        for i in T.unroll(cfg.vectors_per_chunk):
                            for v in T.vectorized(vec):
                                y[row, c * chunk + i * vec + v] = T.cast(
                                    _fp4_scaled(buf[s, (i * vec + v) // 2], (i * vec + v) % 2, sc[s], gs, nvfp4), "bfloat16"
                                )

    return body, t, group


def _fp4_scaled(byte, odd, sc, gs, nvfp4: bool):
    """The fp32 value of one nibble times its scale(s): (value * s8) * gs, or value * 2**(e - 127)."""
    code = T.if_then_else(odd == 1, byte >> T.uint8(4), byte & T.uint8(15))
    value = F.e2m1_value_denormal(code) * sc
    return value * gs if nvfp4 else value


@tilelang.jit
def dequant_fp4_e4m3_tl(D: int, *, x_align: int = 16, pdl: bool = False):
    """Compiled kernel(packed, scale, global_scale, y): NVFP4 -> bf16."""
    body, t, group = _dequant_fp4_body("dequant_fp4_e4m3", D, x_align, True, pdl)

    @T.prim_func
    def dequant_fp4_e4m3(
        packed: T.Tensor((t, D // 2), "uint8"),
        scale: T.Tensor((t, D // group), FP8),
        global_scale: T.Tensor((1,), "float32"),
        y: T.Tensor((t, D), "bfloat16"),
    ):
        body(packed, scale, global_scale, y)

    return dequant_fp4_e4m3


@tilelang.jit
def dequant_fp4_ue8m0_tl(D: int, *, x_align: int = 16, pdl: bool = False):
    """Compiled kernel(packed, scale, y): MX FP4 -> bf16."""
    body, t, group = _dequant_fp4_body("dequant_fp4_ue8m0", D, x_align, False, pdl)

    @T.prim_func
    def dequant_fp4_ue8m0(
        packed: T.Tensor((t, D // 2), "uint8"),
        scale: T.Tensor((t, D // group), "uint8"),
        y: T.Tensor((t, D), "bfloat16"),
    ):
        body(packed, scale, None, y)

    return dequant_fp4_ue8m0
