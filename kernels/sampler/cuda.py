"""NVIDIA TileLang implementation of `sampler`: per-request temperature, top-k, top-p and min-p
filtering by radix select (no sort), then an exponential race with the library's noise.

    k = sampler_tl(dtype, vec, top_k_dtype)
    k(logits, temperature, top_k, top_p, min_p, seed, offset, token, logprob, empty)

logits       (B, V) of `dtype` (float32 or bfloat16), row stride `row_stride` >= V elements (a view
             of a wider tensor is fine), last dimension contiguous; base pointer and row stride (in
             bytes) multiples of vec * element size. 1 <= V < 2**23.
temperature  (B,) float32; top_k (B,) of `top_k_dtype` (int32 or int64, read as given); top_p,
             min_p (B,) float32; seed, offset (B,) int64: per-request device tensors (a captured
             CUDA graph reads new values on every replay).
token        (B,) int64 output: the sampled id, -1 for a row without a finite logit.
logprob      (B,) float32 output: the token's log-probability (always written).
empty        (B,) uint8 output (a bool tensor's bytes): 1 for a row without a finite logit.

Semantics are `kernels.sampler.ref` (the contract), token for token: s = l / t with IEEE division,
w = expf(s - m) with the accurate expf (fast math off: PASS_CONFIGS of random_sampling, checked by
the codegen test), the integer masses q = floor(w * 2**20) summed in int64 (exact in any order), and
the race key w / E with the noise macros of kernels/random_sampling/cuda.py; the argmaxes break ties
to the lowest id, a total order, so the reduction order cannot change a token. Only the logprob's
float32 sum has this kernel's own (fixed) order.

B, V and the row stride are dynamic: one compile per (dtype, vec, top_k_dtype). B >= 1 (the
interface launches nothing otherwise).

One block of _THREADS threads per row (grid = B) runs _PHASES passes; a pass that does not apply to
the row has a trip count of 0, so every barrier is reached by every thread:
  phase 0       over the row: max of s with the lowest id holding it, and the count of finite
                entries. Thread 0 then settles empty rows, rows holding +inf and the row's filters.
  phases 1-4    top-k (sampled rows with 0 < k < V and k <= the finite count; a larger k keeps every
                finite entry): radix select of the k-th largest x (the logit), 8 bits a pass, over
                an order-preserving uint32 image, counting entries in shared-memory histograms
                (integer atomics: exact in any order; one histogram per lane, summed after the
                pass). No division: s = x / t never decreases as x grows, so the k-th largest s is
                that x's s, and x_threshold turns every later test s >= tau into x >= its x.
                Phase 3 (_PHASE_COMPACT) is the last pass over the row: besides its digit it sums
                w (the logprob's normaliser) and appends the candidates, every entry whose x reaches
                the bin of the first two digits, to shared memory. When at most _CAP are appended
                (random logits: about k) phases 4-9 read the candidates, not the row; otherwise
                (many equal logits) they read the row as without top-k.
  phases 5-8    top-p (sampled rows with top_p < 1 and P20 > 0; P20 = 0 keeps w >= 1 without a
                pass): radix select over the bits of w (non-negative floats order like their bits)
                with int64 q-mass histograms over the top-k survivors; phase 5 also sums Q. After
                each radix pass the first 256 threads take a bin each (from the top) and scan them;
                the thread whose bin holds the target extends the prefix.
  phase 9       the race among kept entries (sampled rows) and, unless the compaction pass took it,
                the sum of w over finite entries; thread 0 writes the outputs.
Greedy rows run phases 0 and 9 only; sampled rows with top-k read the row 4 times (phases 0-3),
without it 2 times plus one per top-p digit. Block reductions: shuffle butterflies per warp, then
the per-warp results from shared memory folded in warp order by thread 0.

Speed (H200, PERF.md): 247 us a row at B = 1 and 275 us at B = 128 (V 129280, top-k 50, top-p 0.9),
each pass at one SM's share of the memory system; fused_sample's chunked kernel splits each row over
many blocks and runs these passes (sample_row) only for rows its candidate lists cannot hold.
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import types

import tilelang
import tilelang.language as T
from tilelang.transform import PassConfigKey

from kernels.random_sampling.cuda import PASS_CONFIGS, exponential_noise, noise_bits, noise_row_keys, take_if_better
from kernels.sampler.ref import MASS_BITS, check_config, sampler_shipped_configs

__all__ = ["alloc_row", "sample_row", "sampler_flagged_tl", "sampler_shipped_configs", "sampler_tl"]

# 512 threads leave each thread up to 128 registers (1024 would cap them at 64 and spill).
_THREADS = 512
_WARP = 32
_WARPS = _THREADS // _WARP
# Shuffle rounds of a butterfly over one warp: log2(_WARP).
_SHUFFLES = 5
# Vectors a thread loads before using any (4 spill on sm_100a at 128 registers).
_UNROLL = 2
# Radix select: 4 digits of 8 bits, most significant first.
_DIGIT_BITS = 8
_BINS = 1 << _DIGIT_BITS
# One histogram per lane: logits crowd a few leading digits (sign and exponent), and one shared copy
# serialised a warp's 32 same-bin atomics (1.6 ms a row on the H200). Lane l adds to replica l, so the
# lanes of a warp never meet on an address; one padding bin (8 bytes: two banks) shifts each
# replica's start by two banks, so replicas l and l + 16 start on the same bank.
_REPLICAS = _WARP
_REP_STRIDE = _BINS + 1
# Warps that scan the bins, one bin a thread.
_SCAN_WARPS = _BINS // _WARP
_DIGITS = 32 // _DIGIT_BITS
_PHASE_MAX = 0
_PHASE_TOP_K = 1
_PHASE_TOP_P = _PHASE_TOP_K + _DIGITS
_PHASE_RACE = _PHASE_TOP_P + _DIGITS
_PHASES = _PHASE_RACE + 1
# The digit-3 pass of top-k also compacts the row's candidates into shared memory (every entry
# with x >= the smallest x whose s reaches the 16-bit prefix's bin): the later passes read them
# instead of the row while at most _CAP fit; more (many equal logits) keep reading the row.
_PHASE_COMPACT = _PHASE_TOP_K + 2
_CAP = 2048
# Image (_ordered) of the lowest finite float32, -FLT_MAX; images below it are -inf and the NaNs
# with the sign bit set (other NaNs map above +inf's).
_LOWEST = 0x00800000
# Row modes decided after phase 0.
_DONE, _GREEDY, _SAMPLED = 0, 1, 2
# Slots of the shared int64 state thread 0 writes and every thread reads after a barrier.
# _ST_REMAIN_IN is _ST_REMAIN as a radix pass found it: the bin scan reads it while the bin's
# thread writes the next _ST_REMAIN.
# _ST_COMPACT (sampler only): 1 once the candidates fit in shared memory.
_ST_MODE, _ST_BEST, _ST_TOP_K_ON, _ST_TOP_P_ON, _ST_PREFIX, _ST_MASK, _ST_REMAIN, _ST_P20, _ST_TARGET, _ST_REMAIN_IN, _ST_COMPACT = range(11)
_ST_SLOTS = 11
# Slots of the shared float32 state: the row max of s and the three keep thresholds; sampler
# only: _SF_WSUM the sum of w the compaction pass took over the whole row, _SF_CUT the phase's
# threshold on x.
_SF_MAX, _SF_TAU_K, _SF_TAU_P, _SF_MIN_P, _SF_WSUM, _SF_CUT = range(6)
_SF_SLOTS = 6
_SIGN = 0x80000000
_ALL = 0xFFFFFFFF


def _ordered(s):
    """uint32 image of float32 s that orders like s (-0.0 just below +0.0). A plain expression, not
    a macro: usable inside boolean conditions (kernels/fused_sample/cuda.py's candidate test)."""
    # Negative floats (the sign bit set, -0.0 included) reverse their order when all bits flip.
    return T.reinterpret(s, "uint32") ^ T.if_then_else((T.reinterpret(s, "uint32") >> T.uint32(31)) != T.uint32(0), T.uint32(_ALL), T.uint32(_SIGN))


def weight(s, m):
    """w = expf(s - m), exactly 1 where s == m (also where both are infinite). A plain expression,
    like _ordered."""
    return T.exp(T.if_then_else(s == m, T.float32(0), s - m))


@T.macro
def _unordered(u):
    """float32 whose _ordered image is u."""
    return T.reinterpret(u ^ T.if_then_else((u >> T.uint32(31)) != T.uint32(0), T.uint32(_SIGN), T.uint32(_ALL)), "float32")


@T.macro
def x_threshold(x_hi, t, lo, hi):
    """hi[0] := the image (_ordered) of the smallest float32 x with x / t >= x_hi / t (IEEE
    division, 0 < t < inf; x_hi finite, or -inf: then -inf). s = x / t never decreases as x grows,
    so {x : s >= x_hi / t} is every x from that one up: a threshold on s read as one on x. Found by
    bisection over the images from -FLT_MAX's up to x_hi's (32 steps cover them all)."""
    lo[0] = T.uint32(_LOWEST)
    hi[0] = _ordered(x_hi)
    for _ in T.serial(32):
        if lo[0] < hi[0]:
            mid = lo[0] + ((hi[0] - lo[0]) >> T.uint32(1))
            if _unordered(mid) / t >= x_hi / t:
                hi[0] = mid
            else:
                lo[0] = mid + T.uint32(1)


@T.macro
def decide_max(bx, V, top_k, top_p, min_p, t, token, logprob, empty, best_key, best_id, acc, st, sf, write):
    """Thread 0 after phase 0, given the row's max of s (best_key, lowest id best_id) and finite count
    acc: outputs of empty and +inf rows (when write != 0: one block of a row writes); the mode and
    filters of others into st / sf."""
    st[_ST_BEST] = T.cast(best_id[0], "int64")
    st[_ST_TOP_K_ON] = T.int64(0)
    st[_ST_TOP_P_ON] = T.int64(0)
    st[_ST_PREFIX] = T.int64(0)
    st[_ST_MASK] = T.int64(0)
    sf[_SF_MAX] = best_key[0]
    sf[_SF_TAU_K] = -T.infinity("float32")
    sf[_SF_CUT] = -T.infinity("float32")
    sf[_SF_TAU_P] = T.float32(0)
    sf[_SF_MIN_P] = T.float32(0)
    if best_id[0] < 0:
        st[_ST_MODE] = T.int64(_DONE)
        if write != 0:
            token[bx] = T.int64(-1)
            logprob[bx] = T.float32(float("nan"))
            empty[bx] = T.uint8(1)
    elif best_key[0] == T.infinity("float32"):
        st[_ST_MODE] = T.int64(_DONE)
        if write != 0:
            token[bx] = T.cast(best_id[0], "int64")
            logprob[bx] = T.float32(0)
            empty[bx] = T.uint8(0)
    elif t > T.float32(0) and t < T.infinity("float32"):
        st[_ST_MODE] = T.int64(_SAMPLED)
        # k beyond the finite count keeps every finite entry: the same as no top-k.
        if T.cast(top_k[bx], "int64") > T.int64(0) and T.cast(top_k[bx], "int64") < T.cast(V, "int64") and T.cast(top_k[bx], "int64") <= acc[0]:
            st[_ST_TOP_K_ON] = T.int64(1)
            st[_ST_REMAIN] = T.cast(top_k[bx], "int64")
        if top_p[bx] < T.float32(1):
            # P20: clamp(top_p, 0, 1) * 2**20 (exact), rounded half to even.
            x = T.max(top_p[bx], T.float32(0)) * T.float32(1 << MASS_BITS)
            whole = T.cast(x, "int64")
            frac = x - T.cast(whole, "float32")
            st[_ST_P20] = whole + T.if_then_else(frac > T.float32(0.5) or (frac == T.float32(0.5) and whole % T.int64(2) == T.int64(1)), T.int64(1), T.int64(0))
            if st[_ST_P20] == T.int64(0):
                # No mass to reach: the max and its ties.
                sf[_SF_TAU_P] = T.float32(1)
            else:
                st[_ST_TOP_P_ON] = T.int64(1)
        # False for NaN: a disabled min_p keeps every w >= 0.
        if min_p[bx] > T.float32(0):
            sf[_SF_MIN_P] = T.min(min_p[bx], T.float32(1))
    else:
        st[_ST_MODE] = T.int64(_GREEDY)

@T.macro
def pick_bin(tx, phase, shift, incl, count, st, sf):
    """The thread of the bin holding the radix select's target (exactly one: the scan is of
    integer counts and masses) extends the prefix and settles the pass. incl: the count or mass
    of this bin and all above it; count: this bin's own."""
    b = T.cast(_BINS - 1 - tx, "int64")
    above = incl - count
    remain = st[_ST_REMAIN_IN]
    # Each slot is written once and never read back here: a shared-memory read after this thread's
    # own write makes TileLang's barrier planner put a __syncthreads inside this one-thread branch.
    prefix = st[_ST_PREFIX] | (b << T.cast(shift, "int64"))
    mask = st[_ST_MASK] | (T.int64(_BINS - 1) << T.cast(shift, "int64"))
    if phase < _PHASE_TOP_P:
        # Top-k: the bin where the entries above stop short of the remaining rank and the bin reaches it.
        if above < remain and remain <= incl:
            st[_ST_REMAIN] = remain - above
            if phase == _PHASE_TOP_P - 1:
                sf[_SF_TAU_K] = _unordered(T.cast(prefix, "uint32"))
                st[_ST_PREFIX] = T.int64(0)
                st[_ST_MASK] = T.int64(0)
            else:
                st[_ST_PREFIX] = prefix
                st[_ST_MASK] = mask
    elif (remain + incl) * T.int64(1 << MASS_BITS) >= st[_ST_TARGET] and (remain + above) * T.int64(1 << MASS_BITS) < st[_ST_TARGET]:
        # Top-p: the highest bin whose mass, with all mass above it, reaches the target; a
        # positive target makes that bin's own mass positive, so the bin holds a w.
        if phase == _PHASE_RACE - 1:
            sf[_SF_TAU_P] = T.reinterpret(T.cast(prefix, "uint32"), "float32")
        st[_ST_PREFIX] = prefix
        st[_ST_MASK] = mask
        st[_ST_REMAIN] = remain + above


@T.macro
def phase_active(phase, mode, st):
    """1 when the row runs `phase` (phase 0 always; top-k and top-p passes when on; the race unless
    the row was settled), else 0: every pass's trip count is a multiple of it."""
    return T.if_then_else(
        phase == _PHASE_MAX,
        1,
        T.if_then_else(
            phase < _PHASE_TOP_P,
            T.cast(st[_ST_TOP_K_ON], "int32"),
            T.if_then_else(phase < _PHASE_RACE, T.cast(st[_ST_TOP_P_ON], "int32"), T.cast(mode != T.int64(_DONE), "int32")),
        ),
    )


@T.macro
def warp_fold(best_key, best_id, acc, wsum, other_key, other_id, red_key, red_id, red_acc, red_sum, warp, lane):
    """Each warp's best entry (ties to the lower id), count or mass and sum of w by a shuffle
    butterfly; lane 0 leaves them in the warp's slot of red_*."""
    for i in T.unroll(_SHUFFLES):
        other_key[0] = T.shfl_xor(best_key[0], 1 << i)
        other_id[0] = T.shfl_xor(best_id[0], 1 << i)
        take_if_better(best_key, best_id, other_key[0], other_id[0])
        acc[0] += T.shfl_xor(acc[0], 1 << i)
        wsum[0] += T.shfl_xor(wsum[0], 1 << i)
    if lane == 0:
        red_key[warp] = best_key[0]
        red_id[warp] = best_id[0]
        red_acc[warp] = acc[0]
        red_sum[warp] = wsum[0]


@T.macro
def block_fold(warps, best_key, best_id, acc, wsum, red_key, red_id, red_acc, red_sum):
    """Thread 0 (holding warp 0's record): the other warps' records folded in, in warp order."""
    for j in T.unroll(1, warps):
        take_if_better(best_key, best_id, red_key[j], red_id[j])
        acc[0] += red_acc[j]
        wsum[0] += red_sum[j]


@T.macro
def write_race(bx, row, logits, t, m, mode, best_id, wsum, s, st, token, logprob, empty):
    """The outputs of a row that ran the race: its winner (sampled rows) or its argmax (greedy rows),
    and the log-probability under softmax(s)."""
    empty[bx] = T.uint8(0)
    if mode == T.int64(_SAMPLED):
        # The winner's s, recomputed from its logit exactly as in the pass.
        s[0] = T.cast(logits[row, best_id[0]], "float32") / t
        token[bx] = T.cast(best_id[0], "int64")
        logprob[bx] = T.if_then_else(s[0] == m, T.float32(0), s[0] - m) - T.log(wsum[0])
    else:
        token[bx] = st[_ST_BEST]
        logprob[bx] = -T.log(wsum[0])


@T.macro
def scan_bins(incl, count, lane, warp, scan_total):
    """First half of the bin scan, by the threads < _BINS holding their bin's count: the inclusive
    scan within each warp, whose total goes to scan_total[warp]."""
    incl[0] = count[0]
    for i in T.unroll(_SHUFFLES):
        other = T.shfl_up(incl[0], 1 << i)
        if lane >= (1 << i):
            incl[0] += other
    if lane == _WARP - 1:
        scan_total[warp] = incl[0]


@T.macro
def finish_scan(tx, phase, shift, incl, count, warp, scan_total, st, sf):
    """Second half, after a barrier: the lower warps' totals added, then pick_bin."""
    for j in T.unroll(_SCAN_WARPS - 1):
        if j < warp:
            incl[0] += scan_total[j]
    pick_bin(tx, phase, shift, incl[0], count[0], st, sf)


@T.macro
def visit(r, val, v, phase, sampled, compact, t, m, cut, tau_p, min_p, prefix, mask, shift, replica):
    """Folds entry v (logit val) into this thread's part of the phase's work (r: the row's buffers,
    alloc_row); compact (a constant): 1 where it comes from the candidates, 0 from the row. Top-k
    and top-p test x against cut (the x threshold of their s threshold, x_threshold), so only the
    entries they keep pay for s = x / t and expf."""
    x32 = T.cast(val, "float32")
    # False for NaN too: NaN counts as -inf, and -inf entries are not finite.
    if x32 > -T.infinity("float32"):
        if phase == _PHASE_MAX:
            r.s[0] = x32
            if sampled != 0:
                r.s[0] = x32 / t
            r.acc[0] += T.int64(1)
            # Ids arrive in ascending order (the row, not candidates): a strictly larger s wins.
            if r.best_id[0] < 0 or r.s[0] > r.best_key[0]:
                r.best_key[0] = r.s[0]
                r.best_id[0] = v
        elif phase < _PHASE_TOP_P:
            # Radix select of the k-th largest x: s = x / t never decreases as x grows, so the
            # k-th largest s is that x's s (x_threshold reads it back as a threshold on x).
            # Through a local: the index analysis cannot see through uint32 arithmetic.
            r.bits[0] = _ordered(x32)
            if (r.bits[0] & mask) == prefix:
                r.digit[0] = T.cast((r.bits[0] >> shift) & T.uint32(_BINS - 1), "int32")
                T.atomic_add(r.hist[replica + r.digit[0]], T.int64(1))
            if compact == 0 and phase == _PHASE_COMPACT:
                # The last pass over the whole row: the logprob's normaliser, and the candidates.
                r.s[0] = x32 / t
                r.wsum[0] += weight(r.s[0], m)
                # A thread whose slot fell past the capacity (the row falls back to passes over
                # itself) appends no more: an all-equal row would otherwise put every entry on one
                # counter. The count still ends above the capacity: that append was counted.
                if x32 >= cut and r.slot[0] < r.cap:
                    r.slot[0] = T.atomic_add(r.ncand[0], 1, return_prev=True)
                    if r.slot[0] < r.cap:
                        r.cand_x[r.slot[0]] = x32
                        r.cand_id[r.slot[0]] = v
        elif phase < _PHASE_RACE:
            if x32 >= cut:
                r.s[0] = x32 / t
                r.w[0] = weight(r.s[0], m)
                q = T.cast(r.w[0] * T.float32(1 << MASS_BITS), "int64")
                r.acc[0] += q
                r.bits[0] = T.reinterpret(r.w[0], "uint32")
                if q > T.int64(0) and (r.bits[0] & mask) == prefix:
                    r.digit[0] = T.cast((r.bits[0] >> shift) & T.uint32(_BINS - 1), "int32")
                    T.atomic_add(r.hist[replica + r.digit[0]], q)
        else:
            r.s[0] = x32
            if sampled != 0:
                r.s[0] = x32 / t
            r.w[0] = weight(r.s[0], m)
            if compact == 0:
                r.wsum[0] += r.w[0]
            if sampled != 0 and x32 >= cut and r.w[0] >= tau_p and r.w[0] >= min_p:
                noise_bits(v, r.keys, r.h)
                # Candidates arrive in no order: ties go to the lower id explicitly.
                take_if_better(r.best_key, r.best_id, r.w[0] / exponential_noise(r.h), v)


def alloc_row(dtype: str, vec: int, threads: int, cap: int) -> types.SimpleNamespace:
    """The buffers of sample_row for one block of `threads` threads (a multiple of 32, >= _BINS)
    whose row holds at most `cap` candidates; called inside a T.prim_func's kernel scope. The
    static sizes travel with them (threads, cap)."""
    warps = threads // _WARP
    return types.SimpleNamespace(
        threads=threads,
        cap=cap,
        keys=T.alloc_local((2,), "uint32"),
        h=T.alloc_local((1,), "uint32"),
        s=T.alloc_local((1,), "float32"),
        w=T.alloc_local((1,), "float32"),
        bits=T.alloc_local((1,), "uint32"),
        digit=T.alloc_local((1,), "int32"),
        slot=T.alloc_local((1,), "int32"),
        lo=T.alloc_local((1,), "uint32"),
        hi=T.alloc_local((1,), "uint32"),
        acc=T.alloc_local((1,), "int64"),
        wsum=T.alloc_local((1,), "float32"),
        best_key=T.alloc_local((1,), "float32"),
        best_id=T.alloc_local((1,), "int32"),
        other_key=T.alloc_local((1,), "float32"),
        other_id=T.alloc_local((1,), "int32"),
        buf=T.alloc_local((_UNROLL, vec), dtype),
        hist=T.alloc_shared((_REPLICAS * _REP_STRIDE,), "int64"),
        incl=T.alloc_local((1,), "int64"),
        count=T.alloc_local((1,), "int64"),
        scan_total=T.alloc_shared((_SCAN_WARPS,), "int64"),
        red_key=T.alloc_shared((warps,), "float32"),
        red_id=T.alloc_shared((warps,), "int32"),
        red_acc=T.alloc_shared((warps,), "int64"),
        red_sum=T.alloc_shared((warps,), "float32"),
        st=T.alloc_shared((_ST_SLOTS,), "int64"),
        sf=T.alloc_shared((_SF_SLOTS,), "float32"),
        ncand=T.alloc_shared((1,), "int32", scope="shared"),
        cand_x=T.alloc_shared((cap,), "float32", scope="shared"),
        cand_id=T.alloc_shared((cap,), "int32", scope="shared"),
    )


@T.macro
def sample_row(r, tx, bx, row, logits, temperature, top_k, top_p, min_p, seed, offset, token, logprob, empty, V, vec):
    """Row `row` (output slot bx) by one block: phases 0-9 of the module docstring, with the
    buffers r of alloc_row (their state is zeroed here)."""
    threads = r.threads
    warp, lane = tx // _WARP, tx % _WARP
    noise_row_keys(seed[bx], offset[bx], r.keys)
    t = temperature[bx]
    sampled = T.cast(t > T.float32(0) and t < T.infinity("float32"), "int32")
    # Phase 0 runs for every row and reads no state; zeroed so that no slot is ever undefined.
    if tx < _ST_SLOTS:
        r.st[tx] = T.int64(0)
    if tx < _SF_SLOTS:
        r.sf[tx] = T.float32(0)
    if tx == 0:
        r.ncand[0] = 0
    n_vec = V // vec
    for phase in T.serial(_PHASES):
        T.sync_threads()
        mode = r.st[_ST_MODE]
        active = phase_active(phase, mode, r.st)
        compact = T.cast(r.st[_ST_COMPACT], "int32")
        n_cand = T.min(r.ncand[0], r.cap)
        m = r.sf[_SF_MAX]
        tau_p = r.sf[_SF_TAU_P]
        min_p_w = r.sf[_SF_MIN_P]
        prefix = T.cast(r.st[_ST_PREFIX], "uint32")
        mask = T.cast(r.st[_ST_MASK], "uint32")
        shift = T.cast(_DIGIT_BITS * (_DIGITS - 1 - (phase - 1) % _DIGITS), "uint32")
        if tx == 0:
            if phase == _PHASE_COMPACT and active != 0:
                # The lowest x whose s reaches the bin of the two digits found so far: the
                # k-th largest x is in that bin, so every entry top-k keeps is a candidate.
                x_threshold(_unordered(T.max(prefix, T.uint32(_LOWEST))), t, r.lo, r.hi)
                r.sf[_SF_CUT] = _unordered(r.hi[0])
            if phase == _PHASE_TOP_P and r.st[_ST_TOP_K_ON] != 0:
                x_threshold(r.sf[_SF_TAU_K], t, r.lo, r.hi)
                r.sf[_SF_CUT] = _unordered(r.hi[0])
        T.sync_threads()
        # The x threshold of the phase (x_threshold): from the compaction pass on, the
        # lowest candidate; from the first top-p pass on, top-k's own; -inf before.
        cut = r.sf[_SF_CUT]
        for i in T.serial(T.ceildiv(_REPLICAS * _REP_STRIDE, threads)):
            if i * threads + tx < _REPLICAS * _REP_STRIDE:
                r.hist[i * threads + tx] = T.int64(0)
        r.acc[0] = T.int64(0)
        r.wsum[0] = T.float32(0)
        r.best_key[0] = -T.infinity("float32")
        r.best_id[0] = -1
        r.slot[0] = 0
        T.sync_threads()
        for i in T.serial(T.ceildiv(n_vec, threads * _UNROLL) * active * (1 - compact)):
            for u in T.unroll(_UNROLL):
                if (i * _UNROLL + u) * threads + tx < n_vec:
                    for e in T.vectorized(vec):
                        r.buf[u, e] = logits[row, ((i * _UNROLL + u) * threads + tx) * vec + e]
            for u in T.unroll(_UNROLL):
                if (i * _UNROLL + u) * threads + tx < n_vec:
                    for e in T.unroll(vec):
                        visit(r, r.buf[u, e], ((i * _UNROLL + u) * threads + tx) * vec + e, phase, sampled, 0, t, m, cut, tau_p, min_p_w, prefix, mask, shift, lane * _REP_STRIDE)
        if vec > 1:
            # The V % vec entries after the last whole vector: ids above all of the loop's.
            if active != 0 and compact == 0 and tx < V - n_vec * vec:
                r.buf[0, 0] = logits[row, n_vec * vec + tx]
                visit(r, r.buf[0, 0], n_vec * vec + tx, phase, sampled, 0, t, m, cut, tau_p, min_p_w, prefix, mask, shift, lane * _REP_STRIDE)
        for i in T.serial(T.ceildiv(n_cand, threads) * active * compact):
            if i * threads + tx < n_cand:
                visit(r, r.cand_x[i * threads + tx], r.cand_id[i * threads + tx], phase, sampled, 1, t, m, cut, tau_p, min_p_w, prefix, mask, shift, lane * _REP_STRIDE)
        warp_fold(r.best_key, r.best_id, r.acc, r.wsum, r.other_key, r.other_id, r.red_key, r.red_id, r.red_acc, r.red_sum, warp, lane)
        T.sync_threads()
        if tx == 0:
            block_fold(threads // _WARP, r.best_key, r.best_id, r.acc, r.wsum, r.red_key, r.red_id, r.red_acc, r.red_sum)
            if phase == _PHASE_MAX:
                decide_max(bx, V, top_k, top_p, min_p, t, token, logprob, empty, r.best_key, r.best_id, r.acc, r.st, r.sf, 1)
            elif phase == _PHASE_COMPACT and active != 0:
                r.sf[_SF_WSUM] = r.wsum[0]
                r.st[_ST_COMPACT] = T.cast(r.ncand[0] <= r.cap, "int64")
            elif phase == _PHASE_TOP_P:
                r.st[_ST_TARGET] = r.st[_ST_P20] * r.acc[0]
                r.st[_ST_REMAIN] = T.int64(0)
            elif phase == _PHASE_RACE and active != 0:
                if compact != 0:
                    r.wsum[0] = r.sf[_SF_WSUM]
                write_race(bx, row, logits, t, m, mode, r.best_id, r.wsum, r.s, r.st, token, logprob, empty)
            r.st[_ST_REMAIN_IN] = r.st[_ST_REMAIN]
        # A radix pass: thread i takes bin 255 - i summed over the replicas, and an inclusive
        # scan over the threads gives each bin the count (or mass) of itself and all above it.
        radix = active != 0 and phase >= _PHASE_TOP_K and phase < _PHASE_RACE
        if radix and tx < _BINS:
            r.count[0] = T.int64(0)
            for j in T.unroll(_REPLICAS):
                r.count[0] += r.hist[j * _REP_STRIDE + _BINS - 1 - tx]
            scan_bins(r.incl, r.count, lane, warp, r.scan_total)
        T.sync_threads()
        if radix and tx < _BINS:
            finish_scan(tx, phase, shift, r.incl, r.count, warp, r.scan_total, r.st, r.sf)


@tilelang.jit(pass_configs=PASS_CONFIGS)
def sampler_tl(dtype: str, vec: int, top_k_dtype: str = "int64"):
    """Compiled kernel(logits, temperature, top_k, top_p, min_p, seed, offset, token, logprob,
    empty) for these static arguments (memoised)."""
    check_config("sampler_tl", dtype, vec, top_k_dtype)
    B, V, S = T.dynamic("B"), T.dynamic("V"), T.dynamic("row_stride", "int64")

    @T.prim_func
    def sampler(
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
    ):
        with T.Kernel(B, threads=_THREADS) as bx:
            tx = T.get_thread_binding(0)
            r = alloc_row(dtype, vec, _THREADS, _CAP)
            # The interface passes vec-aligned rows: what lets the loads below be vectorised.
            T.assume(S % vec == 0)
            # 64-bit row: every offset into logits is 64-bit (B * row_stride may pass 2**31).
            sample_row(r, tx, bx, T.cast(bx, "int64"), logits, temperature, top_k, top_p, min_p, seed, offset, token, logprob, empty, V, vec)

    return sampler


# The flag's branch around sample_row costs sm_100a's vectorised configurations an 8-byte spill
# within 128 registers at ptxas's default register usage level; at level 0 none spills.
@tilelang.jit(pass_configs={**PASS_CONFIGS, PassConfigKey.TL_PTXAS_REGISTER_USAGE_LEVEL: 0})
def sampler_flagged_tl(dtype: str, vec: int, top_k_dtype: str = "int64"):
    """Compiled kernel(logits, temperature, top_k, top_p, min_p, seed, offset, token, logprob, empty,
    flags): sampler_tl's rows b whose flags[b] (int32, at least B of them) is nonzero, each then
    set back to 0; every other block returns at once and writes nothing. fused_sample's second
    launch: the rows whose candidate lists could not hold them (kernels/fused_sample/cuda.py).
    Launched as a programmatic dependent launch (PDL): its blocks may start before the kernel ahead
    of it on the stream ends, if that kernel triggers them, and read nothing until it has ended.
    sm_90 and later only: TileLang does not lower PDL for older GPUs."""
    check_config("sampler_flagged_tl", dtype, vec, top_k_dtype)
    B, V, S = T.dynamic("B"), T.dynamic("V"), T.dynamic("row_stride", "int64")
    F = T.dynamic("flag_slots")

    @T.prim_func
    def sampler_flagged(
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
        flags: T.Tensor((F,), "int32"),
    ):
        with T.Kernel(B, threads=_THREADS) as bx:
            tx = T.get_thread_binding(0)
            r = alloc_row(dtype, vec, _THREADS, _CAP)
            flagged = T.alloc_local((1,), "int32")
            T.assume(S % vec == 0)
            # Launched as a programmatic dependent of the kernel before it (which may let this
            # grid start during its tail): nothing is read before that kernel has ended and its
            # writes are visible.
            T.pdl_sync()
            flagged[0] = flags[bx]
            if flagged[0] != 0:
                sample_row(r, tx, bx, T.cast(bx, "int64"), logits, temperature, top_k, top_p, min_p, seed, offset, token, logprob, empty, V, vec)
                # After sample_row's barriers, so every thread has read the flag.
                if tx == 0:
                    flags[bx] = 0

    return sampler_flagged
