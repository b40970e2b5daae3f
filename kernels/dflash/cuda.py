"""NVIDIA TileLang implementation of `dflash`: the confidence head of a block drafter.

    k = dflash_tl(H, He, h_stride, prev_dtype, draft_dtype, cu_dtype, h_align=16, e_align=16)
    k(hidden, prev_tokens, embedding, w_h, w_e, bias, threshold, draft_tokens, cu_draft_lens,
      confidence, proposal_len, expected_len, tokens)

hidden          (N, H) bfloat16, row stride `h_stride` >= H elements, last dimension contiguous, base
                pointer aligned to `h_align` bytes.
prev_tokens     (N,) of `prev_dtype`; draft_tokens and tokens (N,) of `draft_dtype` (int32 or int64).
embedding       (V, He) bfloat16, contiguous, base pointer aligned to `e_align` bytes.
w_h (H,), w_e (He,), bias (1,), threshold (1,): float32. cu_draft_lens (>= B + 1,) of `cu_dtype`.
confidence      (N,) float32; proposal_len (B,) int32; expected_len (B,) float32. All contiguous.

Semantics are `kernels.dflash.ref` (the contract): the confidences to within fp32 rounding (each
thread accumulates its vectors of both dot products in one fp32 register, then a warp butterfly and
the warps' partial sums in a fixed order: deterministic), and the derived outputs bit for bit from
those confidences (the in-order products and sums use IEEE round-to-nearest intrinsics, so nvcc
cannot fuse them into an FMA). N, B and V are dynamic (N, B >= 1: the interface launches nothing
otherwise) and the threshold is read from its tensor; the hidden row stride is compiled in (vector
loads need it to divide the row offsets).

One launch of B + 1 blocks of 128 threads. Block b < B owns request b: it walks the request's
positions in order, each a block-wide dot product over H + He elements (16-byte loads when the
strides and alignments allow), thread 0 applying the confidence to the running proposal length,
product and expected length; then the block writes the request's tokens (coalesced). Block B owns
the padding rows (before cu[0] and from cu[B] on; none for a consistent table): their confidence,
and -1 tokens. No atomics, no global workspace; every output element has one writer.
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import tilelang
import tilelang.language as T

from kernels.dflash.ref import BACKEND_INDEX_DTYPES as INDEX_DTYPES
from kernels.dflash.ref import check_config, dflash_shipped_configs, vector_elems

__all__ = ["INDEX_DTYPES", "dflash_shipped_configs", "dflash_tl"]

_THREADS = 128
_WARP = 32
_WARPS = _THREADS // _WARP


@tilelang.jit
def dflash_tl(
    H: int,
    He: int,
    h_stride: int,
    prev_dtype: str,
    draft_dtype: str,
    cu_dtype: str,
    *,
    h_align: int = 16,
    e_align: int = 16,
):
    """Compiled kernel(hidden, prev_tokens, embedding, w_h, w_e, bias, threshold, draft_tokens,
    cu_draft_lens, confidence, proposal_len, expected_len, tokens) (memoised)."""
    check_config("dflash", H, He, h_stride, h_align, e_align, prev_dtype=prev_dtype, draft_dtype=draft_dtype, cu_dtype=cu_dtype)
    # Elements per load and loads per row: thread tx takes vectors tx, tx + 128, ... of each row.
    h_vec, e_vec = vector_elems(H, h_stride, h_align), vector_elems(He, He, e_align)
    h_vectors, e_vectors = H // h_vec, He // e_vec
    h_steps, e_steps = T.ceildiv(h_vectors, _THREADS), T.ceildiv(e_vectors, _THREADS)
    N, B, V, C = T.dynamic("N"), T.dynamic("B"), T.dynamic("V"), T.dynamic("C")

    @T.macro
    def confidence_at(row, hidden, prev_tokens, embedding, w_h, w_e, bias, confidence, hbuf, ebuf, part, red, c, tx):
        """c[0] (thread 0) = confidence[row] = the row's confidence; every thread must call it."""
        tok = T.cast(prev_tokens[row], "int64")
        part[0] = T.float32(0)
        for k in T.unroll(h_steps):
            if k * _THREADS + tx < h_vectors:
                for j in T.vectorized(h_vec):
                    hbuf[j] = hidden[row, (k * _THREADS + tx) * h_vec + j]
                for j in T.unroll(h_vec):
                    part[0] += w_h[(k * _THREADS + tx) * h_vec + j] * T.cast(hbuf[j], "float32")
        # An out-of-range prev_token reads nothing; its confidence is 0 below.
        if tok >= 0 and tok < T.cast(V, "int64"):
            for k in T.unroll(e_steps):
                if k * _THREADS + tx < e_vectors:
                    for j in T.vectorized(e_vec):
                        ebuf[j] = embedding[tok, (k * _THREADS + tx) * e_vec + j]
                    for j in T.unroll(e_vec):
                        part[0] += w_e[(k * _THREADS + tx) * e_vec + j] * T.cast(ebuf[j], "float32")
        for i in T.unroll(5):
            part[0] += T.shfl_xor(part[0], 1 << i)
        if tx % _WARP == 0:
            red[tx // _WARP] = part[0]
        T.sync_threads()
        if tx == 0:
            part[0] = bias[0]
            for w in T.unroll(_WARPS):
                part[0] += red[w]
            c[0] = T.float32(0)
            if tok >= 0 and tok < T.cast(V, "int64") and not T.isnan(part[0]):
                c[0] = T.float32(1) / (T.float32(1) + T.exp(-part[0]))
            confidence[row] = c[0]
        # `red` is written again by the next position only after thread 0 has read it.
        T.sync_threads()

    @T.prim_func
    def dflash(
        hidden: T.StridedTensor((N, H), (h_stride, 1), "bfloat16"),
        prev_tokens: T.Tensor((N,), prev_dtype),
        embedding: T.Tensor((V, He), "bfloat16"),
        w_h: T.Tensor((H,), "float32"),
        w_e: T.Tensor((He,), "float32"),
        bias: T.Tensor((1,), "float32"),
        threshold: T.Tensor((1,), "float32"),
        draft_tokens: T.Tensor((N,), draft_dtype),
        cu_draft_lens: T.Tensor((C,), cu_dtype),
        confidence: T.Tensor((N,), "float32"),
        proposal_len: T.Tensor((B,), "int32"),
        expected_len: T.Tensor((B,), "float32"),
        tokens: T.Tensor((N,), draft_dtype),
    ):
        with T.Kernel(B + 1, threads=_THREADS) as b:
            tx = T.get_thread_binding(0)
            hbuf = T.alloc_local((h_vec,), "bfloat16")
            ebuf = T.alloc_local((e_vec,), "bfloat16")
            part = T.alloc_local((1,), "float32")
            c = T.alloc_local((1,), "float32")
            prod = T.alloc_local((1,), "float32")
            acc = T.alloc_local((1,), "float32")
            alive = T.alloc_local((1,), "int32")
            plen = T.alloc_local((1,), "int32")
            thr = T.alloc_local((1,), "float32")
            row = T.alloc_local((1,), "int64")
            red = T.alloc_shared((_WARPS,), "float32")
            plen_s = T.alloc_shared((1,), "int32")
            n64 = T.cast(N, "int64")
            if b < B:
                # Rows [lo, hi) of the request, clamped into [0, N] (ref.request_bounds).
                lo = T.min(T.max(T.cast(cu_draft_lens[b], "int64"), 0), n64)
                hi = T.max(T.min(T.max(T.cast(cu_draft_lens[b + 1], "int64"), 0), n64), lo)
                thr[0] = threshold[0]
                prod[0] = T.float32(1)
                acc[0] = T.float32(0)
                alive[0] = 1
                plen[0] = T.cast(hi - lo, "int32")
                for t in T.serial(T.cast(hi - lo, "int32")):
                    confidence_at(lo + t, hidden, prev_tokens, embedding, w_h, w_e, bias, confidence, hbuf, ebuf, part, red, c, tx)
                    if tx == 0 and alive[0] != 0:
                        if c[0] < thr[0] or c[0] == T.float32(0):
                            plen[0] = t
                            alive[0] = 0
                        else:
                            prod[0] = T.ieee_mul(prod[0], c[0])
                            acc[0] = T.ieee_add(acc[0], prod[0])
                if tx == 0:
                    proposal_len[b] = plen[0]
                    expected_len[b] = acc[0]
                    plen_s[0] = plen[0]
                T.sync_threads()
                for i in T.serial(T.ceildiv(T.cast(hi - lo, "int32"), _THREADS)):
                    if i * _THREADS + tx < hi - lo:
                        if i * _THREADS + tx < plen_s[0]:
                            tokens[lo + i * _THREADS + tx] = draft_tokens[lo + i * _THREADS + tx]
                        else:
                            tokens[lo + i * _THREADS + tx] = T.cast(-1, draft_dtype)
            else:
                # Padding rows: [0, first) and [last, N), first = lo_0, last = hi_{B-1}.
                first = T.min(T.max(T.cast(cu_draft_lens[0], "int64"), 0), n64)
                last = T.max(T.min(T.max(T.cast(cu_draft_lens[B], "int64"), 0), n64), T.min(T.max(T.cast(cu_draft_lens[B - 1], "int64"), 0), n64))
                for p in T.serial(T.cast(first + n64 - last, "int32")):
                    row[0] = T.if_then_else(p < first, T.cast(p, "int64"), last + (p - first))
                    confidence_at(row[0], hidden, prev_tokens, embedding, w_h, w_e, bias, confidence, hbuf, ebuf, part, red, c, tx)
                    if tx == 0:
                        tokens[row[0]] = T.cast(-1, draft_dtype)

    return dflash
