"""NVIDIA TileLang implementations of `candidate_blocks`: per-query top-k KV blocks with forced sink
and local blocks, ascending ids, optionally mapped to pages. Two kernels, one contract:

    k = candidate_blocks_tl(NB, k, num_sink, num_local, n_dtype, req_dtype=None)       # a block per query
    k = candidate_blocks_pair_tl(NB, k, num_sink, num_local, n_dtype, req_dtype=None)  # two warps per query
    k(scores, n_t, ids)                              # req_dtype None: block ids
    k(scores, n_t, block_table, req_index, ids)      # req_dtype int32/int64: pages
    (each factory also takes pdl=False: True builds a programmatic dependent launch,
    kernels/tl_launch.py, sm_90+)

scores       (t, NB) float32, contiguous.
n_t          (t,) of `n_dtype` (int32 or int64): causal block counts, clamped to [0, NB].
block_table  (B, max_blocks) int32, row stride `bt_stride` >= max_blocks, last dim contiguous;
             B, max_blocks and the stride are dynamic.
req_index    (t,) of `req_dtype`: the block-table row of each query (outside [0, B) -> -1).
ids          (t, k) int32, contiguous.

Semantics are `kernels.candidate_blocks.ref` (the contract), exactly: ranking keys are the
order-preserving uint32 map of the fp32 score (-0.0 read as +0.0, NaN -> 1, non-candidates -> 0,
sinks and local blocks above every score), the min(k, n) largest keys are kept, equal keys go to
the lower block id, ids are written ascending then -1 padded. Both kernels: t is dynamic
(T.dynamic), NB and k are compiled in; one launch, no host sync, no global atomics, no workspace;
t == 0 must not be launched (the interface launches nothing); row offsets are 64-bit.

Which one: a query's select is a chain of dependent steps, so a few queries finish soonest with a
block each, and many queries go fastest with two warps each (no 8-warp block barriers, 32 warps
resident per SM at 64 registers, fewer instructions per key). The interface picks by t
(api.PAIR_KERNEL_MIN_QUERIES).

candidate_blocks_tl, a block of 256 threads per query (no sort):
  1. Load. Thread tx loads scores[row, tx + 256 i] (coalesced 4-byte loads, all in flight), turns
     each into its ranking key in registers, and stores the key at its block id in shared memory.
  2. Radix select of the threshold. With need = min(k, n), up to three passes over the key bits,
     11 + 11 + 10 from the top: a 2048-bin shared-memory histogram of the digit of the keys that
     match the prefix found so far (shared atomicAdd: integer counts are exact whatever their
     order), then a block prefix scan of the bins from the highest digit down, 8 per thread
     (kernels/tl_scan.py, fixed order), finds the thread whose bins hold the need-th largest key;
     it walks its 8 bins and publishes the digit and the count still needed inside the bin. The
     passes stop as soon as that bin is taken whole (usually after two: an 11-bit first digit
     spreads real-valued scores where 8 bits, the sign and 7 exponent bits, put most of a row in
     two bins). Then `thr` is the threshold's resolved digits, `low` the shift below them, and
     `need` how many keys with those digits are taken. When n <= k every candidate is taken and
     the passes are skipped (thr = 0, the non-candidate key, low = 0 and need = 0).
  3. Stable compaction. Thread tx reads its contiguous block ids [tx * per, (tx + 1) * per) from
     shared memory and counts keys whose digits from `low` up are > thr (gt) and == thr (eq); one
     block scan of (gt << 16 | eq) (both <= 2048 < 2**16) gives each thread the counts of lower
     ids, so its first output slot is gt_before + min(eq_before, need): ties at the threshold are
     taken lowest ids first. Each thread then writes its selected ids (or pages) in ascending
     order; slots [need_total, k) are -1.

candidate_blocks_pair_tl, a block of two warps (64 threads) per query; the kernel places its own
barriers (TileLang's automatic ones are off):
  1. Load. Only when n > k (otherwise ids 0..n-1 are written and no score is read): thread tx loads
     the candidate scores j = 64 i + tx < n (coalesced, all in flight; at most 32 per thread, so 64
     registers hold a query and 16 blocks fit an SM), and turns each into a key in registers,
     counting its top digit as it goes (radix pass 0). The key orders and ties exactly as the ref's:
     0x80000000 plus the magnitude bits, minus them for sign 1 (-0.0 meets +0.0), NaN 1, forced
     keys the ref's; ids >= n get key 0, below every candidate, so no later step tests them.
  2. Radix select over the keys, 11 + 8 + 8 + 5 bits from the top: a shared histogram per digit
     (2048 bins, then 256, 256, 32) of the keys that match the prefix found so far, filled by both
     warps' atomics. Both warps then find the bin on the same counts (so both hold the threshold in
     registers): lane l sums its share of the bins (64, then 8, then 1; 16-byte vectors read rotated
     by l, so no two lanes hit one bank), a suffix scan over the lanes finds the lane whose bins
     hold the need-th largest key, and a second suffix scan over that lane's bins (two per lane,
     then one; no second scan at one bin a lane) finds the bin. The passes stop as soon as a whole
     bin is taken, usually after two. An 11-bit first digit spreads real-valued scores over enough
     bins that the threshold bin holds a few dozen keys, where an 8-bit one (sign and 7 exponent
     bits) leaves most of a row in two bins; 256 bins separate those few dozen about as well as 2048
     do, at an eighth of the scan.
  3. Compaction. Bit i of a thread's mask marks its id 64 i + tx as taken (above the threshold bin,
     or in it when it is taken whole); a 32 x 32 bit transpose across the warp (five shuffles) gives
     lane s of warp w the lanes taken in step 2 s + w (ids 64 s + 32 w + lanes). The steps' counts,
     exchanged through shared memory and scanned in id order, place each step's ids, which its lane
     writes in order. With a tie at a fully resolved key, the tied ids' masks go the same way
     first: their counts scanned in id order tell each step how many of its lowest tied ids are
     still within `need`.
Why no sort: a full sort (or torch.topk + sort) of NB keys costs O(NB log NB) and a second sort
for the ascending output; the radix select touches each key once per pass, and the output order
comes free from the id order. A row is at most 8 KiB of scores, so a block or two warps keep it in
registers and the DRAM traffic is one read of the candidates' scores plus the (t, k) output.
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import tilelang
import tilelang.language as T

from kernels.candidate_blocks.ref import BACKEND_INDEX_DTYPES as INDEX_DTYPES
from kernels.candidate_blocks.ref import MAX_K, MAX_NB, SINK_KEY, check_static, shipped_configs
from kernels.tl_bits import lowest_set_bit
from kernels.tl_launch import dependent_entry
from kernels.tl_scan import block_scan_macro

__all__ = [
    "INDEX_DTYPES",
    "MAX_K",
    "MAX_NB",
    "candidate_blocks_shipped_configs",
    "candidate_blocks_tl",
    "candidate_blocks_pair_tl",
]

_WARP = 32
# The block kernel's radix digits, from the top: (shift, bits); 11 + 11 + 10 = 32. An 11-bit first
# digit spreads real-valued scores over enough bins that the second pass usually resolves the
# threshold (8 bits are the sign and 7 exponent bits: most of a row lands in two bins).
_DIGITS = ((21, 11), (10, 11), (0, 10))
_BINS = 1 << max(bits for _, bits in _DIGITS)


def candidate_blocks_shipped_configs() -> list[tuple[int, int, int, int, str, str | None]]:
    """(NB, k, num_sink, num_local, n_dtype, req_dtype) of both factories: see ref.shipped_configs."""
    return shipped_configs()


def _page_writer(paged: bool, B, M):
    """T.macro write(ids, block_table, req_index, row, pos, block): ids[row, pos] = the block id, or
    its page when paged."""

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

    return write


def _prim_func(select, NB: int, k: int, n_dtype: str, req_dtype, t, B, M, S):
    """The kernel's entry point around `select`: (scores, n_t, ids), or with the page table."""
    if req_dtype is None:

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


# ----------------------------------------------------------------------------------------------------
# A block per query.

_THREADS = 256
_WARPS = _THREADS // _WARP
# Bins per thread in the scan: thread tx holds bins 2047 - 8 tx - e, e = 0..7 (from the top down).
_THREAD_BINS = _BINS // _THREADS


@tilelang.jit
def candidate_blocks_tl(NB: int, k: int, num_sink: int, num_local: int, n_dtype: str, req_dtype=None, *, pdl: bool = False):
    """Compiled kernel(scores, n_t[, block_table, req_index], ids) for these static arguments."""
    check_static("candidate_blocks", NB, k, num_sink, num_local, n_dtype, req_dtype)
    per = -(-NB // _THREADS)
    scan_block = block_scan_macro(_WARPS)
    t = T.dynamic("t")
    B, M, S = T.dynamic("B"), T.dynamic("max_blocks"), T.dynamic("bt_stride", "int64")
    write = _page_writer(req_dtype is not None, B, M)

    @T.macro
    def select(scores, n_t, block_table, req_index, ids):
        with T.Kernel(t, threads=_THREADS) as bx:
            dependent_entry(pdl)
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
            wanted = T.alloc_local((1,), "int32")
            prefix = T.alloc_local((1,), "uint32")
            skeys = T.alloc_shared((per * _THREADS,), "uint32")
            hist = T.alloc_shared((_BINS,), "int32")
            warp_total = T.alloc_shared((_WARPS,), "int32")
            # state[0] = the threshold's digits found so far, state[1] = keys still needed at it,
            # state[2] = the shift below those digits, state[3] = 1 once no more digits are needed
            # (every key of the threshold bin is taken).
            state = T.alloc_shared((4,), "uint32")
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
                state[2] = T.uint32(0)
                state[3] = T.uint32(1)
            T.sync_threads()
            # 2. Radix select (the branches are uniform over the block: n and state are per row).
            if n > k:
                if tx == 0:
                    state[1] = T.cast(need, "uint32")
                    state[3] = T.uint32(0)
                T.sync_threads()
                for shift, digit_bits in _DIGITS:
                    if state[3] == T.uint32(0):
                        # In a register: a shared read among the atomics would get a barrier per key.
                        prefix[0] = state[0]
                        for e in T.unroll(_THREAD_BINS):
                            hist[tx * _THREAD_BINS + e] = 0
                        T.sync_threads()
                        for i in T.unroll(per):
                            # Keys whose higher digits equal the prefix found so far (every key in pass 0).
                            if shift + digit_bits == 32 or (keys[i] >> T.uint32(shift + digit_bits)) == (prefix[0] >> T.uint32(shift + digit_bits)):
                                T.atomic_add(hist[T.cast((keys[i] >> T.uint32(shift)) & T.uint32((1 << digit_bits) - 1), "int32")], 1)
                        T.sync_threads()
                        # Thread tx holds the 8 bins from digit 2047 - 8 tx down: the scan counts keys
                        # from the top down.
                        mine[0] = 0
                        for e in T.unroll(_THREAD_BINS):
                            mine[0] += hist[_BINS - 1 - tx * _THREAD_BINS - e]
                        scan_block(mine, scan, before, total, warp_total, warp, lane)
                        # Exactly one thread's bins hold the need-th largest key; it walks them.
                        hit[0] = 0
                        slot[0] = before[0] + scan[0] - mine[0]
                        wanted[0] = T.cast(state[1], "int32")
                        if slot[0] < wanted[0] and wanted[0] <= slot[0] + mine[0]:
                            for e in T.unroll(_THREAD_BINS):
                                if hit[0] == 0:
                                    count = hist[_BINS - 1 - tx * _THREAD_BINS - e]
                                    if wanted[0] <= slot[0] + count:
                                        hit[0] = 1 + e
                                        taken_eq[0] = count
                                    else:
                                        slot[0] += count
                        # Every thread reads state before the owner of the bin rewrites it.
                        T.sync_threads()
                        if hit[0] != 0:
                            state[0] = state[0] | (T.cast(_BINS - tx * _THREAD_BINS - hit[0], "uint32") << T.uint32(shift))
                            state[1] = T.cast(wanted[0] - slot[0], "uint32")
                            state[2] = T.uint32(shift)
                            state[3] = T.if_then_else(wanted[0] - slot[0] == taken_eq[0], T.uint32(1), T.uint32(0))
                        T.sync_threads()
            # 3. Stable compaction over contiguous ids, comparing the digits from state[2] up.
            low = state[2]
            thr = state[0] >> low
            take = T.cast(state[1], "int32")
            mine[0] = 0
            for i in T.unroll(per):
                if tx * per + i < NB:
                    mine[0] += T.if_then_else((skeys[tx * per + i] >> low) > thr, 1 << 16, 0)
                    mine[0] += T.if_then_else((skeys[tx * per + i] >> low) == thr, 1, 0)
            scan_block(mine, scan, before, total, warp_total, warp, lane)
            slot[0] = before[0] + scan[0] - mine[0]
            taken_eq[0] = T.min(slot[0] & 0xFFFF, take)
            slot[0] = (slot[0] >> 16) + taken_eq[0]
            for i in T.unroll(per):
                if tx * per + i < NB:
                    if (skeys[tx * per + i] >> low) > thr:
                        write(ids, block_table, req_index, row, slot[0], tx * per + i)
                        slot[0] += 1
                    elif (skeys[tx * per + i] >> low) == thr and taken_eq[0] < take:
                        write(ids, block_table, req_index, row, slot[0], tx * per + i)
                        slot[0] += 1
                        taken_eq[0] += 1
            for c in T.serial(T.ceildiv(k, _THREADS)):
                if c * _THREADS + tx >= need and c * _THREADS + tx < k:
                    write(ids, block_table, req_index, row, c * _THREADS + tx, -1)

    return _prim_func(select, NB, k, n_dtype, req_dtype, t, B, M, S)


# ----------------------------------------------------------------------------------------------------
# Two warps per query.

# A query's two warps: 32 keys per lane at most (NB <= 2048), half the registers of one warp per
# query, so twice the queries are in flight.
_PAIR_THREADS = 2 * _WARP
# 16 resident blocks (32 warps) per SM cap registers at 64 per thread; a block's resources free as
# soon as its query is done.
_BLOCKS_PER_SM = 16
# Room past the largest histogram for a later pass's spare bin (bin 2**bits, which takes the atomics
# of the keys outside the prefix's range); 4 keep the size a multiple of 16 bytes.
_SPARE = 4
# The pair kernel's digits: the same 11-bit first digit, then 8-bit ones. Past the first pass the
# threshold bin holds a few dozen keys, which 256 bins separate about as often as 2048 do, and a
# lane scans 8 bins instead of 64. Every digit has 5 bits or more: a bin a lane at least.
_PAIR_DIGITS = ((21, 11), (13, 8), (5, 8), (0, 5))
_PAIR_BINS = 1 << max(bits for _, bits in _PAIR_DIGITS)
_SHUFFLES = 5
# 16-byte vectors of the histogram a lane has in flight: each chunk's addresses depend on the sum so
# far (its lane is lane + min(sum, 0), the same lane), else all 16 loads are hoisted (64 registers
# beside the keys); the lane's multiple of 64 keeps the loads 16-byte vectors.
_CHUNK = 2
# Steps under one test of the row length: a test per step costs a branch per step.
_GROUP = 4
# The bit transpose's rounds: (width, the bits b with b & width == 0).
_TRANSPOSE_ROUNDS = ((16, 0x0000FFFF), (8, 0x00FF00FF), (4, 0x0F0F0F0F), (2, 0x33333333), (1, 0x55555555))
# The kernel places its own barriers and guards every access itself, so TileLang's barriers and
# bounds guards (which serialised the loads) are off.
_PASS_CONFIGS = {"tl.disable_thread_storage_sync": True, "tl.disable_safe_memory_legalize": True}


@T.macro
def suffix_scan(value, incl, lane):
    """incl[0] = the sum of value over this lane and the higher lanes of the warp."""
    incl[0] = value
    for i in T.unroll(_SHUFFLES):
        down = T.shfl_down(incl[0], 1 << i)
        if lane + (1 << i) < _WARP:
            incl[0] += down


@T.macro
def prefix_scan(value, incl, lane):
    """incl[0] = the sum of value over this lane and the lower lanes of the warp."""
    incl[0] = value
    for i in T.unroll(_SHUFFLES):
        up = T.shfl_up(incl[0], 1 << i)
        if lane >= (1 << i):
            incl[0] += up


@T.macro
def last_reaching(incl, need):
    """The highest lane whose suffix sum incl[0] reaches need[0]: suffix sums fall with the lane, so
    the lanes reaching it are 0..that one."""
    return T.cast(T.popcount(T.cast(T.ballot_sync(incl[0] >= need[0]), "uint32")), "int32") - 1


@tilelang.jit(pass_configs=_PASS_CONFIGS)
def candidate_blocks_pair_tl(NB: int, k: int, num_sink: int, num_local: int, n_dtype: str, req_dtype=None, *, pdl: bool = False):
    """Compiled kernel(scores, n_t[, block_table, req_index], ids) for these static arguments."""
    check_static("candidate_blocks", NB, k, num_sink, num_local, n_dtype, req_dtype)
    per = -(-NB // _PAIR_THREADS)
    groups = -(-per // _GROUP)
    t = T.dynamic("t")
    B, M, S = T.dynamic("B"), T.dynamic("max_blocks"), T.dynamic("bt_stride", "int64")
    write = _page_writer(req_dtype is not None, B, M)

    @T.macro
    def score_key(bits):
        """A key ordered as the ref's key of a score with the bits `bits`, equal where the ref's
        keys are equal: 0x80000000 + the magnitude, negated for sign 1 (so -0.0 and +0.0 meet at
        0x80000000; -inf is 0x00800000, +inf 0xFF800000), and NaN 1."""
        sign = T.reinterpret(T.reinterpret(bits, "int32") >> 31, "uint32")
        key = ((bits & T.uint32(0x7FFFFFFF)) ^ sign) - sign + T.uint32(0x80000000)
        return T.if_then_else(T.isnan(T.reinterpret(bits, "float32")), T.uint32(1), key)

    @T.macro
    def clear(hist, tx, bins):
        for m in T.unroll(-(-bins // (4 * _PAIR_THREADS))):
            if (m + 1) * 4 * _PAIR_THREADS <= bins or m * 4 * _PAIR_THREADS + tx * 4 < bins:
                for v in T.vectorized(4):
                    hist[m * 4 * _PAIR_THREADS + tx * 4 + v] = 0

    @T.macro
    def count(hist, bin_index, offset, digit_shift, digit_bits):
        # A key outside the prefix's range has an offset of 2**(digit_shift + digit_bits) or more
        # (keys below the prefix wrap around), so its digit clamped to 2**digit_bits is the spare
        # bin: one min, where a range test and a select cost two instructions more and a predicated
        # atomic a branch. (A local int32 keeps the min out of the 64-bit index arithmetic.)
        bin_index[0] = T.cast(T.min(offset >> digit_shift, T.uint32(1 << digit_bits)), "int32")
        T.atomic_add(hist[bin_index[0]], 1)

    @T.macro
    def find_bin(hist, lane, state, digit_shift, digit_bits):
        """Narrows the threshold to the bin of the histogram (2**digit_bits bins) holding the need-th
        largest key. Both warps run it on the same counts, so both hold the same state."""
        prefix, need, done, incl = state
        lane_bins = (1 << digit_bits) // _WARP
        T.sync_threads()
        # Level 1: lane l's bins; four or more as 16-byte vectors read rotated by l (conflict-free
        # banks).
        mine = T.alloc_local((1,), "int32")
        mine[0] = 0
        if lane_bins >= 4:
            part = T.alloc_local((4,), "int32")
            bins_lane = T.alloc_local((1,), "int32")
            bins_lane[0] = lane
            for m in T.unroll(lane_bins // 4):
                if m % _CHUNK == 0:
                    bins_lane[0] = lane + T.min(mine[0], 0)
                for v in T.vectorized(4):
                    part[v] = hist[bins_lane[0] * lane_bins + ((m + lane) % (lane_bins // 4)) * 4 + v]
                mine[0] += part[0] + part[1] + part[2] + part[3]
        else:
            mine[0] = hist[lane * lane_bins]
            if lane_bins == 2:
                mine[0] += hist[lane * lane_bins + 1]
        suffix_scan(mine[0], incl, lane)
        top = last_reaching(incl, need)
        above = T.shfl_sync(incl[0] - mine[0], top)
        if lane_bins == 2 * _WARP:
            # Level 2: lane l holds bins 2l and 2l + 1 of lane top's 64.
            hi = hist[top * lane_bins + 2 * lane + 1]
            lo = hist[top * lane_bins + 2 * lane]
            suffix_scan(hi + lo, incl, lane)
            incl[0] += above
            pair = last_reaching(incl, need)
            pair_above = T.shfl_sync(incl[0] - hi - lo, pair)
            pair_hi = T.shfl_sync(hi, pair)
            pair_lo = T.shfl_sync(lo, pair)
            upper = pair_above + pair_hi >= need[0]
            need[0] = need[0] - T.if_then_else(upper, pair_above, pair_above + pair_hi)
            prefix[0] = prefix[0] | (T.cast(top * lane_bins + 2 * pair + T.if_then_else(upper, 1, 0), "uint32") << digit_shift)
            if T.if_then_else(upper, pair_hi, pair_lo) == need[0]:
                done[0] = 1
        elif lane_bins > 1:
            # Level 2: lanes below lane_bins hold one bin each of lane top's.
            one = T.if_then_else(lane < lane_bins, hist[top * lane_bins + T.min(lane, lane_bins - 1)], 0)
            suffix_scan(one, incl, lane)
            incl[0] += above
            pick = last_reaching(incl, need)
            pick_above = T.shfl_sync(incl[0] - one, pick)
            pick_count = T.shfl_sync(one, pick)
            need[0] = need[0] - pick_above
            prefix[0] = prefix[0] | (T.cast(top * lane_bins + pick, "uint32") << digit_shift)
            if pick_count == need[0]:
                done[0] = 1
        else:
            # One bin a lane: lane top's is the bin.
            top_count = T.shfl_sync(mine[0], top)
            need[0] = need[0] - above
            prefix[0] = prefix[0] | (T.cast(top, "uint32") << digit_shift)
            if top_count == need[0]:
                done[0] = 1
        # Both warps have read the histogram before it is written again.
        T.sync_threads()

    @T.macro
    def transpose_bits(word, lane):
        """A 32 x 32 bit matrix held one row per lane (bit c of lane r's word) becomes its transpose:
        bit r of lane c. Five butterfly rounds, each swapping the off-diagonal blocks of its size."""
        for width, low_half in _TRANSPOSE_ROUNDS:
            other = T.shfl_xor(word[0], width)
            word[0] = T.if_then_else(
                (lane & width) == 0,
                (word[0] & T.uint32(low_half)) | ((other & T.uint32(low_half)) << T.uint32(width)),
                (word[0] & T.uint32(~low_half & 0xFFFFFFFF)) | ((other >> T.uint32(width)) & T.uint32(low_half)),
            )

    @T.macro
    def steps_before(hist, value, before, total, incl, lane, warp):
        """Lane s of warp w holds `value` of step 2 s + w (ids 64 s + 32 w + lanes): before[0] = the
        sum over the lower steps of both warps, total[0] = the sum over all. Through hist, free
        between the barriers."""
        hist[2 * lane + warp] = value
        T.sync_threads()
        even = hist[2 * lane]
        odd = hist[2 * lane + 1]
        prefix_scan(even + odd, incl, lane)
        total[0] = T.shfl_sync(incl[0], _WARP - 1)
        before[0] = incl[0] - odd - T.if_then_else(warp == 0, even, 0)
        T.sync_threads()

    @T.macro
    def select(scores, n_t, block_table, req_index, ids):
        with T.Kernel(t, threads=_PAIR_THREADS) as bx:
            T.annotate_min_blocks_per_sm(_BLOCKS_PER_SM)
            dependent_entry(pdl)
            tx = T.get_thread_binding(0)
            warp, lane = tx // _WARP, tx % _WARP
            row = T.cast(bx, "int64")
            keys = T.alloc_local((per,), "uint32")
            bin_index = T.alloc_local((1,), "int32")
            # The threshold: keys above prefix's bin are taken, and of the keys in it the `need`
            # lowest ids; done: that bin is taken whole (else it is one key: all 32 bits resolved).
            prefix = T.alloc_local((1,), "uint32")
            need = T.alloc_local((1,), "int32")
            done = T.alloc_local((1,), "int32")
            incl = T.alloc_local((1,), "int32")
            state = (prefix, need, done, incl)
            chosen = T.alloc_local((1,), "uint32")
            tied = T.alloc_local((1,), "uint32")
            rest = T.alloc_local((1,), "int32")
            before = T.alloc_local((1,), "int32")
            total = T.alloc_local((1,), "int32")
            hist = T.alloc_shared((_PAIR_BINS + _SPARE,), "int32")
            n = T.cast(T.max(T.min(T.cast(n_t[row], "int64"), NB), 0), "int32")
            # Id 64 i + tx is a candidate when 64 i < left.
            left = n - T.cast(tx, "int32")
            if n > k:
                prefix[0] = T.uint32(0)
                need[0] = k
                done[0] = 0
                # 1. Every load first (all in flight).
                for i in T.unroll(per):
                    keys[i] = T.uint32(0)
                    if i * _PAIR_THREADS < left:
                        keys[i] = T.reinterpret(scores[row, i * _PAIR_THREADS + tx], "uint32")
                clear(hist, tx, 1 << _PAIR_DIGITS[0][1])
                T.sync_threads()
                # The keys, counted by their top digit as they are made (radix pass 0). Ids >= n get
                # key 0, below every candidate's (NaN's is 1): counted or not, they never reach the
                # threshold, the need-th largest of n > need candidates. Groups past n keep key 0
                # and are skipped by every pass.
                for g in T.unroll(groups):
                    if g * _GROUP * _PAIR_THREADS < n:
                        for u in T.unroll(_GROUP):
                            i = g * _GROUP + u
                            if i < per:
                                keys[i] = score_key(keys[i])
                                # Forced keys and non-candidates (key 0) only in the steps that can hold a
                                # sink, one of the last num_local candidates or an id >= n.
                                if i * _PAIR_THREADS < num_sink or i * _PAIR_THREADS + _PAIR_THREADS > n - num_local:
                                    j = i * _PAIR_THREADS + tx
                                    d = n - 1 - j
                                    keys[i] = T.if_then_else(
                                        j >= n,
                                        T.uint32(0),
                                        T.if_then_else(j < num_sink, T.uint32(SINK_KEY), T.if_then_else(d < num_local, T.uint32(SINK_KEY - 1) - T.cast(d, "uint32"), keys[i])),
                                    )
                                T.atomic_add(hist[T.cast(keys[i] >> _PAIR_DIGITS[0][0], "int32")], 1)
                find_bin(hist, lane, state, *_PAIR_DIGITS[0])
                # 2. The lower digits, over the keys in [prefix, prefix + 2**(shift + bits)), whose
                # offset from prefix holds the digit in its top bits.
                for digit_shift, digit_bits in _PAIR_DIGITS[1:]:
                    if done[0] == 0:
                        clear(hist, tx, 1 << digit_bits)
                        T.sync_threads()
                        for g in T.unroll(groups):
                            if g * _GROUP * _PAIR_THREADS < n:
                                for u in T.unroll(_GROUP):
                                    i = g * _GROUP + u
                                    if i < per:
                                        count(hist, bin_index, keys[i] - prefix[0], digit_shift, digit_bits)
                        find_bin(hist, lane, state, digit_shift, digit_bits)
                # 3. Compaction in ascending id order. Bit i of this lane's word marks id 64 i + tx;
                # transposed, lane s of warp w holds the lanes chosen in step 2 s + w (ids
                # 64 s + 32 w + lanes). Taken: the keys above the threshold bin, and the bin's too
                # when it is taken whole (then prefix >= 1: a bin from key 0 up holds every key,
                # more than need, so prefix - 1 does not wrap).
                cut = T.if_then_else(done[0] != 0, prefix[0] - T.uint32(1), prefix[0])
                chosen[0] = T.uint32(0)
                for i in T.unroll(per):
                    if keys[i] > cut:
                        chosen[0] = chosen[0] | (T.uint32(1) << T.uint32(i))
                transpose_bits(chosen, lane)
                if done[0] == 0:
                    # A tie at a fully resolved key: its `need` lowest ids, counted in id order over
                    # both warps' steps.
                    tied[0] = T.uint32(0)
                    for i in T.unroll(per):
                        if keys[i] == prefix[0]:
                            tied[0] = tied[0] | (T.uint32(1) << T.uint32(i))
                    transpose_bits(tied, lane)
                    steps_before(hist, T.cast(T.popcount(tied[0]), "int32"), before, total, incl, lane, warp)
                    rest[0] = T.min(T.max(need[0] - before[0], 0), T.cast(T.popcount(tied[0]), "int32"))
                    while rest[0] > 0:
                        chosen[0] = chosen[0] | (tied[0] & (T.uint32(0) - tied[0]))
                        tied[0] = tied[0] & (tied[0] - T.uint32(1))
                        rest[0] -= 1
                steps_before(hist, T.cast(T.popcount(chosen[0]), "int32"), before, total, incl, lane, warp)
                while chosen[0] != T.uint32(0):
                    write(ids, block_table, req_index, row, before[0], lane * _PAIR_THREADS + warp * _WARP + lowest_set_bit(chosen[0]))
                    before[0] += 1
                    chosen[0] = chosen[0] & (chosen[0] - T.uint32(1))
                for c in T.serial(T.ceildiv(k, _PAIR_THREADS)):
                    if c * _PAIR_THREADS + tx >= total[0] and c * _PAIR_THREADS + tx < k:
                        write(ids, block_table, req_index, row, c * _PAIR_THREADS + tx, -1)
            else:
                # n <= k: every candidate is taken and no score is read.
                for c in T.serial(T.ceildiv(k, _PAIR_THREADS)):
                    if c * _PAIR_THREADS + tx < k:
                        write(ids, block_table, req_index, row, c * _PAIR_THREADS + tx, T.if_then_else(c * _PAIR_THREADS + tx < n, c * _PAIR_THREADS + tx, -1))

    return _prim_func(select, NB, k, n_dtype, req_dtype, t, B, M, S)
