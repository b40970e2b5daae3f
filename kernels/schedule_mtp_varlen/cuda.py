"""NVIDIA TileLang implementation of `schedule_mtp_varlen`: the next varlen step's schedule after an
MTP verification step, and its attention work split, in one launch.

    k = schedule_mtp_varlen_tl(num_draft, block_size, num_sm_parts, len_dtype, acc_dtype)
    k(seq_lens_before, num_accepted, new_seq_lens, query_start_loc, positions, request_ids,
      last_hidden_rows, tile_metadata, num_splits)

seq_lens_before  (B,) of `len_dtype` (int32 or int64); num_accepted (B,) of `acc_dtype`.
new_seq_lens, last_hidden_rows (B,); query_start_loc, num_splits (B + 1,); positions, request_ids
(num_tokens,); tile_metadata (num_sm_parts, 8): int32, all contiguous.

Semantics are `kernels.schedule_mtp_varlen.ref` (the contract), exactly. B and num_tokens are
dynamic (one compile per (k, block_size, num_sm_parts, dtypes) serves every batch and padded token
count); 1 <= B <= MAX_BATCH (the interface launches nothing for B == 0 and rejects larger batches).
Every active length is at most (INT32_MAX // MAX_BATCH) * block_size, so every length, block count
and prefix fits int32; the part boundaries p * per_part are computed in int64.

One block of 512 threads: the whole computation is three prefix sums over B <= 4096 requests and a
few hundred searches, a few microseconds of latency at most, so a second launch or cross-block
communication would cost more than it saves. Thread t owns the keff = ceil(B / 512) consecutive
requests keff * t .. keff * t + keff - 1 (one request each up to B = 512, at most 8 at B = 4096): the
per-request work is a serial chain within its thread (two integer divisions in the split count
alone), so spreading a small batch over the whole block keeps that chain one request long. Its
keff <= 8 slots are unrolled with the unused ones masked (all its loads in flight at once). Three
fixed-order block scans (kernels/tl_scan.py: warp shuffles, then per-warp totals; no atomics, so
the result is deterministic) give the query-token prefix (query_start_loc), the KV-block prefix
(kept in shared memory for the searches) and, once per_part = ceil(total / num_sm_parts) is known,
the num_splits prefix. Each thread then writes its requests' 1 + k tokens, and the parts are handed
out one per thread: a part finds the requests of its first and last block by binary search over the
shared block prefix (12 steps). Tokens at or past query_start_loc[B] are padded with -1 by a
strided loop.
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import tilelang
import tilelang.language as T

from kernels.schedule_mtp_varlen.ref import (
    BACKEND_INDEX_DTYPES as INDEX_DTYPES,
    MAX_BATCH,
    META_FIELDS,
    check_config,
    max_context,
    schedule_mtp_varlen_shipped_configs,
)
from kernels.tl_scan import WARP, block_scan_macro

__all__ = ["INDEX_DTYPES", "schedule_mtp_varlen_shipped_configs", "schedule_mtp_varlen_tl"]

_THREADS = 512
_WARPS = _THREADS // WARP
_PER_THREAD = MAX_BATCH // _THREADS
# Binary search over [0, B - 1], B <= MAX_BATCH = 2**12.
_STEPS = 12
_FIELDS = len(META_FIELDS)


@tilelang.jit
def schedule_mtp_varlen_tl(num_draft: int, block_size: int, num_sm_parts: int, len_dtype: str, acc_dtype: str):
    """Compiled kernel(seq_lens_before, num_accepted, *MtpSchedule fields) (memoised)."""
    check_config("schedule_mtp_varlen", num_draft, block_size, num_sm_parts, len_dtype=len_dtype, acc_dtype=acc_dtype)
    q = 1 + num_draft
    cap = max_context(block_size, num_draft)
    P = num_sm_parts
    K = _PER_THREAD
    B, Bp, n = T.dynamic("B"), T.dynamic("B_plus_1"), T.dynamic("num_tokens")
    keff = (B + (_THREADS - 1)) // _THREADS
    scan_block = block_scan_macro(_WARPS)

    @T.macro
    def find_request(starts, g, lo):
        """lo[0] = the largest b in [0, B - 1] with starts[b] <= g: for 0 <= g < total, the request
        owning global block g (requests without blocks share their start with the next one)."""
        lo[0] = 0
        for s in T.unroll(_STEPS):
            if lo[0] + (MAX_BATCH >> (s + 1)) <= B - 1:
                if starts[lo[0] + (MAX_BATCH >> (s + 1))] <= g:
                    lo[0] += MAX_BATCH >> (s + 1)

    @T.prim_func
    def schedule_mtp_varlen(
        seq_lens_before: T.Tensor((B,), len_dtype),
        num_accepted: T.Tensor((B,), acc_dtype),
        new_seq_lens: T.Tensor((B,), "int32"),
        query_start_loc: T.Tensor((Bp,), "int32"),
        positions: T.Tensor((n,), "int32"),
        request_ids: T.Tensor((n,), "int32"),
        last_hidden_rows: T.Tensor((B,), "int32"),
        tile_metadata: T.Tensor((P, _FIELDS), "int32"),
        num_splits: T.Tensor((Bp,), "int32"),
    ):
        with T.Kernel(1, threads=_THREADS) as _:
            tx = T.get_thread_binding(0)
            warp, lane = tx // WARP, tx % WARP
            lens = T.alloc_local((K,), "int32")  # next length, 0 when inactive
            acc = T.alloc_local((K,), "int32")  # accepted drafts, clamped
            mine = T.alloc_local((1,), "int32")
            scan = T.alloc_local((1,), "int32")
            before = T.alloc_local((1,), "int32")
            q_total = T.alloc_local((1,), "int32")
            blk_total = T.alloc_local((1,), "int32")
            split_total = T.alloc_local((1,), "int32")
            q_run = T.alloc_local((1,), "int32")
            blk_run = T.alloc_local((1,), "int32")
            split_run = T.alloc_local((1,), "int32")
            fr = T.alloc_local((1,), "int32")
            lr = T.alloc_local((1,), "int32")
            starts = T.alloc_shared((MAX_BATCH + 1,), "int32")
            # One per scan, so no scan waits for the previous one's readers.
            wt_q = T.alloc_shared((_WARPS,), "int32")
            wt_blk = T.alloc_shared((_WARPS,), "int32")
            wt_split = T.alloc_shared((_WARPS,), "int32")

            mine[0] = 0
            for i in T.unroll(K):
                lens[i] = 0
                acc[i] = 0
                if i < keff and tx * keff + i < B:
                    s = T.cast(seq_lens_before[tx * keff + i], "int64")
                    a = T.max(T.min(T.cast(num_accepted[tx * keff + i], "int64"), num_draft), 0)
                    if s >= 0 and s <= cap:
                        lens[i] = T.cast(s + a + (2 + num_draft), "int32")
                        acc[i] = T.cast(a, "int32")
                        mine[0] += q
            scan_block(mine, scan, before, q_total, wt_q, warp, lane)
            q_run[0] = before[0] + scan[0] - mine[0]

            mine[0] = 0
            for i in T.unroll(K):
                mine[0] += (lens[i] + (block_size - 1)) // block_size
            scan_block(mine, scan, before, blk_total, wt_blk, warp, lane)
            blk_run[0] = before[0] + scan[0] - mine[0]

            for i in T.unroll(K):
                b = tx * keff + i
                if i < keff and b < B:
                    new_seq_lens[b] = lens[i]
                    query_start_loc[b] = q_run[0]
                    last_hidden_rows[b] = T.if_then_else(lens[i] > 0, b * q + acc[i], -1)
                    starts[b] = blk_run[0]
                    if lens[i] > 0:
                        for j in T.unroll(q):
                            if q_run[0] + j < n:
                                positions[q_run[0] + j] = lens[i] - q + j
                                request_ids[q_run[0] + j] = b
                        q_run[0] += q
                    blk_run[0] += (lens[i] + (block_size - 1)) // block_size
            if tx == 0:
                starts[B] = blk_total[0]
                query_start_loc[B] = q_total[0]
            for r in T.serial(T.ceildiv(n, _THREADS)):
                if r * _THREADS + tx < n and r * _THREADS + tx >= q_total[0]:
                    positions[r * _THREADS + tx] = -1
                    request_ids[r * _THREADS + tx] = -1

            # Every part boundary divides by per_part only when total > 0, where per_part >= 1.
            per_part = (blk_total[0] + (P - 1)) // P
            pp = T.max(per_part, 1)
            # A request with blocks [c, c + n) is touched by parts c // pp .. (c + n - 1) // pp.
            mine[0] = 0
            # The block prefix of every request is in `starts` only after every thread wrote it.
            T.sync_threads()
            for i in T.unroll(K):
                b = tx * keff + i
                if i < keff and b < B:
                    if starts[b + 1] > starts[b]:
                        mine[0] += (starts[b + 1] - 1) // pp - starts[b] // pp + 1
            scan_block(mine, scan, before, split_total, wt_split, warp, lane)
            split_run[0] = before[0] + scan[0] - mine[0]
            for i in T.unroll(K):
                b = tx * keff + i
                if i < keff and b < B:
                    num_splits[b] = split_run[0]
                    if starts[b + 1] > starts[b]:
                        split_run[0] += (starts[b + 1] - 1) // pp - starts[b] // pp + 1
            if tx == 0:
                num_splits[B] = split_total[0]

            for r in T.serial(T.ceildiv(P, _THREADS)):
                p = r * _THREADS + tx
                if p < P:
                    g0 = T.cast(p, "int64") * per_part
                    if g0 < T.cast(blk_total[0], "int64"):
                        g1 = T.min(g0 + per_part, T.cast(blk_total[0], "int64"))
                        find_request(starts, T.cast(g0, "int32"), fr)
                        find_request(starts, T.cast(g1 - 1, "int32"), lr)
                        tile_metadata[p, 0] = fr[0]
                        tile_metadata[p, 1] = T.cast(g0, "int32") - starts[fr[0]]
                        tile_metadata[p, 2] = lr[0]
                        tile_metadata[p, 3] = T.cast(g1, "int32") - starts[lr[0]]
                        tile_metadata[p, 4] = p - starts[fr[0]] // pp
                        tile_metadata[p, 5] = T.if_then_else((starts[fr[0] + 1] - 1) // pp > starts[fr[0]] // pp, 1, 0)
                        tile_metadata[p, 6] = T.if_then_else((starts[lr[0] + 1] - 1) // pp > starts[lr[0]] // pp, 1, 0)
                        tile_metadata[p, 7] = T.cast(g1 - g0, "int32")
                    else:
                        tile_metadata[p, 0] = -1
                        tile_metadata[p, 2] = -1
                        for c in T.unroll(_FIELDS):
                            if c != 0 and c != 2:
                                tile_metadata[p, c] = 0

    return schedule_mtp_varlen
