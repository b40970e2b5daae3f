"""NVIDIA TileLang implementation of `candidate_blocks`: per-query top-k KV blocks with forced sink and
local blocks, ascending ids, optionally mapped to pages.

    k = candidate_blocks_tl(NB, k, num_sink, num_local, n_dtype, req_dtype=None)
    k(scores, n_t, ids)                              # req_dtype None: block ids
    k(scores, n_t, block_table, req_index, ids)      # req_dtype int32/int64: pages

scores       (t, NB) float32, contiguous.
n_t          (t,) of `n_dtype` (int32 or int64): causal block counts, clamped to [0, NB].
block_table  (B, max_blocks) int32, row stride `bt_stride` >= max_blocks, last dim contiguous;
             B, max_blocks and the stride are dynamic.
req_index    (t,) of `req_dtype`: the block-table row of each query (outside [0, B) -> -1).
ids          (t, k) int32, contiguous.

Semantics are `kernels.candidate_blocks.ref` (the contract), exactly: ranking keys are the
order-preserving uint32 map of the fp32 score (-0.0 read as +0.0, NaN -> 1, non-candidates -> 0,
sinks and local blocks above every score), the min(k, n) largest keys are kept, equal keys go to
the lower block id, ids are written ascending then -1 padded.

Algorithm (no sort). One block of 256 threads per query row; t is dynamic (T.dynamic), NB and k
are compiled in; one launch, no host sync, no global atomics, no workspace.
  1. Load. Thread tx loads scores[row, tx + 256 i] (coalesced 4-byte loads, all in flight), turns
     each into its ranking key in registers, and stores the key at its block id in shared memory.
  2. Radix select of the threshold. With need = min(k, n), four passes over the key bits, 8 at a
     time from the top: a 256-bin shared-memory histogram of the digit of the keys that match the
     prefix found so far (shared atomicAdd: integer counts are exact whatever their order), then a
     block prefix scan of the bins from the highest digit down (kernels/tl_scan.py, fixed order)
     finds the bin holding the need-th largest key; the thread owning it publishes the digit and
     the count still needed inside it. After four passes the exact threshold key `thr` is known,
     and `need` is how many keys equal to thr are taken. When n <= k every candidate is taken and
     the passes are skipped (thr = 0, the non-candidate key, and need = 0).
  3. Stable compaction. Thread tx reads its contiguous block ids [tx * per, (tx + 1) * per) from
     shared memory and counts keys > thr (gt) and == thr (eq); one block scan of (gt << 16 | eq)
     (both <= 2048 < 2**16) gives each thread the counts of lower ids, so its first output slot is
     gt_before + min(eq_before, need): ties at the threshold are taken lowest ids first. Each
     thread then writes its selected ids (or pages) in ascending order; slots [need_total, k) are
     -1.
Why: a full sort (or torch.topk + sort) of NB keys per row costs O(NB log NB) shared-memory
passes and a second sort for ascending output; radix select is 4 histogram passes over keys held
in registers, after which the output order comes free from the id-ordered compaction. A row is at
most 8 KiB of scores, so one block per row keeps every pass in shared memory and the kernel's
DRAM traffic is one read of the scores plus the (t, k) output. Several rows per block would only
pay off for NB far below 256, which block-sparse attention over 64-token blocks rarely meets.

t == 0 must not be launched (the interface launches nothing). Row offsets are 64-bit.
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import tilelang
import tilelang.language as T

from kernels.candidate_blocks.ref import BACKEND_INDEX_DTYPES as INDEX_DTYPES
from kernels.candidate_blocks.ref import MAX_K, MAX_NB, SINK_KEY, check_static, shipped_configs
from kernels.tl_scan import block_scan_macro

__all__ = ["INDEX_DTYPES", "MAX_K", "MAX_NB", "candidate_blocks_shipped_configs", "candidate_blocks_tl"]

_THREADS = 256
_WARP = 32
_WARPS = _THREADS // _WARP
# 8-bit digits: a 256-bin histogram, one bin per thread in the scan, four passes over 32 bits.
_BINS = 256
_PASSES = 4


def candidate_blocks_shipped_configs() -> list[tuple[int, int, int, int, str, str | None]]:
    """(NB, k, num_sink, num_local, n_dtype, req_dtype): see ref.shipped_configs."""
    return shipped_configs()


@tilelang.jit
def candidate_blocks_tl(NB: int, k: int, num_sink: int, num_local: int, n_dtype: str, req_dtype=None):
    """Compiled kernel(scores, n_t[, block_table, req_index], ids) for these static arguments."""
    check_static("candidate_blocks", NB, k, num_sink, num_local, n_dtype, req_dtype)
    per = -(-NB // _THREADS)
    scan_block = block_scan_macro(_WARPS)
    t = T.dynamic("t")
    B, M, S = T.dynamic("B"), T.dynamic("max_blocks"), T.dynamic("bt_stride", "int64")
    paged = req_dtype is not None

    @T.macro
    def write(ids, block_table, req_index, row, pos, block):
        if paged:
            # The clamped indices keep the load in bounds; invalid rows, ids and entries give -1.
            r = T.cast(req_index[row], "int64")
            page = T.if_then_else(
                block >= 0 and block < M and r >= 0 and r < T.cast(B, "int64"),
                block_table[T.max(T.min(r, T.cast(B, "int64") - 1), 0), T.max(T.min(block, M - 1), 0)],
                -1,
            )
            ids[row, pos] = T.max(page, -1)
        else:
            ids[row, pos] = block

    @T.macro
    def select(scores, n_t, block_table, req_index, ids):
        with T.Kernel(t, threads=_THREADS) as bx:
            tx = T.get_thread_binding(0)
            warp, lane = tx // _WARP, tx % _WARP
            row = T.cast(bx, "int64")
            keys = T.alloc_local((per,), "uint32")
            s = T.alloc_local((per,), "float32")
            mine = T.alloc_local((1,), "int32")
            scan = T.alloc_local((1,), "int32")
            before = T.alloc_local((1,), "int32")
            total = T.alloc_local((1,), "int32")
            slot = T.alloc_local((1,), "int32")
            taken_eq = T.alloc_local((1,), "int32")
            hit = T.alloc_local((1,), "int32")
            skeys = T.alloc_shared((per * _THREADS,), "uint32")
            hist = T.alloc_shared((_BINS,), "int32")
            warp_total = T.alloc_shared((_WARPS,), "int32")
            # state[0] = the threshold key's digits found so far, state[1] = keys still needed at it.
            state = T.alloc_shared((2,), "uint32")
            n = T.max(T.min(T.cast(n_t[bx], "int64"), NB), 0)
            need = T.cast(T.min(n, k), "int32")
            # 1. Every load first (registers), then the keys.
            for i in T.unroll(per):
                s[i] = T.float32(0)
                if tx + i * _THREADS < NB:
                    s[i] = scores[row, tx + i * _THREADS]
            for i in T.unroll(per):
                j = tx + i * _THREADS
                # +0.0 for either zero, so equal scores tie whatever their sign bit.
                bits = T.reinterpret(T.if_then_else(s[i] == T.float32(0), T.float32(0), s[i]), "uint32")
                score_key = T.if_then_else(bits >= T.uint32(0x80000000), bits ^ T.uint32(0xFFFFFFFF), bits | T.uint32(0x80000000))
                d = T.cast(n, "int32") - 1 - j
                keys[i] = T.if_then_else(
                    j >= n,
                    T.uint32(0),
                    T.if_then_else(
                        j < num_sink,
                        T.uint32(SINK_KEY),
                        T.if_then_else(d < num_local, T.uint32(SINK_KEY - 1) - T.cast(d, "uint32"), T.if_then_else(T.isnan(s[i]), T.uint32(1), score_key)),
                    ),
                )
                skeys[j] = keys[i]
            if tx == 0:
                state[0] = T.uint32(0)
                state[1] = T.uint32(0)
            T.sync_threads()
            # 2. Radix select (the branch is uniform over the block: n is per row).
            if n > k:
                if tx == 0:
                    state[1] = T.cast(need, "uint32")
                for p in T.serial(_PASSES):
                    shift = 24 - 8 * p
                    hist[tx] = 0
                    T.sync_threads()
                    for i in T.unroll(per):
                        # Keys whose higher digits equal the prefix found so far (every key in pass 0).
                        if p == 0 or (keys[i] >> T.cast(shift + 8, "uint32")) == (state[0] >> T.cast(shift + 8, "uint32")):
                            T.atomic_add(hist[T.cast((keys[i] >> T.cast(shift, "uint32")) & T.uint32(0xFF), "int32")], 1)
                    T.sync_threads()
                    # Thread tx holds digit 255 - tx: the scan counts keys from the top down.
                    mine[0] = hist[_BINS - 1 - tx]
                    scan_block(mine, scan, before, total, warp_total, warp, lane)
                    # Exactly one bin holds the need-th largest key: lower bins count fewer keys.
                    hit[0] = 0
                    if before[0] + scan[0] - mine[0] < T.cast(state[1], "int32") and T.cast(state[1], "int32") <= before[0] + scan[0]:
                        hit[0] = 1
                        slot[0] = T.cast(state[1], "int32") - (before[0] + scan[0] - mine[0])
                    # Every thread reads state before the owner of the bin rewrites it.
                    T.sync_threads()
                    if hit[0] != 0:
                        state[0] = state[0] | (T.cast(_BINS - 1 - tx, "uint32") << T.cast(shift, "uint32"))
                        state[1] = T.cast(slot[0], "uint32")
                    T.sync_threads()
            # 3. Stable compaction over contiguous ids.
            thr = state[0]
            take = T.cast(state[1], "int32")
            mine[0] = 0
            for i in T.unroll(per):
                if tx * per + i < NB:
                    mine[0] += T.if_then_else(skeys[tx * per + i] > thr, 1 << 16, 0)
                    mine[0] += T.if_then_else(skeys[tx * per + i] == thr, 1, 0)
            scan_block(mine, scan, before, total, warp_total, warp, lane)
            slot[0] = before[0] + scan[0] - mine[0]
            taken_eq[0] = T.min(slot[0] & 0xFFFF, take)
            slot[0] = (slot[0] >> 16) + taken_eq[0]
            for i in T.unroll(per):
                if tx * per + i < NB:
                    if skeys[tx * per + i] > thr:
                        write(ids, block_table, req_index, row, slot[0], tx * per + i)
                        slot[0] += 1
                    elif skeys[tx * per + i] == thr and taken_eq[0] < take:
                        write(ids, block_table, req_index, row, slot[0], tx * per + i)
                        slot[0] += 1
                        taken_eq[0] += 1
            for c in T.serial(T.ceildiv(k, _THREADS)):
                if c * _THREADS + tx >= need and c * _THREADS + tx < k:
                    write(ids, block_table, req_index, row, c * _THREADS + tx, -1)

    if not paged:

        @T.prim_func
        def candidate_blocks(
            scores: T.Tensor((t, NB), "float32"),
            n_t: T.Tensor((t,), n_dtype),
            ids: T.Tensor((t, k), "int32"),
        ):
            select(scores, n_t, None, None, ids)

        return candidate_blocks

    @T.prim_func
    def candidate_pages(
        scores: T.Tensor((t, NB), "float32"),
        n_t: T.Tensor((t,), n_dtype),
        block_table: T.StridedTensor((B, M), (S, 1), "int32"),
        req_index: T.Tensor((t,), req_dtype),
        ids: T.Tensor((t, k), "int32"),
    ):
        select(scores, n_t, block_table, req_index, ids)

    return candidate_pages
