"""NVIDIA TileLang implementations of `schedule_mtp_varlen`: the next varlen step's schedule after an
MTP verification step, and its attention work split, in one launch. Three kernels, one contract:

    k = schedule_mtp_varlen_tl(num_draft, block_size, num_sm_parts, len_dtype, acc_dtype, pdl=False)              # any B
    k = schedule_mtp_varlen_warp_tl(num_draft, block_size, num_sm_parts, len_dtype, acc_dtype, slots, pdl=False)  # B <= 32 slots
    k = schedule_mtp_varlen_lane_tl(num_draft, block_size, num_sm_parts, len_dtype, acc_dtype, warps, pdl=False)  # B <= 32 warps
    k(seq_lens_before, num_accepted, new_seq_lens, query_start_loc, positions, request_ids,
      last_hidden_rows, tile_metadata, num_splits)

seq_lens_before  (B,) of `len_dtype` (int32 or int64); num_accepted (B,) of `acc_dtype`.
new_seq_lens, last_hidden_rows (B,); query_start_loc, num_splits (B + 1,); positions, request_ids
(num_tokens,); tile_metadata (num_sm_parts, 8): int32, all contiguous.

Semantics are `kernels.schedule_mtp_varlen.ref` (the contract), exactly. B and num_tokens are
dynamic (one compile per (k, block_size, num_sm_parts, dtypes[, slots]) serves every batch and padded token
count); 1 <= B <= MAX_BATCH (the interface launches nothing for B == 0 and rejects larger batches).
Every active length is at most (INT32_MAX // MAX_BATCH) * block_size, so every length, block count
and prefix fits int32; the part boundaries p * per_part are computed in int64.

schedule_mtp_varlen_tl, one block of 512 threads: the whole computation is three prefix sums over B <= 4096 requests and a
few hundred searches, a few microseconds of latency at most, so a second launch or cross-block
communication would cost more than it saves. Thread t owns the keff = ceil(B / 512) consecutive
requests keff * t .. keff * t + keff - 1 (one request each up to B = 512, at most 8 at B = 4096): the
per-request work is a serial chain within its thread (two integer divisions in the split count
alone), so spreading a small batch over the whole block keeps that chain one request long. Its keff
<= 8 slots are unrolled with the unused ones masked (all its loads in flight at once). Three
fixed-order block scans (kernels/tl_scan.py: warp shuffles, then per-warp totals; no atomics, so the
result is deterministic) give the query-token prefix (query_start_loc), the KV-block prefix (kept in
shared memory for the searches) and, once per_part = ceil(total / num_sm_parts) is known, the
num_splits prefix. Each thread then writes its requests' 1 + k tokens, and the parts are handed out
one per thread per round: a part finds the requests of its first and last block by binary search
over the shared block prefix (12 steps). Tokens at or past query_start_loc[B] are padded with -1 by
a strided loop.

schedule_mtp_varlen_warp_tl, for decode batches (1 <= B <= 32 * slots, slots in WARP_KERNEL_SLOTS;
the interface picks the fewest slots that hold B, and the kernel by api.WARP_KERNEL_MAX_BATCH). The
block kernel's time at small B is its chain of dependent steps (three block scans, 24 dependent
shared loads per part) and 16 warps issuing it, not data; this one keeps the chain to what one warp
needs. Lane l holds requests b = 32 i + l of slots i < slots (coalesced loads, all issued before any
use). Each warp computes the whole request side itself, so warps never wait for each other (no
block barrier, no shared memory between warps): the query prefix is q times a ballot count of the
active requests below; the block prefix one warp scan per slot (shuffles, the slots interleaved)
plus the slot totals in order, into the warp's own shared `starts` (one __syncwarp before reading);
num_splits needs no second scan: the (request, part) pairs below request b are one per request with
blocks plus one per part boundary strictly inside one, i.e. the boundaries in (0, start_b), counted
by a division, less those landing on a request's first block (a ballot). The warps (one per 32
parts, at most four: one per SM sub-partition) split only the writes: slot i's requests go to warp
i % warps, part p to warp (p // 32) % warps, each lane's parts in unrolled rounds whose two binary
searches (first and last block, log2(32 slots) steps over `starts`) run side by side. A first or
last request is split exactly when it starts before its part or ends after it (no division). The
-1 padding loop comes last. B <= 128 requests of at most INT32_MAX // MAX_BATCH blocks keep every
block index below 2**26 (int32); p * per_part is compared in int64.

schedule_mtp_varlen_lane_tl, for batches past the warp kernel (1 <= B <= 32 * warps, warps in
LANE_KERNEL_WARPS; the interface picks the fewest that hold B, and the kernel by
api.LANE_KERNEL_MAX_BATCH). The block kernel takes two requests a thread through three block
scans at B = 1024, and the warp kernel's chain grows with its slots; here thread b holds request b
alone, so every warp's chain is the warp kernel's at one slot, and the warps meet
at two block barriers: after the first, lane w of every warp reads warp w's block and active
counts, and warp sums (one redux.sync each: over the lanes below the warp's index for its offsets,
over all lanes for the totals, so per_part) replace a scan; after the second, the same for the count
of active requests starting on a part boundary (num_splits, as in the warp kernel). Each warp lists
its active requests by rank in shared memory before the first barrier and writes its run of tokens
from that list, 32 consecutive tokens a store. Parts: one a thread a round, a binary search of
log2(32 warps) steps over the shared block prefix, run only by the warps holding the round's parts.
B <= 1024 keeps every block index below 2**29 (int32).
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import tilelang
import tilelang.language as T

from kernels.schedule_mtp_varlen.ref import (
    BACKEND_INDEX_DTYPES as INDEX_DTYPES,
    LANE_KERNEL_WARPS,
    MAX_BATCH,
    META_FIELDS,
    WARP_KERNEL_SLOTS,
    check_config,
    max_context,
    schedule_mtp_varlen_shipped_configs,
)
from kernels.tl_launch import dependent_entry
from kernels.tl_ptx import warp_sum
from kernels.tl_scan import WARP, block_scan_macro

__all__ = [
    "INDEX_DTYPES",
    "LANE_KERNEL_WARPS",
    "WARP_KERNEL_SLOTS",
    "schedule_mtp_varlen_lane_tl",
    "schedule_mtp_varlen_shipped_configs",
    "schedule_mtp_varlen_tl",
    "schedule_mtp_varlen_warp_tl",
]

_THREADS = 512
_WARPS = _THREADS // WARP
_PER_THREAD = MAX_BATCH // _THREADS
# Binary search over [0, B - 1], B <= MAX_BATCH = 2**12.
_STEPS = 12
_FIELDS = len(META_FIELDS)
# Shuffle rounds of an inclusive warp scan: log2(WARP).
_SHUFFLES = 5


def _prim_func(name: str, kernel, len_dtype: str, acc_dtype: str, P: int, B, n):
    """The entry point `name` of a kernel here around its T.macro `kernel`: the inputs, then the
    MtpSchedule fields, B and num_tokens dynamic (the factory's B and n, which its body reads)."""
    Bp = T.dynamic("B_plus_1")

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
        kernel(seq_lens_before, num_accepted, new_seq_lens, query_start_loc, positions, request_ids, last_hidden_rows, tile_metadata, num_splits)

    return schedule_mtp_varlen.with_attr("global_symbol", name)


@T.macro
def _warp_scans(incl, which, lane):
    """incl[c] for c in `which` becomes its sum over this lane and the lower lanes of the warp
    (inclusive scans, their shuffles interleaved)."""
    for d in T.unroll(_SHUFFLES):
        for c in which:
            up = T.shfl_up(incl[c], 1 << d)
            if lane >= (1 << d):
                incl[c] += up


def _lower_and_all_warps(count, lane, warp):
    """(its sum over the warps below `warp`, its sum over all warps) of a per-warp count that lane w
    holds for warp w (0 in lanes past the warps): two warp sums, one redux.sync each."""
    return warp_sum(T.if_then_else(lane < warp, count, 0)), warp_sum(count)


def _check_size(arg: str, value: int, allowed: tuple) -> None:
    """ValueError unless a small-batch kernel's size argument is one it is built for."""
    if value not in allowed:
        raise ValueError(f"schedule_mtp_varlen: {arg} must be one of {allowed}, got {value!r}")


@T.macro
def _write_owned_part(tile_metadata, p, first, last, first_start, first_end, last_start, last_end, g0, g_last, per_part):
    """Part p owns global blocks [g0, g_last] (per_part >= 1): `first` and `last` are the requests
    of those blocks, [first_start, first_end) and [last_start, last_end) their global blocks."""
    tile_metadata[p, 0] = first
    tile_metadata[p, 1] = g0 - first_start
    tile_metadata[p, 2] = last
    tile_metadata[p, 3] = g_last + 1 - last_start
    tile_metadata[p, 4] = p - T.truncdiv(first_start, per_part)
    # A request is split when it starts before this part or ends after it.
    tile_metadata[p, 5] = T.if_then_else(first_start < g0 or first_end - g0 > per_part, 1, 0)
    tile_metadata[p, 6] = T.if_then_else(last_start < g0 or last_end - g0 > per_part, 1, 0)
    tile_metadata[p, 7] = g_last + 1 - g0


@T.macro
def _write_unowned_part(tile_metadata, p):
    """Part p owns no block: -1 requests, zero offsets, counts and flags."""
    tile_metadata[p, 0] = -1
    tile_metadata[p, 2] = -1
    for c in T.unroll(_FIELDS):
        if c != 0 and c != 2:
            tile_metadata[p, c] = 0


@tilelang.jit
def schedule_mtp_varlen_tl(num_draft: int, block_size: int, num_sm_parts: int, len_dtype: str, acc_dtype: str, *, pdl: bool = False):
    """Compiled kernel(seq_lens_before, num_accepted, *MtpSchedule fields) (memoised); pdl: a
    programmatic dependent launch (kernels/tl_launch.py, sm_90+)."""
    check_config("schedule_mtp_varlen", num_draft, block_size, num_sm_parts, len_dtype=len_dtype, acc_dtype=acc_dtype)
    q = 1 + num_draft
    cap = max_context(block_size, num_draft)
    P = num_sm_parts
    K = _PER_THREAD
    B, n = T.dynamic("B"), T.dynamic("num_tokens")
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

    @T.macro
    def kernel(seq_lens_before, num_accepted, new_seq_lens, query_start_loc, positions, request_ids, last_hidden_rows, tile_metadata, num_splits):
        with T.Kernel(1, threads=_THREADS) as _:
            dependent_entry(pdl)
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
                        _write_unowned_part(tile_metadata, p)

    return _prim_func("schedule_mtp_varlen", kernel, len_dtype, acc_dtype, P, B, n)


# The warp kernel (schedule_mtp_varlen_warp_tl). Its request work is per warp, so every warp of the
# block does it whole (they share nothing: no block barrier); the warps only split the writes.
# Up to four warps, one per 32 parts: four SM sub-partitions issue the four warps' copies of the
# request work side by side, a fifth would share an issue slot.
_MAX_WARPS = 4
# The only shared array is per warp, ordered by __syncwarp; TileLang's block barriers would put the
# chain back.
_WARP_PASS_CONFIGS = {"tl.disable_thread_storage_sync": True}


@tilelang.jit(pass_configs=_WARP_PASS_CONFIGS)
def schedule_mtp_varlen_warp_tl(num_draft: int, block_size: int, num_sm_parts: int, len_dtype: str, acc_dtype: str, slots: int, *, pdl: bool = False):
    """Compiled kernel(seq_lens_before, num_accepted, *MtpSchedule fields) for batches of
    1 <= B <= 32 * slots requests, slots one of WARP_KERNEL_SLOTS (memoised); pdl as above."""
    check_config("schedule_mtp_varlen", num_draft, block_size, num_sm_parts, len_dtype=len_dtype, acc_dtype=acc_dtype)
    _check_size("slots", slots, WARP_KERNEL_SLOTS)
    q = 1 + num_draft
    cap = max_context(block_size, num_draft)
    P, R = num_sm_parts, slots
    # One warp per 32 parts, at most _MAX_WARPS; a lane takes its parts in `rounds` unrolled rounds.
    warps = min(-(-P // WARP), _MAX_WARPS)
    rounds = -(-P // (WARP * warps))
    # Binary search over [0, B - 1], B <= 32 * R, a power of two.
    steps = (WARP * R).bit_length() - 1
    B, n = T.dynamic("B"), T.dynamic("num_tokens")

    @T.macro
    def kernel(seq_lens_before, num_accepted, new_seq_lens, query_start_loc, positions, request_ids, last_hidden_rows, tile_metadata, num_splits):
        with T.Kernel(1, threads=WARP * warps) as _:
            dependent_entry(pdl)
            tx = T.get_thread_binding(0)
            warp, lane = tx // WARP, tx % WARP
            s_in = T.alloc_local((R,), len_dtype)
            a_in = T.alloc_local((R,), acc_dtype)
            lens = T.alloc_local((R,), "int32")  # next length, 0 when inactive
            acc = T.alloc_local((R,), "int32")  # accepted drafts, clamped
            blocks = T.alloc_local((R,), "int32")
            incl = T.alloc_local((R,), "int32")  # inclusive block prefix within the slot's 32 requests
            start = T.alloc_local((R,), "int32")  # the request's first global block
            busy = T.alloc_local((R,), "uint32")  # ballot: requests with blocks (the active ones)
            run = T.alloc_local((3,), "int32")  # over the lower slots: blocks, busy, aligned requests
            g0 = T.alloc_local((rounds,), "int32")
            g_last = T.alloc_local((rounds,), "int32")
            fr = T.alloc_local((rounds,), "int32")
            lr = T.alloc_local((rounds,), "int32")
            # starts[w, b] = the first global block of request b (b = B: the total), one row per warp.
            starts = T.alloc_shared((warps, WARP * R + 1), "int32")
            lower_lanes = (T.uint32(1) << T.cast(lane, "uint32")) - T.uint32(1)

            # Request b = 32 i + lane in slot i. Every load is issued before any is used: lanes past
            # the batch read request B - 1 (B >= 1) and drop it, so no load sits in a branch.
            for i in T.unroll(R):
                s_in[i] = seq_lens_before[T.min(i * WARP + lane, B - 1)]
                a_in[i] = num_accepted[T.min(i * WARP + lane, B - 1)]
            for i in T.unroll(R):
                s = T.cast(s_in[i], "int64")
                a = T.max(T.min(T.cast(a_in[i], "int64"), num_draft), 0)
                live = i * WARP + lane < B and s >= 0 and s <= cap
                lens[i] = T.if_then_else(live, T.cast(s + a + (2 + num_draft), "int32"), 0)
                acc[i] = T.cast(a, "int32")
                # An active request has at least 2 + k tokens, so at least one block.
                busy[i] = T.cast(T.ballot_sync(lens[i] > 0), "uint32")
                blocks[i] = (lens[i] + (block_size - 1)) // block_size
                incl[i] = blocks[i]

            # Block prefix: one warp scan per slot, the slots' shuffles interleaved, then the slots'
            # totals (lane 31) carried over in order. B <= 128 requests of at most
            # INT32_MAX // MAX_BATCH blocks: every block index below fits int32 with room (< 2**26).
            _warp_scans(incl, tuple(range(R)), lane)
            run[0] = 0
            for i in T.unroll(R):
                start[i] = run[0] + incl[i] - blocks[i]
                starts[warp, i * WARP + lane + 1] = start[i] + blocks[i]
                run[0] += T.shfl_sync(incl[i], WARP - 1)
            if lane == 0:
                starts[warp, 0] = 0
            # The warp's searches read every lane's starts.
            T.sync_warp()
            # per_part >= 1 whenever a part owns a block; pp stands in for it in the divisions.
            per_part = T.truncdiv(run[0] + (P - 1), P)
            pp = T.max(per_part, 1)

            # Per-request outputs, slot i by warp i % warps. The query prefix is q times the busy
            # requests below (a ballot). num_splits[b] counts the (request, part) pairs of the
            # requests below b: one per busy request, plus one per part boundary strictly inside
            # one, i.e. the boundaries in (0, start) less those on a busy request's first block:
            # ballots again, no second scan.
            run[1] = 0
            run[2] = 0
            for i in T.unroll(R):
                below = T.truncdiv(T.max(start[i] - 1, 0), pp)
                aligned = T.cast(T.ballot_sync(lens[i] > 0 and start[i] > 0 and start[i] - 1 - below * pp == pp - 1), "uint32")
                if warp == i % warps and i * WARP + lane < B:
                    b = i * WARP + lane
                    busy_below = run[1] + T.cast(T.popcount(busy[i] & lower_lanes), "int32")
                    new_seq_lens[b] = lens[i]
                    query_start_loc[b] = q * busy_below
                    last_hidden_rows[b] = T.if_then_else(lens[i] > 0, b * q + acc[i], -1)
                    num_splits[b] = busy_below + below - run[2] - T.cast(T.popcount(aligned & lower_lanes), "int32")
                    if lens[i] > 0:
                        for j in T.unroll(q):
                            if q * busy_below + j < n:
                                positions[q * busy_below + j] = lens[i] - q + j
                                request_ids[q * busy_below + j] = b
                run[1] += T.cast(T.popcount(busy[i]), "int32")
                run[2] += T.cast(T.popcount(aligned), "int32")
            if tx == 0:
                query_start_loc[B] = q * run[1]
                num_splits[B] = run[1] + T.truncdiv(T.max(run[0] - 1, 0), pp) - run[2]

            # Parts: the lane's part p of round r owns global blocks [g0, g_last]; its first and last
            # requests by binary search over the warp's starts, every round's two searches in step.
            for r in T.unroll(rounds):
                p = (r * warps + warp) * WARP + lane
                # An unowned part (g0 >= total; p * per_part may pass int32) searches for block 0.
                owned = T.cast(p, "int64") * per_part < T.cast(run[0], "int64")
                g0[r] = T.if_then_else(owned, p * per_part, 0)
                g_last[r] = T.if_then_else(owned, T.min(g0[r] + per_part, run[0]) - 1, 0)
                fr[r] = 0
                lr[r] = 0
            for st in T.unroll(steps):
                for r in T.unroll(rounds):
                    if fr[r] + ((WARP * R) >> (st + 1)) <= B - 1:
                        if starts[warp, fr[r] + ((WARP * R) >> (st + 1))] <= g0[r]:
                            fr[r] += (WARP * R) >> (st + 1)
                    if lr[r] + ((WARP * R) >> (st + 1)) <= B - 1:
                        if starts[warp, lr[r] + ((WARP * R) >> (st + 1))] <= g_last[r]:
                            lr[r] += (WARP * R) >> (st + 1)
            for r in T.unroll(rounds):
                p = (r * warps + warp) * WARP + lane
                if p < P:
                    if T.cast(p, "int64") * per_part < T.cast(run[0], "int64"):
                        _write_owned_part(
                            tile_metadata, p, fr[r], lr[r], starts[warp, fr[r]], starts[warp, fr[r] + 1],
                            starts[warp, lr[r]], starts[warp, lr[r] + 1], g0[r], g_last[r], per_part,
                        )
                    else:
                        _write_unowned_part(tile_metadata, p)

            # Padding tokens last: a loop whose length depends on the data, off every other chain.
            for r in T.serial(T.ceildiv(T.max(n - q * run[1], 0), WARP * warps)):
                if q * run[1] + r * (WARP * warps) + tx < n:
                    positions[q * run[1] + r * (WARP * warps) + tx] = -1
                    request_ids[q * run[1] + r * (WARP * warps) + tx] = -1

    return _prim_func("schedule_mtp_varlen_warp", kernel, len_dtype, acc_dtype, P, B, n)


# The lane kernel (schedule_mtp_varlen_lane_tl): a thread per request, so a warp's chain is one
# request long at any batch it holds, and the warps meet at two block barriers.


@tilelang.jit(pass_configs=_WARP_PASS_CONFIGS)
def schedule_mtp_varlen_lane_tl(num_draft: int, block_size: int, num_sm_parts: int, len_dtype: str, acc_dtype: str, warps: int, *, pdl: bool = False):
    """Compiled kernel(seq_lens_before, num_accepted, *MtpSchedule fields) for batches of
    1 <= B <= 32 * warps requests, warps one of LANE_KERNEL_WARPS (memoised); pdl as above."""
    check_config("schedule_mtp_varlen", num_draft, block_size, num_sm_parts, len_dtype=len_dtype, acc_dtype=acc_dtype)
    _check_size("warps", warps, LANE_KERNEL_WARPS)
    q = 1 + num_draft
    cap = max_context(block_size, num_draft)
    P = num_sm_parts
    threads = WARP * warps
    # A thread takes one part a round; only the warps holding a round's parts search.
    rounds = -(-P // threads)
    # Binary search over [0, B - 1], B <= threads, a power of two.
    steps = threads.bit_length() - 1
    B, n = T.dynamic("B"), T.dynamic("num_tokens")

    @T.macro
    def kernel(seq_lens_before, num_accepted, new_seq_lens, query_start_loc, positions, request_ids, last_hidden_rows, tile_metadata, num_splits):
        with T.Kernel(1, threads=threads) as _:
            dependent_entry(pdl)
            tx = T.get_thread_binding(0)
            warp, lane = tx // WARP, tx % WARP
            lens = T.alloc_local((1,), "int32")  # next length, 0 when inactive
            blk = T.alloc_local((1,), "int32")  # inclusive block prefix within the warp
            # Lane w < warps holds warp w's counts (blocks, active requests, aligned starts).
            counts = T.alloc_local((3,), "int32")
            fr = T.alloc_local((1,), "int32")
            lr = T.alloc_local((1,), "int32")
            # starts[b] = the first global block of request b (b = B: the total).
            starts = T.alloc_shared((threads + 1,), "int32")
            warp_counts = T.alloc_shared((3, warps), "int32")
            # Each warp's active requests by rank, and their next lengths: the warp's tokens are
            # written from them, 32 consecutive tokens a store.
            active_req = T.alloc_shared((threads,), "int32")
            active_len = T.alloc_shared((threads,), "int32")
            lower_lanes = (T.uint32(1) << T.cast(lane, "uint32")) - T.uint32(1)

            # Thread b holds request b; threads past the batch read request B - 1 (B >= 1) and drop
            # it, so the load sits in no branch.
            s = T.cast(seq_lens_before[T.min(tx, B - 1)], "int64")
            a = T.max(T.min(T.cast(num_accepted[T.min(tx, B - 1)], "int64"), num_draft), 0)
            lens[0] = T.if_then_else(tx < B and s >= 0 and s <= cap, T.cast(s + a + (2 + num_draft), "int32"), 0)
            # An active request has at least 2 + k tokens, so at least one block.
            busy = T.cast(T.ballot_sync(lens[0] > 0), "uint32")
            rank = T.cast(T.popcount(busy & lower_lanes), "int32")
            warp_active = T.cast(T.popcount(busy), "int32")
            blocks = (lens[0] + (block_size - 1)) // block_size
            blk[0] = blocks
            _warp_scans(blk, (0,), lane)
            if lens[0] > 0:
                active_req[warp * WARP + rank] = tx
                active_len[warp * WARP + rank] = lens[0]
            if lane == WARP - 1:
                warp_counts[0, warp] = blk[0]
                warp_counts[1, warp] = warp_active
            T.sync_threads()

            # The lower warps' blocks and active requests. B <= 1024 requests of at most
            # INT32_MAX // MAX_BATCH blocks keep every block index below 2**29 (int32).
            for c in T.unroll(2):
                counts[c] = T.if_then_else(lane < warps, warp_counts[c, T.min(lane, warps - 1)], 0)
            blocks_before, total = _lower_and_all_warps(counts[0], lane, warp)
            # The active requests of the lower warps: this warp's first token is q times that.
            active_before, active = _lower_and_all_warps(counts[1], lane, warp)
            start = blocks_before + blk[0] - blocks
            active_below = active_before + rank
            starts[tx + 1] = start + blocks
            if tx == 0:
                starts[0] = 0
            # per_part >= 1 whenever a part owns a block; pp stands in for it in the divisions.
            per_part = T.truncdiv(total + (P - 1), P)
            pp = T.max(per_part, 1)
            # num_splits[b] counts the (request, part) pairs of the requests below b: one per
            # active request, plus one per part boundary strictly inside one, i.e. the boundaries
            # in (0, start) less those on an active request's first block (counted by a ballot, then
            # over the warps).
            below = T.truncdiv(T.max(start - 1, 0), pp)
            aligned = T.cast(T.ballot_sync(lens[0] > 0 and start > 0 and start - 1 - below * pp == pp - 1), "uint32")
            if lane == WARP - 1:
                warp_counts[2, warp] = T.cast(T.popcount(aligned), "int32")
            # Also orders `starts` and the active lists before the searches and token writes.
            T.sync_threads()
            counts[2] = T.if_then_else(lane < warps, warp_counts[2, T.min(lane, warps - 1)], 0)
            aligned_before, aligned_total = _lower_and_all_warps(counts[2], lane, warp)
            aligned_below = aligned_before + T.cast(T.popcount(aligned & lower_lanes), "int32")

            if tx < B:
                new_seq_lens[tx] = lens[0]
                query_start_loc[tx] = q * active_below
                last_hidden_rows[tx] = T.if_then_else(lens[0] > 0, tx * q + T.cast(a, "int32"), -1)
                num_splits[tx] = active_below + below - aligned_below
            if tx == 0:
                query_start_loc[B] = q * active
                num_splits[B] = active + T.truncdiv(T.max(total - 1, 0), pp) - aligned_total
            # The warp's tokens, from the first of its active requests on: token g of the run
            # belongs to its active request g // q.
            first = q * active_before
            for r in T.unroll(q):
                g = r * WARP + lane
                if g < q * warp_active and first + g < n:
                    positions[first + g] = active_len[warp * WARP + g // q] - q + g % q
                    request_ids[first + g] = active_req[warp * WARP + g // q]

            # Parts: part p owns global blocks [g0, g_last]; its first and last requests by binary
            # search over `starts`.
            for r in T.unroll(rounds):
                if (r * warps + warp) * WARP < P:
                    p = r * threads + tx
                    # An unowned part (g0 >= total; p * per_part may pass int32) searches for block 0.
                    owned = T.cast(p, "int64") * per_part < T.cast(total, "int64")
                    g0 = T.if_then_else(owned, p * per_part, 0)
                    g_last = T.if_then_else(owned, T.min(g0 + per_part, total) - 1, 0)
                    fr[0] = 0
                    lr[0] = 0
                    for st in T.unroll(steps):
                        if fr[0] + (threads >> (st + 1)) <= B - 1:
                            if starts[fr[0] + (threads >> (st + 1))] <= g0:
                                fr[0] += threads >> (st + 1)
                        if lr[0] + (threads >> (st + 1)) <= B - 1:
                            if starts[lr[0] + (threads >> (st + 1))] <= g_last:
                                lr[0] += threads >> (st + 1)
                    if p < P:
                        if owned:
                            _write_owned_part(
                                tile_metadata, p, fr[0], lr[0], starts[fr[0]], starts[fr[0] + 1], starts[lr[0]], starts[lr[0] + 1], g0, g_last, per_part
                            )
                        else:
                            _write_unowned_part(tile_metadata, p)

            # Padding tokens last: a loop whose length depends on the data, off every other chain.
            for r in T.serial(T.ceildiv(T.max(n - q * active, 0), threads)):
                if q * active + r * threads + tx < n:
                    positions[q * active + r * threads + tx] = -1
                    request_ids[q * active + r * threads + tx] = -1

    return _prim_func("schedule_mtp_varlen_lane", kernel, len_dtype, acc_dtype, P, B, n)
