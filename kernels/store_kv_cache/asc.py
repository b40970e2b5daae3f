"""Huawei Ascend 950 TileLang implementation of `store_kv_cache`: the CUDA factories' names,
signatures and arithmetic (see kernels/store_kv_cache/cuda.py for the operands and
kernels/store_kv_cache/ref.py for the contract).

Verified by lowering to AscendC only (codegen_ascend suite: every shipped configuration lowers and
its Unified Buffer footprint fits); no NPU has run it, so neither results nor speed are measured.

Where the work runs: a pure vector (AIV) kernel, one persistent block per vector core over tiles of
consecutive tokens. Per tile, MTE2 brings the tile's slots into the Unified Buffer (UB) and the
scalar unit reads and range-checks each one in 64 bits:
  * copies: for each valid token, MTE2 moves its H head rows into a UB staging buffer (K, and V
    into a second one) and MTE3 moves them to the token's cache slot (the slot is a scalar, so the
    GM address of each DMA is computed at run time, as `gather` does for its source rows);
  * quantised records: MTE2 brings the tile's 576-wide rows into the UB at once; one SIMT region
    gives each thread one scale group of one token, which it reduces and encodes with the portable
    forms of the CUDA kernel's expressions (kernels/quant/tl_formats.py: e4m3 by clamp and cast
    where CUDA converts with saturation, the amax a compare-and-select, which ignores NaN like
    fmaxf), bit-identical results, writing the codes, the scale bytes and its share of the rope
    bytes into a UB record tile; then MTE3 stores each valid token's record to its slot.
The checked kernels count out-of-range slots per core in a scalar and add the count to
out_of_range with one store-mode atomic add (SetAtomicAdd<int32_t>) per core at the end.

UB budget: copies 2 x (H x Dh padded to 32 bytes) staging (at most 2 x 32 KiB at MAX_ROW when a head
is a multiple of 32 bytes; each head's padding adds up to 31 bytes) plus the slots; records a 16 x
1152-byte row tile, a 16-record tile (at most 10.5 KiB) and the 32 KiB SIMT reservation. `x_align`
is accepted for signature parity and ignored: the global-memory side of an Ascend DMA is
byte-granular.
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import tilelang
import tilelang.ascend.language as T

from kernels.quant import tl_formats as F
from kernels.quant.formats import E2M1_MAX, E4M3_MAX
from kernels.static_args import element_bytes, head_staging_bytes
from kernels.store_kv_cache.layout import FP4, FP8, LATENT, ROPE, WIDTH, RecordLayout
from kernels.store_kv_cache.ref import BACKEND_DTYPES as DTYPES, INDEX_DTYPES, MAX_ROW, check_row, check_slots

__all__ = [
    "DTYPES",
    "INDEX_DTYPES",
    "MAX_ROW",
    "store_kv_checked_tl",
    "store_kv_fp4_checked_tl",
    "store_kv_fp4_tl",
    "store_kv_fp8_checked_tl",
    "store_kv_fp8_tl",
    "store_kv_pair_checked_tl",
    "store_kv_pair_tl",
    "store_kv_shipped_configs",
    "store_kv_tl",
]

# One persistent block per vector core, as TileLang's Ascend 950 vector examples launch.
_VECTOR_CORES = 64
# Tokens per tile: the slots of a tile are one DMA; records are encoded a tile at a time.
_COPY_ROWS = 64
_RECORD_ROWS = 16
_UB_ALIGN = 32
# The copy kernels' K (and V) staging, at most: a MAX_ROW pair twice over, so at MAX_ROW a pair's
# heads pass down to 16 bytes (8 values), a single row's down to 8; narrower ones are refused.
_STAGE_BYTES = 128 * 1024
E4M3 = "float8_e4m3"


def _pad(n: int, elem: int) -> int:
    per = max(1, _UB_ALIGN // elem)
    return -(-n // per) * per


def store_kv_shipped_configs() -> dict[str, list[tuple]]:
    """{factory: [positional args + (x_align,)]}: cases of the CUDA backend's list, without its
    alignment variants (alignment does not change an Ascend kernel), and the largest per-head
    staging the copy kernels allow; covering the MLA row, MAX_ROW, per-head NHD / HND views, fp16, a
    block size of 1, both index types and both record formats with strided rows and block
    strides."""
    mla = (1, WIDTH, "bfloat16")
    copies = [
        (*mla, "int64", 64, (WIDTH, WIDTH), (64 * WIDTH, WIDTH, WIDTH), 16),
        (1, MAX_ROW, "bfloat16", "int32", 16, (MAX_ROW + 1, MAX_ROW), (16 * MAX_ROW, MAX_ROW, MAX_ROW), 16),
        (8, 128, "float16", "int64", 1, (5120, 128), (2 * 1024, 1024, 128), 16),
        (8, 128, "bfloat16", "int64", 64, (1024, 128), (64 * 1024, 128, 64 * 128), 16),  # HND
        (3, 6, "float16", "int32", 5, (20, 6), (5 * 18, 18, 6), 16),
    ]
    fp4 = [("int64", 64, WIDTH, 64 * FP4.record_bytes, 16), ("int32", 1, WIDTH + 1, 2 * FP4.record_bytes, 16)]
    fp8 = [("int64", 64, WIDTH, 64 * FP8.record_bytes, 16), ("int32", 16, 2 * WIDTH, 2 * 16 * FP8.record_bytes, 16)]
    return {
        "store_kv_tl": copies,
        "store_kv_checked_tl": [copies[0]],
        # The last: K and V of 2048 heads of 8 values, 128 KiB of staging (the most allowed).
        "store_kv_pair_tl": [copies[1], copies[3], copies[4], (2048, 8, "bfloat16", "int64", 1, (MAX_ROW, 8), (MAX_ROW, MAX_ROW, 8), 16)],
        "store_kv_pair_checked_tl": [copies[3]],
        "store_kv_fp4_tl": fp4,
        "store_kv_fp4_checked_tl": [fp4[0]],
        "store_kv_fp8_tl": fp8,
        "store_kv_fp8_checked_tl": [fp8[0]],
    }


@T.macro
def _add_count(cnt_ub, cnt, out_of_range):
    """out_of_range[0] += cnt, atomically across cores (a store-mode atomic UB -> GM copy)."""
    cnt_ub[0] = cnt
    T.set_atomic("add", "int32")
    T.copy(cnt_ub[0:1], out_of_range[0:1])
    T.set_atomic_none()


def _copy_body(name: str, H: int, Dh: int, dtype: str, index_dtype: str, block_size: int, pair: bool, checked: bool):
    check_slots(name, index_dtype, block_size)
    check_row(name, H, Dh, dtype)
    pitch = _pad(Dh, element_bytes(dtype))
    head_staging_bytes(name, H, Dh, dtype, 2 if pair else 1, _STAGE_BYTES)

    @T.macro
    def body(k, v, slot_mapping, k_cache, v_cache, out_of_range, t, num_blocks):
        with T.Kernel(_VECTOR_CORES) as core:
            slot_ub = T.alloc_shared((_COPY_ROWS,), index_dtype)
            k_ub = T.alloc_shared((H, pitch), dtype)
            v_ub = T.alloc_shared((H if pair else 1, pitch), dtype)
            cnt_ub = T.alloc_shared((8,), "int32")
            cnt = T.alloc_var("int32", init=0)
            for tile in T.Persistent([T.ceildiv(t, _COPY_ROWS)], _VECTOR_CORES, core, group_size=1, num_stages=1):
                # 64-bit rows and slots make every GM offset below 64-bit.
                row0 = T.cast(tile, "int64") * _COPY_ROWS
                valid = T.min(_COPY_ROWS, T.cast(t, "int64") - row0)
                T.copy(slot_mapping[row0 : row0 + valid], slot_ub[:valid])
                for r in T.serial(valid):
                    slot = T.cast(slot_ub[r], "int64")
                    if slot >= 0 and slot < T.cast(num_blocks, "int64") * block_size:
                        for h in T.serial(H):
                            T.copy(k[row0 + r, h, :], k_ub[h, :Dh])
                            if pair:
                                T.copy(v[row0 + r, h, :], v_ub[h, :Dh])
                        for h in T.serial(H):
                            T.copy(k_ub[h, :Dh], k_cache[slot // block_size, slot % block_size, h, :])
                            if pair:
                                T.copy(v_ub[h, :Dh], v_cache[slot // block_size, slot % block_size, h, :])
                    if checked:
                        if slot >= T.cast(num_blocks, "int64") * block_size:
                            cnt += 1
            if checked:
                _add_count(cnt_ub, cnt, out_of_range)

    return body


def _copy_params(H: int, Dh: int, dtype: str, index_dtype: str, block_size: int, k_strides, cache_strides):
    t = T.dynamic("t")
    num_blocks = T.dynamic("num_blocks")

    # Each parameter needs its own buffer: these build a fresh annotation per call.
    def src():
        return T.StridedTensor((t, H, Dh), (k_strides[0], k_strides[1], 1), dtype)

    def dst():
        return T.StridedTensor((num_blocks, block_size, H, Dh), (*cache_strides, 1), dtype)

    return t, num_blocks, src, dst, T.Tensor((t,), index_dtype)


@tilelang.jit(target="ascend")
def store_kv_tl(H: int, Dh: int, dtype: str, index_dtype: str, block_size: int, k_strides: tuple, cache_strides: tuple, *, x_align: int = 16):
    """Ascend kernel(k, slot_mapping, k_cache) (`x_align` ignored)."""
    body = _copy_body("store_kv", H, Dh, dtype, index_dtype, block_size, False, False)
    t, num_blocks, src, dst, slots = _copy_params(H, Dh, dtype, index_dtype, block_size, k_strides, cache_strides)

    @T.prim_func
    def store_kv(k: src(), slot_mapping: slots, k_cache: dst()):
        body(k, None, slot_mapping, k_cache, None, None, t, num_blocks)

    return store_kv


@tilelang.jit(target="ascend")
def store_kv_checked_tl(H: int, Dh: int, dtype: str, index_dtype: str, block_size: int, k_strides: tuple, cache_strides: tuple, *, x_align: int = 16):
    """Ascend kernel(k, slot_mapping, k_cache, out_of_range) (`x_align` ignored)."""
    body = _copy_body("store_kv_checked", H, Dh, dtype, index_dtype, block_size, False, True)
    t, num_blocks, src, dst, slots = _copy_params(H, Dh, dtype, index_dtype, block_size, k_strides, cache_strides)

    @T.prim_func
    def store_kv_checked(k: src(), slot_mapping: slots, k_cache: dst(), out_of_range: T.Tensor((1,), "int32")):
        body(k, None, slot_mapping, k_cache, None, out_of_range, t, num_blocks)

    return store_kv_checked


@tilelang.jit(target="ascend")
def store_kv_pair_tl(H: int, Dh: int, dtype: str, index_dtype: str, block_size: int, k_strides: tuple, cache_strides: tuple, *, x_align: int = 16):
    """Ascend kernel(k, v, slot_mapping, k_cache, v_cache) (`x_align` ignored)."""
    body = _copy_body("store_kv_pair", H, Dh, dtype, index_dtype, block_size, True, False)
    t, num_blocks, src, dst, slots = _copy_params(H, Dh, dtype, index_dtype, block_size, k_strides, cache_strides)

    @T.prim_func
    def store_kv_pair(k: src(), v: src(), slot_mapping: slots, k_cache: dst(), v_cache: dst()):
        body(k, v, slot_mapping, k_cache, v_cache, None, t, num_blocks)

    return store_kv_pair


@tilelang.jit(target="ascend")
def store_kv_pair_checked_tl(H: int, Dh: int, dtype: str, index_dtype: str, block_size: int, k_strides: tuple, cache_strides: tuple, *, x_align: int = 16):
    """Ascend kernel(k, v, slot_mapping, k_cache, v_cache, out_of_range) (`x_align` ignored)."""
    body = _copy_body("store_kv_pair_checked", H, Dh, dtype, index_dtype, block_size, True, True)
    t, num_blocks, src, dst, slots = _copy_params(H, Dh, dtype, index_dtype, block_size, k_strides, cache_strides)

    @T.prim_func
    def store_kv_pair_checked(k: src(), v: src(), slot_mapping: slots, k_cache: dst(), v_cache: dst(), out_of_range: T.Tensor((1,), "int32")):
        body(k, v, slot_mapping, k_cache, v_cache, out_of_range, t, num_blocks)

    return store_kv_pair_checked


def _amax_of(acc, v):
    """max(acc, |v|) with NaN v ignored by the comparison (any NaN compares false)."""
    a = T.abs(v)
    return T.if_then_else(a > acc, a, acc)


def _record_body(name: str, layout: RecordLayout, index_dtype: str, block_size: int, kv_stride: int, block_stride: int, checked: bool):
    check_slots(name, index_dtype, block_size)
    rec = layout.record_bytes
    if kv_stride < WIDTH:
        raise ValueError(f"{name}: kv_stride {kv_stride} is smaller than the row width {WIDTH}")
    if block_stride < block_size * rec:
        raise ValueError(f"{name}: block_stride {block_stride} is smaller than a block of {block_size} x {rec} bytes")
    rows, groups, group = _RECORD_ROWS, layout.groups, layout.group
    threads = rows * groups
    rope_share = ROPE // groups  # rope values each group's thread copies
    fp4 = layout is FP4

    @T.macro
    def body(kv, slot_mapping, cache, out_of_range, t, num_blocks):
        with T.Kernel(_VECTOR_CORES) as core:
            slot_ub = T.alloc_shared((rows,), index_dtype)
            x_ub = T.alloc_shared((rows, WIDTH), "bfloat16")
            r_ub = T.alloc_shared((rows, _pad(rec, 1)), "uint8")
            cnt_ub = T.alloc_shared((8,), "int32")
            cnt = T.alloc_var("int32", init=0)
            for tile in T.Persistent([T.ceildiv(t, rows)], _VECTOR_CORES, core, group_size=1, num_stages=2):
                row0 = T.cast(tile, "int64") * rows
                valid = T.min(rows, T.cast(t, "int64") - row0)
                T.copy(slot_mapping[row0 : row0 + valid], slot_ub[:valid])
                T.copy(kv[row0 : row0 + valid, :], x_ub[:valid, :])
                with T.SimtVF(threads=threads):
                    tid = T.get_thread_binding(0)
                    amax = T.alloc_var("float32")
                    sc = T.alloc_var("float32")
                    inv = T.alloc_var("float32")
                    r = tid // groups
                    j = tid % groups
                    if r < valid:
                        amax = T.float32(0)
                        for e in T.serial(group):
                            amax = _amax_of(amax, T.cast(x_ub[r, j * group + e], "float32"))
                        if fp4:
                            r_ub[r, layout.scale_offset + j] = F.ue8m0_exponent(F.group_scale(amax, E2M1_MAX, True))
                            inv = T.float32(1) / F.ue8m0_value(r_ub[r, layout.scale_offset + j])
                            for p in T.serial(group // 2):
                                lo = F.e2m1_code(T.cast(x_ub[r, j * group + 2 * p], "float32") * inv)
                                hi = F.e2m1_code(T.cast(x_ub[r, j * group + 2 * p + 1], "float32") * inv)
                                r_ub[r, j * (group // 2) + p] = lo | T.shift_left(hi, T.uint8(4))
                        else:
                            sc = F.group_scale(amax, E4M3_MAX, True)
                            inv = T.float32(1) / sc
                            for b in T.serial(4):
                                r_ub[r, layout.scale_offset + 4 * j + b] = T.cast(
                                    (T.reinterpret(sc, "uint32") >> T.cast(8 * b, "uint32")) & T.uint32(0xFF), "uint8"
                                )
                            for e in T.serial(group):
                                r_ub[r, j * group + e] = T.reinterpret(
                                    T.cast(F.e4m3_clamp(T.cast(x_ub[r, j * group + e], "float32") * inv), E4M3), "uint8"
                                )
                        # bf16 bits, little-endian, as the record's bytes.
                        for e in T.serial(rope_share):
                            bits = T.reinterpret(x_ub[r, LATENT + j * rope_share + e], "uint16")
                            r_ub[r, layout.rope_offset + 2 * (j * rope_share + e)] = T.cast(bits & T.uint16(0xFF), "uint8")
                            r_ub[r, layout.rope_offset + 2 * (j * rope_share + e) + 1] = T.cast(bits >> T.uint16(8), "uint8")
                for r in T.serial(valid):
                    slot = T.cast(slot_ub[r], "int64")
                    if slot >= 0 and slot < T.cast(num_blocks, "int64") * block_size:
                        T.copy(r_ub[r, :rec], cache[slot // block_size, slot % block_size, :])
                    if checked:
                        if slot >= T.cast(num_blocks, "int64") * block_size:
                            cnt += 1
            if checked:
                _add_count(cnt_ub, cnt, out_of_range)

    return body


def _record_params(layout: RecordLayout, index_dtype: str, block_size: int, kv_stride: int, block_stride: int):
    t = T.dynamic("t")
    num_blocks = T.dynamic("num_blocks")
    kv = T.StridedTensor((t, WIDTH), (kv_stride, 1), "bfloat16")
    cache = T.StridedTensor((num_blocks, block_size, layout.record_bytes), (block_stride, layout.record_bytes, 1), "uint8")
    return t, num_blocks, kv, T.Tensor((t,), index_dtype), cache


@tilelang.jit(target="ascend")
def store_kv_fp4_tl(index_dtype: str, block_size: int, kv_stride: int, block_stride: int, *, x_align: int = 16):
    """Ascend kernel(kv, slot_mapping, cache): FP4 records (`x_align` ignored)."""
    body = _record_body("store_kv_fp4", FP4, index_dtype, block_size, kv_stride, block_stride, False)
    t, num_blocks, kv_t, slots, cache_t = _record_params(FP4, index_dtype, block_size, kv_stride, block_stride)

    @T.prim_func
    def store_kv_fp4(kv: kv_t, slot_mapping: slots, cache: cache_t):
        body(kv, slot_mapping, cache, None, t, num_blocks)

    return store_kv_fp4


@tilelang.jit(target="ascend")
def store_kv_fp4_checked_tl(index_dtype: str, block_size: int, kv_stride: int, block_stride: int, *, x_align: int = 16):
    """Ascend kernel(kv, slot_mapping, cache, out_of_range): FP4 records, counting (`x_align` ignored)."""
    body = _record_body("store_kv_fp4_checked", FP4, index_dtype, block_size, kv_stride, block_stride, True)
    t, num_blocks, kv_t, slots, cache_t = _record_params(FP4, index_dtype, block_size, kv_stride, block_stride)

    @T.prim_func
    def store_kv_fp4_checked(kv: kv_t, slot_mapping: slots, cache: cache_t, out_of_range: T.Tensor((1,), "int32")):
        body(kv, slot_mapping, cache, out_of_range, t, num_blocks)

    return store_kv_fp4_checked


@tilelang.jit(target="ascend")
def store_kv_fp8_tl(index_dtype: str, block_size: int, kv_stride: int, block_stride: int, *, x_align: int = 16):
    """Ascend kernel(kv, slot_mapping, cache): FP8 records (`x_align` ignored)."""
    body = _record_body("store_kv_fp8", FP8, index_dtype, block_size, kv_stride, block_stride, False)
    t, num_blocks, kv_t, slots, cache_t = _record_params(FP8, index_dtype, block_size, kv_stride, block_stride)

    @T.prim_func
    def store_kv_fp8(kv: kv_t, slot_mapping: slots, cache: cache_t):
        body(kv, slot_mapping, cache, None, t, num_blocks)

    return store_kv_fp8


@tilelang.jit(target="ascend")
def store_kv_fp8_checked_tl(index_dtype: str, block_size: int, kv_stride: int, block_stride: int, *, x_align: int = 16):
    """Ascend kernel(kv, slot_mapping, cache, out_of_range): FP8 records, counting (`x_align` ignored)."""
    body = _record_body("store_kv_fp8_checked", FP8, index_dtype, block_size, kv_stride, block_stride, True)
    t, num_blocks, kv_t, slots, cache_t = _record_params(FP8, index_dtype, block_size, kv_stride, block_stride)

    @T.prim_func
    def store_kv_fp8_checked(kv: kv_t, slot_mapping: slots, cache: cache_t, out_of_range: T.Tensor((1,), "int32")):
        body(kv, slot_mapping, cache, out_of_range, t, num_blocks)

    return store_kv_fp8_checked
