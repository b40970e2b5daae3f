"""NVIDIA TileLang implementation of `store_kv_cache`: scatter new per-token KV rows into a paged cache.

    store = store_kv_tl(H, Dh, dtype, index_dtype, block_size, k_strides, cache_strides, x_align=...)
    store(k, slot_mapping, k_cache)                              # rows copied as they are
    store_kv_pair_tl(...same...)(k, v, slot_mapping, k_cache, v_cache)   # K and V in one launch
    store_kv_fp4_tl(index_dtype, block_size, kv_stride, block_stride, x_align=...)(kv, slot_mapping, cache)
    store_kv_fp8_tl(index_dtype, block_size, kv_stride, block_stride, x_align=...)(kv, slot_mapping, cache)
    store_kv_checked_tl, store_kv_pair_checked_tl, store_kv_fp4_checked_tl, store_kv_fp8_checked_tl:
        the same kernels with one more operand, out_of_range (1,) int32, last.
    Every factory also takes pdl=False: True builds a programmatic dependent launch
    (kernels/tl_launch.py, sm_90+).

k, v           (t, H, Dh) of `dtype` (bfloat16 or float16), strides (k_strides[0], k_strides[1], 1)
               (an MLA latent row is H = 1, Dh = width).
k_cache, v_cache
               (num_blocks, block_size, H, Dh) of `dtype` with strides (cache_strides[0],
               cache_strides[1], cache_strides[2], 1): the "NHD" cache itself, or an "HND" cache
               (num_blocks, H, block_size, Dh) passed as its transpose(1, 2) view; any strides whose
               (block, offset, head) places do not overlap. v and v_cache share k's and k_cache's strides.
kv             (t, 576) bfloat16, row stride kv_stride, last dimension contiguous.
cache          (num_blocks, block_size, record_bytes) uint8 (the quantised cache's bytes, 400 for FP4,
               656 for FP8: kernels/store_kv_cache/layout.py), strides (block_stride, record_bytes, 1).
slot_mapping   (t,) int32 or int64, contiguous.
out_of_range   (1,) int32: the checked kernels add the number of slots >= num_blocks * block_size.
All base pointers are aligned to `x_align` bytes (the caller folds them into one number).

Row i goes to slot s = slot_mapping[i], i.e. block s // block_size, offset s % block_size. A slot
< 0 (a padding token) is not written, but its row may still be read (the loads go out with the
slot's); a slot >= num_blocks * block_size is never written (the checked kernels count it). Valid
slots must be distinct (which of two rows sharing a slot lands is unspecified). Quantised records
are `layout.encode_rows` bit for bit (kernels/quant/tl_formats.py): fmaxf amax (NaN ignored), the
floor, the UE8M0 scale from the exponent bits of the floored amax (no division), its reciprocal by
an integer subtraction of the bits (exact), one multiply per element, then e4m3 by one saturating
conversion (NaN kept) or e2m1 by e2m1_code_denormal (two multiplies where a scale above 2**23 would
underflow the one); no fast-math and no add, so no fused multiply-add can change a rounding.

t and num_blocks are dynamic: one compiled kernel serves every batch and every cache size; every
offset is 64-bit (slot * record_bytes and block * block_stride pass 2**31 on large caches). t == 0
must not be launched (a CUDA grid cannot be empty).

Where the work runs (design):
  * A store is pure data movement plus, for quantised caches, ~15 fp32/int operations per element:
    it is bound by DRAM bandwidth at prefill sizes and by launch latency at decode sizes, so every
    choice below aims at full-width memory transactions and a single launch.
  * Copies: a group of `threads_per_row` lanes (a power of two up to a warp, whole warps above) owns
    one token. The token's H * Dh elements are cut into 16-byte vectors (narrower only when a
    stride or pointer forces it); lane l takes vectors l, l + threads_per_row, ... (coalesced on
    both sides: consecutive lanes touch consecutive bytes of one head row). Each lane reads its
    slot once (the group's lanes hit the same L1 line) and issues all its loads (K and V) with it,
    not after it (one DRAM round trip before the stores, most of a decode-sized store's time; a
    skipped slot's row is read for nothing), all before any store, so `steps` (<= 4 per operand,
    more only for narrow vectors) 16-byte transactions are in flight per operand. Short rows share
    a 128-thread block (4 MLA rows of 576 bf16 per block, 72 vectors over 32 lanes), so a
    4096-token prefill has ~1000 blocks in flight and a 1-token decode is one small block.
  * Quantised records: 64 lanes per token, each owning 8 consecutive latent values (one 16-byte
    load; a warp's loads are one contiguous 512-byte run). A scale group spans lanes (FP4's 32
    values: 4 lanes, FP8's 128: 16) and reduces its amax by xor shuffles (every lane of the warp
    takes part, inactive ones with amax 0, so the full mask is always right); the group's first lane
    writes its scale. Codes are 4 (FP4) or 8 (FP8) bytes per lane, one store, contiguous across the
    warp. The 64 rope values (128 bytes) are copied by lanes 0..7 with one 16-byte vector each,
    split into bytes in registers (the cache operand is bytes). 2 tokens per 128-thread block: a
    4096-token store is 2048 blocks, every thread's serial work short (8 values). Against 16 lanes
    of 32 values: 17-19% faster at 4096 tokens and 0.08-0.21 us at decode sizes on an H100, 5%
    slower for FP4 at 16384 tokens (PERF.md).
  * No shared memory, no atomics except the checked kernels' count (one atomicAdd per out-of-range
    token, which only a broken slot mapping produces).
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import dataclasses
import math

import tilelang
import tilelang.language as T

from kernels.quant import tl_formats as F
from kernels.quant.formats import E4M3_MAX
from kernels.static_args import ALIGNMENTS, element_bytes, next_pow2
from kernels.store_kv_cache.layout import FP4, FP8, LATENT, ROPE, WIDTH, RecordLayout
from kernels.store_kv_cache.ref import BACKEND_DTYPES as DTYPES, INDEX_DTYPES, MAX_ROW, check_row, check_slots
from kernels.tl_launch import dependent_entry


__all__ = [
    "DTYPES",
    "INDEX_DTYPES",
    "MAX_ROW",
    "CopyConfig",
    "copy_config",
    "record_vector_bytes",
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

_MAX_VECTOR_BYTES = 16
_WARP = 32
_MAX_THREADS = 1024
_BLOCK_THREADS = 128
# Vectors one lane keeps in flight per operand (4 x 16 B; K and V together 128 B = 32 registers).
_MAX_STEPS = 4
# Quantised records: lanes per token (a power of two; a scale group's lanes must share a warp).
_RECORD_LANES = 64


def _check_common(name: str, index_dtype: str, block_size: int, x_align: int) -> None:
    check_slots(name, index_dtype, block_size)
    if x_align not in ALIGNMENTS:
        raise ValueError(f"{name}: x_align must be one of {ALIGNMENTS}, got {x_align}")


@dataclasses.dataclass(frozen=True)
class CopyConfig:
    """The static launch shape of one copy kernel."""

    vector_elems: int  # elements of one vector access (both sides)
    head_vectors: int  # vectors in one head row of Dh elements
    heads: int
    threads_per_row: int  # a power of two up to a warp, whole warps above
    rows_per_block: int
    steps: int  # vectors each lane takes per operand (the last may fall past the row)

    @property
    def row_vectors(self) -> int:
        return self.heads * self.head_vectors

    @property
    def threads(self) -> int:
        return self.threads_per_row * self.rows_per_block


def copy_config(H: int, Dh: int, dtype: str, k_strides, cache_strides, x_align: int = 16) -> CopyConfig:
    """Launch shape of the copy kernels; ValueError for arguments no kernel takes."""
    check_row("store_kv_cache", H, Dh, dtype)
    if len(k_strides) != 2 or len(cache_strides) != 3 or min(*k_strides, *cache_strides) < 1:
        raise ValueError(f"store_kv_cache: strides must be positive (2 for k, 3 for the cache), got {k_strides}, {cache_strides}")
    elem = element_bytes(dtype)
    if x_align not in ALIGNMENTS or x_align < elem:
        raise ValueError(f"store_kv_cache: x_align must be a power of two in [{elem}, 16], got {x_align}")
    vector_bytes = math.gcd(Dh * elem, x_align, _MAX_VECTOR_BYTES, *(s * elem for s in (*k_strides, *cache_strides)))
    vec = vector_bytes // elem
    head_vectors = Dh // vec
    row_vectors = H * head_vectors
    wanted = -(-row_vectors // _MAX_STEPS)
    tpr = next_pow2(wanted) if wanted <= _WARP else min(_MAX_THREADS, -(-wanted // _WARP) * _WARP)
    return CopyConfig(
        vector_elems=vec,
        head_vectors=head_vectors,
        heads=H,
        threads_per_row=tpr,
        rows_per_block=max(1, _BLOCK_THREADS // tpr),
        steps=-(-row_vectors // tpr),
    )


def record_vector_bytes(kv_stride: int, block_stride: int, layout: RecordLayout, x_align: int) -> tuple[int, int]:
    """(bytes of one kv load, bytes of one cache store) of a record kernel."""
    load = math.gcd(kv_stride * 2, WIDTH * 2, x_align, _MAX_VECTOR_BYTES)
    store = math.gcd(block_stride, layout.record_bytes, x_align, _MAX_VECTOR_BYTES)
    return load, store


def store_kv_shipped_configs() -> dict[str, list[tuple]]:
    """{factory: [positional args + (x_align,)]} the dispatcher can pick, covering every code path.

    Copies: the MLA row (576 bf16: 72 vectors, 32 lanes x 3 steps, a partial last step), a
    decode-shaped and a strided (token view of a QKV tensor) per-head NHD cache, an HND cache (its
    transpose view), fp16, a block size of 1, misaligned rows (2-byte vectors: 1024 lanes x 16
    steps at MAX_ROW, the heaviest thread), and 4-byte vectors. Records: aligned and misaligned kv
    (2-byte loads), both index types, block strides of K/V-interleaved caches, a misaligned store.
    Checked variants share the bodies; one configuration each compiles their count.
    """
    mla = (1, WIDTH, "bfloat16")
    copies = [
        (*mla, "int64", 64, (WIDTH, WIDTH), (64 * WIDTH, WIDTH, WIDTH), 16),
        (*mla, "int32", 64, (WIDTH + 64, WIDTH), (64 * WIDTH, WIDTH, WIDTH), 2),
        (1, MAX_ROW, "bfloat16", "int64", 16, (MAX_ROW + 1, MAX_ROW), (16 * MAX_ROW, MAX_ROW, MAX_ROW), 2),
        (8, 128, "bfloat16", "int32", 16, (1024, 128), (16 * 1024, 1024, 128), 16),
        (8, 128, "float16", "int64", 1, (5120, 128), (2 * 1024, 1024, 128), 16),
        (8, 128, "bfloat16", "int64", 64, (1024, 128), (64 * 1024, 128, 64 * 128), 16),  # HND
        (128, 128, "bfloat16", "int64", 64, (MAX_ROW, 128), (64 * MAX_ROW, MAX_ROW, 128), 16),
        (3, 6, "float16", "int32", 5, (20, 6), (5 * 18, 18, 6), 4),
    ]
    pairs = [copies[3], copies[5], copies[6], copies[7]]
    fp4 = [("int64", 64, WIDTH, 64 * FP4.record_bytes, 16), ("int32", 1, WIDTH + 1, 2 * FP4.record_bytes, 2)]
    fp8 = [("int64", 64, WIDTH, 64 * FP8.record_bytes, 16), ("int32", 16, 2 * WIDTH, 2 * 16 * FP8.record_bytes, 4)]
    return {
        "store_kv_tl": copies,
        "store_kv_checked_tl": [copies[0]],
        "store_kv_pair_tl": pairs,
        "store_kv_pair_checked_tl": [pairs[0]],
        "store_kv_fp4_tl": fp4,
        "store_kv_fp4_checked_tl": [fp4[0]],
        "store_kv_fp8_tl": fp8 + [("int64", 64, WIDTH, 64 * FP8.record_bytes + 8, 8)],
        "store_kv_fp8_checked_tl": [fp8[0]],
    }


def _slot_macros(block_size: int, checked: bool):
    """Slot decoding and the out-of-range count shared by every kernel."""

    @T.macro
    def count(slot, num_blocks, lane, out_of_range):
        if checked:
            if lane == 0 and slot >= T.cast(num_blocks, "int64") * block_size:
                T.atomic_add(out_of_range[0], 1)

    @T.macro
    def valid(slot, num_blocks):
        return slot >= 0 and slot < T.cast(num_blocks, "int64") * block_size

    return valid, count


def _copy_body(name: str, H: int, Dh: int, dtype: str, index_dtype: str, block_size: int, k_strides, cache_strides, x_align: int, pair: bool, checked: bool, pdl: bool):
    _check_common(name, index_dtype, block_size, x_align)
    cfg = copy_config(H, Dh, dtype, k_strides, cache_strides, x_align)
    tpr, rows, steps, vec, hv = cfg.threads_per_row, cfg.rows_per_block, cfg.steps, cfg.vector_elems, cfg.head_vectors
    full, tail_lanes = divmod(cfg.row_vectors, tpr)
    valid, count = _slot_macros(block_size, checked)
    operands = 2 if pair else 1

    @T.macro
    def load_row(src, row, lane, buf):
        for s in T.unroll(full):
            for v in T.vectorized(vec):
                buf[s, v] = src[row, (lane + s * tpr) // hv, ((lane + s * tpr) % hv) * vec + v]
        if tail_lanes:
            if lane < tail_lanes:
                for v in T.vectorized(vec):
                    buf[full, v] = src[row, (lane + full * tpr) // hv, ((lane + full * tpr) % hv) * vec + v]

    @T.macro
    def store_row(dst, block, off, lane, buf):
        for s in T.unroll(full):
            for v in T.vectorized(vec):
                dst[block, off, (lane + s * tpr) // hv, ((lane + s * tpr) % hv) * vec + v] = buf[s, v]
        if tail_lanes:
            if lane < tail_lanes:
                for v in T.vectorized(vec):
                    dst[block, off, (lane + full * tpr) // hv, ((lane + full * tpr) % hv) * vec + v] = buf[full, v]

    @T.macro
    def body(k, v, slot_mapping, k_cache, v_cache, out_of_range, t, num_blocks):
        with T.Kernel(T.ceildiv(t, rows), threads=cfg.threads) as bx:
            dependent_entry(pdl)
            tx = T.get_thread_binding(0)
            lane = tx % tpr
            # 64-bit row ids and slots make every offset below 64-bit.
            row = T.cast(bx * rows + tx // tpr, "int64")
            kbuf = T.alloc_local((steps, vec), dtype)
            vbuf = T.alloc_local((steps, vec), dtype)
            slot = T.alloc_local((1,), "int64")  # read once into a register
            if row < t:
                slot[0] = T.cast(slot_mapping[row], "int64")
                # The row's loads (K and V) go out with its slot's, not after it: one round trip
                # before the stores instead of two. A row whose slot is skipped reads for nothing.
                load_row(k, row, lane, kbuf)
                if pair:
                    load_row(v, row, lane, vbuf)
                if valid(slot[0], num_blocks):
                    block = slot[0] // block_size
                    off = slot[0] % block_size
                    store_row(k_cache, block, off, lane, kbuf)
                    if pair:
                        store_row(v_cache, block, off, lane, vbuf)
                count(slot[0], num_blocks, lane, out_of_range)

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


@tilelang.jit
def store_kv_tl(H: int, Dh: int, dtype: str, index_dtype: str, block_size: int, k_strides: tuple, cache_strides: tuple, *, x_align: int = 16, pdl: bool = False):
    """Compiled kernel(k, slot_mapping, k_cache): k_cache[slot // block_size, slot % block_size] = k."""
    body = _copy_body("store_kv", H, Dh, dtype, index_dtype, block_size, k_strides, cache_strides, x_align, False, False, pdl)
    t, num_blocks, src, dst, slots = _copy_params(H, Dh, dtype, index_dtype, block_size, k_strides, cache_strides)

    @T.prim_func
    def store_kv(k: src(), slot_mapping: slots, k_cache: dst()):
        body(k, None, slot_mapping, k_cache, None, None, t, num_blocks)

    return store_kv


@tilelang.jit
def store_kv_checked_tl(H: int, Dh: int, dtype: str, index_dtype: str, block_size: int, k_strides: tuple, cache_strides: tuple, *, x_align: int = 16, pdl: bool = False):
    """Compiled kernel(k, slot_mapping, k_cache, out_of_range): store_kv_tl, counting slots past the cache."""
    body = _copy_body("store_kv_checked", H, Dh, dtype, index_dtype, block_size, k_strides, cache_strides, x_align, False, True, pdl)
    t, num_blocks, src, dst, slots = _copy_params(H, Dh, dtype, index_dtype, block_size, k_strides, cache_strides)

    @T.prim_func
    def store_kv_checked(k: src(), slot_mapping: slots, k_cache: dst(), out_of_range: T.Tensor((1,), "int32")):
        body(k, None, slot_mapping, k_cache, None, out_of_range, t, num_blocks)

    return store_kv_checked


@tilelang.jit
def store_kv_pair_tl(H: int, Dh: int, dtype: str, index_dtype: str, block_size: int, k_strides: tuple, cache_strides: tuple, *, x_align: int = 16, pdl: bool = False):
    """Compiled kernel(k, v, slot_mapping, k_cache, v_cache): K and V rows in one launch."""
    body = _copy_body("store_kv_pair", H, Dh, dtype, index_dtype, block_size, k_strides, cache_strides, x_align, True, False, pdl)
    t, num_blocks, src, dst, slots = _copy_params(H, Dh, dtype, index_dtype, block_size, k_strides, cache_strides)

    @T.prim_func
    def store_kv_pair(k: src(), v: src(), slot_mapping: slots, k_cache: dst(), v_cache: dst()):
        body(k, v, slot_mapping, k_cache, v_cache, None, t, num_blocks)

    return store_kv_pair


@tilelang.jit
def store_kv_pair_checked_tl(H: int, Dh: int, dtype: str, index_dtype: str, block_size: int, k_strides: tuple, cache_strides: tuple, *, x_align: int = 16, pdl: bool = False):
    """Compiled kernel(k, v, slot_mapping, k_cache, v_cache, out_of_range): store_kv_pair_tl, counting."""
    body = _copy_body("store_kv_pair_checked", H, Dh, dtype, index_dtype, block_size, k_strides, cache_strides, x_align, True, True, pdl)
    t, num_blocks, src, dst, slots = _copy_params(H, Dh, dtype, index_dtype, block_size, k_strides, cache_strides)

    @T.prim_func
    def store_kv_pair_checked(k: src(), v: src(), slot_mapping: slots, k_cache: dst(), v_cache: dst(), out_of_range: T.Tensor((1,), "int32")):
        body(k, v, slot_mapping, k_cache, v_cache, out_of_range, t, num_blocks)

    return store_kv_pair_checked


def _record_body(name: str, layout: RecordLayout, index_dtype: str, block_size: int, kv_stride: int, block_stride: int, x_align: int, checked: bool, pdl: bool):
    _check_common(name, index_dtype, block_size, x_align)
    rec = layout.record_bytes
    if kv_stride < WIDTH:
        raise ValueError(f"{name}: kv_stride {kv_stride} is smaller than the row width {WIDTH}")
    if block_stride < block_size * rec:
        raise ValueError(f"{name}: block_stride {block_stride} is smaller than a block of {block_size} x {rec} bytes")
    load_bytes, svec = record_vector_bytes(kv_stride, block_stride, layout, x_align)
    lvec = load_bytes // 2
    lanes = _RECORD_LANES
    n = LATENT // lanes  # latent values per lane
    if n > layout.group or n % lvec or layout.group // n > _WARP:
        raise ValueError(f"{name}: {lanes} lanes per token give {n} values a lane, which must divide the group ({layout.group}) and be whole loads of {lvec}, with a group's lanes in one warp")
    group_lanes = layout.group // n  # lanes sharing one scale: they reduce by xor shuffles
    rows = _BLOCK_THREADS // lanes
    fp4 = layout is FP4
    shuffles = int(math.log2(group_lanes))
    out_bytes = n // 2 if fp4 else n
    code_svec = math.gcd(svec, out_bytes)
    rope_vectors = ROPE // lvec
    rope_steps = -(-rope_vectors // lanes)
    rope_svec = math.gcd(svec, 2 * lvec)
    scale_svec = math.gcd(svec, layout.scale_bytes)
    valid, count = _slot_macros(block_size, checked)

    @T.macro
    def store_bytes(cache, block, off, first, src, nbytes, width):
        for i in T.unroll(nbytes // width):
            for v in T.vectorized(width):
                cache[block, off, first + i * width + v] = src[i * width + v]

    def code(pairs, q, h, m, below, pre):
        """e2m1_code_denormal (m, below) of element 2q + h, or of it times pre (not None)."""
        x = F.bf16_pair_value(pairs[q], h)
        return F.e2m1_code_denormal(x if pre is None else x * pre, m, below)

    @T.macro
    def encode_fp4(pairs, m, below, pre, words):
        """words = the lane's e2m1 codes of x (pre None) or x * pre (tl_formats.e2m1_code_denormal
        with m and below), 8 per word, element e in bits [4 (e % 8), 4 (e % 8) + 4) of word e // 8."""
        for w in T.unroll(n // 8):
            words[w] = T.uint32(0)
        for q in T.unroll(n // 2):
            words[q // 4] = words[q // 4] + F.e2m1_pair_bits(code(pairs, q, 0, m, below, pre), code(pairs, q, 1, m, below, pre), q)

    @T.macro
    def body(kv, slot_mapping, cache, out_of_range, t, num_blocks):
        with T.Kernel(T.ceildiv(t, rows), threads=_BLOCK_THREADS) as bx:
            dependent_entry(pdl)
            tx = T.get_thread_binding(0)
            lane = tx % lanes
            row = T.cast(bx * rows + tx // lanes, "int64")
            buf = T.alloc_local((n,), "bfloat16")
            rope = T.alloc_local((rope_steps, lvec), "bfloat16")
            words = T.alloc_local((out_bytes // 4,), "uint32")  # FP4: 8 e2m1 codes per word
            codes = T.view(words, (out_bytes,), "uint8")
            pairs = T.view(buf, (n // 2,), "uint32")
            rb = T.alloc_local((2 * lvec,), "uint8")
            sb = T.alloc_local((4,), "uint8")  # the group's scale as bytes (FP4: one byte)
            amax = T.alloc_local((1,), "float32")
            sc = T.alloc_local((3,), "float32")  # inv, e2m1_denormal_multiplier(inv), e2m1_sign_threshold
            slot = T.alloc_local((1,), "int64")
            amax[0] = T.float32(0)
            slot[0] = T.int64(-1)
            if row < t:
                slot[0] = T.cast(slot_mapping[row], "int64")
                # Every load of the row is issued with its slot's (one round trip, not two) and
                # before any arithmetic; a row whose slot is skipped reads and reduces for nothing
                # (its group's lanes are its own: nothing of it is stored).
                for i in T.unroll(n // lvec):
                    for v in T.vectorized(lvec):
                        buf[i * lvec + v] = kv[row, lane * n + i * lvec + v]
                for s in T.unroll(rope_steps):
                    if lane + s * lanes < rope_vectors:
                        for v in T.vectorized(lvec):
                            rope[s, v] = kv[row, LATENT + (lane + s * lanes) * lvec + v]
                for q in T.unroll(n // 2):
                    amax[0] = F.abs_max(F.abs_max(amax[0], F.bf16_pair_value(pairs[q], 0)), F.bf16_pair_value(pairs[q], 1))
            # A group spanning several lanes reduces by shuffles; every lane of the warp takes part
            # (rows past t hold 0).
            for i in T.unroll(shuffles):
                amax[0] = T.max(amax[0], T.shfl_xor(amax[0], 1 << i))
            if valid(slot[0], num_blocks):
                block = slot[0] // block_size
                off = slot[0] % block_size
                if fp4:
                    F.mx_fp4_scales(amax[0], sb, sc)
                    # Scales above 2**23 underflow the multiplier: two multiplies then.
                    if sc[1] != T.float32(0) or sc[0] == T.float32(0):
                        encode_fp4(pairs, sc[1], sc[2], None, words)
                    else:
                        encode_fp4(pairs, T.float32(2.0**-126), T.float32(-0.0), sc[0], words)
                    if lane % group_lanes == 0:
                        cache[block, off, layout.scale_offset + lane // group_lanes] = sb[0]
                else:
                    amax[0] = F.group_scale(amax[0], E4M3_MAX, True)
                    sc[0] = F.scale_reciprocal(amax[0], True)
                    for e in T.unroll(n):
                        codes[e] = T.reinterpret(F.e4m3(T.cast(buf[e], "float32") * sc[0]), "uint8")
                    if lane % group_lanes == 0:
                        for b in T.unroll(4):
                            sb[b] = T.cast((T.reinterpret(amax[0], "uint32") >> T.uint32(8 * b)) & T.uint32(0xFF), "uint8")
                        store_bytes(cache, block, off, layout.scale_offset + (lane // group_lanes) * 4, sb, 4, scale_svec)
                store_bytes(cache, block, off, lane * out_bytes, codes, out_bytes, code_svec)
                for s in T.unroll(rope_steps):
                    if lane + s * lanes < rope_vectors:
                        # bf16 bits, little-endian, as the record's bytes.
                        for e in T.unroll(lvec):
                            rb[2 * e] = T.cast(T.reinterpret(rope[s, e], "uint16") & T.uint16(0xFF), "uint8")
                            rb[2 * e + 1] = T.cast(T.reinterpret(rope[s, e], "uint16") >> T.uint16(8), "uint8")
                        store_bytes(cache, block, off, layout.rope_offset + (lane + s * lanes) * 2 * lvec, rb, 2 * lvec, rope_svec)
            count(slot[0], num_blocks, lane, out_of_range)

    return body


def _record_params(layout: RecordLayout, index_dtype: str, block_size: int, kv_stride: int, block_stride: int):
    t = T.dynamic("t")
    num_blocks = T.dynamic("num_blocks")
    kv = T.StridedTensor((t, WIDTH), (kv_stride, 1), "bfloat16")
    cache = T.StridedTensor((num_blocks, block_size, layout.record_bytes), (block_stride, layout.record_bytes, 1), "uint8")
    return t, num_blocks, kv, T.Tensor((t,), index_dtype), cache


@tilelang.jit
def store_kv_fp4_tl(index_dtype: str, block_size: int, kv_stride: int, block_stride: int, *, x_align: int = 16, pdl: bool = False):
    """Compiled kernel(kv, slot_mapping, cache): 576-wide bf16 rows -> FP4 records (layout.FP4)."""
    body = _record_body("store_kv_fp4", FP4, index_dtype, block_size, kv_stride, block_stride, x_align, False, pdl)
    t, num_blocks, kv_t, slots, cache_t = _record_params(FP4, index_dtype, block_size, kv_stride, block_stride)

    @T.prim_func
    def store_kv_fp4(kv: kv_t, slot_mapping: slots, cache: cache_t):
        body(kv, slot_mapping, cache, None, t, num_blocks)

    return store_kv_fp4


@tilelang.jit
def store_kv_fp4_checked_tl(index_dtype: str, block_size: int, kv_stride: int, block_stride: int, *, x_align: int = 16, pdl: bool = False):
    """Compiled kernel(kv, slot_mapping, cache, out_of_range): store_kv_fp4_tl, counting slots past the cache."""
    body = _record_body("store_kv_fp4_checked", FP4, index_dtype, block_size, kv_stride, block_stride, x_align, True, pdl)
    t, num_blocks, kv_t, slots, cache_t = _record_params(FP4, index_dtype, block_size, kv_stride, block_stride)

    @T.prim_func
    def store_kv_fp4_checked(kv: kv_t, slot_mapping: slots, cache: cache_t, out_of_range: T.Tensor((1,), "int32")):
        body(kv, slot_mapping, cache, out_of_range, t, num_blocks)

    return store_kv_fp4_checked


@tilelang.jit
def store_kv_fp8_tl(index_dtype: str, block_size: int, kv_stride: int, block_stride: int, *, x_align: int = 16, pdl: bool = False):
    """Compiled kernel(kv, slot_mapping, cache): 576-wide bf16 rows -> FP8 records (layout.FP8)."""
    body = _record_body("store_kv_fp8", FP8, index_dtype, block_size, kv_stride, block_stride, x_align, False, pdl)
    t, num_blocks, kv_t, slots, cache_t = _record_params(FP8, index_dtype, block_size, kv_stride, block_stride)

    @T.prim_func
    def store_kv_fp8(kv: kv_t, slot_mapping: slots, cache: cache_t):
        body(kv, slot_mapping, cache, None, t, num_blocks)

    return store_kv_fp8


@tilelang.jit
def store_kv_fp8_checked_tl(index_dtype: str, block_size: int, kv_stride: int, block_stride: int, *, x_align: int = 16, pdl: bool = False):
    """Compiled kernel(kv, slot_mapping, cache, out_of_range): store_kv_fp8_tl, counting slots past the cache."""
    body = _record_body("store_kv_fp8_checked", FP8, index_dtype, block_size, kv_stride, block_stride, x_align, True, pdl)
    t, num_blocks, kv_t, slots, cache_t = _record_params(FP8, index_dtype, block_size, kv_stride, block_stride)

    @T.prim_func
    def store_kv_fp8_checked(kv: kv_t, slot_mapping: slots, cache: cache_t, out_of_range: T.Tensor((1,), "int32")):
        body(kv, slot_mapping, cache, out_of_range, t, num_blocks)

    return store_kv_fp8_checked
