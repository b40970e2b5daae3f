"""Huawei Ascend 950 TileLang implementation of `swa_index`. Verified by lowering to AscendC only
(codegen_ascend suite: every configuration lowers and its Unified Buffer footprint fits); no NPU has
run it.

    k = swa_index_tl(block_size, pad, indptr_dtype, pos_dtype, len_dtype)
    k(query_start_loc, positions, block_table, seq_lens,
      slots, valid_len, first_block, replay_start, replay_end)

Arguments, dtypes, layouts and semantics are those of the CUDA factory (kernels/swa_index/cuda.py)
and of `kernels.swa_index.ref` (the contract), exactly; every size but block_size is dynamic (the
window W included), and the pad mode is compiled in.

Where the work runs: one persistent block per vector core over jobs. Jobs [0, T * C) are (token,
column tile) pairs, C = ceil(W / 1024): in a SIMT region of 256 threads each thread binary-searches
query_start_loc in global memory for the token's request (scalar loads, at most 31 steps, fewer for
small B), then computes 4 of the tile's slots into a UB tile that MTE3 stores; the tile-0 job also
writes the token's valid_len. Jobs [T * C, T * C + ceil(B / 1024)) write the per-request outputs of
1024 requests each. The cores never need each other's data.

UB budget: one 4 KiB slot tile, a 4 KiB first-block tile, two 8 KiB replay tiles and a 32-byte
valid_len cell, far below the UB (testing/codegen_ascend.py measures it).
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import tilelang
import tilelang.ascend.language as T

from kernels.swa_index.ref import (
    BACKEND_INDEX_DTYPES as INDEX_DTYPES,
    INT32_MAX,
    check_static,
    swa_index_shipped_configs,
)

__all__ = ["INDEX_DTYPES", "swa_index_shipped_configs", "swa_index_tl"]

# One persistent block per vector core, the count TileLang's Ascend 950 vector examples launch.
_VECTOR_CORES = 64
_SIMT_THREADS = 256
_TILE = 1024
# Steps of a binary search over any int32 range.
_GM_STEPS = 31


@tilelang.jit(target="ascend")
def swa_index_tl(block_size: int, pad: str, indptr_dtype: str, pos_dtype: str, len_dtype: str):
    """Ascend kernel(query_start_loc, positions, block_table, seq_lens, slots, valid_len,
    first_block, replay_start, replay_end) (memoised)."""
    check_static("swa_index", block_size, pad, indptr_dtype=indptr_dtype, pos_dtype=pos_dtype, len_dtype=len_dtype)
    # What an entry without a slot holds before the repeat mode's fill replaces it.
    default_fill = -1 if pad == "minus_one" else 0
    repeat = pad == "repeat"
    B, M, S = T.dynamic("B"), T.dynamic("max_blocks"), T.dynamic("bt_stride", "int64")
    Q, n, W = T.dynamic("Q"), T.dynamic("T"), T.dynamic("W")

    @T.prim_func
    def swa_index(
        query_start_loc: T.Tensor((Q,), indptr_dtype),
        positions: T.Tensor((n,), pos_dtype),
        block_table: T.StridedTensor((B, M), (S, 1), "int32"),
        seq_lens: T.Tensor((B,), len_dtype),
        slots: T.Tensor((n, W), "int32"),
        valid_len: T.Tensor((n,), "int32"),
        first_block: T.Tensor((B,), "int32"),
        replay_start: T.Tensor((B,), "int64"),
        replay_end: T.Tensor((B,), "int64"),
    ):
        with T.Kernel(_VECTOR_CORES) as core:
            slot_ub = T.alloc_shared((_TILE,), "int32")
            len_ub = T.alloc_shared((8,), "int32")
            first_ub = T.alloc_shared((_TILE,), "int32")
            start_ub = T.alloc_shared((_TILE,), "int64")
            end_ub = T.alloc_shared((_TILE,), "int64")
            tiles = T.ceildiv(W, _TILE)
            for k in T.Persistent([n * tiles + T.ceildiv(B, _TILE)], _VECTOR_CORES, core, group_size=1, num_stages=2):
                if k < n * tiles:
                    tok = k // tiles
                    c0 = (k % tiles) * _TILE
                    valid = T.min(_TILE, W - c0)
                    with T.SimtVF(threads=_SIMT_THREADS):
                        tid = T.get_thread_binding(0)
                        req = T.alloc_var("int32")
                        lo = T.alloc_var("int32")
                        pos = T.alloc_var("int64")
                        length = T.alloc_var("int64")
                        fill = T.alloc_var("int64")
                        val = T.alloc_var("int64")
                        req = -1
                        if query_start_loc[0] <= tok and tok < query_start_loc[B]:
                            # The largest lo <= B - 1 with query_start_loc[lo] <= tok (scalar loads; steps past B load nothing).
                            lo = 0
                            for s in T.unroll(_GM_STEPS):
                                if lo + (1 << (_GM_STEPS - 1 - s)) <= B - 1:
                                    if query_start_loc[lo + (1 << (_GM_STEPS - 1 - s))] <= tok:
                                        lo = lo + (1 << (_GM_STEPS - 1 - s))
                            # Always true for a non-decreasing query_start_loc; keeps a non-monotone one in bounds.
                            if tok < query_start_loc[lo + 1]:
                                req = lo
                        pos = T.cast(positions[tok], "int64")
                        length = 0
                        fill = default_fill
                        if req >= 0 and pos >= 0:
                            length = T.min(pos, T.cast(W, "int64") - 1) + 1
                            if repeat:
                                # The token's own slot, the last entry of its window.
                                if pos // block_size < T.cast(M, "int64"):
                                    own = block_table[T.cast(req, "int64"), pos // block_size]
                                    if own >= 0 and T.cast(own, "int64") * block_size + pos % block_size <= INT32_MAX:
                                        fill = T.cast(own, "int64") * block_size + pos % block_size
                        if tid == 0:
                            len_ub[0] = T.cast(length, "int32")
                        for r in T.serial(_TILE // _SIMT_THREADS):
                            j = r * _SIMT_THREADS + tid
                            if j < valid:
                                val = fill
                                if T.cast(c0 + j, "int64") < length:
                                    # Position pos - len + 1 + column: in [0, pos] for column < len.
                                    p = pos - length + 1 + T.cast(c0 + j, "int64")
                                    if p // block_size < T.cast(M, "int64"):
                                        blk = block_table[T.cast(req, "int64"), p // block_size]
                                        if blk >= 0 and T.cast(blk, "int64") * block_size + p % block_size <= INT32_MAX:
                                            val = T.cast(blk, "int64") * block_size + p % block_size
                                slot_ub[j] = T.cast(val, "int32")
                    T.copy(slot_ub[:valid], slots[tok, c0 : c0 + valid])
                    if c0 == 0:
                        T.copy(len_ub[0:1], valid_len[tok : tok + 1])
                else:
                    b0 = (k - n * tiles) * _TILE
                    count = T.min(_TILE, B - b0)
                    with T.SimtVF(threads=_SIMT_THREADS):
                        tid = T.get_thread_binding(0)
                        total = T.alloc_var("int64")
                        start = T.alloc_var("int64")
                        for r in T.serial(_TILE // _SIMT_THREADS):
                            j = r * _SIMT_THREADS + tid
                            if j < count:
                                # A negative length is an empty request.
                                total = T.max(T.cast(seq_lens[b0 + j], "int64"), 0)
                                start = T.max(total - T.cast(W, "int64"), 0)
                                start_ub[j] = start
                                end_ub[j] = total
                                first_ub[j] = T.cast(T.min(start // block_size, T.cast(M, "int64")), "int32")
                    T.copy(first_ub[:count], first_block[b0 : b0 + count])
                    T.copy(start_ub[:count], replay_start[b0 : b0 + count])
                    T.copy(end_ub[:count], replay_end[b0 : b0 + count])

    return swa_index
