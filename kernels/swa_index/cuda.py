"""NVIDIA TileLang implementation of `swa_index`: per query token the KV slots of its sliding window,
per request the first block still in the window and the replay range.

    k = swa_index_tl(block_size, pad, indptr_dtype, pos_dtype, len_dtype, pdl=False)
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

One launch of 256-thread blocks on a 2-D grid. C, the columns of a token per block, is 1024 for
block_size >= 33 (a warp's 1024 columns then span <= 32 blocks), else 512.
  * blocks (bx, by) with by < ceil(T / 8) own 8 consecutive tokens, one warp each, and `slots`
    columns [bx * C, bx * C + C). Each finds its tokens' requests by a scan of query_start_loc
    (4 requests per thread, all loads in flight, then the range of the block's tokens each request
    holds, empty for nearly all: B <= 1024 is one round trip; no search, no staged prefix, no
    atomics); the token's position is loaded during the scan. Lane l of a warp owns columns
    l, l + 32, ... of its token, so every warp store writes 128 consecutive bytes, and every
    block-table load of a thread (and, in the repeat mode, the token's own block) is issued
    before its first store: a thread waits for one round trip however wide its share.
      - block_size >= 17 (the columns of a warp span <= 32 blocks): lane l loads the l-th block of
        its warp's columns, and each column takes its block id by a warp shuffle, so there is
        one load per thread and no 64-bit address arithmetic per entry.
      - block_size <= 16: each lane loads the entry of each of its 16 columns (an L1 broadcast
        among neighbours in one block).
    Only the first column divides its 64-bit position by the block size; later columns divide a
    narrow unsigned offset. Blocks with bx == 0 also write valid_len.
  * blocks (0, by) with by >= ceil(T / 8) own 256 requests each: the per-request outputs, one
    thread per request. The other bx of those rows exit at once.
A block's dependent global round trips are two (positions and query_start_loc together, then the
block table); the stores follow without waiting. At W = 4096 the write of `slots` is
ceil(T / 8) x 4 blocks of 32 KiB of stores each (block_size >= 33), spread over every SM.
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
from kernels.tl_launch import dependent_entry

__all__ = ["INDEX_DTYPES", "swa_index_shipped_configs", "swa_index_tl"]

_THREADS = 256
# Tokens per block, one warp each: every block scans query_start_loc once for all of them, and a
# row's token, request and window are warp-uniform.
_TOK = _THREADS // 32
# Columns of a token each lane takes per round (a warp's round covers 32 times as many), 32 apart,
# so every store instruction of a warp writes 32 consecutive int32 (128 bytes): _PER_SHUFFLE where
# one block-table load per lane serves the round (few registers), _PER_LOAD where every column
# loads its own entry (all in flight).
_PER_SHUFFLE = 32
_PER_LOAD = 16
# query_start_loc entries per thread per scan round (1024 requests a round).
_REQ_PER_THREAD = 4
_REQ_CHUNK = _THREADS * _REQ_PER_THREAD


# Every access is guarded by the kernel's own bounds (columns < valid_len, blocks < max_blocks,
# requests found by the scan); the legaliser's copies of them would double the per-entry work.
@tilelang.jit(pass_configs={"tl.disable_safe_memory_legalize": True})
def swa_index_tl(block_size: int, pad: str, indptr_dtype: str, pos_dtype: str, len_dtype: str, *, pdl: bool = False):
    """Compiled kernel(query_start_loc, positions, block_table, seq_lens, slots, valid_len,
    first_block, replay_start, replay_end) (memoised); pdl: a programmatic dependent launch
    (kernels/tl_launch.py, sm_90+)."""
    check_static("swa_index", block_size, pad, indptr_dtype=indptr_dtype, pos_dtype=pos_dtype, len_dtype=len_dtype)
    # What an entry without a slot holds before the repeat mode's fill replaces it.
    default_fill = -1 if pad == "minus_one" else 0
    repeat = pad == "repeat"
    # A warp's c columns span at most (block_size - 1 + c - 1) // block_size + 1 blocks: when that
    # is <= 32, one block-table load per lane serves the warp, and columns take their block by a
    # shuffle; smaller blocks load one entry per column.
    per = _PER_SHUFFLE if (block_size + 32 * _PER_SHUFFLE - 2) // block_size < 32 else _PER_LOAD
    cols = 32 * per
    shuffle = (block_size + cols - 2) // block_size < 32
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
        with T.Kernel(T.ceildiv(W, cols), T.ceildiv(n, _TOK) + T.ceildiv(B, _THREADS), threads=_THREADS) as (bx, by):
            dependent_entry(pdl)
            tx = T.get_thread_binding(0)
            lo = T.alloc_local((_REQ_PER_THREAD,), indptr_dtype)
            hi = T.alloc_local((_REQ_PER_THREAD,), indptr_dtype)
            cur = T.alloc_local((1,), "int32")
            pos = T.alloc_local((1,), "int64")
            length = T.alloc_local((1,), "int64")
            fill = T.alloc_local((1,), "int32")
            first_blk = T.alloc_local((1,), "int64")
            # Unsigned (divisions by the block size are shifts or one multiply) and in registers
            # (as expressions the simplifier would widen them to int64): the first column's offset
            # in its block, a column's offset in its own block and (per-column loads) the blocks
            # between the two.
            off = T.alloc_local((1,), "uint32")
            rem = T.alloc_local((1,), "uint32")
            span = T.alloc_local((1,), "int32")
            if shuffle:
                tbl = T.alloc_local((1,), "int32")
            else:
                skip = T.alloc_local((1,), "uint32")
                blk = T.alloc_local((per,), "int32")
                room = T.alloc_local((1,), "int32")
            req_s = T.alloc_shared((_TOK,), "int32")
            if by < T.ceildiv(n, _TOK):
                row = tx // 32
                lane = tx % 32
                tok = by * _TOK + row
                # Issued before the scan, so its latency hides behind query_start_loc's.
                pos[0] = -1
                if tok < n:
                    pos[0] = T.cast(positions[tok], "int64")
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
                            # The block's tokens the request holds, [q0, q1) of [0, _TOK): empty for
                            # nearly every request, so no per-token tests. One request holds a token
                            # when query_start_loc is monotone; otherwise any one of the writers wins.
                            q0 = T.cast(T.min(T.max(T.cast(lo[k], "int64") - by * _TOK, 0), _TOK), "int32")
                            q1 = T.cast(T.min(T.max(T.cast(hi[k], "int64") - by * _TOK, 0), _TOK), "int32")
                            for q in T.serial(q0, q1):
                                req_s[q] = c * _REQ_CHUNK + k * _THREADS + tx
                T.sync_threads()
                req = req_s[row]
                length[0] = 0
                if req >= 0 and pos[0] >= 0:
                    length[0] = T.min(pos[0], T.cast(W, "int64") - 1) + 1
                # Columns of this block (>= 1), and how many of them have a position.
                cw = T.min(W - bx * cols, cols)
                span[0] = T.cast(T.max(length[0] - T.cast(bx * cols, "int64"), 0), "int32")
                # Position of the block's first column of the row (shuffle), or of the lane's first
                # column (otherwise): >= 0, in block `first_blk` at offset `off`. Later columns
                # need only a narrow division by the constant block size.
                first = T.if_then_else(length[0] > 0, pos[0] - length[0] + 1, 0) + T.cast(bx * cols, "int64")
                if not shuffle:
                    first = first + T.cast(lane, "int64")
                first_blk[0] = T.truncdiv(first, block_size)
                off[0] = T.cast(T.truncmod(first, block_size), "uint32")
                # Every block-table load of the thread is issued before its first store, so the
                # thread waits for one round trip, not one per entry.
                if repeat:
                    own = T.alloc_local((1,), "int32")
                    own[0] = -1
                    if length[0] > 0 and pos[0] // block_size < T.cast(M, "int64"):
                        own[0] = block_table[T.cast(req, "int64"), pos[0] // block_size]
                if shuffle:
                    # Lane l holds the row's l-th block of this column range, -1 past the table
                    # or past valid_len (span > 0 implies a request).
                    tbl[0] = T.if_then_else(
                        span[0] > 0
                        and T.cast(lane, "int64") * block_size < T.cast(off[0], "int64") + T.cast(span[0], "int64")
                        and first_blk[0] + T.cast(lane, "int64") < T.cast(M, "int64"),
                        block_table[T.cast(req, "int64"), first_blk[0] + T.cast(lane, "int64")],
                        -1,
                    )
                else:
                    room[0] = T.cast(T.max(T.cast(M, "int64") - first_blk[0], -1), "int32")
                    for k in T.unroll(per):
                        skip[0] = T.truncdiv(off[0] + T.uint32(k * 32), T.uint32(block_size))
                        # -1 (the pad) for a column past valid_len or past the table; span > 0
                        # implies a request.
                        blk[k] = T.if_then_else(
                            lane + k * 32 < span[0] and T.cast(skip[0], "int32") < room[0],
                            block_table[T.cast(req, "int64"), first_blk[0] + T.cast(skip[0], "int64")],
                            -1,
                        )
                fill[0] = default_fill
                if repeat:
                    # The token's own slot, the last entry of its window.
                    if own[0] >= 0 and T.cast(own[0], "int64") * block_size + pos[0] % block_size <= INT32_MAX:
                        fill[0] = T.cast(T.cast(own[0], "int64") * block_size + pos[0] % block_size, "int32")
                if bx == 0 and lane == 0 and tok < n:
                    valid_len[tok] = T.cast(length[0], "int32")
                if tok < n:
                    for k in T.unroll(per):
                        # Block-uniform: a narrow window skips the rest of the unrolled steps.
                        if k * 32 < cw:
                            if shuffle:
                                # Every lane shuffles (tok and k * 32 < cw are warp-uniform); the
                                # source lane is < 32 by the choice of `shuffle`.
                                rem[0] = T.truncmod(off[0] + T.cast(lane + k * 32, "uint32"), T.uint32(block_size))
                                cur[0] = T.shfl_sync(
                                    tbl[0], T.cast(T.truncdiv(off[0] + T.cast(lane + k * 32, "uint32"), T.uint32(block_size)), "int32")
                                )
                                cur[0] = T.if_then_else(lane + k * 32 < span[0], cur[0], -1)
                            else:
                                rem[0] = T.truncmod(off[0] + T.uint32(k * 32), T.uint32(block_size))
                                cur[0] = blk[k]
                            if lane + k * 32 < cw:
                                # A negative block id (unallocated) fails the unsigned test, as does
                                # a slot past int32; both are the pad. A slot that passes fits in
                                # int32.
                                slots[T.cast(tok, "int64"), T.cast(bx * cols + lane + k * 32, "int64")] = T.if_then_else(
                                    T.cast(cur[0], "uint32") <= T.truncdiv(T.uint32(INT32_MAX) - rem[0], T.uint32(block_size)),
                                    cur[0] * block_size + T.cast(rem[0], "int32"),
                                    fill[0],
                                )
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
