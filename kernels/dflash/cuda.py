"""NVIDIA TileLang implementation of `dflash`: the confidence head of a block drafter, in two launches.

    k = dflash_confidence_tl(H, He, h_stride, prev_dtype, h_align=16, e_align=16, w_align=16, pdl=False)
    k(hidden, prev_tokens, embedding, w_h, w_e, bias, confidence)

    k = dflash_derive_tl(draft_dtype, cu_dtype, pdl=False)
    k(confidence, threshold, draft_tokens, cu_draft_lens, proposal_len, expected_len, tokens)

hidden          (N, H) bfloat16, row stride `h_stride` >= H elements, last dimension contiguous, base
                pointer aligned to `h_align` bytes.
prev_tokens     (N,) of `prev_dtype`; draft_tokens and tokens (N,) of `draft_dtype` (int32 or int64).
embedding       (V, He) bfloat16, contiguous, base pointer aligned to `e_align` bytes.
w_h (H,), w_e (He,): float32, both base pointers aligned to `w_align` bytes. bias (1,), threshold
                (1,): float32. cu_draft_lens (>= B + 1,) of `cu_dtype`.
confidence      (N,) float32; proposal_len (B,) int32; expected_len (B,) float32. All contiguous.

Semantics are `kernels.dflash.ref` (the contract); the interface launches the confidence kernel,
then the derive kernel on the same stream, on sm_90+ as its programmatic dependent (`pdl=True` on
both: the derive grid starts during the confidence grid's tail and waits on the device for its end
before reading a confidence; TileLang lowers PDL for sm_90 and later only).

dflash_confidence_tl: one block of 256 threads per row (grid N), every row at once, padding rows
included. Thread tx takes vectors tx, tx + 256, ... of the hidden row and of the embedding row of
prev_tokens[row] (16 bytes when the strides and alignments allow) with the matching weights (fp32
vectors of up to 16 bytes as `w_align` allows), and issues its loads before any arithmetic: the
hidden row's with prev_tokens[row], then the embedding row's once the token is known. A row costs
those two dependent rounds of memory latency, and all rows overlap, where the one-launch kernel
this replaces took them for each position of a request in turn. The thread accumulates its hidden
terms, then its embedding terms, in one fp32 register; a warp butterfly and the warps' partial sums
added in a fixed order by thread 0 (after the bias) make the logit: deterministic, and the
confidences equal the reference's to within fp32 rounding. An out-of-range prev_token reads no
embedding row; it and a NaN logit give confidence 0.

dflash_derive_tl: one block of 128 threads per request plus one (grid B + 1). Block b < B stages
its request's confidences in shared memory 128 at a time (each thread also loads its position's
draft token); thread 0 applies them in order to the running proposal length, product and expected
length, with IEEE round-to-nearest intrinsics so nvcc cannot fuse the product and sum into an FMA:
the derived outputs are the reference's derivation of the confidences bit for bit. The threads then
write their positions' tokens, -1 past the proposal. Block B writes -1 to the padding rows (before
cu[0], from cu[B] on; none for a consistent table). No atomics, no global workspace; every output
element has one writer.

N, B and V are dynamic (N, B >= 1: the interface launches nothing otherwise) and the threshold is
read from its tensor; the hidden row stride is compiled in (vector loads need it to divide the row
offsets). Row offsets are 64-bit.
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import math

import tilelang
import tilelang.language as T

from kernels.dflash.ref import BACKEND_INDEX_DTYPES as INDEX_DTYPES
from kernels.dflash.ref import check_config, check_index_dtypes, vector_elems

__all__ = ["INDEX_DTYPES", "confidence_shipped_configs", "derive_shipped_configs", "dflash_confidence_tl", "dflash_derive_tl"]

_WARP = 32
# Threads of a row: a 7168-wide bf16 row is 896 16-byte vectors, at most 4 per thread of each
# operand (8 at the widest, 16384), few enough for registers (ptxas: 68, and 111 at 16384).
_ROW_THREADS = 256
_ROW_WARPS = _ROW_THREADS // _WARP
# Confidences a derive block stages in shared memory at once (one per thread): a decode draft's
# whole request.
_DERIVE_THREADS = 128


def confidence_shipped_configs() -> list[tuple[int, int, int, str, int, int, int]]:
    """(H, He, h_stride, prev_dtype, h_align, e_align, w_align): the widest rows (the most loads a
    thread holds), the DeepSeek-V3 and a 4096 model width with 16-byte vectors, an odd small head
    (576, 320) with strided hidden rows, with 4- and 8-byte vectors and with 2-byte ones (misaligned
    base pointers), and weights aligned to 16, 8 and 4 bytes; both prev_tokens dtypes."""
    return [
        (16384, 16384, 16384, "int64", 16, 16, 16),
        (7168, 7168, 7168, "int32", 16, 16, 16),
        (7168, 7168, 7168, "int64", 16, 16, 8),
        (4096, 4096, 4096, "int64", 16, 16, 16),
        (576, 320, 640, "int64", 16, 16, 16),
        (576, 320, 576, "int32", 4, 8, 16),
        (576, 320, 576, "int32", 2, 2, 4),
    ]


def derive_shipped_configs() -> list[tuple[str, str]]:
    """(draft_dtype, cu_dtype): every pair of index dtypes."""
    return [(d, c) for d in INDEX_DTYPES for c in INDEX_DTYPES]


def weight_elems(vec: int, w_align: int) -> int:
    """fp32 weight elements per load beside a `vec`-element bf16 vector: its 4 * vec bytes of weights
    in 16-byte loads at most, narrower when w_align is (an fp32 tensor is at least 4-byte aligned)."""
    return max(1, math.gcd(4 * vec, w_align, 16) // 4)


def _operand(vectors: int, vec: int, w_vec: int):
    """(load, dot) macros of one operand (the hidden row or the embedding row) of `vectors` vectors
    of `vec` elements: vector tx + s * 256 is step s of thread tx. The first `full` steps need no
    bounds check; when the vectors do not fill the last step, only its first `tail` threads take it."""
    full, tail = divmod(vectors, _ROW_THREADS)

    @T.macro
    def load_step(src, src_row, w, buf, wbuf, s, tx):
        for j in T.vectorized(vec):
            buf[s, j] = src[src_row, (s * _ROW_THREADS + tx) * vec + j]
        for k in T.unroll(vec // w_vec):
            for j in T.vectorized(w_vec):
                wbuf[s, k * w_vec + j] = w[(s * _ROW_THREADS + tx) * vec + k * w_vec + j]

    @T.macro
    def load(src, src_row, w, buf, wbuf, tx):
        for s in T.unroll(full):
            load_step(src, src_row, w, buf, wbuf, s, tx)
        if tail:
            if tx < tail:
                load_step(src, src_row, w, buf, wbuf, full, tx)

    @T.macro
    def dot_step(buf, wbuf, part, s):
        for j in T.unroll(vec):
            part[0] += wbuf[s, j] * T.cast(buf[s, j], "float32")

    @T.macro
    def dot(buf, wbuf, part, tx):
        """part += this thread's terms, in step and element order."""
        for s in T.unroll(full):
            dot_step(buf, wbuf, part, s)
        if tail:
            if tx < tail:
                dot_step(buf, wbuf, part, full)

    return load, dot


@tilelang.jit
def dflash_confidence_tl(
    H: int,
    He: int,
    h_stride: int,
    prev_dtype: str,
    *,
    h_align: int = 16,
    e_align: int = 16,
    w_align: int = 16,
    pdl: bool = False,
):
    """Compiled kernel(hidden, prev_tokens, embedding, w_h, w_e, bias, confidence) (memoised). pdl:
    the next launch, dflash_derive_tl(pdl=True), may start while this grid runs (sm_90+)."""
    check_config("dflash", H, He, h_stride, h_align, e_align, w_align=w_align, prev_dtype=prev_dtype)
    h_vec, e_vec = vector_elems(H, h_stride, h_align), vector_elems(He, He, e_align)
    h_steps, e_steps = T.ceildiv(H // h_vec, _ROW_THREADS), T.ceildiv(He // e_vec, _ROW_THREADS)
    load_h, dot_h = _operand(H // h_vec, h_vec, weight_elems(h_vec, w_align))
    load_e, dot_e = _operand(He // e_vec, e_vec, weight_elems(e_vec, w_align))
    N, V = T.dynamic("N"), T.dynamic("V")

    @T.prim_func
    def dflash_confidence(
        hidden: T.StridedTensor((N, H), (h_stride, 1), "bfloat16"),
        prev_tokens: T.Tensor((N,), prev_dtype),
        embedding: T.Tensor((V, He), "bfloat16"),
        w_h: T.Tensor((H,), "float32"),
        w_e: T.Tensor((He,), "float32"),
        bias: T.Tensor((1,), "float32"),
        confidence: T.Tensor((N,), "float32"),
    ):
        with T.Kernel(N, threads=_ROW_THREADS) as bx:
            if pdl:
                # Once every block has started, the derive grid's blocks may take the slots this
                # grid's tail frees; they read no confidence before this grid has ended.
                T.pdl_trigger()
            tx = T.get_thread_binding(0)
            h = T.alloc_local((h_steps, h_vec), "bfloat16")
            wh = T.alloc_local((h_steps, h_vec), "float32")
            e = T.alloc_local((e_steps, e_vec), "bfloat16")
            we = T.alloc_local((e_steps, e_vec), "float32")
            part = T.alloc_local((1,), "float32")
            c = T.alloc_local((1,), "float32")
            red = T.alloc_shared((_ROW_WARPS,), "float32")
            row = T.cast(bx, "int64")
            tok = T.cast(prev_tokens[row], "int64")
            # An out-of-range prev_token reads nothing; its confidence is 0 below.
            in_vocab = tok >= 0 and tok < T.cast(V, "int64")
            load_h(hidden, row, w_h, h, wh, tx)
            if in_vocab:
                load_e(embedding, tok, w_e, e, we, tx)
            part[0] = T.float32(0)
            dot_h(h, wh, part, tx)
            if in_vocab:
                dot_e(e, we, part, tx)
            for i in T.unroll(5):
                part[0] += T.shfl_xor(part[0], 1 << i)
            if tx % _WARP == 0:
                red[tx // _WARP] = part[0]
            T.sync_threads()
            if tx == 0:
                part[0] = bias[0]
                for w in T.unroll(_ROW_WARPS):
                    part[0] += red[w]
                c[0] = T.float32(0)
                if in_vocab and not T.isnan(part[0]):
                    c[0] = T.float32(1) / (T.float32(1) + T.exp(-part[0]))
                confidence[row] = c[0]

    return dflash_confidence


@tilelang.jit
def dflash_derive_tl(draft_dtype: str, cu_dtype: str, *, pdl: bool = False):
    """Compiled kernel(confidence, threshold, draft_tokens, cu_draft_lens, proposal_len,
    expected_len, tokens) (memoised). pdl: launched as a programmatic dependent of
    dflash_confidence_tl(pdl=True): a block reads its request's bounds and the threshold while that
    grid may still run, and the confidences only after it has ended (sm_90+)."""
    check_index_dtypes("dflash", draft_dtype=draft_dtype, cu_dtype=cu_dtype)
    N, B, C = T.dynamic("N"), T.dynamic("B"), T.dynamic("C")

    @T.prim_func
    def dflash_derive(
        confidence: T.Tensor((N,), "float32"),
        threshold: T.Tensor((1,), "float32"),
        draft_tokens: T.Tensor((N,), draft_dtype),
        cu_draft_lens: T.Tensor((C,), cu_dtype),
        proposal_len: T.Tensor((B,), "int32"),
        expected_len: T.Tensor((B,), "float32"),
        tokens: T.Tensor((N,), draft_dtype),
    ):
        with T.Kernel(B + 1, threads=_DERIVE_THREADS) as b:
            tx = T.get_thread_binding(0)
            draft = T.alloc_local((1,), draft_dtype)
            c = T.alloc_local((1,), "float32")
            prod = T.alloc_local((1,), "float32")
            acc = T.alloc_local((1,), "float32")
            alive = T.alloc_local((1,), "int32")
            plen = T.alloc_local((1,), "int32")
            thr = T.alloc_local((1,), "float32")
            conf_s = T.alloc_shared((_DERIVE_THREADS,), "float32")
            plen_s = T.alloc_shared((1,), "int32")
            n64 = T.cast(N, "int64")
            if b < B:
                # Rows [lo, hi) of the request, clamped into [0, N] (ref.request_bounds).
                lo = T.min(T.max(T.cast(cu_draft_lens[b], "int64"), 0), n64)
                hi = T.max(T.min(T.max(T.cast(cu_draft_lens[b + 1], "int64"), 0), n64), lo)
                length = T.cast(hi - lo, "int32")
                if tx == 0:
                    thr[0] = threshold[0]
                    prod[0] = T.float32(1)
                    acc[0] = T.float32(0)
                    alive[0] = 1
                    plen[0] = length
                if pdl:
                    T.pdl_sync()
                for i in T.serial(T.ceildiv(length, _DERIVE_THREADS)):
                    t = i * _DERIVE_THREADS + tx
                    if t < length:
                        conf_s[tx] = confidence[lo + t]
                        draft[0] = draft_tokens[lo + t]
                    T.sync_threads()
                    if tx == 0:
                        for k in T.serial(T.min(length - i * _DERIVE_THREADS, _DERIVE_THREADS)):
                            c[0] = conf_s[k]
                            if alive[0] != 0:
                                if c[0] < thr[0] or c[0] == T.float32(0):
                                    plen[0] = i * _DERIVE_THREADS + k
                                    alive[0] = 0
                                else:
                                    prod[0] = T.ieee_mul(prod[0], c[0])
                                    acc[0] = T.ieee_add(acc[0], prod[0])
                        plen_s[0] = plen[0]
                    # Also keeps conf_s until thread 0 has read it: the next chunk overwrites it.
                    T.sync_threads()
                    # plen_s is the proposal's end if it ended by this chunk's last position, else
                    # the request's length: either way it decides every position of the chunk.
                    if t < length:
                        tokens[lo + t] = T.if_then_else(t < plen_s[0], draft[0], T.cast(-1, draft_dtype))
                if tx == 0:
                    proposal_len[b] = plen[0]
                    expected_len[b] = acc[0]
            else:
                # Padding rows: [0, first) and [last, N), first = lo_0, last = hi_{B-1}.
                first = T.min(T.max(T.cast(cu_draft_lens[0], "int64"), 0), n64)
                last = T.max(T.min(T.max(T.cast(cu_draft_lens[B], "int64"), 0), n64), T.min(T.max(T.cast(cu_draft_lens[B - 1], "int64"), 0), n64))
                count = first + n64 - last
                for i in T.serial(T.ceildiv(count, _DERIVE_THREADS)):
                    p = i * _DERIVE_THREADS + tx
                    if p < count:
                        tokens[T.if_then_else(p < first, p, last + (p - first))] = T.cast(-1, draft_dtype)

    return dflash_derive
