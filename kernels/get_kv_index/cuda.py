"""NVIDIA TileLang implementation of `get_kv_index`: slot mapping, paged-KV index set, and batch
indices / positions of an append.

    k = slot_mapping_tl(block_size, indptr_dtype, pos_dtype)
    k(query_start_loc, positions, block_table, slot_mapping)
    k = paged_kv_indices_tl(block_size, page_size, len_dtype)
    k(block_table, seq_lens, kv_indptr, kv_indices, kv_last_page_len)
    k = batch_indices_positions_tl(indptr_dtype, len_dtype)
    k(append_indptr, seq_lens, batch_indices, positions)
    (each factory also takes pdl=False: True builds a programmatic dependent launch,
    kernels/tl_launch.py, sm_90+)

query_start_loc / append_indptr  (>= B + 1,) of `indptr_dtype` (int32 or int64); entries past B
                 are never read.
positions        (P,) of `pos_dtype` (int32 or int64), P >= the output length.
block_table      (B, max_blocks) int32, row stride `bt_stride` >= max_blocks, last dim contiguous.
seq_lens         (B,) of `len_dtype` (int32 or int64).
slot_mapping     (n,) int64; kv_indptr (B + 1,), kv_indices (capacity,), kv_last_page_len (B,),
                 batch_indices (n,), positions (n,): int32. All contiguous.

Semantics are `kernels.get_kv_index.ref` (the contract), exactly. B, max_blocks, the block-table
row stride, P, n and the capacity are all dynamic, so one compile per (block size, page size,
index dtypes) serves every batch, table shape and padded token count; block_size and page_size are
compiled in (divisions by constants). B >= 1, n >= 1 (the interface launches nothing otherwise)
and B * max_blocks * (block_size // page_size) < 2**31 (checked by the interface) keep every page
count and prefix in int32; slots and block-table offsets are computed in int64.

Each output element needs the request that owns it, a search over a prefix array (the given
indptr, or the page-count prefix of seq_lens). Every kernel is one launch of 256-thread blocks,
one output element per thread, and every block builds the prefix array it needs in its own shared
memory, then binary-searches it there (10 or 11 shared-memory steps, about 30 cycles each), so:
  * no second launch and no cross-block communication (a one-block prefix kernel followed by a
    search kernel costs a second launch; one block doing everything serialises a 16384-token
    prefill on one SM; a decoupled look-back needs a zeroed workspace and atomics);
  * the per-token chain of dependent global loads is two: the indptr (or seq_lens) chunk, loaded
    by all threads at once with every load in flight, then the block-table entry. A binary search
    in global memory would be 11 dependent L2 round trips (~1.5 us at B = 1024), past the budget
    of a launch-bound kernel.
The redundant per-block work is one coalesced read of at most 8 KiB (16 KiB for int64) of indptr
per block, served by L2 after the first block. Batches larger than one shared-memory chunk (2047
requests for the token kernels, 1024 for the paged one) walk the prefix chunk by chunk, carrying the
running total, so any B is correct; B <= 1024 is one chunk.

paged_kv_indices: block b of the grid owns kv_indices[b * 1024, (b + 1) * 1024) (4 entries per
thread); each block scans the page counts (4 requests per thread: warp shuffles, then the
per-warp totals from shared memory, a fixed order, no atomics), so block 0 also writes kv_indptr
and kv_last_page_len. The grid is ceil((capacity + 1) / 1024) blocks, at least one, so the
index set of a batch with capacity 0 is still written.
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import tilelang
import tilelang.language as T

from kernels.get_kv_index.ref import (
    BACKEND_INDEX_DTYPES as INDEX_DTYPES,
    INT32_MAX,
    batch_indices_positions_shipped_configs,
    check_dtypes,
    check_sizes,
    paged_kv_indices_shipped_configs,
    slot_mapping_shipped_configs,
)
from kernels.tl_launch import dependent_entry
from kernels.tl_scan import block_scan_macro

__all__ = [
    "INDEX_DTYPES",
    "batch_indices_positions_shipped_configs",
    "batch_indices_positions_tl",
    "paged_kv_indices_shipped_configs",
    "paged_kv_indices_tl",
    "slot_mapping_shipped_configs",
    "slot_mapping_tl",
]

_THREADS = 256
_WARP = 32
_WARPS = _THREADS // _WARP
# Token kernels: one token per thread; the indptr is staged 2048 entries at a time (8 loads per
# thread, all in flight), so one chunk holds B <= 2047 and the search takes 11 steps.
_INDPTR_PER_THREAD = 8
_INDPTR_CHUNK = _THREADS * _INDPTR_PER_THREAD
_INDPTR_STEPS = 11
# Paged kernel: 4 consecutive requests per thread in the scan (a 1024-request chunk, searched in 10
# steps) and 4 kv_indices entries per thread (1024 per block).
_SCAN_PER_THREAD = 4
_SCAN_CHUNK = _THREADS * _SCAN_PER_THREAD
_SCAN_STEPS = 10
_ENTRIES_PER_THREAD = 4
_ENTRIES = _THREADS * _ENTRIES_PER_THREAD


@T.macro
def _find_request(indptr, n_req, tok, tx, req, end, lo, staged, stage):
    """req[0] = the b in [0, n_req) with indptr[b] <= tok < indptr[b + 1] (else -1), end[0] =
    indptr[b + 1]. Every thread of the block must call it (it synchronises)."""
    req[0] = -1
    end[0] = 0
    for c in T.serial(T.ceildiv(n_req, _INDPTR_CHUNK - 1)):
        # Chunks overlap by one entry, so each holds the upper bound of its last request.
        base = c * (_INDPTR_CHUNK - 1)
        count = T.min(_INDPTR_CHUNK, n_req + 1 - base)
        # All loads first (registers), then the shared-memory stores: one L2 round trip.
        for k in T.unroll(_INDPTR_PER_THREAD):
            if k * _THREADS + tx < count:
                staged[k] = indptr[base + k * _THREADS + tx]
        for k in T.unroll(_INDPTR_PER_THREAD):
            if k * _THREADS + tx < count:
                stage[k * _THREADS + tx] = staged[k]
        T.sync_threads()
        if stage[0] <= tok and tok < stage[count - 1]:
            # The largest lo <= count - 2 with stage[lo] <= tok; stage[lo] <= tok holds throughout.
            lo[0] = 0
            for s in T.unroll(_INDPTR_STEPS):
                if lo[0] + (_INDPTR_CHUNK >> (s + 1)) <= count - 2:
                    if stage[lo[0] + (_INDPTR_CHUNK >> (s + 1))] <= tok:
                        lo[0] += _INDPTR_CHUNK >> (s + 1)
            # Always true for a non-decreasing indptr; keeps a non-monotone one in bounds.
            if tok < stage[lo[0] + 1]:
                req[0] = base + lo[0]
                end[0] = stage[lo[0] + 1]
        # The next chunk overwrites `stage` only after every thread has searched it.
        T.sync_threads()


@tilelang.jit
def slot_mapping_tl(block_size: int, indptr_dtype: str, pos_dtype: str, *, pdl: bool = False):
    """Compiled kernel(query_start_loc, positions, block_table, slot_mapping) (memoised); pdl: a
    programmatic dependent launch (kernels/tl_launch.py, sm_90+)."""
    check_sizes("slot_mapping", block_size)
    check_dtypes("slot_mapping", indptr_dtype=indptr_dtype, pos_dtype=pos_dtype)
    B, M, S = T.dynamic("B"), T.dynamic("max_blocks"), T.dynamic("bt_stride", "int64")
    Q, P, n = T.dynamic("Q"), T.dynamic("P"), T.dynamic("n")

    @T.prim_func
    def slot_mapping(
        query_start_loc: T.Tensor((Q,), indptr_dtype),
        positions: T.Tensor((P,), pos_dtype),
        block_table: T.StridedTensor((B, M), (S, 1), "int32"),
        slots: T.Tensor((n,), "int64"),
    ):
        with T.Kernel(T.ceildiv(n, _THREADS), threads=_THREADS) as bx:
            dependent_entry(pdl)
            tx = T.get_thread_binding(0)
            tok = bx * _THREADS + tx
            req = T.alloc_local((1,), "int32")
            end = T.alloc_local((1,), indptr_dtype)
            lo = T.alloc_local((1,), "int32")
            pos = T.alloc_local((1,), "int64")
            slot = T.alloc_local((1,), "int64")
            staged = T.alloc_local((_INDPTR_PER_THREAD,), indptr_dtype)
            stage = T.alloc_shared((_INDPTR_CHUNK,), indptr_dtype)
            # Issued before the search, so its latency hides behind the indptr's.
            pos[0] = -1
            if tok < n:
                pos[0] = T.cast(positions[tok], "int64")
            _find_request(query_start_loc, B, tok, tx, req, end, lo, staged, stage)
            if tok < n:
                slot[0] = -1
                if req[0] >= 0 and pos[0] >= 0:
                    if pos[0] // block_size < T.cast(M, "int64"):
                        block = block_table[T.cast(req[0], "int64"), pos[0] // block_size]
                        if block >= 0:
                            slot[0] = T.cast(block, "int64") * block_size + pos[0] % block_size
                slots[tok] = slot[0]

    return slot_mapping


@tilelang.jit
def batch_indices_positions_tl(indptr_dtype: str, len_dtype: str, *, pdl: bool = False):
    """Compiled kernel(append_indptr, seq_lens, batch_indices, positions) (memoised); pdl as above."""
    check_dtypes("batch_indices_positions", indptr_dtype=indptr_dtype, len_dtype=len_dtype)
    B, Q, n = T.dynamic("B"), T.dynamic("Q"), T.dynamic("n")

    @T.prim_func
    def batch_indices_positions(
        append_indptr: T.Tensor((Q,), indptr_dtype),
        seq_lens: T.Tensor((B,), len_dtype),
        batch_indices: T.Tensor((n,), "int32"),
        positions: T.Tensor((n,), "int32"),
    ):
        with T.Kernel(T.ceildiv(n, _THREADS), threads=_THREADS) as bx:
            dependent_entry(pdl)
            tx = T.get_thread_binding(0)
            tok = bx * _THREADS + tx
            req = T.alloc_local((1,), "int32")
            end = T.alloc_local((1,), indptr_dtype)
            lo = T.alloc_local((1,), "int32")
            pos = T.alloc_local((1,), "int64")
            staged = T.alloc_local((_INDPTR_PER_THREAD,), indptr_dtype)
            stage = T.alloc_shared((_INDPTR_CHUNK,), indptr_dtype)
            _find_request(append_indptr, B, tok, tx, req, end, lo, staged, stage)
            if tok < n:
                pos[0] = -1
                if req[0] >= 0:
                    # seq_len - append_len + (tok - start) == seq_len - end + tok, in int64.
                    pos[0] = T.cast(seq_lens[T.cast(req[0], "int64")], "int64") - T.cast(end[0], "int64") + tok
                if pos[0] >= 0 and pos[0] <= INT32_MAX:
                    batch_indices[tok] = req[0]
                    positions[tok] = T.cast(pos[0], "int32")
                else:
                    batch_indices[tok] = -1
                    positions[tok] = -1

    return batch_indices_positions


@tilelang.jit
def paged_kv_indices_tl(block_size: int, page_size: int, len_dtype: str, *, pdl: bool = False):
    """Compiled kernel(block_table, seq_lens, kv_indptr, kv_indices, kv_last_page_len) (memoised); pdl as
    above."""
    check_sizes("paged_kv_indices", block_size, page_size)
    check_dtypes("paged_kv_indices", len_dtype=len_dtype)
    r = block_size // page_size
    B, M, S = T.dynamic("B"), T.dynamic("max_blocks"), T.dynamic("bt_stride", "int64")
    Bp, cap = T.dynamic("B_plus_1"), T.dynamic("capacity")
    K = _SCAN_PER_THREAD
    scan_block = block_scan_macro(_WARPS)

    @T.prim_func
    def paged_kv_indices(
        block_table: T.StridedTensor((B, M), (S, 1), "int32"),
        seq_lens: T.Tensor((B,), len_dtype),
        kv_indptr: T.Tensor((Bp,), "int32"),
        kv_indices: T.Tensor((cap,), "int32"),
        kv_last_page_len: T.Tensor((B,), "int32"),
    ):
        with T.Kernel(T.ceildiv(cap + 1, _ENTRIES), threads=_THREADS) as bx:
            dependent_entry(pdl)
            tx = T.get_thread_binding(0)
            warp, lane = tx // _WARP, tx % _WARP
            lens = T.alloc_local((K,), "int64")
            pages = T.alloc_local((K,), "int32")
            mine = T.alloc_local((1,), "int32")  # this thread's pages in the chunk
            scan = T.alloc_local((1,), "int32")  # inclusive prefix of `mine` within the warp
            before = T.alloc_local((1,), "int32")  # pages of the chunk in lower warps
            total = T.alloc_local((1,), "int32")  # pages of the chunk
            carry = T.alloc_local((1,), "int32")  # pages of every earlier chunk
            run = T.alloc_local((1,), "int32")
            lo = T.alloc_local((1,), "int32")
            starts = T.alloc_shared((_SCAN_CHUNK + 1,), "int32")
            warp_total = T.alloc_shared((_WARPS,), "int32")
            carry[0] = 0
            for c in T.serial(T.ceildiv(B, _SCAN_CHUNK)):
                first = c * _SCAN_CHUNK + tx * K
                mine[0] = 0
                for k in T.unroll(K):
                    lens[k] = 0
                    if first + k < B:
                        # What the table can describe: a longer length is clamped, a negative one empty.
                        lens[k] = T.max(T.min(T.cast(seq_lens[first + k], "int64"), T.cast(M, "int64") * block_size), 0)
                    pages[k] = T.cast((lens[k] + (page_size - 1)) // page_size, "int32")
                    mine[0] += pages[k]
                scan_block(mine, scan, before, total, warp_total, warp, lane)
                run[0] = carry[0] + before[0] + scan[0] - mine[0]
                for k in T.unroll(K):
                    starts[tx * K + k] = run[0]
                    if bx == 0 and first + k < B:
                        kv_indptr[first + k] = T.min(run[0], cap)
                        kv_last_page_len[first + k] = T.if_then_else(
                            pages[k] > 0, T.cast(lens[k] - T.cast(pages[k] - 1, "int64") * page_size, "int32"), 0
                        )
                    run[0] += pages[k]
                if tx == 0:
                    starts[_SCAN_CHUNK] = carry[0] + total[0]
                T.sync_threads()
                for k in T.unroll(_ENTRIES_PER_THREAD):
                    e = bx * _ENTRIES + k * _THREADS + tx
                    if e < cap and e >= carry[0] and e < carry[0] + total[0]:
                        # The largest lo with starts[lo] <= e: a request with pages (empty ones
                        # share their start with the next request, which is further right).
                        lo[0] = 0
                        for s in T.unroll(_SCAN_STEPS):
                            if starts[lo[0] + (_SCAN_CHUNK >> (s + 1))] <= e:
                                lo[0] += _SCAN_CHUNK >> (s + 1)
                        p = e - starts[lo[0]]
                        block = block_table[T.cast(c * _SCAN_CHUNK + lo[0], "int64"), p // r]
                        page = T.cast(block, "int64") * r + p % r
                        kv_indices[e] = T.if_then_else(block >= 0 and page <= INT32_MAX, T.cast(page, "int32"), -1)
                carry[0] += total[0]
                # The next chunk overwrites warp_total and starts only after every thread read them.
                T.sync_threads()
            for k in T.unroll(_ENTRIES_PER_THREAD):
                e = bx * _ENTRIES + k * _THREADS + tx
                if e >= carry[0] and e < cap:
                    kv_indices[e] = -1
            if bx == 0 and tx == 0:
                kv_indptr[B] = T.min(carry[0], cap)

    return paged_kv_indices
