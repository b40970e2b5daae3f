"""NVIDIA TileLang implementation of `norm`: RMSNorm, plain and with a fused residual add, each also
with an FP8 (e4m3) output.

    kernel = rmsnorm_tl(D, dtype, eps, x_stride, x_align=...)
    kernel(x, weight, y)                     # y = x * rsqrt(mean(x^2) + eps) * weight

    kernel = add_rmsnorm_tl(D, dtype, eps, x_stride, x_align=...)
    kernel(x, residual, weight, y)           # residual <- x + residual (in place); y = rmsnorm(residual)

    kernel = rmsnorm_fp8_tl(D, dtype, eps, x_stride, group, ue8m0=..., scale_layout=..., with_y=..., x_align=...)
    kernel(x, weight, q, scale[, y])         # q, scale = y quantised per group (kernels/norm/ref.py)
    kernel = add_rmsnorm_fp8_tl(...)         # the same arguments
    kernel(x, residual, weight, q, scale[, y])

x         (t, D) of `dtype` (bfloat16, float16 or float32), row stride `x_stride` >= D elements (a
          view of a wider tensor is fine), last dimension contiguous.
residual  (t, D) of `dtype`, contiguous; read, then overwritten with x + residual rounded to `dtype`.
weight    (D,) of `dtype`, contiguous.
y         (t, D) of `dtype`, contiguous.
All base pointers must be aligned to `x_align` bytes (the caller folds them into one number).
Every factory also takes pdl=False: True builds a programmatic dependent launch
(kernels/tl_launch.py, sm_90+).

Arithmetic, as `kernels.norm.ref` (the contract) orders it: every element is widened to fp32; the
sum of squares is accumulated in fp32 (per-lane fused multiply-adds, then a fixed-order tree across
lanes, threads and warps: deterministic, the same for every run and batch size); the mean is that
sum times fp32(1 / D) (as torch on CUDA computes it; within an fp32 ulp of the reference's IEEE
division on the CPU); r = rsqrtf(mean + eps) with eps rounded to fp32; y = (x * r) * w in fp32,
rounded to nearest-even into `dtype`. The residual variant first forms s = x + residual in fp32,
rounds it to `dtype` (exactly what torch's `x + residual` does), stores it, and normalises the
rounded s. Against the reference only the summation order and that mean differ. No fast-math: no
flush to zero.

t is dynamic: one compiled kernel serves every batch size; every global offset is computed in 64
bits, so t * x_stride may exceed 2**31. D, the element type, eps, x_stride and x_align are compiled
in (eps is a compile-time constant: one kernel per distinct eps, which models keep fixed). t == 0
must not be launched (a CUDA grid cannot be empty).

Where the work runs: each row is split over `threads_per_row` threads that each hold `steps`
16-byte vectors (narrower when alignment forces it) of the row in registers. A thread loads all
its vectors first, accumulates their squares, the row's threads reduce with warp shuffles and, for
rows wider than a warp, one shared-memory exchange of the per-warp sums (every thread adds them in
the same order, so all get the same total); then each thread scales the values it still holds and
stores them (the fused kernels' threads hold at most two 16-byte vectors of each operand,
_FUSED_OPERAND_BYTES: twice the threads a row; add_rmsnorm's hold one where a row then takes at
most 512 lanes, add_norm_config). x (and residual) are read from global memory exactly once; the weight is read in the
scale pass, after the barrier (loading it with x would hold a weight vector per step in registers,
which spills at the register cap below for several widths). So that this read finds it in L2, the
fused kernel's first threads prefetch the weight's lines into L2 as x's loads go out (one
`prefetch.L2` per 128-byte line, no register held), in the blocks of a batch's first 64 rows: at
decode sizes it would otherwise be a second DRAM round trip after the reduction. (In the plain
kernel ptxas issues the prefetch only at the reduction, too late to help; in the fused FP8 kernel
the gate spills at D 16384 per token on sm_90a, and prefetching in every block costs 2-4% at large
batches: neither has one; kernels/norm/PERF.md.) Built for a programmatic dependent launch
(pdl=True), every norm kernel's block 0 issues that prefetch while it waits for the grid before it
(kernels/tl_launch.py: an L2 hint is the one access allowed there), so the weight's DRAM round
trip overlaps that grid instead of following x's. The weight is read through the read-only path
(`__ldg`), which nvcc no longer infers once the weight's address has reached the prefetch's inline
assembly, nor in a PDL build (no `__restrict__`): the weight is a model parameter, which no grid
of a decode chain writes. Short rows put several rows in a block. `__launch_bounds__(threads, 1024 / threads)` caps registers at 64 per
thread so that about 1024 threads (several rows) are resident per SM.

FP8 output (rmsnorm_fp8_tl, add_rmsnorm_fp8_tl; the section at the end of this file). q (t, D)
float8_e4m3 contiguous; scale fp32, (t, D / group) contiguous for scale_layout "row", or for
"tma_col" the (D / group, t) transpose of DeepGEMM's column-major view, whose row stride (T_pad) is
read from the tensor at launch; y (t, D) of `dtype`, only with with_y. `group` is D (one scale per
token) or 16/32/64/128 dividing D; ue8m0 rounds scales up to powers of two. The load, residual add
and rsqrt are the norm's (same macros); then each thread rounds (x * r) * w to dtype into the
registers that held x (and stores it when with_y: a static argument because it only adds a store
and y's argument, the body is the same). The plain variant, where its register cap is at least
_WIDE_ROW_REGISTERS, widens its row to fp32 as it loads and keeps y there, rounded to dtype and
widened back, so no later pass converts (the kernel is issue-bound); the fused variant, which holds
x and residual at once, keeps them packed. bf16 pairs widen from their 32-bit word (a shift or a
mask). Each thread finishes one group at a time: the group's amax (fmaxf, NaN-free) over its
elements in the thread, a shuffle-xor butterfly over the group's lanes, and, for groups of whole
warps (narrow vectors, or one scale per token in rows of several warps), one shared-memory
exchange and barrier; then the scale (tl_formats.fp32_quotient: the IEEE quotient without
nvcc's slow-path branch), 1 / scale (tl_formats.reciprocal_rn, likewise) and the e4m3 codes, every
step the expression kernels/quant/tl_formats.py gives, so q and scale equal quantising the
kernel's own y bit for bit. The groups' first lanes store the row's scales at the end, in one
branch.
fp8_config maps groups to lanes: vector `lane + s * tpr` is step s of lane `lane`, so a group
of g elements is g / vector_elems consecutive lanes of one step (rows of more than a
warp are rounded up to whole groups of lanes so that no group straddles two steps), or in rows of
fewer lanes several consecutive steps of all of them. Every configuration of a width D in
[16, 16384] with D % group == 0 (any D per token), any dtype, stride and alignment is served.
The two norm factories above generate the same code as before the FP8 variants existed.
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import dataclasses
import math

import tilelang
import tilelang.language as T

from kernels.norm.ref import FP8_GROUPS, fp32_eps
from kernels.quant.formats import E4M3_MAX, SCALE_LAYOUTS
from kernels.quant.tl_formats import (
    CUDA_PRELUDE,
    abs_max,
    bf16_pair_value,
    e4m3,
    fp32_quotient,
    group_scale,
    reciprocal_rn,
    scale_reciprocal,
    widen,
)
from kernels.static_args import next_pow2, row_elements
from kernels.tl_launch import release_dependents, wait_for_earlier_grids

__all__ = [
    "DTYPES",
    "FP8_DTYPE",
    "MAX_D",
    "Fp8Groups",
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
# threads, a 16384-wide one 512 (the fused kernels hold fewer: _FUSED_OPERAND_BYTES).
_MAX_ROW_REGISTERS = 32
# Vectors one thread holds (binds only for narrow vectors, i.e. odd D or unaligned data): at most 8,
# unless a row needs more than 1024 threads of 8; then up to 16 (16384 elements, 1-element vectors).
_MAX_STEPS = 8
# The fused kernels' threads hold at most this many bytes of each (t, D) operand: two 16-byte
# vectors, twice the threads of the register budget's four. Same-run probe on the H200 (7168 bf16,
# 2026-12-01, kernels/norm/PERF.md): 1-7% faster at 1 to 256 rows, as fast at 1024 and 16384; the
# plain kernels lose from 1024 rows on, so they keep the budget's shape.
_FUSED_OPERAND_BYTES = 32
# add_rmsnorm's threads hold a single 16-byte vector of each operand when that takes at most this
# many lanes a row (D <= 4096 in 16-bit types): same-run probe on the H200 (bf16, 2026-12-02,
# kernels/norm/PERF.md), at 4096 2.3% faster at 16384 rows and 6.6% at 1024, at 1024 9-10% faster
# at 1 and 64 rows, never slower. Wider rows keep two (one vector of 7168 takes 896 lanes).
_ONE_VECTOR_MAX_LANES = 512
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


def norm_config(
    D: int,
    dtype: str,
    x_stride: int,
    x_align: int = 16,
    threads: int | None = None,
    max_steps: int | None = None,
    residual: bool = False,
    lane_multiple: int = 1,
    operand_bytes: int | None = None,
) -> NormConfig:
    """Derive the launch shape from the static arguments (`residual`: the fused variant's register
    budget).

    `threads` is the smallest block (short rows share it; a power of two in [32, 1024]) and
    `max_steps` caps the vectors a thread holds (tuning knobs; None takes the defaults above); a
    row that would need more than 1024 threads at the cap gives each of 1024 threads more.
    `lane_multiple` (1 or a power of two up to 128) rounds a row of more than a warp up to a
    multiple of that many lanes (the default 1 leaves the shape as it always was).
    `operand_bytes` caps the bytes of each operand a thread holds (the fused kernels pass
    _FUSED_OPERAND_BYTES; None: the register budget alone).
    """
    elem = row_elements("norm", D, dtype, DTYPES, x_stride, max_D=MAX_D, x_align=x_align)
    block = threads or _BLOCK_THREADS
    if block & (block - 1) or not _WARP <= block <= _MAX_THREADS:
        raise ValueError(f"norm: threads must be a power of two in [32, 1024], got {block}")
    if max_steps is not None and not 1 <= max_steps <= 32:
        raise ValueError(f"norm: max_steps must be in [1, 32], got {max_steps}")
    if lane_multiple & (lane_multiple - 1) or not 1 <= lane_multiple <= 4 * _WARP:
        raise ValueError(f"norm: lane_multiple must be a power of two in [1, 128], got {lane_multiple}")
    # Every row start of x, residual and y, and every base pointer, is aligned to the vector.
    vector_bytes = math.gcd(D * elem, x_stride * elem, x_align, _MAX_VECTOR_BYTES)
    vector_elems = vector_bytes // elem
    row_vectors = D * elem // vector_bytes
    inputs = 2 if residual else 1  # (t, D) operands each thread loads
    widened = _MAX_ROW_REGISTERS // vector_elems
    loaded = _MAX_ROW_REGISTERS * 4 // (vector_bytes * inputs)
    held = operand_bytes // vector_bytes if operand_bytes else _MAX_STEPS
    steps_cap = max_steps or max(1, min(_MAX_STEPS, widened, loaded, held))
    wanted = -(-row_vectors // steps_cap)  # threads one row needs at `steps_cap` vectors each
    # Rows of a warp or more take whole warps; shorter rows a power-of-two group of lanes, so the
    # shuffle butterfly stays inside the group.
    # `lane_multiple` (a power of two up to 128) makes rows of more than a warp take a multiple of
    # that many lanes: the FP8 variant's groups must not straddle two steps.
    unit = max(_WARP, lane_multiple)
    threads_per_row = next_pow2(wanted) if wanted <= _WARP else min(_MAX_THREADS, -(-wanted // unit) * unit)
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


def add_norm_config(
    D: int, dtype: str, x_stride: int, x_align: int = 16, threads: int | None = None, max_steps: int | None = None
) -> NormConfig:
    """add_rmsnorm_tl's launch shape: norm_config's fused budget, with one 16-byte vector of each
    operand a thread where the row then takes at most _ONE_VECTOR_MAX_LANES lanes, else
    _FUSED_OPERAND_BYTES (max_steps, when given, decides alone)."""
    one = norm_config(D, dtype, x_stride, x_align, threads, max_steps, residual=True, operand_bytes=_MAX_VECTOR_BYTES)
    if max_steps is not None or one.threads_per_row <= _ONE_VECTOR_MAX_LANES:
        return one
    return norm_config(D, dtype, x_stride, x_align, threads, max_steps, residual=True, operand_bytes=_FUSED_OPERAND_BYTES)


def norm_shipped_configs() -> list[tuple[int, str, int, int]]:
    """(D, dtype, x_stride, x_align) tuples covering every path of norm_config.

    Register pressure grows with the row elements a thread holds (steps x vector elements), so for
    each of the 7 (element size, vector width) classes that some D in 1..16384 and alignment
    reaches, the case with the most steps (the largest D among ties) is here; the codegen test
    recomputes these maxima over every D and alignment. The rest add every dtype, the models'
    widths, strided rows, 1 to 128 rows per block, 1 to 32 warps per row, a row of a
    non-power-of-two number of warps and partial last steps.
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
        (7168, "bfloat16", 7168, 16),  # hidden size: 224 threads (7 warps) x 4 steps (fused: 448 x 2)
        (7168, "float16", 7168, 16),
        (7168, "float32", 7168, 16),  # 224 threads x 8 steps (fused: 896 x 2)
        (4096, "bfloat16", 7168, 16),  # strided rows: 128 threads x 4 steps
        (2880, "bfloat16", 2880, 16),  # odd multiple of 64: 96 threads x 4 steps, partial
        (1536, "bfloat16", 1536, 16),  # 64 threads x 3 steps, 2 rows per block
        (576, "bfloat16", 576, 16),  # MLA latent + rope: one warp x 3 steps, partial, 4 rows per block
        (576, "float32", 577, 4),  # strided, 4-byte vectors
        (128, "float16", 128, 16),  # 4 threads per row, 32 rows per block
        (7, "float32", 9, 4),  # odd, strided, tiny: 1 thread per row, 128 rows per block
    ]


# tl_ops_prefetch_l2: a hint that brings the line holding p into L2 and holds no register (PTX
# prefetch, generic address). tl_ops_load_nc<Bytes>: one vector through the read-only path (__ldg).
# The weight's pointer reaches the prefetch's inline assembly, after which nvcc no longer proves the
# weight read-only: its plain loads then lose the non-coherent path and queue behind y's stores.
# tl_ops_round_bf16: x rounded to bfloat16 (nearest-even, as the cast) and returned as the fp32 of
# that value, in one conversion: cvt.rn.bf16x2 puts x's bfloat16 in the high half and 0.0's in the
# low one, which is the fp32 of the same value; a cast and a widening take a conversion per pair
# and a shift or mask per element.
_NORM_PRELUDE = """
__device__ __forceinline__ float tl_ops_round_bf16(float x) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(x), "f"(0.0f));
  return __uint_as_float(r);
}
__device__ __forceinline__ void tl_ops_prefetch_l2(const void *p) { asm volatile("prefetch.L2 [%0];" ::"l"(p)); }
template <int Bytes> struct tl_ops_word;
template <> struct tl_ops_word<2> { using type = unsigned short; };
template <> struct tl_ops_word<4> { using type = unsigned int; };
template <> struct tl_ops_word<8> { using type = uint2; };
template <> struct tl_ops_word<16> { using type = uint4; };
template <int Bytes, typename T> __device__ __forceinline__ void tl_ops_load_nc(T *dst, const T *src) {
  using W = typename tl_ops_word<Bytes>::type;
  *reinterpret_cast<W *>(dst) = __ldg(reinterpret_cast<const W *>(src));
}
"""
_LINE_BYTES = 128
# The blocks of a batch's first rows prefetch the weight. Same-run A/B on the H200 (7168 bf16, every
# block prefetching): 3-8% faster at 1 to 64 rows, where each block is alone with its row; 3-4%
# slower from 256 rows on, where the first blocks have brought the weight into L2 for the rest and
# the others' prefetches are only extra requests.
_PREFETCH_ROWS = 64
# A PDL build prefetches in block 0 alone, while every block waits for the grid before it: the lines
# are in L2 long before any block reads the weight. Same-run probe on an H100 (PDL launches, 7168
# bf16): against the first 64 rows' blocks, add_rmsnorm at 64 rows 3.01 -> 2.99 us, rms_norm 2.54 ->
# 2.48; against no prefetch, rms_norm 1 row 1.78 -> 1.52, 64 rows 2.41 -> 2.48 (kernels/norm/PERF.md).
_PDL_PREFETCH_ROWS = 1


def _load_nc(cfg: NormConfig, dst, src):
    """dst's vector <- src's, one `vector_bytes` load through the read-only path."""
    return T.evaluate(T.call_extern("handle", f"tl_ops_load_nc<{cfg.vector_bytes}>", dst, src))


def _entry(cfg: NormConfig, D: int, pdl: bool, rows_without_pdl: int):
    """A macro, the kernel's first statements: kernels/tl_launch.py's dependent entry with the
    weight's L2 prefetch ahead of its wait (the block's first threads ask L2 for every line of the
    weight, one line each).

    A kernel that reads the weight only after the reduction (registers for it would spill) then
    finds it in L2: at decode sizes that takes a DRAM round trip off the critical path. Only the
    blocks of the batch's first rows prefetch: _PDL_PREFETCH_ROWS when pdl (the prefetch then
    overlaps the grid before), else `rows_without_pdl` (0: no prefetch). Lines are counted from the
    weight's first element, so D * elem // 128 + 1 of them cover an unaligned base too (the last
    offset is clamped into the row).
    """
    first_rows = _PDL_PREFETCH_ROWS if pdl else rows_without_pdl
    elem = cfg.vector_bytes // cfg.vector_elems
    lines = D * elem // _LINE_BYTES + 1
    rounds = -(-lines // cfg.threads)
    blocks = -(-first_rows // cfg.rows_per_block)

    @T.macro
    def entry(weight, bx, tx):
        if first_rows:
            # Later blocks find the weight in L2.
            for i in T.unroll(rounds):
                if bx < blocks and tx + i * cfg.threads < lines:
                    offset = T.min((tx + i * cfg.threads) * (_LINE_BYTES // elem), D - 1)
                    T.evaluate(T.call_extern("handle", "tl_ops_prefetch_l2", T.address_of(weight[offset])))
        wait_for_earlier_grids(pdl)
        release_dependents(pdl)

    return entry


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
        # An fp32 buf (the plain FP8 variant's row) widens the vector as it lands.
        for v in T.vectorized(vec):
            buf[s, v] = T.cast(src[row, (lane + s * tpr) * vec + v], buf.dtype)

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
        # The mean by D's reciprocal (within an fp32 ulp of the quotient, far below y's rounding):
        # one instruction where the division takes twelve and a slow-path branch.
        inv[0] = T.rsqrt(inv[0] * T.float32(1.0 / D) + T.float32(eps32))

    @T.macro
    def store_step(dst, weight, row, lane, buf, inv, wbuf, s):
        _load_nc(cfg, T.address_of(wbuf[0]), T.address_of(weight[(lane + s * tpr) * vec]))
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
    pdl: bool = False,
):
    """Compiled RMSNorm kernel(x, weight, y) for these static arguments (memoised per argument set)."""
    cfg = norm_config(D, dtype, x_stride, x_align, threads, max_steps, residual=False)
    load_row, add_rows, inv_rms, store_scaled = _kernel_macros(cfg, D, dtype, eps)
    entry = _entry(cfg, D, pdl, 0)
    t = T.dynamic("t")
    tpr, rows, steps, vec = cfg.threads_per_row, cfg.rows_per_block, cfg.steps, cfg.vector_elems

    @T.prim_func
    def rmsnorm(
        x: T.StridedTensor((t, D), (x_stride, 1), dtype),
        weight: T.Tensor((D,), dtype),
        y: T.Tensor((t, D), dtype),
    ):
        with T.Kernel(T.ceildiv(t, rows), threads=cfg.threads, prelude=_NORM_PRELUDE) as bx:
            T.annotate_min_blocks_per_sm(cfg.min_blocks_per_sm)
            tx = T.get_thread_binding(0)
            entry(weight, bx, tx)
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
    pdl: bool = False,
):
    """Compiled fused kernel(x, residual, weight, y): residual <- x + residual, y = rmsnorm(residual)."""
    cfg = add_norm_config(D, dtype, x_stride, x_align, threads, max_steps)
    load_row, add_rows, inv_rms, store_scaled = _kernel_macros(cfg, D, dtype, eps)
    entry = _entry(cfg, D, pdl, _PREFETCH_ROWS)
    t = T.dynamic("t")
    tpr, rows, steps, vec = cfg.threads_per_row, cfg.rows_per_block, cfg.steps, cfg.vector_elems

    @T.prim_func
    def add_rmsnorm(
        x: T.StridedTensor((t, D), (x_stride, 1), dtype),
        residual: T.Tensor((t, D), dtype),
        weight: T.Tensor((D,), dtype),
        y: T.Tensor((t, D), dtype),
    ):
        with T.Kernel(T.ceildiv(t, rows), threads=cfg.threads, prelude=_NORM_PRELUDE) as bx:
            T.annotate_min_blocks_per_sm(cfg.min_blocks_per_sm)
            tx = T.get_thread_binding(0)
            entry(weight, bx, tx)
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


# ----------------------------------------------------------------------------------------------------
# FP8 output: y rounded to dtype, then quantised per group to e4m3 (kernels/norm/ref.py).

# Element type name of the quantised output: TileLang's spelling the launcher matches against
# torch.float8_e4m3fn tensors.
FP8_DTYPE = "float8_e4m3"
# Resident threads per SM the FP8 kernels' register cap is sized for (blocks per SM rounded to the
# nearest whole block): the quantise pass keeps the row, its group's amax and the q, y and scale
# addresses live, which at 64 registers spills a few words on sm_100a; about 85 registers (768
# threads, each with the same row in flight as the norm: 3/4 of its bytes in flight per SM) do not.
_FP8_RESIDENT_THREADS = 768
# Register cap a plain FP8 kernel needs to hold its row widened to fp32 (up to 32 registers of row
# data) without spilling; below it the row stays packed. The cap is 65536 / resident threads, and
# blocks per SM rounded to _FP8_RESIDENT_THREADS leave 544 to 1024 of them: 64 to 120 registers
# (64 for rows of 512 or 1024 threads, which spills on sm_100a; 73 for 448 or 896).
_WIDE_ROW_REGISTERS = 80
_REGISTERS_PER_SM = 65536


@dataclasses.dataclass(frozen=True)
class Fp8Groups:
    """How the groups of one scale map onto the lanes and steps of a NormConfig.

    Vector `lane + s * tpr` sits in step s of lane `lane`, so a group of `group_vectors` consecutive
    vectors is either `lanes` consecutive lanes of one step (group_steps == 1), or, in rows of fewer
    lanes than the group has vectors, `group_steps` consecutive steps of all the row's lanes. A lane
    holds `slots` groups (slot k: steps k * group_steps ...). One scale per token is the group of the
    whole row: one slot of every step across all the row's lanes.
    """

    group: int  # elements per scale (D: one per token)
    groups: int  # scales per row
    group_vectors: int  # vectors per group (per token: the row's)
    lanes: int  # lanes that share a group within a step (the butterfly spans min(lanes, 32))
    group_steps: int  # consecutive steps one group spans
    slots: int  # groups one lane holds
    group_warps: int  # warps one group spans; > 1 adds a shared-memory exchange

    @property
    def shuffles(self) -> int:
        return int(math.log2(min(self.lanes, _WARP)))


def _fp8_occupancy(cfg: NormConfig) -> NormConfig:
    return dataclasses.replace(cfg, min_blocks_per_sm=max(1, round(_FP8_RESIDENT_THREADS / cfg.threads)))


def fp8_config(
    D: int,
    dtype: str,
    x_stride: int,
    group: int,
    scale_layout: str = "row",
    x_align: int = 16,
    threads: int | None = None,
    max_steps: int | None = None,
    fused: bool = False,
) -> tuple[NormConfig, Fp8Groups]:
    """The launch shape of an FP8-output kernel and its group mapping (ValueError on bad arguments);
    the plain and the fused variant share it.

    `group` is D (one scale per token) or one of ref.FP8_GROUPS dividing D. A per-group row of more
    than a warp is rounded up to whole groups of lanes (norm_config's lane_multiple), so no group
    straddles two steps. Registers are budgeted as for the fused norm (norm_config's `residual`):
    that halves the steps of fp32 rows with 16-byte vectors (8 -> 4), whose 32 fp32 row registers
    leave no room for the quantise pass; every other class keeps the plain shape. `fused`: the
    fused variant's, whose threads also hold at most _FUSED_OPERAND_BYTES of each operand. Blocks
    per SM follow _FP8_RESIDENT_THREADS.
    """
    if scale_layout not in SCALE_LAYOUTS:
        raise ValueError(f"norm: scale_layout must be one of {', '.join(SCALE_LAYOUTS)}, got {scale_layout!r}")
    if group != D and (group not in FP8_GROUPS or D % group):
        raise ValueError(f"norm: group must be D ({D}) or one of {FP8_GROUPS} dividing it, got {group}")
    operand_bytes = _FUSED_OPERAND_BYTES if fused else None
    cfg = norm_config(D, dtype, x_stride, x_align, threads, max_steps, residual=True, operand_bytes=operand_bytes)
    tpr = cfg.threads_per_row
    if group == D:
        grp = Fp8Groups(D, 1, cfg.row_vectors, tpr, cfg.steps, 1, cfg.warps_per_row)
        return _fp8_occupancy(cfg), grp
    # Vectors are a power of two of at most 16 bytes, so they divide every group of 16 or more.
    group_vectors = group // cfg.vector_elems
    cfg = norm_config(D, dtype, x_stride, x_align, threads, max_steps, residual=True, lane_multiple=group_vectors, operand_bytes=operand_bytes)
    cfg = _fp8_occupancy(cfg)
    tpr = cfg.threads_per_row
    lanes = min(group_vectors, tpr)  # both powers of two when tpr < group_vectors (tpr <= 32)
    group_steps = group_vectors // lanes
    slots, group_warps = cfg.steps // group_steps, max(1, lanes // _WARP)
    grp = Fp8Groups(group, D // group, group_vectors, lanes, group_steps, slots, group_warps)
    return cfg, grp


def fp8_shipped_configs() -> list[tuple[int, str, int, int, int]]:
    """(D, dtype, x_stride, x_align, group) tuples covering every path of fp8_config.

    Every group size and one scale per token at the models' widths (576, 1536, 4096, 7168) and the
    extremes (128, 16384); every dtype; groups within a warp's lanes of one step, groups spanning
    several steps of a short row, groups spanning several warps (narrow vectors from misaligned
    data, which round the row up to whole groups of lanes), rows per token of one lane group and of
    many warps, and strided rows. The register worst cases are the norm's (the FP8 path holds the
    same row and one fp32 per group): the widest rows of each vector class.
    """
    return [
        # bf16 with 16-byte vectors: a group of 128 is 16 lanes, 16 is 2 lanes.
        (7168, "bfloat16", 7168, 16, 128),
        (7168, "bfloat16", 7168, 16, 16),
        (7168, "bfloat16", 7168, 16, 7168),  # per token: 7 warps, shared-memory exchange
        (4096, "bfloat16", 7168, 16, 128),  # strided rows
        (4096, "bfloat16", 4096, 16, 64),
        (16384, "bfloat16", 16384, 16, 128),  # 512 threads x 4 steps
        (16384, "bfloat16", 16384, 16, 16384),
        (1536, "bfloat16", 1536, 16, 128),
        (1536, "bfloat16", 1536, 16, 32),
        (576, "bfloat16", 576, 16, 64),  # one warp x 3 steps, partial last step
        (576, "bfloat16", 576, 16, 576),
        (256, "bfloat16", 256, 16, 128),  # 8 lanes x 4 steps: a group spans 2 steps of all the lanes
        (128, "bfloat16", 128, 16, 16),
        (128, "float16", 128, 16, 32),
        (7168, "float16", 7168, 16, 128),
        # fp32 with 16-byte vectors: a group of 128 is a whole warp.
        (7168, "float32", 7168, 16, 128),
        (16384, "float32", 16384, 16, 128),
        (576, "float32", 576, 16, 576),
        (16384, "bfloat16", 16384, 8, 16384),  # 4-element vectors: 512 threads x 8 steps
        (16384, "float32", 16384, 8, 64),  # 2-element vectors: 32-lane groups, 1024 threads x 8 steps
        # Narrow vectors (misaligned base or odd stride): groups of 64 / 128 lanes span warps.
        (7168, "bfloat16", 7168, 2, 128),  # 1-element vectors: 128-lane groups, 896 threads x 8 steps
        (16384, "bfloat16", 16384, 2, 128),  # 1024 threads x 16 steps
        (7168, "bfloat16", 7169, 4, 64),  # odd stride: 1-element vectors
        (4096, "bfloat16", 4096, 4, 128),  # 2-element vectors: 64-lane groups
        (16384, "float32", 16384, 4, 128),  # 1024 threads x 16 steps
        (576, "float32", 577, 4, 16),
        (576, "bfloat16", 577, 4, 576),  # per token, 1-element vectors
    ]


def _fp8_macros(cfg: NormConfig, grp: Fp8Groups, dtype: str, ue8m0: bool, scale_layout: str, with_y: bool):
    """The FP8 output's pieces, on top of _kernel_macros: normalise in place, then per group amax,
    scale and quantise.

    Groups are finished one slot at a time (bf16 rows: two at a time, their butterflies shared), so
    one or two fp32 amaxes are live at once (the row itself is the register budget); each slot's
    scale waits in a register until the row's scales are stored together. A slot is `slot_steps` steps from `first` that every lane holds, plus,
    when `slot_tail`, the partial last step held by the first `tail_lanes` lanes (per token only);
    a per-group row whose last step is partial has one more slot of that step alone, which only
    its first `tail_lanes` lanes (whole groups) finish.
    """
    tpr, vec = cfg.threads_per_row, cfg.vector_elems
    full, tail_lanes = divmod(cfg.row_vectors, tpr)
    lanes, group_warps = grp.lanes, grp.group_warps
    per_token = grp.groups == 1
    full_slots, tail_slot = (1, False) if per_token else (full // grp.group_steps, bool(tail_lanes))
    slot_steps, slot_tail = (full, bool(tail_lanes)) if per_token else (grp.group_steps, False)
    # Slots whose butterflies run as one on bfloat16 pairs (pair_butterfly): y must be bfloat16.
    paired = full_slots // 2 if dtype == "bfloat16" and group_warps == 1 else 0

    @T.macro
    def load_weight_step(weight, lane, wbuf, s):
        _load_nc(cfg, T.address_of(wbuf[s, 0]), T.address_of(weight[(lane + s * tpr) * vec]))

    @T.macro
    def load_weight(weight, lane, wbuf):
        """wbuf[s] = the weight vector of step s. The plain variant issues these with the row's
        loads, so after the reduction the weight is already in registers instead of one more round
        trip on the critical path; the fused variant, which holds the residual too, has no
        registers to spare (it spills on sm_100a) and loads each step's weight just before use."""
        for s in T.unroll(full):
            load_weight_step(weight, lane, wbuf, s)
        if tail_lanes:
            if lane < tail_lanes:
                load_weight_step(weight, lane, wbuf, full)

    @T.macro
    def normalise_step(weight, y, row, lane, buf, inv, wbuf, ybuf, s, prefetched):
        if not prefetched:
            load_weight_step(weight, lane, wbuf, s)
        if buf.dtype == "float32" and dtype == "bfloat16":
            # The fp32 row keeps y as the fp32 of its bfloat16 (exact); y's store packs pairs of
            # those values (exact too).
            for v in T.unroll(vec):
                buf[s, v] = T.call_extern("float32", "tl_ops_round_bf16", buf[s, v] * inv[0] * widen(wbuf, s, v))
            if with_y:
                for v in T.vectorized(vec):
                    y[row, (lane + s * tpr) * vec + v] = T.cast(buf[s, v], dtype)
        else:
            # y rounded to dtype into ybuf; an fp32 buf keeps it widened back (exact).
            for v in T.unroll(vec):
                ybuf[0, v] = T.cast(widen(buf, s, v) * inv[0] * widen(wbuf, s, v), dtype)
            for v in T.unroll(vec):
                buf[s, v] = widen(ybuf, 0, v) if buf.dtype == "float32" else ybuf[0, v]
            if with_y:
                for v in T.vectorized(vec):
                    y[row, (lane + s * tpr) * vec + v] = ybuf[0, v]

    @T.macro
    def normalise_row(weight, y, row, lane, buf, inv, wbuf, prefetched):
        """buf <- (buf * inv) * weight rounded to dtype (the y the FP8 output quantises); also
        stored into y's row when with_y. `prefetched`: wbuf already holds the weight."""
        ybuf = T.alloc_local((1, vec), dtype)
        for s in T.unroll(full):
            normalise_step(weight, y, row, lane, buf, inv, wbuf, ybuf, s, prefetched)
        if tail_lanes:
            if lane < tail_lanes:
                normalise_step(weight, y, row, lane, buf, inv, wbuf, ybuf, full, prefetched)

    @T.macro
    def widen_row(raw, buf):
        """buf <- raw widened to fp32, every step (a lane's missing tail step is never read)."""
        for s in T.unroll(cfg.steps):
            for v in T.unroll(vec):
                buf[s, v] = widen(raw, s, v)

    @T.macro
    def amax_step(buf, m, j, s):
        for v in T.unroll(vec):
            m[j] = abs_max(m[j], widen(buf, s, v))

    @T.macro
    def thread_amax(buf, active, lane, m, j, first, n, tail):
        """m[j] = max |y| over the slot's elements this thread holds (NaN ignored); zero in inactive
        threads and lanes without the tail step."""
        m[j] = T.float32(0)
        if active:
            for i in T.unroll(n):
                amax_step(buf, m, j, first + i)
            if tail:
                if lane < tail_lanes:
                    amax_step(buf, m, j, full)

    @T.macro
    def butterfly(m):
        """m[0] = the max over the group's lanes of a warp (groups are aligned to their lane count);
        every thread takes part."""
        for i in T.unroll(grp.shuffles):
            m[0] = T.max(m[0], T.shfl_xor(m[0], 1 << i))

    @T.macro
    def pair_butterfly(m):
        """butterfly of m[0] and m[1] at once, for bfloat16 y: each amax is a bfloat16 value (the
        fp32 of one, low half zero), so the two travel as one bfloat16 pair through the shuffles
        (max is exact on them): half the shuffles and maxima of two butterflies."""
        pair = T.alloc_local((1,), "uint32")
        pair[0] = T.call_extern(
            "uint32", "__byte_perm", T.reinterpret(m[0], "uint32"), T.reinterpret(m[1], "uint32"), T.uint32(0x7632)
        )
        for i in T.unroll(grp.shuffles):
            pair[0] = T.call_extern("uint32", "tl_ops_max_bf16x2", pair[0], T.shfl_xor(pair[0], 1 << i))
        m[0] = bf16_pair_value(pair[0], 0)
        m[1] = bf16_pair_value(pair[0], 1)

    @T.macro
    def store_scale(scale, row, g, value):
        if scale_layout == "row":
            scale[row, g] = value
        else:
            # The (groups, T_pad) storage of the column-major (T, groups) view.
            scale[g, row] = value

    @T.macro
    def quantise_step(q, row, lane, buf, m, j, s):
        # Converted as a vector: pairs of fp32 become e4m3 pairs in one conversion.
        scaled = T.alloc_local((vec,), "float32")
        for v in T.unroll(vec):
            scaled[v] = widen(buf, s, v) * m[j]
        for v in T.vectorized(vec):
            q[row, (lane + s * tpr) * vec + v] = e4m3(scaled[v])

    @T.macro
    def quantise_slot(q, row, lane, buf, m, j, sc, k, first, n, tail):
        """m[j] (the group's amax) -> sc[k] (its scale) -> m[j] = inv; q = e4m3(y * inv)."""
        sc[k] = group_scale(m[j], E4M3_MAX, ue8m0, fp32_quotient)
        m[j] = scale_reciprocal(sc[k], ue8m0, reciprocal_rn)
        for i in T.unroll(n):
            quantise_step(q, row, lane, buf, m, j, first + i)
        if tail:
            if lane < tail_lanes:
                quantise_step(q, row, lane, buf, m, j, full)

    @T.macro
    def store_scales(scale, row, lane, sc):
        """The groups' first lanes store their slots' scales, all in one branch: a store per slot
        behind its own branch cost every warp the branch and the address (lanes 0 and 16 take it)."""
        if lane % lanes == 0:
            for k in T.unroll(full_slots):
                store_scale(scale, row, (k * grp.group_steps * tpr + lane) // grp.group_vectors, sc[k])
            if tail_slot:
                if lane < tail_lanes:
                    store_scale(scale, row, (full * tpr + lane) // grp.group_vectors, sc[full_slots])

    @T.macro
    def exchange(red, tx, m, k):
        """Groups of whole warps: m = the max over the group's warps of what they published."""
        first_warp = tx % tpr // _WARP // group_warps * group_warps
        m[0] = red[tx // tpr, k, first_warp]
        for i in T.unroll(1, group_warps):
            m[0] = T.max(m[0], red[tx // tpr, k, first_warp + i])

    @T.macro
    def quantise_row(q, scale, row, active, tx, buf, red):
        """Scales of the row's groups into scale, q = e4m3(y * inv) into q; `buf` holds y."""
        lane = tx % tpr
        m = T.alloc_local((2,), "float32")
        sc = T.alloc_local((full_slots + tail_slot,), "float32")
        if group_warps == 1:
            for k in T.unroll(paired):
                thread_amax(buf, active, lane, m, 0, 2 * k * grp.group_steps, slot_steps, slot_tail)
                thread_amax(buf, active, lane, m, 1, (2 * k + 1) * grp.group_steps, slot_steps, slot_tail)
                pair_butterfly(m)
                if active:
                    quantise_slot(q, row, lane, buf, m, 0, sc, 2 * k, 2 * k * grp.group_steps, slot_steps, slot_tail)
                    quantise_slot(q, row, lane, buf, m, 1, sc, 2 * k + 1, (2 * k + 1) * grp.group_steps, slot_steps, slot_tail)
            for k in T.unroll(2 * paired, full_slots):
                thread_amax(buf, active, lane, m, 0, k * grp.group_steps, slot_steps, slot_tail)
                butterfly(m)
                if active:
                    quantise_slot(q, row, lane, buf, m, 0, sc, k, k * grp.group_steps, slot_steps, slot_tail)
            if tail_slot:
                thread_amax(buf, active, lane, m, 0, full, 0, True)
                butterfly(m)
                if active:
                    if lane < tail_lanes:
                        quantise_slot(q, row, lane, buf, m, 0, sc, full_slots, full, 1, False)
        else:
            # Each warp's first lane publishes its part of every group; one barrier; every lane
            # combines its group's warps (max is exact: the order does not matter).
            for k in T.unroll(full_slots):
                thread_amax(buf, active, lane, m, 0, k * grp.group_steps, slot_steps, slot_tail)
                butterfly(m)
                if tx % _WARP == 0:
                    red[tx // tpr, k, lane // _WARP] = m[0]
            if tail_slot:
                thread_amax(buf, active, lane, m, 0, full, 0, True)
                butterfly(m)
                if tx % _WARP == 0:
                    red[tx // tpr, full, lane // _WARP] = m[0]
            T.sync_threads()
            if active:
                for k in T.unroll(full_slots):
                    exchange(red, tx, m, k)
                    quantise_slot(q, row, lane, buf, m, 0, sc, k, k * grp.group_steps, slot_steps, slot_tail)
                if tail_slot:
                    if lane < tail_lanes:
                        exchange(red, tx, m, full)
                        quantise_slot(q, row, lane, buf, m, 0, sc, full_slots, full, 1, False)
        if active:
            store_scales(scale, row, lane, sc)

    return load_weight, widen_row, normalise_row, quantise_row


def _scale_tensor(scale_layout: str, t, groups: int):
    """The scale argument: (t, groups) row-major, or for "tma_col" the transpose of DeepGEMM's
    column-major (t, groups) view: (groups, t) with row stride t_pad, bound at launch from the
    tensor's stride (the caller keeps it T rounded up to 4; the kernel writes only columns < t)."""
    if scale_layout == "row":
        return T.Tensor((t, groups), "float32")
    return T.StridedTensor((groups, t), (T.dynamic("t_pad"), 1), "float32")


def _fp8_kernel(D, dtype, eps, x_stride, group, ue8m0, scale_layout, with_y, threads, x_align, max_steps, residual, pdl):
    """The prim_func of rmsnorm_fp8_tl / add_rmsnorm_fp8_tl: the norm's load (and residual add),
    then normalise in place, group amax, quantise. with_y adds y's store and argument, nothing else."""
    cfg, grp = fp8_config(D, dtype, x_stride, group, scale_layout, x_align, threads, max_steps, fused=residual)
    load_row, add_rows, inv_rms, _ = _kernel_macros(cfg, D, dtype, eps)
    load_weight, widen_row, normalise_row, quantise_row = _fp8_macros(cfg, grp, dtype, ue8m0, scale_layout, with_y)
    entry = _entry(cfg, D, pdl, 0)
    t = T.dynamic("t")
    tpr, rows, steps, vec = cfg.threads_per_row, cfg.rows_per_block, cfg.steps, cfg.vector_elems
    scale_type = _scale_tensor(scale_layout, t, grp.groups)
    # The plain variant widens its row once, as it loads, and keeps y in fp32 (rounded to dtype):
    # the norm, amax and quantise passes then convert nothing (the kernel is issue-bound, and each
    # widening of a packed row costs an instruction per element), where the register cap leaves
    # room for it. The fused variant holds x and residual at once and keeps them packed.
    wide = not residual and _REGISTERS_PER_SM // (cfg.threads * cfg.min_blocks_per_sm) >= _WIDE_ROW_REGISTERS
    row_dtype = "float32" if wide else dtype

    @T.macro
    def body(x, residual, weight, q, scale, y):
        with T.Kernel(T.ceildiv(t, rows), threads=cfg.threads, prelude=_NORM_PRELUDE + CUDA_PRELUDE) as bx:
            T.annotate_min_blocks_per_sm(cfg.min_blocks_per_sm)
            tx = T.get_thread_binding(0)
            entry(weight, bx, tx)
            lane = tx % tpr
            # 64-bit row ids make every offset below 64-bit: t * x_stride may pass 2**31.
            row = T.cast(bx * rows + tx // tpr, "int64")
            buf = T.alloc_local((steps, vec), row_dtype)
            red = T.alloc_shared((rows, cfg.warps_per_row), "float32")
            inv = T.alloc_local((1,), "float32")
            # Its own buffer: threads may still read `red` when the first lanes publish their amax.
            red_max = T.alloc_shared((rows, grp.slots, cfg.warps_per_row), "float32")
            wbuf = T.alloc_local((steps, vec), dtype)
            if row < t:
                if wide and dtype == "bfloat16":
                    # Loaded packed, widened by pairs once all the loads are in flight.
                    xbuf = T.alloc_local((steps, vec), dtype)
                    load_row(x, row, lane, xbuf)
                    widen_row(xbuf, buf)
                else:
                    load_row(x, row, lane, buf)
                if residual is not None:
                    rbuf = T.alloc_local((steps, vec), dtype)
                    load_row(residual, row, lane, rbuf)
                    add_rows(residual, row, lane, buf, rbuf)
                else:
                    load_weight(weight, lane, wbuf)
            inv_rms(buf, row < t, tx, red, inv)
            if row < t:
                normalise_row(weight, y, row, lane, buf, inv, wbuf, residual is None)
            quantise_row(q, scale, row, row < t, tx, buf, red_max)

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


@tilelang.jit
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
    pdl: bool = False,
):
    """Compiled RMSNorm + FP8 kernel(x, weight, q, scale[, y]) for these static arguments."""
    return _fp8_kernel(D, dtype, eps, x_stride, group, ue8m0, scale_layout, with_y, threads, x_align, max_steps, False, pdl)


@tilelang.jit
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
    pdl: bool = False,
):
    """Compiled fused kernel(x, residual, weight, q, scale[, y]): residual <- x + residual, then the
    RMSNorm + FP8 output of the rounded sum."""
    return _fp8_kernel(D, dtype, eps, x_stride, group, ue8m0, scale_layout, with_y, threads, x_align, max_steps, True, pdl)
