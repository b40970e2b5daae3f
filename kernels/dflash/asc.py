"""Huawei Ascend 950 TileLang implementation of `dflash`: the confidence head of a block drafter.
Verified by lowering to AscendC only (codegen_ascend suite: every configuration lowers and its
Unified Buffer footprint fits); no NPU has run it.

    k = dflash_tl(H, He, h_stride, prev_dtype, draft_dtype, cu_dtype, h_align=16, e_align=16)
    k(hidden, prev_tokens, embedding, w_h, w_e, bias, threshold, draft_tokens, cu_draft_lens,
      confidence, proposal_len, expected_len, tokens)

Arguments, dtypes and layouts are those of the CUDA kernels (kernels/dflash/cuda.py), which split
this launch in two (the confidences pass from the first to the second through `confidence`);
semantics are those of `kernels.dflash.ref` (the contract): confidences to within fp32 rounding (a
fixed reduction order: deterministic), the derived outputs exactly from them (one float32 multiply,
then one add, per kept position, in order). `h_align` and `e_align` are accepted for signature
parity and ignored: the global-memory side of an Ascend DMA is byte-granular.

Where the work runs: one persistent block per vector core over B + 1 jobs. Job b < B is request b:
per position in order, MTE2 brings the hidden row, the prev_token and (when it is in range) the
embedding row into the UB; a SIMT region of 256 threads forms strided partial dot products against
the weights (loaded once per core, with the bias and the threshold), a second region sums the 256
partials in order on thread 0, applies the bias and sigmoid and updates the request's running
proposal length, product and expected length (UB cells); MTE3 stores the confidence. Then the
request's tokens go through the UB in tiles of 1024, positions past the proposal set to -1. Job B
does the padding rows (before cu[0], from cu[B] on): their confidence and -1 tokens. The cores
never need each other's data.

UB budget: the fp32 weights (4 (H + He) bytes), one bf16 hidden and one embedding row
(2 (H + He) bytes), 1 KiB of partials, a 1024-token tile (4 KiB, 8 KiB for int64 draft_tokens) and
nine 8-element cells (32 bytes each, 64 for int64 prev_tokens or cu_draft_lens): at H = He = 7168,
84 + 1 + 8 KiB + 352 bytes = 93.34 KiB when all three index dtypes are int64, 89.28 KiB when all
are int32 (testing/codegen_ascend.py measures it).
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import tilelang
import tilelang.ascend.language as T

from kernels.dflash.ref import BACKEND_INDEX_DTYPES as INDEX_DTYPES
from kernels.dflash.ref import check_config, dflash_shipped_configs

__all__ = ["INDEX_DTYPES", "dflash_shipped_configs", "dflash_tl"]

# One persistent block per vector core, the count TileLang's Ascend 950 vector examples launch.
_VECTOR_CORES = 64
_SIMT_THREADS = 256
# Tokens per UB tile of the truncation pass.
_TILE = 1024
# The smallest UB allocation a DMA may target: 32 bytes.
_CELL = 8


def _round_up(v: int, to: int) -> int:
    return -(-v // to) * to


@tilelang.jit(target="ascend")
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
    """Ascend kernel(hidden, prev_tokens, embedding, w_h, w_e, bias, threshold, draft_tokens,
    cu_draft_lens, confidence, proposal_len, expected_len, tokens) (memoised)."""
    check_config("dflash", H, He, h_stride, h_align, e_align, prev_dtype=prev_dtype, draft_dtype=draft_dtype, cu_dtype=cu_dtype)
    # UB rows padded to 32 bytes (16 bf16 elements).
    h_pad, e_pad = _round_up(H, 16), _round_up(He, 16)
    N, B, V, C = T.dynamic("N"), T.dynamic("B"), T.dynamic("V"), T.dynamic("C")

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
        with T.Kernel(_VECTOR_CORES) as core:
            wh_ub = T.alloc_shared((h_pad,), "float32")
            we_ub = T.alloc_shared((e_pad,), "float32")
            h_ub = T.alloc_shared((h_pad,), "bfloat16")
            e_ub = T.alloc_shared((e_pad,), "bfloat16")
            part_ub = T.alloc_shared((_SIMT_THREADS,), "float32")
            bias_ub = T.alloc_shared((_CELL,), "float32")
            thr_ub = T.alloc_shared((_CELL,), "float32")
            conf_ub = T.alloc_shared((_CELL,), "float32")
            prod_ub = T.alloc_shared((_CELL,), "float32")
            acc_ub = T.alloc_shared((_CELL,), "float32")
            plen_ub = T.alloc_shared((_CELL,), "int32")
            alive_ub = T.alloc_shared((_CELL,), "int32")
            tok_ub = T.alloc_shared((_CELL,), prev_dtype)
            cu_ub = T.alloc_shared((_CELL,), cu_dtype)
            out_ub = T.alloc_shared((_TILE,), draft_dtype)
            row = T.alloc_var("int64")
            lo = T.alloc_var("int64")
            hi = T.alloc_var("int64")
            T.copy(w_h[0:H], wh_ub[:H])
            T.copy(w_e[0:He], we_ub[:He])
            T.copy(bias[0:1], bias_ub[0:1])
            T.copy(threshold[0:1], thr_ub[0:1])
            for job in T.Persistent([B + 1], _VECTOR_CORES, core, group_size=1, num_stages=1):
                if job < B:
                    # Rows [lo, hi) of the request, clamped into [0, N] (ref.request_bounds).
                    T.copy(cu_draft_lens[job : job + 1], cu_ub[0:1])
                    lo = T.min(T.max(T.cast(cu_ub[0], "int64"), 0), T.cast(N, "int64"))
                    T.copy(cu_draft_lens[job + 1 : job + 2], cu_ub[0:1])
                    hi = T.max(T.min(T.max(T.cast(cu_ub[0], "int64"), 0), T.cast(N, "int64")), lo)
                    plen_ub[0] = T.cast(hi - lo, "int32")
                    alive_ub[0] = 1
                    prod_ub[0] = T.float32(1)
                    acc_ub[0] = T.float32(0)
                else:
                    # Padding rows: [0, lo) and [hi, N), lo = lo_0, hi = hi_{B-1}.
                    T.copy(cu_draft_lens[0:1], cu_ub[0:1])
                    lo = T.min(T.max(T.cast(cu_ub[0], "int64"), 0), T.cast(N, "int64"))
                    T.copy(cu_draft_lens[B - 1 : B], cu_ub[0:1])
                    hi = T.min(T.max(T.cast(cu_ub[0], "int64"), 0), T.cast(N, "int64"))
                    T.copy(cu_draft_lens[B : B + 1], cu_ub[0:1])
                    hi = T.max(T.min(T.max(T.cast(cu_ub[0], "int64"), 0), T.cast(N, "int64")), hi)
                for p in T.serial(T.if_then_else(job < B, hi - lo, lo + T.cast(N, "int64") - hi)):
                    row = T.if_then_else(job < B, lo + p, T.if_then_else(p < lo, p, hi + (p - lo)))
                    T.copy(hidden[row, 0:H], h_ub[:H])
                    T.copy(prev_tokens[row : row + 1], tok_ub[0:1])
                    # An out-of-range prev_token reads nothing; its confidence is 0 below.
                    if tok_ub[0] >= 0 and T.cast(tok_ub[0], "int64") < T.cast(V, "int64"):
                        T.copy(embedding[T.cast(tok_ub[0], "int64"), 0:He], e_ub[:He])
                    with T.SimtVF(threads=_SIMT_THREADS):
                        tid = T.get_thread_binding(0)
                        s = T.alloc_var("float32")
                        s = T.float32(0)
                        for k in T.serial(T.ceildiv(H, _SIMT_THREADS)):
                            if k * _SIMT_THREADS + tid < H:
                                s = s + wh_ub[k * _SIMT_THREADS + tid] * T.cast(h_ub[k * _SIMT_THREADS + tid], "float32")
                        if tok_ub[0] >= 0 and T.cast(tok_ub[0], "int64") < T.cast(V, "int64"):
                            for k in T.serial(T.ceildiv(He, _SIMT_THREADS)):
                                if k * _SIMT_THREADS + tid < He:
                                    s = s + we_ub[k * _SIMT_THREADS + tid] * T.cast(e_ub[k * _SIMT_THREADS + tid], "float32")
                        part_ub[tid] = s
                    with T.SimtVF(threads=_SIMT_THREADS):
                        tid = T.get_thread_binding(0)
                        logit = T.alloc_var("float32")
                        c = T.alloc_var("float32")
                        if tid == 0:
                            logit = bias_ub[0]
                            for i in T.serial(_SIMT_THREADS):
                                logit = logit + part_ub[i]
                            c = T.float32(0)
                            if tok_ub[0] >= 0 and T.cast(tok_ub[0], "int64") < T.cast(V, "int64") and not T.isnan(logit):
                                c = T.float32(1) / (T.float32(1) + T.exp(-logit))
                            conf_ub[0] = c
                            if job < B and alive_ub[0] != 0:
                                if c < thr_ub[0] or c == T.float32(0):
                                    plen_ub[0] = T.cast(p, "int32")
                                    alive_ub[0] = 0
                                else:
                                    prod_ub[0] = prod_ub[0] * c
                                    acc_ub[0] = acc_ub[0] + prod_ub[0]
                    T.copy(conf_ub[0:1], confidence[row : row + 1])
                    if job == B:
                        out_ub[0] = T.cast(-1, draft_dtype)
                        T.copy(out_ub[0:1], tokens[row : row + 1])
                if job < B:
                    T.copy(plen_ub[0:1], proposal_len[job : job + 1])
                    T.copy(acc_ub[0:1], expected_len[job : job + 1])
                    for c0 in T.serial(T.ceildiv(hi - lo, _TILE)):
                        valid = T.min(_TILE, hi - lo - c0 * _TILE)
                        T.copy(draft_tokens[lo + c0 * _TILE : lo + c0 * _TILE + valid], out_ub[:valid])
                        with T.SimtVF(threads=_SIMT_THREADS):
                            tid = T.get_thread_binding(0)
                            for r in T.serial(_TILE // _SIMT_THREADS):
                                if r * _SIMT_THREADS + tid < valid and c0 * _TILE + r * _SIMT_THREADS + tid >= plen_ub[0]:
                                    out_ub[r * _SIMT_THREADS + tid] = T.cast(-1, draft_dtype)
                        T.copy(out_ub[:valid], tokens[lo + c0 * _TILE : lo + c0 * _TILE + valid])

    return dflash
