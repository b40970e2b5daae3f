"""Huawei Ascend 950 TileLang implementation of `sampler`. Verified by lowering to AscendC only
(codegen_ascend suite: every configuration lowers and its Unified Buffer footprint fits); no NPU has
run it.

    k = sampler_tl(dtype, vec, top_k_dtype)
    k(logits, temperature, top_k, top_p, min_p, seed, offset, token, logprob, empty)

Arguments, dtypes, layouts and semantics are those of the CUDA factory (kernels/sampler/cuda.py) and
of `kernels.sampler.ref` (the contract), token for token: the same s = l / t, w = expf(d), integer
masses, thresholds and race keys w / E with the library's noise (random_sampling/asc.py's macros:
this module may not import the CUDA ones). B, V and the row stride are
dynamic. `vec` is accepted for signature parity and validated but unused: the global-memory side of
an Ascend DMA is byte-granular, so rows need no alignment class.

Where the work runs: one persistent block per vector core over rows. Each row takes _PASSES passes;
a pass copies the row in tiles of _TILE elements into the UB (MTE2), and a SIMT region of
_SIMT_THREADS threads folds each thread's strided entries of the tile into per-thread partials (a
best (key, id, d), an int64 count or mass, the int64 Q, a float32 sum) kept in UB vectors between
tiles; the scalar unit folds the partials in thread order and decides; each row's outputs are stored
once, after its last pass. The thresholds are found bit by bit (a binary search over the 32-bit
keys, one pass per bit: simpler than CUDA's shared-memory radix histograms, which would need SIMT
atomics, and exact in the same way; the ref suite checks both searches against the contract's sorted
thresholds):
  pass 0         max of s with the lowest id holding it, and the count of finite entries;
  passes 1-32    top-k: the largest uint32 u with count(ordered(s) >= u) >= k is the k-th largest;
  passes 33-63   top-p: the largest w bit pattern x with mass(w >= x) * 2**20 >= P20 * Q (bit 31 of
                 a non-negative float is 0); pass 33 also sums Q;
  pass 64        the race over kept entries (carrying the winner's d) and the sum of w.
Passes that do not apply to the row (greedy rows, disabled filters) are skipped by the scalar unit.

UB budget: one tile (32 KiB of float32, 16 KiB of bfloat16), six 256-entry partial vectors (best key,
id and d, count or mass, Q, sum of w: 8 KiB), small state and output cells, plus the SIMT reserve
(testing/codegen_ascend.py measures it). Speed was not a goal here: 65 passes over each row.
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import tilelang
import tilelang.ascend.language as T

from kernels.random_sampling.asc import exponential_noise, noise_bits, noise_row_keys
from kernels.sampler.ref import MASS_BITS, check_config, sampler_shipped_configs

__all__ = ["sampler_shipped_configs", "sampler_tl"]

# One persistent block per vector core, the count TileLang's Ascend 950 vector examples launch.
_VECTOR_CORES = 64
_SIMT_THREADS = 256
# Row elements per UB tile: 32 per thread.
_TILE = 8192
_PASS_MAX = 0
_PASS_TOP_K = 1
_PASS_TOP_P = _PASS_TOP_K + 32
_PASS_RACE = _PASS_TOP_P + 31
_PASSES = _PASS_RACE + 1
# Slots of the float32 state: row max of s, the three keep thresholds, the folded key, sum and the
# winner's d.
_SF_MAX, _SF_TAU_K, _SF_TAU_P, _SF_MIN_P, _SF_KEY, _SF_SUM, _SF_D = range(7)
_SF_SLOTS = 8
# Slots of the int64 state the scalar unit keeps between passes (and the SIMT threads read).
_SI_CAND, _SI_SAMPLED, _SI_DONE, _SI_TOP_K_ON, _SI_TOP_P_ON, _SI_REMAIN, _SI_P20, _SI_TARGET, _SI_FOUND = range(9)
_SI_ID, _SI_ACC, _SI_TOTAL = 9, 10, 11
_SI_SLOTS = 12


@T.macro
def _ordered(s):
    """int64 holding the uint32 image of float32 s that orders like s (-0.0 just below +0.0)."""
    bits = T.cast(T.reinterpret(s, "uint32"), "int64")
    return T.if_then_else(bits >= T.int64(1 << 31), bits ^ T.int64(0xFFFFFFFF), bits | T.int64(1 << 31))


@T.macro
def _unordered(u):
    """float32 whose _ordered image is the int64 u."""
    return T.reinterpret(T.cast(T.if_then_else(u >= T.int64(1 << 31), u ^ T.int64(1 << 31), u ^ T.int64(0xFFFFFFFF)), "uint32"), "float32")


@tilelang.jit(target="ascend")
def sampler_tl(dtype: str, vec: int, top_k_dtype: str = "int64"):
    """Ascend kernel(logits, temperature, top_k, top_p, min_p, seed, offset, token, logprob, empty)
    (memoised)."""
    check_config("sampler_tl", dtype, vec, top_k_dtype)
    B, V, S = T.dynamic("B"), T.dynamic("V"), T.dynamic("row_stride", "int64")

    @T.macro
    def entry(ph, v, x32, tt, sampled, m, tau_k, tau_p, min_p_w, cand, hk, s, d, w, mine_key, mine_id, mine_d, mine_acc, mine_tot, mine_sum):
        """Folds finite entry v (float32 logit x32) into this thread's partials of pass ph; ids
        arrive in ascending order, so only a strictly larger key replaces an earlier best."""
        s[0] = x32
        if sampled != 0:
            s[0] = x32 / tt
        if ph == _PASS_MAX:
            mine_acc[0] += T.int64(1)
            if mine_id[0] < 0 or s[0] > mine_key[0]:
                mine_key[0] = s[0]
                mine_id[0] = v
        elif ph < _PASS_TOP_P:
            if _ordered(s[0]) >= cand:
                mine_acc[0] += T.int64(1)
        else:
            d[0] = T.if_then_else(s[0] == m, T.float32(0), s[0] - m)
            w[0] = T.exp(d[0])
            if ph == _PASS_RACE:
                mine_sum[0] += w[0]
                if sampled != 0 and s[0] >= tau_k and w[0] >= tau_p and w[0] >= min_p_w:
                    noise_bits(v, hk)
                    s[0] = w[0] / exponential_noise(hk)
                    if mine_id[0] < 0 or s[0] > mine_key[0]:
                        mine_key[0] = s[0]
                        mine_id[0] = v
                        mine_d[0] = d[0]
            elif s[0] >= tau_k:
                q = T.cast(w[0] * T.float32(1 << MASS_BITS), "int64")
                mine_tot[0] += q
                if T.cast(T.reinterpret(w[0], "uint32"), "int64") >= cand:
                    mine_acc[0] += q

    @T.macro
    def simt_tile(ph, b, c, valid, tile, seed, offset, temperature, sf, si, key_ub, id_ub, d_ub, acc_ub, tot_ub, sum_ub):
        """The SIMT threads fold tile c of row b into their partials (kept in the UB vectors)."""
        with T.SimtVF(threads=_SIMT_THREADS):
            tid = T.get_thread_binding(0)
            # (k0, k1, bits): a local array, so the hash steps store in place.
            hk = T.alloc_local((3,), "uint32")
            s = T.alloc_local((1,), "float32")
            d = T.alloc_local((1,), "float32")
            w = T.alloc_local((1,), "float32")
            mine_key = T.alloc_local((1,), "float32")
            mine_d = T.alloc_local((1,), "float32")
            mine_id = T.alloc_local((1,), "int32")
            mine_acc = T.alloc_local((1,), "int64")
            mine_tot = T.alloc_local((1,), "int64")
            mine_sum = T.alloc_local((1,), "float32")
            # The row's state, read from the UB once per tile.
            tt = temperature[b]
            sampled = si[_SI_SAMPLED]
            m = sf[_SF_MAX]
            tau_k = sf[_SF_TAU_K]
            tau_p = sf[_SF_TAU_P]
            min_p_w = sf[_SF_MIN_P]
            cand = si[_SI_CAND]
            mine_key[0] = -T.infinity("float32")
            mine_id[0] = -1
            mine_d[0] = T.float32(0)
            mine_acc[0] = T.int64(0)
            mine_tot[0] = T.int64(0)
            mine_sum[0] = T.float32(0)
            if c > 0:
                mine_key[0] = key_ub[tid]
                mine_id[0] = id_ub[tid]
                mine_d[0] = d_ub[tid]
                mine_acc[0] = acc_ub[tid]
                mine_tot[0] = tot_ub[tid]
                mine_sum[0] = sum_ub[tid]
            # The row keys of random_sampling's ref.row_keys (the race pass needs them).
            noise_row_keys(seed[b], offset[b], hk)
            for r in T.serial(_TILE // _SIMT_THREADS):
                j = r * _SIMT_THREADS + tid
                if j < valid:
                    x32 = T.cast(tile[j], "float32")
                    # False for NaN too: NaN counts as -inf, and -inf is not finite.
                    if x32 > -T.infinity("float32"):
                        entry(ph, c * _TILE + j, x32, tt, sampled, m, tau_k, tau_p, min_p_w, cand, hk, s, d, w, mine_key, mine_id, mine_d, mine_acc, mine_tot, mine_sum)
            key_ub[tid] = mine_key[0]
            id_ub[tid] = mine_id[0]
            d_ub[tid] = mine_d[0]
            acc_ub[tid] = mine_acc[0]
            tot_ub[tid] = mine_tot[0]
            sum_ub[tid] = mine_sum[0]

    @T.macro
    def fold(sf, si, key_ub, id_ub, d_ub, acc_ub, tot_ub, sum_ub):
        """The scalar unit folds the partials in thread order (the same argmax and sums on every
        run) into sf[_SF_KEY], si[_SI_ID], sf[_SF_D], si[_SI_ACC], si[_SI_TOTAL], sf[_SF_SUM]."""
        key = T.alloc_var("float32")
        dd = T.alloc_var("float32")
        idx = T.alloc_var("int32")
        acc = T.alloc_var("int64")
        tot = T.alloc_var("int64")
        wsum = T.alloc_var("float32")
        key = key_ub[0]
        idx = id_ub[0]
        dd = d_ub[0]
        acc = acc_ub[0]
        tot = tot_ub[0]
        wsum = sum_ub[0]
        for i in T.serial(1, _SIMT_THREADS):
            if id_ub[i] >= 0:
                if idx < 0 or key_ub[i] > key or (key_ub[i] == key and id_ub[i] < idx):
                    key = key_ub[i]
                    idx = id_ub[i]
                    dd = d_ub[i]
            acc += acc_ub[i]
            tot += tot_ub[i]
            wsum += sum_ub[i]
        sf[_SF_KEY] = key
        si[_SI_ID] = T.cast(idx, "int64")
        sf[_SF_D] = dd
        si[_SI_ACC] = acc
        si[_SI_TOTAL] = tot
        sf[_SF_SUM] = wsum

    @T.macro
    def store(b, token, logprob, empty, tok_ub, lp_ub, em_ub):
        T.copy(tok_ub[0:1], token[b : b + 1])
        T.copy(lp_ub[0:1], logprob[b : b + 1])
        T.copy(em_ub[0:1], empty[b : b + 1])

    @T.macro
    def decide_max(b, top_k, top_p, min_p, sf, si, tok_ub, lp_ub, em_ub):
        """After pass 0: outputs of empty and +inf rows; the filters of sampled rows."""
        sf[_SF_MAX] = sf[_SF_KEY]
        sf[_SF_TAU_K] = -T.infinity("float32")
        sf[_SF_TAU_P] = T.float32(0)
        sf[_SF_MIN_P] = T.float32(0)
        tok_ub[0] = si[_SI_ID]
        if si[_SI_ID] < 0 or sf[_SF_KEY] == T.infinity("float32"):
            si[_SI_DONE] = T.int64(1)
            lp_ub[0] = T.if_then_else(si[_SI_ID] < 0, T.float32(float("nan")), T.float32(0))
            em_ub[0] = T.cast(si[_SI_ID] < 0, "uint8")
        elif si[_SI_SAMPLED] != 0:
            # k beyond the finite count keeps every finite entry: no top-k.
            if T.cast(top_k[b], "int64") > T.int64(0) and T.cast(top_k[b], "int64") < T.cast(V, "int64") and T.cast(top_k[b], "int64") <= si[_SI_ACC]:
                si[_SI_TOP_K_ON] = T.int64(1)
                si[_SI_REMAIN] = T.cast(top_k[b], "int64")
            if top_p[b] < T.float32(1):
                # P20: clamp(top_p, 0, 1) * 2**20 (exact), rounded half to even.
                x = T.max(top_p[b], T.float32(0)) * T.float32(1 << MASS_BITS)
                whole = T.cast(x, "int64")
                frac = x - T.cast(whole, "float32")
                si[_SI_P20] = whole + T.if_then_else(frac > T.float32(0.5) or (frac == T.float32(0.5) and whole % T.int64(2) == T.int64(1)), T.int64(1), T.int64(0))
                if si[_SI_P20] == T.int64(0):
                    # No mass to reach: the max and its ties.
                    sf[_SF_TAU_P] = T.float32(1)
                else:
                    si[_SI_TOP_P_ON] = T.int64(1)
            # False for NaN: a disabled min_p keeps every w >= 0.
            if min_p[b] > T.float32(0):
                sf[_SF_MIN_P] = T.min(min_p[b], T.float32(1))

    @T.macro
    def decide_search(ph, sf, si):
        """After a search pass: keep the candidate bit when its count (top-k) or mass (top-p)
        still reaches the need; the last pass of each search turns the bits into a threshold."""
        if ph < _PASS_TOP_P:
            if si[_SI_ACC] >= si[_SI_REMAIN]:
                si[_SI_FOUND] = si[_SI_CAND]
            if ph == _PASS_TOP_P - 1:
                sf[_SF_TAU_K] = _unordered(si[_SI_FOUND])
                si[_SI_FOUND] = T.int64(0)
        else:
            if ph == _PASS_TOP_P:
                si[_SI_TARGET] = si[_SI_P20] * si[_SI_TOTAL]
            if si[_SI_ACC] * T.int64(1 << MASS_BITS) >= si[_SI_TARGET]:
                si[_SI_FOUND] = si[_SI_CAND]
            if ph == _PASS_RACE - 1:
                sf[_SF_TAU_P] = T.reinterpret(T.cast(si[_SI_FOUND], "uint32"), "float32")

    @T.macro
    def finish(sf, si, tok_ub, lp_ub, em_ub):
        """After the race pass: the token (the race winner, or the greedy max) and its logprob."""
        em_ub[0] = T.uint8(0)
        lp_ub[0] = -T.log(sf[_SF_SUM])
        if si[_SI_SAMPLED] != 0:
            tok_ub[0] = si[_SI_ID]
            lp_ub[0] = sf[_SF_D] - T.log(sf[_SF_SUM])

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
        with T.Kernel(_VECTOR_CORES) as core:
            tile = T.alloc_shared((_TILE,), dtype)
            key_ub = T.alloc_shared((_SIMT_THREADS,), "float32")
            id_ub = T.alloc_shared((_SIMT_THREADS,), "int32")
            d_ub = T.alloc_shared((_SIMT_THREADS,), "float32")
            acc_ub = T.alloc_shared((_SIMT_THREADS,), "int64")
            tot_ub = T.alloc_shared((_SIMT_THREADS,), "int64")
            sum_ub = T.alloc_shared((_SIMT_THREADS,), "float32")
            sf = T.alloc_shared((_SF_SLOTS,), "float32")
            si = T.alloc_shared((_SI_SLOTS,), "int64")
            tok_ub = T.alloc_shared((4,), "int64")
            lp_ub = T.alloc_shared((8,), "float32")
            em_ub = T.alloc_shared((32,), "uint8")
            for b in T.Persistent([B], _VECTOR_CORES, core, group_size=1, num_stages=1):
                row = T.cast(b, "int64")
                t = temperature[b]
                for i in T.serial(_SI_SLOTS):
                    si[i] = T.int64(0)
                si[_SI_SAMPLED] = T.cast(t > T.float32(0) and t < T.infinity("float32"), "int64")
                for ph in T.serial(_PASSES):
                    active = T.if_then_else(
                        ph == _PASS_MAX,
                        T.int64(1),
                        T.if_then_else(ph < _PASS_TOP_P, si[_SI_TOP_K_ON], T.if_then_else(ph < _PASS_RACE, si[_SI_TOP_P_ON], 1 - si[_SI_DONE])),
                    )
                    if active != 0:
                        # A search pass's candidate: the bits found so far plus this pass's bit.
                        if ph >= _PASS_TOP_K and ph < _PASS_TOP_P:
                            si[_SI_CAND] = si[_SI_FOUND] | (T.int64(1) << T.cast(_PASS_TOP_P - 1 - ph, "int64"))
                        if ph >= _PASS_TOP_P and ph < _PASS_RACE:
                            si[_SI_CAND] = si[_SI_FOUND] | (T.int64(1) << T.cast(_PASS_RACE - 1 - ph, "int64"))
                        for c in T.serial(T.ceildiv(V, _TILE)):
                            valid = T.min(_TILE, V - c * _TILE)
                            T.copy(logits[row, c * _TILE : c * _TILE + valid], tile[:valid])
                            simt_tile(ph, b, c, valid, tile, seed, offset, temperature, sf, si, key_ub, id_ub, d_ub, acc_ub, tot_ub, sum_ub)
                        fold(sf, si, key_ub, id_ub, d_ub, acc_ub, tot_ub, sum_ub)
                        if ph == _PASS_MAX:
                            decide_max(b, top_k, top_p, min_p, sf, si, tok_ub, lp_ub, em_ub)
                        elif ph < _PASS_RACE:
                            decide_search(ph, sf, si)
                        else:
                            finish(sf, si, tok_ub, lp_ub, em_ub)
                # Every row's outputs were settled by pass 0 (empty and +inf rows) or the race pass.
                store(b, token, logprob, empty, tok_ub, lp_ub, em_ub)

    return sampler
