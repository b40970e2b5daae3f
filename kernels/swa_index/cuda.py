"""NVIDIA TileLang implementation of `swa_index`: per query token the KV slots of its sliding window,
per request the first block still in the window and the replay range.

    k = swa_index_tl(block_size, pad, indptr_dtype, pos_dtype, len_dtype)
    k(query_start_loc, positions, block_table, seq_lens,
      slots, valid_len, first_block, replay_start, replay_end)

query_start_loc  (>= B + 1,) of `indptr_dtype` (int32 or int64); entries past B are never read.
positions        (T,) of `pos_dtype` (int32 or int64).
block_table      (B, max_blocks) int32, row stride `bt_stride` >= max_blocks, last dim contiguous.
seq_lens         (B,) of `len_dtype` (int32 or int64).
slots            (T, W) int32; valid_len (T,) int32; first_block (B,) int32; replay_start and
                 replay_end (B,) int64. All contiguous.

Semantics are `kernels.swa_index.ref` (the contract), exactly. T, B, max_blocks, the block-table row
stride and the window W (the width of `slots`) are dynamic, so one compile per (block size, pad,
index dtypes) serves every batch and every window; block_size is compiled in (divisions by a
constant) and so is the pad mode (one select, no second kernel body). T, B >= 1 (the interface
launches nothing otherwise). Positions, slots and output offsets are computed in int64.

One launch of 256-thread blocks on a 2-D grid:
  * blocks (bx, by) with by < ceil(T / 8) own 8 consecutive tokens and `slots` columns
    [bx * 512, bx * 512 + 512). Each finds its tokens' requests by a scan of query_start_loc (4
    requests per thread, all loads in flight, then 8 range tests each: B <= 1024 is one round trip;
    no search, no staged prefix, no atomics), then writes its 8 x min(W - bx * 512, 512) entries,
    one per thread per step, consecutive threads on consecutive columns (coalesced stores; the
    block-table entries they read are shared by block_size neighbours, an L1 broadcast).
    Blocks with bx == 0 also write valid_len.
  * blocks (0, by) with by >= ceil(T / 8) own 256 requests each: the per-request outputs, one
    thread per request. The other bx of those rows exit at once.
Per decode step (T = B * (1 + MTP tokens), W <= 4096) this is at most a few thousand small blocks,
and the dependent global loads per entry are three: query_start_loc, then the block-table entry,
then the store.
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import tilelang
import tilelang.language as T

from kernels.swa_index.ref import (
    BACKEND_INDEX_DTYPES as INDEX_DTYPES,
    INT32_MAX,
    check_static,
    swa_index_shipped_configs,
)

__all__ = ["INDEX_DTYPES", "swa_index_shipped_configs", "swa_index_tl"]

_THREADS = 256
# Tokens per block: every block scans query_start_loc once for all of them.
_TOK = 8
# Columns per block: 8 x 512 entries, 16 per thread, for a wide window.
_COLS = 512
# query_start_loc entries per thread per scan round (1024 requests a round).
_REQ_PER_THREAD = 4
_REQ_CHUNK = _THREADS * _REQ_PER_THREAD


@tilelang.jit
def swa_index_tl(block_size: int, pad: str, indptr_dtype: str, pos_dtype: str, len_dtype: str):
    """Compiled kernel(query_start_loc, positions, block_table, seq_lens, slots, valid_len,
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
        with T.Kernel(T.ceildiv(W, _COLS), T.ceildiv(n, _TOK) + T.ceildiv(B, _THREADS), threads=_THREADS) as (bx, by):
            tx = T.get_thread_binding(0)
            lo = T.alloc_local((_REQ_PER_THREAD,), indptr_dtype)
            hi = T.alloc_local((_REQ_PER_THREAD,), indptr_dtype)
            pos = T.alloc_local((1,), "int64")
            length = T.alloc_local((1,), "int64")
            fill = T.alloc_local((1,), "int64")
            val = T.alloc_local((1,), "int64")
            qi = T.alloc_local((1,), "int32")
            col = T.alloc_local((1,), "int64")
            req_s = T.alloc_shared((_TOK,), "int32")
            pos_s = T.alloc_shared((_TOK,), "int64")
            len_s = T.alloc_shared((_TOK,), "int64")
            fill_s = T.alloc_shared((_TOK,), "int64")
            t0 = by * _TOK
            if by < T.ceildiv(n, _TOK):
                # Issued before the scan, so its latency hides behind query_start_loc's.
                pos[0] = -1
                if tx < _TOK and t0 + tx < n:
                    pos[0] = T.cast(positions[t0 + tx], "int64")
                if tx < _TOK:
                    req_s[tx] = -1
                T.sync_threads()
                for c in T.serial(T.ceildiv(B, _REQ_CHUNK)):
                    for k in T.unroll(_REQ_PER_THREAD):
                        if c * _REQ_CHUNK + k * _THREADS + tx < B:
                            lo[k] = query_start_loc[c * _REQ_CHUNK + k * _THREADS + tx]
                            hi[k] = query_start_loc[c * _REQ_CHUNK + k * _THREADS + tx + 1]
                    for k in T.unroll(_REQ_PER_THREAD):
                        if c * _REQ_CHUNK + k * _THREADS + tx < B:
                            for q in T.unroll(_TOK):
                                # One request holds the token when query_start_loc is monotone;
                                # otherwise any one of the writers wins (still in bounds).
                                if lo[k] <= t0 + q and t0 + q < hi[k]:
                                    req_s[q] = c * _REQ_CHUNK + k * _THREADS + tx
                T.sync_threads()
                if tx < _TOK:
                    length[0] = 0
                    fill[0] = default_fill
                    if req_s[tx] >= 0 and pos[0] >= 0:
                        length[0] = T.min(pos[0], T.cast(W, "int64") - 1) + 1
                        if repeat:
                            # The token's own slot, the last entry of its window.
                            if pos[0] // block_size < T.cast(M, "int64"):
                                own = block_table[T.cast(req_s[tx], "int64"), pos[0] // block_size]
                                if own >= 0:
                                    if T.cast(own, "int64") * block_size + pos[0] % block_size <= INT32_MAX:
                                        fill[0] = T.cast(own, "int64") * block_size + pos[0] % block_size
                    if bx == 0 and t0 + tx < n:
                        valid_len[t0 + tx] = T.cast(length[0], "int32")
                    pos_s[tx] = pos[0]
                    len_s[tx] = length[0]
                    fill_s[tx] = fill[0]
                T.sync_threads()
                # Columns of this block (>= 1); the entry's token and column, held in registers so
                # the dynamic division is computed once per entry.
                cw = T.min(W - bx * _COLS, _COLS)
                for i in T.serial(T.ceildiv(_TOK * cw, _THREADS)):
                    qi[0] = (i * _THREADS + tx) // cw
                    col[0] = T.cast(bx * _COLS, "int64") + (i * _THREADS + tx) % cw
                    if qi[0] < _TOK and t0 + qi[0] < n:
                        val[0] = fill_s[qi[0]]
                        if col[0] < len_s[qi[0]]:
                            # Position pos - len + 1 + column: in [0, pos] for column < len.
                            p = pos_s[qi[0]] - len_s[qi[0]] + 1 + col[0]
                            if p // block_size < T.cast(M, "int64"):
                                blk = block_table[T.cast(req_s[qi[0]], "int64"), p // block_size]
                                if blk >= 0:
                                    if T.cast(blk, "int64") * block_size + p % block_size <= INT32_MAX:
                                        val[0] = T.cast(blk, "int64") * block_size + p % block_size
                        slots[T.cast(t0 + qi[0], "int64"), col[0]] = T.cast(val[0], "int32")
            else:
                if bx == 0 and (by - T.ceildiv(n, _TOK)) * _THREADS + tx < B:
                    b = (by - T.ceildiv(n, _TOK)) * _THREADS + tx
                    # A negative length is an empty request.
                    total = T.max(T.cast(seq_lens[b], "int64"), 0)
                    start = T.max(total - T.cast(W, "int64"), 0)
                    replay_start[b] = start
                    replay_end[b] = total
                    first_block[b] = T.cast(T.min(start // block_size, T.cast(M, "int64")), "int32")

    return swa_index
