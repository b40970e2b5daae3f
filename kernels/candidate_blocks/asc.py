"""Huawei Ascend 950 TileLang implementation of `candidate_blocks`. Verified by lowering to AscendC
only (codegen_ascend suite: every configuration lowers and its Unified Buffer footprint fits); no
NPU has run it.

    k = candidate_blocks_tl(NB, k, num_sink, num_local, n_dtype, req_dtype=None)
    k(scores, n_t, ids)                              # req_dtype None: block ids
    k(scores, n_t, block_table, req_index, ids)      # req_dtype int32/int64: pages

Arguments, dtypes, layouts and semantics are those of the CUDA factory (kernels/candidate_blocks/
cuda.py) and of `kernels.candidate_blocks.ref` (the contract), exactly: the same ranking keys, the
same threshold (the need-th largest key) and the same tie rule (keys equal to the threshold are
taken lowest ids first). t is dynamic; NB, k, num_sink and num_local are compiled in.

Where the work runs (vector (AIV) cores): one persistent block per vector core over query rows.
MTE2 brings a row of scores (at most 8 KiB) and the row's count into the UB; the scalar unit turns
each score into its ranking key, finds the same threshold as the CUDA kernels by four 8-bit radix
passes (the CUDA kernels use three digits of 11, 11 and 10 bits; each pass here is a 256-bin UB
histogram of the keys matching the prefix so far, then a walk of the bins from the top), and
compacts the selected ids in ascending order into a UB row of k ids with -1
padding. Paged calls then map the row through the block table in a SIMT region (one thread per
output slot, scalar GM loads of block_table, as get_kv_index's Ascend kernels read it), and MTE3
stores the row. The scalar passes cost about 6 * NB + 2048 scalar steps per row (a key pass, four
histogram passes and the compaction, plus four clears and walks of 256 bins): correct and simple,
not tuned; a SIMT histogram is the next step once an NPU can measure it.

UB budget: scores and keys 2 x 4 * NB bytes, the histogram 1 KiB, the output row 4 * k bytes (at
most 25 KiB for NB = k = 2048), plus 32-byte scalars; testing/codegen_ascend.py measures it.
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import tilelang
import tilelang.ascend.language as T

from kernels.candidate_blocks.ref import BACKEND_INDEX_DTYPES as INDEX_DTYPES
from kernels.candidate_blocks.ref import MAX_K, MAX_NB, SINK_KEY, check_static, shipped_configs

__all__ = ["INDEX_DTYPES", "MAX_K", "MAX_NB", "candidate_blocks_shipped_configs", "candidate_blocks_tl"]

# One persistent block per vector core, the count TileLang's Ascend 950 vector examples launch.
_VECTOR_CORES = 64
_SIMT_THREADS = 256
_BINS = 256
_PASSES = 4


def _round_up(v: int, to: int) -> int:
    return -(-v // to) * to


def candidate_blocks_shipped_configs() -> list[tuple[int, int, int, int, str, str | None]]:
    """(NB, k, num_sink, num_local, n_dtype, req_dtype): see ref.shipped_configs."""
    return shipped_configs()


@tilelang.jit(target="ascend")
def candidate_blocks_tl(NB: int, k: int, num_sink: int, num_local: int, n_dtype: str, req_dtype=None):
    """Ascend kernel(scores, n_t[, block_table, req_index], ids) (memoised)."""
    check_static("candidate_blocks", NB, k, num_sink, num_local, n_dtype, req_dtype)
    paged = req_dtype is not None
    t = T.dynamic("t")
    B, M, S = T.dynamic("B"), T.dynamic("max_blocks"), T.dynamic("bt_stride", "int64")
    # UB rows padded to 32 bytes (8 four-byte elements) for the DMA.
    nb_pad, k_pad = _round_up(NB, 8), _round_up(k, 8)

    @T.macro
    def select_row(scores, n_t, row, s_ub, key_ub, hist, ids_ub, n_ub, state):
        """ids_ub[:k] = the ascending selected block ids of `row`, then -1."""
        T.copy(scores[row, :], s_ub[:NB])
        T.copy(n_t[row : row + 1], n_ub[0:1])
        n = T.max(T.min(T.cast(n_ub[0], "int64"), NB), 0)
        for j in T.serial(NB):
            # +0.0 for either zero, so equal scores tie whatever their sign bit.
            bits = T.reinterpret(T.if_then_else(s_ub[j] == T.float32(0), T.float32(0), s_ub[j]), "uint32")
            score_key = T.if_then_else(bits >= T.uint32(0x80000000), bits ^ T.uint32(0xFFFFFFFF), bits | T.uint32(0x80000000))
            d = T.cast(n, "int32") - 1 - j
            key_ub[j] = T.if_then_else(
                j >= n,
                T.uint32(0),
                T.if_then_else(
                    j < num_sink,
                    T.uint32(SINK_KEY),
                    T.if_then_else(d < num_local, T.uint32(SINK_KEY - 1) - T.cast(d, "uint32"), T.if_then_else(T.isnan(s_ub[j]), T.uint32(1), score_key)),
                ),
            )
        # state[0] = threshold prefix, state[1] = keys still needed at it; n <= k takes every
        # candidate (threshold 0, the non-candidate key, nothing taken at it).
        state[0] = T.uint32(0)
        state[1] = T.uint32(0)
        if n > k:
            state[1] = T.uint32(k)
            for p in T.serial(_PASSES):
                shift = T.cast(24 - 8 * p, "uint32")
                for b in T.serial(_BINS):
                    hist[b] = 0
                for j in T.serial(NB):
                    if p == 0 or (key_ub[j] >> (shift + T.uint32(8))) == (state[0] >> (shift + T.uint32(8))):
                        hist[T.cast((key_ub[j] >> shift) & T.uint32(0xFF), "int32")] += 1
                # Walk the bins from the top until the one holding the need-th largest key.
                seen = T.alloc_var("int32", init=0)
                found = T.alloc_var("int32", init=0)
                for b in T.serial(_BINS):
                    if found == 0:
                        if seen + hist[_BINS - 1 - b] >= T.cast(state[1], "int32"):
                            state[0] = state[0] | (T.cast(_BINS - 1 - b, "uint32") << shift)
                            state[1] = T.cast(T.cast(state[1], "int32") - seen, "uint32")
                            found = 1
                        else:
                            seen += hist[_BINS - 1 - b]
        # Ascending compaction; ties at the threshold lowest ids first.
        slot = T.alloc_var("int32", init=0)
        taken = T.alloc_var("int32", init=0)
        for j in T.serial(NB):
            if key_ub[j] > state[0]:
                ids_ub[slot] = j
                slot += 1
            elif key_ub[j] == state[0] and taken < T.cast(state[1], "int32"):
                ids_ub[slot] = j
                slot += 1
                taken += 1
        for i in T.serial(k):
            if i >= slot:
                ids_ub[i] = -1

    if not paged:

        @T.prim_func
        def candidate_blocks(
            scores: T.Tensor((t, NB), "float32"),
            n_t: T.Tensor((t,), n_dtype),
            ids: T.Tensor((t, k), "int32"),
        ):
            with T.Kernel(_VECTOR_CORES) as core:
                s_ub = T.alloc_shared((nb_pad,), "float32")
                key_ub = T.alloc_shared((nb_pad,), "uint32")
                hist = T.alloc_shared((_BINS,), "int32")
                ids_ub = T.alloc_shared((k_pad,), "int32")
                n_ub = T.alloc_shared((8,), n_dtype)
                state = T.alloc_shared((8,), "uint32")
                for q in T.Persistent([t], _VECTOR_CORES, core, group_size=1, num_stages=1):
                    row = T.cast(q, "int64")
                    select_row(scores, n_t, row, s_ub, key_ub, hist, ids_ub, n_ub, state)
                    T.copy(ids_ub[:k], ids[row, :])

        return candidate_blocks

    @T.prim_func
    def candidate_pages(
        scores: T.Tensor((t, NB), "float32"),
        n_t: T.Tensor((t,), n_dtype),
        block_table: T.StridedTensor((B, M), (S, 1), "int32"),
        req_index: T.Tensor((t,), req_dtype),
        ids: T.Tensor((t, k), "int32"),
    ):
        with T.Kernel(_VECTOR_CORES) as core:
            s_ub = T.alloc_shared((nb_pad,), "float32")
            key_ub = T.alloc_shared((nb_pad,), "uint32")
            hist = T.alloc_shared((_BINS,), "int32")
            ids_ub = T.alloc_shared((k_pad,), "int32")
            n_ub = T.alloc_shared((8,), n_dtype)
            r_ub = T.alloc_shared((8,), req_dtype)
            state = T.alloc_shared((8,), "uint32")
            for q in T.Persistent([t], _VECTOR_CORES, core, group_size=1, num_stages=1):
                row = T.cast(q, "int64")
                select_row(scores, n_t, row, s_ub, key_ub, hist, ids_ub, n_ub, state)
                T.copy(req_index[row : row + 1], r_ub[0:1])
                with T.SimtVF(threads=_SIMT_THREADS):
                    tid = T.get_thread_binding(0)
                    r = T.cast(r_ub[0], "int64")
                    for c in T.serial(T.ceildiv(k, _SIMT_THREADS)):
                        i = c * _SIMT_THREADS + tid
                        if i < k:
                            block = ids_ub[i]
                            page = T.alloc_var("int32")
                            page = -1
                            # Invalid rows, ids past max_blocks and unallocated entries give -1.
                            if block >= 0 and block < M and r >= 0 and r < T.cast(B, "int64"):
                                page = T.max(block_table[r, block], -1)
                            ids_ub[i] = page
                T.copy(ids_ub[:k], ids[row, :])

    return candidate_pages
