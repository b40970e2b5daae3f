"""NVIDIA TileLang implementation of `fused_sample`: the sampler's filters and race with each row split
into chunks read by many blocks at once, and finished by the last of them.

    k = fused_sample_tl(dtype, vec, top_k_dtype)            # one launch
    k = fused_sample_flagging_tl(dtype, vec, top_k_dtype)   # four blocks an SM, a second launch
    k(logits, temperature, top_k, top_p, min_p, seed, offset, token, logprob, empty,
      chunk_f, chunk_i, list_s, list_id, arrivals)

logits ... empty are kernels/sampler/cuda.py's sampler_tl arguments (same shapes, dtypes, strides and
alignment rules), with B <= ref.MAX_ROWS (kernels/fused_sample/ref.py). The rest is the workspace
(kernels/fused_sample/api.py allocates it), n = ceil(V / ref.CHUNK) chunks a row, W = B * n:
  chunk_f   (W, 2) float32   per (row, chunk) record: the chunk's max of s, its sum of expf(s - max)
  chunk_i   (W, 3) int32     its lowest id holding the max (-1: no finite entry), finite count,
                             number of candidates (above ref.LIST_CAP: the list overflowed)
  list_s    (W, ref.LIST_CAP) float32, list_id (W, ref.LIST_CAP) int32: the chunk's candidates
            (s and id), in no order
  arrivals  (>= B,) int32    zero before the launch; after it zero (fused_sample_tl), or 1 for
                             each row left to the second launch and 0 for the others
                             (fused_sample_flagging_tl, below)
No entry of the workspace needs a value before the launch except arrivals.

Semantics are `kernels.sampler.ref` (the contract), token for token: the candidates only decide which
entries the sampler's passes look at, and they hold every entry any filter could keep (below). Only
the logprob's float32 normaliser is this kernel's own: its own fixed order (each chunk's sum in
thread and warp order, the chunks rescaled to the row max and added in chunk order) and, on
ordinary chunks (step 2), x in place of s and ex2 (subnormal terms flushed) in place of expf (the
logprob stays within 1e-5 relative, 1e-4 absolute of the sampler's: the device tests' tolerance).

Grid (n, B), _THREADS threads a block (two blocks an SM for fused_sample_tl, four for
fused_sample_flagging_tl: _Layout.blocks_per_sm); block (c, b) reads chunk c of row b once,
into registers, as x (s = x / d with d = t on sampled rows, 1 on others: division by d > 0 never
decreases as x grows, so the chunk's max of s is its max of x divided, m = max x / d). Stage 1 is
what every block runs, and what most of a large batch's time goes to: each of its steps spends as
few instructions an entry as it can (kernels/fused_sample/PERF.md, "Fewer instructions an entry"):
  1. The chunk's max of x (NaN never wins), its finite count (x > -inf: the entries are counted
     only where some x is NaN or infinite, which one fused multiply-add an entry detects) and T0
     (below, in x).
  2. The normaliser, the sum of exp(s - m) over the finite entries: on ordinary chunks (|m| <= 128
     and d >= 2**-60) ex2(x * c2 - max x * c2), c2 = log2(e) / d, by one fused multiply-add and
     the multi-function unit, with subnormal terms flushed (they vanish in a sum that holds the
     max's 1), no division an entry (within 2**-15 relative of expf(s - m); it only scales the
     logprob); on others the sampler's expf(s - m).
  3. Its candidates, appended to its list as (s, id): every finite entry whose s = x / d (IEEE
     division) reaches a bound that no kept entry is below (and on ordinary chunks, below, the
     few entries within that bound's rounding slack under it, which no filter keeps either).
       greedy rows        s = m (the max's ties).
       top-k rows         (0 < k < V) no bound on s: the lists must hold top-k's whole set, because
                          the k-th largest s and top-p's mass are taken over it. With
                          k <= _TOP_K_FILTER, s >= T0 / d, T0 the smallest over the warps of each
                          warp's ceil(k / warps)-th largest thread max of x (a bitonic sort): the
                          chunk holds >= k entries with x >= T0, so T0 / d <= the chunk's k-th
                          largest s <= every s top-k keeps. A larger k lists every finite entry
                          (and overflows on large rows).
       other sampled rows s >= m - span - |m| * 2**-20: span 15 with top-p on (a kept w is at
                          least 2**-20 = expf(-13.86): entries with q = 0 move no mass), else
                          1 - logf(min_p) with min-p on, else 22 (w / E with w < 3.6e-9 never beats
                          the max's key 1 / E >= 1 / 16.64).
     On ordinary chunks the candidates are the entries with x >= the bound times d, loosened past
     the rounding of x / d: a bit mask marks them branch-free, without a division (other chunks
     test s itself). Each lane counts its candidates, a warp scan places them and one shared
     atomic a warp claims the places; then a lane visits only its own (a register picked by a
     tree of selects), so a warp does not step through a divergent branch for every entry some
     lane lists: it divides, lists (s, id) and offers the id of s == m to lowest's shared atomic
     min (every entry with s == m is a candidate).
  4. The chunk's record; then a block barrier and thread 0's acquire-release add on arrivals[b] (no
     fences: the barrier orders the block's writes before that release, as in CUTLASS's grid
     barriers).
The block that arrives last resets the counter and finishes the row, reading the others' records
and lists through L2 (__ldcg: L1 is not coherent across SMs). It folds the n records (row max,
lowest id, finite count, normaliser), gathers the lists into shared memory (at most _MERGE_CAP
entries; each warp reads up to gather_chunks lists at once) while thread 0 settles the row with
the sampler's decide_max (empty and +inf rows end there), and takes top-k's threshold over them
exactly (top_k_threshold: 8-bit radix passes of integer counts over the images less the smallest,
from the highest bit of their span, ending once the threshold's bin is taken whole) and lists
top-k's survivors (w, q-mass and id). When at most _THREADS survive, a thread each decides
whether top-p and min-p keep its survivor (by the mass above it: no threshold, no barrier) and
races it (race_over_survivors); else top-p's threshold comes from radix_select (integer masses)
and the race runs over the candidates (finish_from_lists). A row whose
lists overflowed or hold more than _MERGE_CAP in all (many equal logits, top-k above _TOP_K_FILTER
on a large row, finite logits whose s all underflow) takes the sampler's passes over the row
itself (correct, at one SM's share of bandwidth per pass). Two compiled forms differ only there:
  fused_sample_tl           the same block runs them (sample_row): one launch, but their 66 KB of
                            shared memory and their registers leave room for two blocks an SM.
  fused_sample_flagging_tl  the block writes nothing but arrivals[b] = 1, and a second launch,
                            kernels/sampler/cuda.py's sampler_flagged_tl, samples the flagged rows
                            and clears the flags; it may start during this kernel's tail (a
                            programmatic dependent launch: every block of this one triggers it
                            on entry). Without the passes a block needs 38 KB and 64
                            registers: four blocks an SM, the loads of three overlapping the
                            fourth's arithmetic, at the cost of that launch and one list gathered
                            at a time.
The interface takes the first for small batches, where a launch is a large share of the time, and
the second from api.FLAGGING_MIN_ROWS rows.

Speed (H200 benchmark, kernels/fused_sample/PERF.md, through the interface): V 129280 fp32 with
top-k 50, top-p 0.9 (the committed baseline): B = 1 16.26 us, B = 8 17.23 us (fused_sample_tl),
B = 64 32.60 us, B = 128 47.45 us, B = 512 134.29 us (fused_sample_flagging_tl +
sampler_flagged_tl); the sampler's kernel takes 247 / 249 / 250 / 274 / 1083 us.
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import types
from typing import NamedTuple

import tilelang
import tilelang.language as T
from tilelang.transform import PassConfigKey

from kernels.fused_sample.ref import CHUNK, LIST_CAP, check_config, fused_sample_shipped_configs
from kernels.interface import INT32_MAX
from kernels.random_sampling.cuda import PASS_CONFIGS, arrive, exponential_noise, noise_bits, noise_row_keys, read_l2, take_if_better
from kernels.sampler.cuda import (
    _BINS,
    _DONE,
    _SAMPLED,
    _SF_MIN_P,
    _SF_SLOTS,
    _SF_TAU_P,
    _ST_MODE,
    _ST_P20,
    _ST_REMAIN,
    _ST_SLOTS,
    _ST_TOP_K_ON,
    _ST_TOP_P_ON,
    _ordered,
    _unordered,
    weight,
    alloc_row,
    decide_max,
    sample_row,
    scan_bins,
    write_race,
)
from kernels.sampler.ref import MASS_BITS
from kernels.tl_bits import lowest_set_bit
from kernels.tl_ptx import declare_ex2_ftz, ex2_ftz

__all__ = ["fused_sample_flagging_tl", "fused_sample_shipped_configs", "fused_sample_tl"]

# 256 threads: radix passes take one bin a thread.
_THREADS = 256
_WARP = 32
_WARPS = _THREADS // _WARP
_SHUFFLES = 5
# Entries a thread holds (in registers, as s).
_PER_THREAD = CHUNK // _THREADS
# Candidates the finishing block holds: 16 chunks (129280's vocabulary) x LIST_CAP, less one
# so that their q-masses (each <= 2**20) sum below 2**32 in radix_select's uint32 bins.
_MERGE_CAP = 4095
# List entries a lane of the gathering warp holds: a whole list (at most LIST_CAP) a warp.
_GATHER = LIST_CAP // _WARP


class _Layout(NamedTuple):
    """What one compiled form fixes (module docstring: the two forms)."""

    blocks_per_sm: int  # the launch bounds: at most 65536 / (blocks_per_sm * _THREADS) registers
    gather_chunks: int  # lists a warp of the finishing block reads at once
    flag_overflow: bool  # a row the lists cannot hold: True flags it, False runs sample_row here


# sample_row's shared memory and registers fit two blocks an SM; 3 x 8 warps gather the 16-19
# chunks of the models' vocabularies in one round trip.
_ONE_LAUNCH = _Layout(blocks_per_sm=2, gather_chunks=3, flag_overflow=False)
# 64 registers a thread (five blocks' 48 spill 128-252 bytes), within which gathering two chunks
# at once spills 84 bytes on sm_90a.
_FLAGGING = _Layout(blocks_per_sm=4, gather_chunks=1, flag_overflow=True)
# T0 takes the ceil(k / _WARPS)-th largest thread max of a warp: at most one a lane.
_TOP_K_FILTER = _WARPS * _WARP
# Spans (in s) below the chunk max that bound the candidates of sampled rows without top-k.
_SPAN_RACE = 22.0
_SPAN_TOP_P = 15.0
# Relative slack of the bound: covers the rounding of max - span for any magnitude of max, and of
# s = x / d where the bound is read in x (xbound).
_SLACK = 2.0**-20
_NAN = float("nan")
_FLT_MAX = 3.4028234663852886e38
# _ordered(-inf): T0 images below it bound nothing.
_ORDERED_NEG_INF = 0x007FFFFF
# The compare-exchange steps of a bitonic sort of a warp's 32 values (a Python tuple: unrolled as it
# is built): the run length, then the lane distance.
_BITONIC = tuple((run, run >> (i + 1)) for run in (2, 4, 8, 16, 32) for i in range(run.bit_length() - 1))
# A chunk is ordinary when |m| <= _ORDINARY_M and d >= _ORDINARY_D: the entries that weigh in the
# normaliser (s >= m - 22) then have |s| < 256, where x / d rounds by at most 2**-16, so exp(s - m)
# read as exp((x - max x) / d) is off by at most 2**-15 relative; and log2(e) / d is finite.
_ORDINARY_M = 128.0
_ORDINARY_D = 2.0**-60
# Absolute slack of xbound, times d + 1: covers the rounding of s = x / d near zero (d * 2**-149)
# and of bound * d (2**-150).
_TINY = 2.0**-126
_LOG2E = 1.4426950408889634
# Survivors race_over_survivors reads a step (a divisor of _THREADS: the steps stay in tp's slots).
_RANK_UNROLL = 8
# radix_select's passes (a Python tuple: unrolled as it is built): index, digit shift, mask of the
# digits above.
_RADIX_PASSES = tuple((d, 24 - 8 * d, ((1 << (8 * d)) - 1) << (32 - 8 * d)) for d in range(4))


def _l2(buf, i, j):
    """buf[i, j] read from L2: another block wrote it during this launch (read_l2)."""
    return read_l2(buf, i * buf.shape[1] + j)


def _add(a, b):
    return a + b


def _pick(regs, p, first, n):
    """regs[p] for a run-time p in [first, first + n), n a power of two: a tree of selects on p's
    bits (registers cannot be indexed at run time, and a local array indexed so lives in memory)."""
    if n == 1:
        return regs[first]
    half = n // 2
    return T.if_then_else((p & half) != 0, _pick(regs, p, first + half, half), _pick(regs, p, first, half))


def alloc_record() -> types.SimpleNamespace:
    """Locals for one chunk record (read_record); called inside the kernel scope."""
    return types.SimpleNamespace(
        m=T.alloc_local((1,), "float32"),
        sum=T.alloc_local((1,), "float32"),
        id=T.alloc_local((1,), "int32"),
        fin=T.alloc_local((1,), "int32"),
        n=T.alloc_local((1,), "int32"),
    )


@T.macro
def read_record(cr, chunk_f, chunk_i, rc):
    """Record rc into cr, its five fields read at once (one L2 round trip)."""
    cr.m[0] = _l2(chunk_f, rc, 0)
    cr.sum[0] = _l2(chunk_f, rc, 1)
    cr.id[0] = _l2(chunk_i, rc, 0)
    cr.fin[0] = _l2(chunk_i, rc, 1)
    cr.n[0] = _l2(chunk_i, rc, 2)


@T.macro
def block_fold(warp, lane, extras, argmax=None):
    """Every thread of the block ends with each extra folded over the block, and with argmax =
    (best_key, best_id, other_key, other_id, red_key, red_id) also the block's best (key, id) (the
    larger key, ties to the lower id): a shuffle butterfly per warp, the warps' values through
    shared memory (one barrier), then every thread folds them in warp order. extras: a tuple of
    (local (1,), shared (_WARPS,), combine) with combine a Python function of two values (_add,
    T.max, T.min). The caller puts a barrier before it when the shared slots were read since their
    last write. The tuples are indexed, not unpacked: a Python name bound to a buffer renames it in
    the generated CUDA."""
    for i in T.unroll(_SHUFFLES):
        if argmax is not None:
            argmax[2][0] = T.shfl_xor(argmax[0][0], 1 << i)
            argmax[3][0] = T.shfl_xor(argmax[1][0], 1 << i)
            take_if_better(argmax[0], argmax[1], argmax[2][0], argmax[3][0])
        for x in extras:
            x[0][0] = x[2](x[0][0], T.shfl_xor(x[0][0], 1 << i))
    if lane == 0:
        if argmax is not None:
            argmax[4][warp] = argmax[0][0]
            argmax[5][warp] = argmax[1][0]
        for x in extras:
            x[1][warp] = x[0][0]
    T.sync_threads()
    if argmax is not None:
        argmax[0][0] = argmax[4][0]
        argmax[1][0] = argmax[5][0]
    for x in extras:
        x[0][0] = x[1][0]
    for w in T.unroll(1, _WARPS):
        if argmax is not None:
            take_if_better(argmax[0], argmax[1], argmax[4][w], argmax[5][w])
        for x in extras:
            x[0][0] = x[2](x[0][0], x[1][w])


@T.macro
def scan_from_top(r, hist, tx, warp, lane):
    """After the barrier that completes hist: r.count[0] <- bin 255 - tx (one bin a thread,
    _THREADS == _BINS), r.incl[0] <- the sum of that bin and every bin above it (the count or mass
    at or above it). One barrier."""
    r.count[0] = T.cast(hist[_BINS - 1 - tx], "int64")
    scan_bins(r.incl, r.count, lane, warp, r.scan_total)
    T.sync_threads()
    for j in T.unroll(_WARPS - 1):
        if j < warp:
            r.incl[0] += r.scan_total[j]


@T.macro
def top_k_threshold(r, hist, sel, tx, warp, lane, n, k, lo, span, tau_k):
    """tau_k[0] <- a float32 whose kept set {s >= tau_k} among the n candidates (r.cand_x: s) is
    top-k's (the k largest s and every tie of the k-th): the image (_ordered) of the k-th largest s
    with its digits below the last pass cleared. Radix passes over v = image - lo, with lo the
    smallest candidate's image and span the largest v: 8-bit digits from the highest set bit of span
    down (one bin a thread, _THREADS == _BINS), ending as soon as the threshold's bin is taken whole.
    Real-valued logits spread over the first digit's bins, so most rows end after one or two passes,
    where digits of the whole image put a row's candidates in one or two bins of the first pass.
    Counts are exact integers, so the order of the atomics is free. hist: shared uint32 (_BINS,);
    sel: shared int64 (4,), the prefix of v and the count still needed, double-buffered by pass
    parity (0 needed: the passes end)."""
    # Every v fits in sh + 8 bits.
    sh = T.max(T.int64(24) - T.cast(T.clz(span), "int64"), T.int64(0))
    done = T.alloc_local((1,), "int32")
    if tx == 0:
        sel[0] = T.int64(0)
        sel[2] = k
    done[0] = 0
    for d in T.serial(4):
        if done[0] == 0:
            # The digit's bits: [shift, upper); the keys in play match the prefix from upper up.
            upper = T.if_then_else(d == 0, sh + T.int64(8), T.max(sh - T.int64(8) * T.cast(d - 1, "int64"), T.int64(0)))
            shift = T.max(sh - T.int64(8) * T.cast(d, "int64"), T.int64(0))
            hist[tx] = T.uint32(0)
            T.sync_threads()
            prefix = sel[d % 2]
            for i in T.serial(T.ceildiv(n, _THREADS)):
                if i * _THREADS + tx < n:
                    r.bits[0] = _ordered(r.cand_x[i * _THREADS + tx]) - lo
                    if T.cast(r.bits[0], "int64") >> upper == prefix >> upper:
                        T.atomic_add(hist[T.cast((T.cast(r.bits[0], "int64") >> shift) & ((T.int64(1) << (upper - shift)) - T.int64(1)), "int32")], T.uint32(1))
            T.sync_threads()
            scan_from_top(r, hist, tx, warp, lane)
            need = sel[2 + d % 2]
            if r.incl[0] - r.count[0] < need and need <= r.incl[0]:
                sel[(d + 1) % 2] = prefix | (T.cast(_BINS - 1 - tx, "int64") << shift)
                # The bin taken whole, or every digit resolved: nothing left to count.
                sel[2 + (d + 1) % 2] = T.if_then_else(need - (r.incl[0] - r.count[0]) == r.count[0] or shift == T.int64(0), T.int64(0), need - (r.incl[0] - r.count[0]))
            T.sync_threads()
            if sel[2 + (d + 1) % 2] == T.int64(0):
                done[0] = 1
                tau_k[0] = _unordered(T.cast(sel[(d + 1) % 2], "uint32") + lo)


@T.macro
def radix_select(r, hist, sel, tx, warp, lane, n, tau_k, m, p20):
    """sel[0] <- tau_p's bits over top-k's survivors among the n candidates (r.cand_x holds s; s >=
    tau_k survive): the largest uint32 key u whose survivors with key >= u weigh at least ceil(p20 *
    Q / 2**20), with key = bits of w = expf(s - m), weight q = floor(w * 2**20) and Q their total
    mass (found by the first pass), by four 8-bit radix passes (one bin a thread, _THREADS ==
    _BINS). Weights are exact integers, so the order of the atomics is free. hist: shared uint32
    (_BINS,) (native shared atomics: 64-bit ones spin on compare-and-swap); sel: shared int64 (4,),
    the prefix and remaining target, double-buffered by pass parity."""
    for d, shift, mask in _RADIX_PASSES:
        hist[tx] = T.uint32(0)
        T.sync_threads()
        prefix = T.cast(sel[d % 2], "uint32")
        for i in T.serial(T.ceildiv(n, _THREADS)):
            if i * _THREADS + tx < n:
                sv = r.cand_x[i * _THREADS + tx]
                if sv >= tau_k:
                    r.w[0] = weight(sv, m)
                    r.bits[0] = T.reinterpret(r.w[0], "uint32")
                    if (r.bits[0] & T.uint32(mask)) == prefix:
                        T.atomic_add(hist[T.cast((r.bits[0] >> T.uint32(shift)) & T.uint32(_BINS - 1), "int32")], T.cast(r.w[0] * T.float32(1 << MASS_BITS), "uint32"))
        T.sync_threads()
        scan_from_top(r, hist, tx, warp, lane)
        if d == 0:
            if tx == _THREADS - 1:
                # incl of the lowest bin: Q, the survivors' whole mass.
                sel[2] = (p20 * r.incl[0] + T.int64((1 << MASS_BITS) - 1)) >> T.int64(MASS_BITS)
            T.sync_threads()
        if r.incl[0] - r.count[0] < sel[2 + d % 2] and sel[2 + d % 2] <= r.incl[0]:
            sel[(d + 1) % 2] = sel[d % 2] | (T.cast(_BINS - 1 - tx, "int64") << T.int64(shift))
            sel[2 + (d + 1) % 2] = sel[2 + d % 2] - (r.incl[0] - r.count[0])
        T.sync_threads()


def alloc_top_p() -> types.SimpleNamespace:
    """The buffers of top-k's survivors and the race over them (called inside the kernel scope)."""
    return types.SimpleNamespace(
        w=T.alloc_shared((_THREADS,), "float32", scope="shared"),
        q=T.alloc_shared((_THREADS,), "int32", scope="shared"),
        id=T.alloc_shared((_THREADS,), "int32", scope="shared"),
        n=T.alloc_shared((1,), "int32", scope="shared"),
        count=T.alloc_local((1,), "int32"),
        mine=T.alloc_local((1,), "float32"),
        above=T.alloc_local((1,), "int32"),
        total=T.alloc_local((1,), "int32"),
    )


@T.macro
def clear_survivors(tp, tx):
    """Every survivor slot to w = -1, q = 0 (a slot no survivor fills weighs nothing and is above
    nothing in race_over_survivors' unrolled steps); a barrier before top_k_survivors writes."""
    tp.w[tx] = T.float32(-1)
    tp.q[tx] = 0


@T.macro
def top_k_survivors(r, tp, tx, lane, n, tau_k, m):
    """The w = expf(s - m), q-mass floor(w * 2**20) and ids of the candidates with s >= tau_k (top-k's
    survivors; radix_select's weighted pass and the race take the same set and w) into tp.w, tp.q
    and tp.id, the first _THREADS of them; tp.n counts them all (zero before). A ballot places a
    warp's survivors, one atomic a warp."""
    survives = T.alloc_local((1,), "int32")
    votes = T.alloc_local((1,), "uint32")
    for i in T.serial(T.ceildiv(n, _THREADS)):
        survives[0] = T.cast(i * _THREADS + tx < n and r.cand_x[T.min(i * _THREADS + tx, n - 1)] >= tau_k, "int32")
        votes[0] = T.cast(T.ballot_sync(survives[0] != 0), "uint32")
        if votes[0] != T.uint32(0):
            r.slot[0] = 0
            if lane == 0:
                r.slot[0] = T.atomic_add(tp.n[0], T.cast(T.popcount(votes[0]), "int32"), return_prev=True)
            r.slot[0] = T.shfl_sync(r.slot[0], 0) + T.cast(T.popcount(votes[0] & ((T.uint32(1) << T.cast(lane, "uint32")) - T.uint32(1))), "int32")
            if survives[0] != 0 and r.slot[0] < _THREADS:
                r.w[0] = weight(r.cand_x[i * _THREADS + tx], m)
                tp.w[r.slot[0]] = r.w[0]
                tp.q[r.slot[0]] = T.cast(r.w[0] * T.float32(1 << MASS_BITS), "int32")
                tp.id[r.slot[0]] = r.cand_id[i * _THREADS + tx]


@T.macro
def race_over_survivors(r, tp, tx, top_p_on, p20, floor, min_p, best_key, best_id):
    """This thread's part of the race over the tp.count[0] <= _THREADS listed survivors: survivor tx,
    when kept, into (best_key, best_id) with key w / E. With top-p on (p20 >= 1), top-p keeps it
    exactly when the survivors' q-mass strictly above its w is below ceil(p20 * Q / 2**20), Q
    their whole mass: the same set as radix_select's threshold (tau_p, the largest w_j whose mass
    at or above it reaches the target: the smallest w above w_tx has mass at or above it equal to
    the mass above w_tx), so each thread decides its own, with no barrier. Off, it keeps w >=
    floor (decide_max's tau_p: 1 where top_p rounds to p20 = 0, the max and its ties; else 0). The
    masses sum at most _THREADS q <= 2**20 each: int32 holds them. r.keys holds the row's noise
    keys."""
    if tx < tp.count[0]:
        tp.mine[0] = tp.w[tx]
        # The noise first: its multiplies overlap the sums' shared reads.
        noise_bits(tp.id[tx], r.keys, r.h)
        tp.above[0] = 0
        tp.total[0] = 0
        if top_p_on != 0:
            # _RANK_UNROLL survivors a step, their shared reads in flight together; the slots past
            # tp.count[0] weigh nothing (clear_survivors).
            for i in T.serial(T.ceildiv(tp.count[0], _RANK_UNROLL)):
                for u in T.unroll(_RANK_UNROLL):
                    tp.total[0] += tp.q[i * _RANK_UNROLL + u]
                    tp.above[0] += T.if_then_else(tp.w[i * _RANK_UNROLL + u] > tp.mine[0], tp.q[i * _RANK_UNROLL + u], 0)
        if (top_p_on != 0 and T.cast(tp.above[0], "int64") < (p20 * T.cast(tp.total[0], "int64") + T.int64((1 << MASS_BITS) - 1)) >> T.int64(MASS_BITS)) or (top_p_on == 0 and tp.mine[0] >= floor):
            if tp.mine[0] >= min_p:
                take_if_better(best_key, best_id, tp.mine[0] / exponential_noise(r.h), tp.id[tx])


@T.macro
def finish_from_lists(r, tp, hist, sel, tx, warp, lane, bx, row, logits, t, row_seed, row_offset, token, logprob, empty, n, m, lo, norm, best_key, best_id, other_key, other_id, red_key, red_id):
    """The row's outputs from its n candidates (r.cand_x: s, r.cand_id: ids; lo: the smallest
    candidate's image), after decide_max left the mode and filters in r.st / r.sf: top-k's
    threshold by top_k_threshold; when at most _THREADS survive it, the race over them with top-p
    and min-p decided by each survivor's thread (race_over_survivors), else top-p's threshold by
    radix_select and the race over the candidates (the sampler's phases 1-9, over the lists
    only). tp.n is zero and tp's slots cleared (clear_survivors) before; row_seed and row_offset
    are the row's counters (values)."""
    mode = r.st[_ST_MODE]
    tau_k = T.alloc_local((1,), "float32")
    tau_p = T.alloc_local((1,), "float32")
    tau_k[0] = -T.infinity("float32")
    tau_p[0] = r.sf[_SF_TAU_P]
    noise_row_keys(row_seed, row_offset, r.keys)
    # More than _THREADS: the survivors are not listed in tp.
    tp.count[0] = _THREADS + 1
    if mode == T.int64(_SAMPLED):
        if r.st[_ST_TOP_K_ON] != 0:
            top_k_threshold(r, hist, sel, tx, warp, lane, n, r.st[_ST_REMAIN], lo, _ordered(m) - lo, tau_k)
        if r.st[_ST_TOP_K_ON] != 0 or r.st[_ST_TOP_P_ON] != 0:
            top_k_survivors(r, tp, tx, lane, n, tau_k[0], m)
            T.sync_threads()
            # Through a local: a loop bound read from shared memory defeats the barrier planner.
            tp.count[0] = tp.n[0]
        if r.st[_ST_TOP_P_ON] != 0 and tp.count[0] > _THREADS:
            if tx == 0:
                sel[0] = T.int64(0)
            radix_select(r, hist, sel, tx, warp, lane, n, tau_k[0], m, r.st[_ST_P20])
            tau_p[0] = T.reinterpret(T.cast(sel[0], "uint32"), "float32")
    # The race among the kept (sampled rows): the largest w / E, ties to the lower id.
    best_key[0] = -T.infinity("float32")
    best_id[0] = -1
    if tp.count[0] <= _THREADS:
        # mode is _SAMPLED here.
        race_over_survivors(r, tp, tx, r.st[_ST_TOP_P_ON], r.st[_ST_P20], tau_p[0], r.sf[_SF_MIN_P], best_key, best_id)
    else:
        for i in T.serial(T.ceildiv(n, _THREADS) * T.cast(mode == T.int64(_SAMPLED), "int32")):
            if i * _THREADS + tx < n:
                if r.cand_x[i * _THREADS + tx] >= tau_k[0]:
                    r.w[0] = weight(r.cand_x[i * _THREADS + tx], m)
                    if r.w[0] >= tau_p[0] and r.w[0] >= r.sf[_SF_MIN_P]:
                        noise_bits(r.cand_id[i * _THREADS + tx], r.keys, r.h)
                        take_if_better(best_key, best_id, r.w[0] / exponential_noise(r.h), r.cand_id[i * _THREADS + tx])
    T.sync_threads()
    block_fold(warp, lane, (), (best_key, best_id, other_key, other_id, red_key, red_id))
    if tx == 0 and mode != T.int64(_DONE):
        write_race(bx, row, logits, t, m, mode, best_id, norm, r.s, r.st, token, logprob, empty)


@tilelang.jit(pass_configs=PASS_CONFIGS)
def fused_sample_tl(dtype: str, vec: int, top_k_dtype: str = "int64"):
    """Compiled kernel(logits, temperature, top_k, top_p, min_p, seed, offset, token, logprob, empty,
    chunk_f, chunk_i, list_s, list_id, arrivals) for these static arguments (memoised): one launch,
    arrivals left zero."""
    return _fused_sample("fused_sample_tl", _ONE_LAUNCH, dtype, vec, top_k_dtype)


# ptxas's most conservative register allocation: at the default level the unvectorised sm_90a
# configurations spill 8 bytes within 64 registers, at level 0 none does (codegen tests).
@tilelang.jit(pass_configs={**PASS_CONFIGS, PassConfigKey.TL_PTXAS_REGISTER_USAGE_LEVEL: 0})
def fused_sample_flagging_tl(dtype: str, vec: int, top_k_dtype: str = "int64"):
    """fused_sample_tl's kernel, except that a row its lists cannot hold is left with arrivals[b] = 1
    and no output, for kernels/sampler/cuda.py's sampler_flagged_tl to sample (memoised). sm_90 and
    later only (it triggers that launch early: PDL, which TileLang does not lower for older GPUs)."""
    return _fused_sample("fused_sample_flagging_tl", _FLAGGING, dtype, vec, top_k_dtype)


def _fused_sample(name: str, layout: _Layout, dtype: str, vec: int, top_k_dtype: str):
    check_config(name, dtype, vec, top_k_dtype)
    gather_chunks = layout.gather_chunks
    B, V, S = T.dynamic("B"), T.dynamic("V"), T.dynamic("row_stride", "int64")
    W, A = T.dynamic("chunk_slots"), T.dynamic("arrival_slots")
    loads = _PER_THREAD // vec

    @T.macro
    def entry_id(base, j, e, tx):
        """Row id of entry e of load j: loads stride the chunk by whole warps (coalesced)."""
        return (base + j * _THREADS + tx) * vec + e

    @T.macro
    def load_vector(logits, s, xs, row, base, j, tx):
        """Vector j of the thread's share of the chunk into s[j * vec : (j + 1) * vec], as float32."""
        if dtype == "float32":
            for e in T.vectorized(vec):
                s[j * vec + e] = logits[row, entry_id(base, j, e, tx)]
        else:
            for e in T.vectorized(vec):
                xs[j, e] = logits[row, entry_id(base, j, e, tx)]
            for e in T.unroll(vec):
                s[j * vec + e] = T.cast(xs[j, e], "float32")

    @T.prim_func
    def fused_sample(
        logits: T.StridedTensor((B, V), (S, 1), dtype),
        temperature: T.Tensor((B,), "float32"),
        top_k: T.Tensor((B,), top_k_dtype),
        top_p: T.Tensor((B,), "float32"),
        min_p: T.Tensor((B,), "float32"),
        seed: T.Tensor((B,), "int64"),
        offset: T.Tensor((B,), "int64"),
        token: T.Tensor((B,), "int64"),
        logprob: T.Tensor((B,), "float32"),
        empty: T.Tensor((B,), "uint8"),
        chunk_f: T.Tensor((W, 2), "float32"),
        chunk_i: T.Tensor((W, 3), "int32"),
        list_s: T.Tensor((W, LIST_CAP), "float32"),
        list_id: T.Tensor((W, LIST_CAP), "int32"),
        arrivals: T.Tensor((A,), "int32"),
    ):
        with T.Kernel(T.ceildiv(V, CHUNK), B, threads=_THREADS) as (cx, bx):
            T.annotate_min_blocks_per_sm(layout.blocks_per_sm)
            declare_ex2_ftz()
            if layout.flag_overflow:
                # Once every block has started, the second launch's blocks may take the slots
                # this grid's tail frees; they wait for this grid's end before reading anything.
                T.pdl_trigger()
            tx = T.get_thread_binding(0)
            warp, lane = tx // _WARP, tx % _WARP
            # 64-bit row and record index: every offset into logits and the workspace is 64-bit.
            row = T.cast(bx, "int64")
            n_chunks = T.ceildiv(V, CHUNK)
            rec = row * T.cast(n_chunks, "int64") + T.cast(cx, "int64")
            # Staging of 16-bit rows (float32 rows load straight into s).
            xs = None if dtype == "float32" else T.alloc_local((loads, vec), dtype)
            s = T.alloc_local((_PER_THREAD,), "float32")
            best_key = T.alloc_local((1,), "float32")
            best_id = T.alloc_local((1,), "int32")
            other_key = T.alloc_local((1,), "float32")
            other_id = T.alloc_local((1,), "int32")
            fin = T.alloc_local((1,), "int32")
            fin64 = T.alloc_local((1,), "int64")
            wsum = T.alloc_local((1,), "float32")
            part = T.alloc_local((4,), "float32")
            hist32 = T.alloc_shared((_BINS,), "uint32", scope="shared")
            t0 = T.alloc_local((1,), "uint32")
            slot = T.alloc_local((1,), "int32")
            total = T.alloc_local((1,), "int32")
            over = T.alloc_local((1,), "int32")
            red_key = T.alloc_shared((_WARPS,), "float32", scope="shared")
            red_id = T.alloc_shared((_WARPS,), "int32", scope="shared")
            red_fin = T.alloc_shared((_WARPS,), "int64", scope="shared")
            red_t0 = T.alloc_shared((_WARPS,), "uint32", scope="shared")
            red_sum = T.alloc_shared((_WARPS,), "float32", scope="shared")
            red_tot = T.alloc_shared((_WARPS,), "int32", scope="shared")
            red_over = T.alloc_shared((_WARPS,), "int32", scope="shared")
            listed = T.alloc_shared((1,), "int32", scope="shared")
            last = T.alloc_shared((1,), "int32", scope="shared")
            fast = T.alloc_shared((1,), "int32", scope="shared")
            norm = T.alloc_local((1,), "float32")
            row_max = T.alloc_local((1,), "float32")
            sel = T.alloc_shared((4,), "int64", scope="shared")
            bound = T.alloc_local((1,), "float32")
            xbound = T.alloc_local((1,), "float32")
            img = T.alloc_local((1,), "uint32")
            peer = T.alloc_local((1,), "uint32")
            mask = T.alloc_local((1,), "uint32")
            zero = T.alloc_local((1,), "float32")
            probe = T.alloc_local((1,), "float32")
            pos = T.alloc_local((1,), "int32")
            gather_s = T.alloc_local((gather_chunks * _GATHER,), "float32")
            gather_n = T.alloc_local((gather_chunks,), "int32")
            gather_at = T.alloc_local((gather_chunks,), "int32")
            row_seed = T.alloc_local((1,), "int64")
            row_offset = T.alloc_local((1,), "int64")
            cr = alloc_record()
            chunk_n = T.alloc_shared((_THREADS,), "int32", scope="shared")
            gather_id = T.alloc_local((gather_chunks * _GATHER,), "int32")
            ncand = T.alloc_local((1,), "int32")
            up = T.alloc_local((1,), "int32")
            xmax = T.alloc_local((1,), "float32")
            cmax = T.alloc_local((1,), "float32")
            sv = T.alloc_local((1,), "float32")
            dl = T.alloc_local((1,), "float32")
            c2 = T.alloc_local((1,), "float32")
            xc2 = T.alloc_local((1,), "float32")
            lowest = T.alloc_shared((1,), "int32", scope="shared")
            lo_img = T.alloc_shared((1,), "uint32", scope="shared")
            img_lo = T.alloc_local((1,), "uint32")
            r = alloc_row(dtype, vec, _THREADS, _MERGE_CAP)
            tp = alloc_top_p()
            # The interface passes vec-aligned rows: what lets the loads below be vectorised.
            T.assume(S % vec == 0)
            t = temperature[bx]
            sampled = t > T.float32(0) and t < T.infinity("float32")
            k = T.cast(top_k[bx], "int64")
            top_k_on = sampled and k > T.int64(0) and k < T.cast(V, "int64")
            top_k_filter = top_k_on and k <= T.int64(_TOP_K_FILTER)
            # s = x / d: the sampler's s (greedy rows s = x, and x / 1 == x).
            dl[0] = T.if_then_else(sampled, t, T.float32(1))
            d = dl[0]
            n_vec = V // vec
            base = cx * (CHUNK // vec)
            if tx == 0:
                listed[0] = 0
                lowest[0] = T.int32(INT32_MAX)

            # 0. The chunk into registers as x. A chunk inside the row loads without bounds; the
            # row's last one leaves NaN in the entries past the row.
            if (cx + 1) * CHUNK <= V:
                for j in T.unroll(loads):
                    load_vector(logits, s, xs, row, base, j, tx)
            else:
                for p in T.unroll(_PER_THREAD):
                    s[p] = T.float32(_NAN)
                for j in T.unroll(loads):
                    if base + j * _THREADS + tx < n_vec:
                        load_vector(logits, s, xs, row, base, j, tx)
                    if vec > 1:
                        # The V % vec entries after the last whole vector, one at a time, in the
                        # register slots of the vector they would have been.
                        if base + j * _THREADS + tx == n_vec:
                            for e in T.unroll(vec):
                                if n_vec * vec + e < V:
                                    s[j * vec + e] = T.cast(logits[row, n_vec * vec + e], "float32")
            # 1. The chunk's max of x (fmaxf: NaN never wins), its finite count (x > -inf: NaN
            # counts as -inf) and T0 in x (s = x / d never decreases as x grows, so T0 / d bounds s).
            for a in T.unroll(4):
                part[a] = -T.infinity("float32")
            # probe: x * 0 summed, NaN exactly when some x is NaN or infinite (zero is a register, so
            # that TileLang's simplifier keeps x * 0); only then are the finite entries counted.
            zero[0] = T.float32(0)
            probe[0] = T.float32(0)
            for p in T.unroll(_PER_THREAD):
                part[p % 4] = T.max(part[p % 4], s[p])
                probe[0] += s[p] * zero[0]
            fin[0] = _PER_THREAD
            if T.isnan(probe[0]):
                fin[0] = 0
                for p in T.unroll(_PER_THREAD):
                    fin[0] += T.cast(s[p] > -T.infinity("float32"), "int32")
            xmax[0] = T.max(T.max(part[0], part[1]), T.max(part[2], part[3]))
            # T0 of the module docstring, per warp: the need-th largest thread max, as its
            # order-preserving image, read from a bitonic sort of the warp's 32 (descending).
            t0[0] = T.uint32(0)
            if top_k_filter:
                img[0] = _ordered(xmax[0])
                for run, j in _BITONIC:
                    peer[0] = T.shfl_xor(img[0], j)
                    # The lower lane of a pair keeps the larger in a descending run.
                    img[0] = T.if_then_else(((lane & j) == 0) == ((lane & run) == 0), T.max(img[0], peer[0]), T.min(img[0], peer[0]))
                t0[0] = T.shfl_sync(img[0], T.cast((k + T.int64(_WARPS - 1)) // T.int64(_WARPS), "int32") - 1)
            # The chunk's max of x, finite count and T0 (one value a warp: its shuffles change nothing).
            block_fold(warp, lane, ((xmax, red_key, T.max), (fin, red_tot, _add), (t0, red_t0, T.min)))
            # m: the chunk's max of s (division is monotone: the max of x divided).
            cmax[0] = xmax[0] / d
            m = cmax[0]
            # Ordinary chunks (|m| <= 128, d not tiny): the normaliser is taken with x in place of
            # s, and the bound below is read in x.
            ordinary = T.abs(m) <= T.float32(_ORDINARY_M) and d >= T.float32(_ORDINARY_D)

            # 2. The normaliser, sum of exp(s - m) over the finite entries (d = 0 at the max: also
            # where s and m are both infinite). Four partial sums, so that the exponentials do not
            # wait on each other's adds. Ordinary chunks take exp2((x - max x) * log2(e) / d), no
            # division an entry (within 2**-15 relative of expf(s - m): the normaliser only scales
            # the logprob); others expf(s - m) as the sampler.
            for a in T.unroll(4):
                part[a] = T.float32(0)
            if ordinary:
                c2[0] = T.float32(_LOG2E) / d
                # The argument in one fused multiply-add, x * c2 - max x * c2: within half an ulp
                # of |max x * c2| = |m| * log2(e) <= 185, 2**-17, of (x - max x) * c2. ex2_ftz(-inf)
                # is 0, and a term it flushes (below 2**-126) vanishes anyway in a sum that holds
                # the max's 1.
                xc2[0] = xmax[0] * c2[0]
                if T.isnan(probe[0]):
                    # Some x is NaN or infinite: fmaxf takes 0 over NaN.
                    for p in T.unroll(_PER_THREAD):
                        part[p % 4] += T.max(ex2_ftz(s[p] * c2[0] - xc2[0]), T.float32(0))
                else:
                    for p in T.unroll(_PER_THREAD):
                        part[p % 4] += ex2_ftz(s[p] * c2[0] - xc2[0])
            else:
                for p in T.unroll(_PER_THREAD):
                    if s[p] > -T.infinity("float32"):
                        sv[0] = s[p] / d
                        part[p % 4] += weight(sv[0], m)
            wsum[0] = (part[0] + part[1]) + (part[2] + part[3])

            # 3. The candidates: s >= bound, where bound is the filters' bound (module docstring) or
            # top-k's T0 / d, the larger. Entries below xbound (bound in x, loosened by more than the
            # rounding of s = x / d) cannot reach it and skip the division; in other chunks xbound
            # admits every entry.
            span = T.if_then_else(
                top_p[bx] < T.float32(1),
                T.float32(_SPAN_TOP_P),
                T.if_then_else(min_p[bx] > T.float32(0), T.float32(1) - T.log(T.min(min_p[bx], T.float32(1))), T.float32(_SPAN_RACE)),
            )
            bound[0] = T.if_then_else(
                not sampled or m == T.infinity("float32"),
                m,
                T.max(
                    T.if_then_else(top_k_on, -T.infinity("float32"), m - span - T.abs(m) * T.float32(_SLACK)),
                    T.if_then_else(t0[0] > T.uint32(_ORDERED_NEG_INF), _unordered(t0[0]), -T.infinity("float32")) / d,
                ),
            )
            xbound[0] = T.if_then_else(
                ordinary,
                T.max(bound[0] * d - T.abs(bound[0] * d) * T.float32(_SLACK) - (d + T.float32(1)) * T.float32(_TINY), T.float32(-_FLT_MAX)),
                T.float32(-_FLT_MAX),
            )
            # Bit p of mask marks entry p a candidate; s[p] keeps x (the list takes x / d).
            mask[0] = T.uint32(0)
            if ordinary:
                # Every entry reaching xbound, found branch-free: s >= bound and at most the
                # entries within the slack below it, which no filter keeps (the finish's exact
                # thresholds pass over them). A chunk lists about 1% of its entries, so only they
                # pay for the division, below.
                for p in T.unroll(_PER_THREAD):
                    mask[0] = mask[0] | T.if_then_else(s[p] >= xbound[0], T.uint32(1) << T.uint32(p), T.uint32(0))
            else:
                for j in T.unroll(loads):
                    for e in T.unroll(vec):
                        # False for NaN and -inf (xbound is finite).
                        if s[j * vec + e] >= xbound[0]:
                            if s[j * vec + e] / d >= bound[0]:
                                mask[0] = mask[0] | (T.uint32(1) << T.uint32(j * vec + e))
            # Places in the list: a scan of the counts over the warp, one atomic a warp.
            ncand[0] = T.cast(T.popcount(mask[0]), "int32")
            slot[0] = ncand[0]
            for i in T.unroll(_SHUFFLES):
                up[0] = T.shfl_up(slot[0], 1 << i)
                if lane >= (1 << i):
                    slot[0] += up[0]
            up[0] = 0
            if lane == _WARP - 1:
                up[0] = T.atomic_add(listed[0], slot[0], return_prev=True)
            slot[0] = T.shfl_sync(up[0], _WARP - 1) + slot[0] - ncand[0]
            # A lane visits only its own candidates (the register picked by a tree of selects): a
            # branch an entry cost the warp every branch any of its lanes took. Every entry with
            # s == m is one (bound <= m) and offers its id to lowest's atomic min.
            while mask[0] != T.uint32(0):
                pos[0] = lowest_set_bit(mask[0])
                mask[0] = mask[0] & (mask[0] - T.uint32(1))
                sv[0] = _pick(s, pos[0], 0, _PER_THREAD) / d
                if sv[0] == m:
                    T.atomic_min(lowest[0], entry_id(base, pos[0] // vec, pos[0] % vec, tx))
                if slot[0] < LIST_CAP:
                    list_s[rec, slot[0]] = sv[0]
                    list_id[rec, slot[0]] = entry_id(base, pos[0] // vec, pos[0] % vec, tx)
                slot[0] += 1
            for i in T.unroll(_SHUFFLES):
                wsum[0] += T.shfl_xor(wsum[0], 1 << i)
            if lane == 0:
                red_sum[warp] = wsum[0]
            # Release and acquire without fences: the barrier orders every thread's list writes
            # before thread 0's record writes and its acquire-release add at GPU scope (cumulative),
            # and the last block's reads after that add; they go through L2 (_l2).
            T.sync_threads()
            if tx == 0:
                wsum[0] = red_sum[0]
                for w in T.unroll(1, _WARPS):
                    wsum[0] += red_sum[w]
                chunk_f[rec, 0] = m
                chunk_f[rec, 1] = wsum[0]
                chunk_i[rec, 0] = T.if_then_else(fin[0] > 0, lowest[0], -1)
                chunk_i[rec, 1] = fin[0]
                # Finite entries whose s all underflowed to -inf bound nothing: an overflow.
                chunk_i[rec, 2] = T.if_then_else(fin[0] > 0 and m == -T.infinity("float32"), LIST_CAP + 1, listed[0])
                arrive(arrivals, bx, n_chunks, slot, last)
            T.sync_threads()

            # The last block of the row finishes it.
            if last[0] != 0:
                # The race's counters, read now: they arrive while the records and lists do.
                row_seed[0] = seed[bx]
                row_offset[0] = offset[bx]
                best_key[0] = -T.infinity("float32")
                best_id[0] = -1
                fin64[0] = T.int64(0)
                total[0] = 0
                over[0] = 0
                # A record a thread, all of it read at once (one L2 round trip); with at most
                # _THREADS chunks (V <= 2**21) it stays in registers for the normaliser and its
                # list's length in shared memory for the gather.
                for i in T.serial(T.ceildiv(n_chunks, _THREADS)):
                    if i * _THREADS + tx < n_chunks:
                        read_record(cr, chunk_f, chunk_i, row * T.cast(n_chunks, "int64") + T.cast(i * _THREADS + tx, "int64"))
                        if cr.fin[0] > 0:
                            take_if_better(best_key, best_id, cr.m[0], cr.id[0])
                        fin64[0] += T.cast(cr.fin[0], "int64")
                        total[0] += T.min(cr.n[0], LIST_CAP + 1)
                        over[0] = T.max(over[0], T.cast(cr.n[0] > LIST_CAP, "int32"))
                        chunk_n[tx] = cr.n[0]
                T.sync_threads()
                block_fold(warp, lane, ((fin64, red_fin, _add), (total, red_tot, _add), (over, red_over, T.max)), (best_key, best_id, other_key, other_id, red_key, red_id))
                row_max[0] = best_key[0]
                # The normaliser: each chunk's sum rescaled to the row max, in chunk order. With
                # more than _THREADS chunks a thread's registers hold its last record only: the
                # records are read again.
                wsum[0] = T.float32(0)
                for i in T.serial(T.ceildiv(n_chunks, _THREADS)):
                    if i * _THREADS + tx < n_chunks:
                        if n_chunks > _THREADS:
                            read_record(cr, chunk_f, chunk_i, row * T.cast(n_chunks, "int64") + T.cast(i * _THREADS + tx, "int64"))
                        if cr.fin[0] > 0:
                            wsum[0] += cr.sum[0] * T.if_then_else(cr.m[0] == row_max[0], T.float32(1), T.exp(cr.m[0] - row_max[0]))
                for i in T.unroll(_SHUFFLES):
                    wsum[0] += T.shfl_xor(wsum[0], 1 << i)
                if lane == 0:
                    red_sum[warp] = wsum[0]
                if tx < _ST_SLOTS:
                    r.st[tx] = T.int64(0)
                if tx < _SF_SLOTS:
                    r.sf[tx] = T.float32(0)
                T.sync_threads()
                if tx == 0:
                    norm[0] = red_sum[0]
                    for w in T.unroll(1, _WARPS):
                        norm[0] += red_sum[w]
                    fast[0] = T.cast(over[0] == 0 and total[0] <= _MERGE_CAP, "int32")
                    listed[0] = 0
                    lo_img[0] = T.uint32(0xFFFFFFFF)
                    tp.n[0] = 0
                clear_survivors(tp, tx)
                T.sync_threads()
                # Through a local: a loop bound read from shared memory defeats the barrier planner.
                over[0] = fast[0]
                if over[0] != 0:
                    # The lists into shared memory as s: a warp a chunk, gather_chunks chunks a
                    # warp at once, places claimed with one atomic a chunk. All of a lane's list
                    # reads are issued before the first lands (one L2 round trip for up to
                    # gather_chunks * _WARPS chunks). The smallest image of s goes to lo_img.
                    img_lo[0] = T.uint32(0xFFFFFFFF)
                    for i in T.serial(T.ceildiv(n_chunks, gather_chunks * _WARPS)):
                        for c in T.unroll(gather_chunks):
                            gather_n[c] = 0
                            if (i * gather_chunks + c) * _WARPS + warp < n_chunks:
                                rc = row * T.cast(n_chunks, "int64") + T.cast((i * gather_chunks + c) * _WARPS + warp, "int64")
                                gather_n[c] = T.if_then_else(n_chunks <= _THREADS, chunk_n[(i * gather_chunks + c) * _WARPS + warp], _l2(chunk_i, rc, 2))
                                gather_at[c] = 0
                                if lane == 0:
                                    gather_at[c] = T.atomic_add(listed[0], gather_n[c], return_prev=True)
                                for e in T.unroll(_GATHER):
                                    if e * _WARP + lane < gather_n[c]:
                                        gather_s[c * _GATHER + e] = _l2(list_s, rc, e * _WARP + lane)
                                        gather_id[c * _GATHER + e] = _l2(list_id, rc, e * _WARP + lane)
                        for c in T.unroll(gather_chunks):
                            gather_at[c] = T.shfl_sync(gather_at[c], 0)
                            for e in T.unroll(_GATHER):
                                if e * _WARP + lane < gather_n[c]:
                                    r.cand_x[gather_at[c] + e * _WARP + lane] = gather_s[c * _GATHER + e]
                                    r.cand_id[gather_at[c] + e * _WARP + lane] = gather_id[c * _GATHER + e]
                                    img_lo[0] = T.min(img_lo[0], _ordered(gather_s[c * _GATHER + e]))
                    for i in T.unroll(_SHUFFLES):
                        img_lo[0] = T.min(img_lo[0], T.shfl_xor(img_lo[0], 1 << i))
                    if lane == 0:
                        T.atomic_min(lo_img[0], img_lo[0])
                    if tx == 0:
                        # The row's mode and filters (and the outputs of empty and +inf rows), while
                        # the other warps' list reads are in flight (sample_row settles its own).
                        decide_max(bx, V, top_k, top_p, min_p, t, token, logprob, empty, best_key, best_id, fin64, r.st, r.sf, 1)
                    T.sync_threads()
                    img_lo[0] = lo_img[0]
                    finish_from_lists(r, tp, hist32, sel, tx, warp, lane, bx, row, logits, t, row_seed[0], row_offset[0], token, logprob, empty, total[0], row_max[0], img_lo[0], norm, best_key, best_id, other_key, other_id, red_key, red_id)
                elif layout.flag_overflow:
                    # Lists that could not hold the row: flagged for the sampler's passes over the
                    # row itself in the second launch (sampler_flagged_tl), which clears the flag.
                    if tx == 0:
                        arrivals[bx] = 1
                else:
                    # Lists that could not hold the row: the sampler's passes over the row itself.
                    sample_row(r, tx, bx, row, logits, temperature, top_k, top_p, min_p, seed, offset, token, logprob, empty, V, vec)

    return fused_sample
