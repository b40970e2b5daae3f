"""NVIDIA TileLang implementation of `fused_sample`: the sampler's filters and race with each row split
over a cluster of thread blocks that hold it in shared memory.

    k = fused_sample_tl(dtype, vec, top_k_dtype)
    k(logits, temperature, top_k, top_p, min_p, seed, offset, token, logprob, empty)

Arguments are those of kernels/sampler/cuda.py's sampler_tl (same shapes, dtypes, strides and
alignment rules), with 1 <= V <= MAX_V (kernels/fused_sample/ref.py): the interface sends larger
vocabularies to the sampler's kernel.

Semantics are `kernels.sampler.ref` (the contract), token for token, as the sampler's kernel: the same
s = l / t (IEEE division, fast math off), integer masses, thresholds and race keys, and argmaxes
that break ties to the lowest id (a total order, so neither the split nor the reduction order can
change a token). Only the logprob's float32 normaliser has this kernel's own fixed order (block
sums in id order, then the blocks in rank order), so logprobs may differ from the sampler's in the
last bits.

Why a cluster: the sampler's one block per row reads its row ten times through one SM; here a
cluster of _CLUSTER blocks (Hopper thread-block clusters: co-scheduled, with a hardware barrier and
access to each other's shared memory) splits the row into _CLUSTER chunks of at most _CHUNK
entries. Each block reads its chunk from global memory once, keeps s in shared memory, and runs every
later pass there. After each pass the blocks publish their partial results (histogram bins, counts,
best entry, sums) into every peer's shared memory and meet at the cluster barrier; every block then
folds the same _CLUSTER records in rank order and takes the same decision, so no block waits for a
leader. One launch: grid B * _CLUSTER, clusters of _CLUSTER; no global atomics, no workspace.

Phases (each the row runs ends with the exchange and the cluster barrier; the row's mode decides
which it runs, and every block of the cluster decides alike, so they skip the same ones):
  phase 0       load: the chunk copied into shared memory (_COPY_UNROLL vectors a thread in flight),
                then s in place (NaN and -inf stored as -inf); max of s with the lowest id, and the
                finite count. Thread 0 of every block then settles the row
                (decide_max of the sampler; rank 0 writes the outputs of empty and +inf rows).
  phases 1-4    top-k radix select over the order-preserving image of s, 8 bits a pass (per-lane
                uint32 histograms: a block's bin holds at most _CHUNK counts). Phase 3
                (_PHASE_COMPACT, the sampler's) also sums w (the logprob's normaliser) and lists the
                block's candidates, every s reaching the bin of the first two digits; when no block
                lists more than _LOCAL_CAP (random logits: about k in all) each hands its list to
                rank 0 (DSMEM, one more cluster barrier) and phases 4-9 run on rank 0 alone over
                those, with block barriers only: the row leaves the cluster.
  phases 5-8    top-p radix select over the bits of w = expf(s - m) of the top-k survivors with
                q-mass histograms (a lane replica holds at most _CHUNK / _REPLICAS * 2**20 < 2**32;
                block and cluster sums are int64); phase 5 also sums Q.
  phase 9       the race among kept entries and, unless phase 3 took it, the sum of w; rank 0
                writes the outputs.

The histograms and candidate lists are static shared memory (35 KiB) apart from the dynamic pool
(s, the records, rank 0's candidates): the barrier planner treats the dynamic pool as one buffer,
and would otherwise put a barrier between every read of s and every histogram atomic or append. A
block takes 170 KiB of shared memory (35 static, 135 dynamic), so an SM runs one block, and a GPU
one cluster per 8 SMs.

Only the radix passes exchange histogram bins; the others send the 32-entry tail of the record.
Passes over shared memory read _BATCH entries a thread before using any, and run one of three
loops (top-k digit, top-p mass, race) chosen outside the entry loop.

Speed (H200, PERF.md): 44.5 us for one row of 129280 fp32 logits with top-k 50 and top-p 0.9, the
same up to 8 rows (one wave of clusters on 132 SMs); the interface sends batches past 64 rows to
the sampler's kernel (one block a row), which is faster there.
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import tilelang
import tilelang.language as T
from tilelang.cuda.language.cluster import cluster_sync

from kernels.fused_sample.ref import CLUSTER_BLOCKS, MAX_V, check_config, fused_sample_shipped_configs
from kernels.random_sampling.cuda import PASS_CONFIGS, exponential_noise, noise_bits, noise_row_keys, take_if_better
from kernels.sampler.cuda import (
    _BINS,
    _DIGIT_BITS,
    _DIGITS,
    _LOWEST,
    _PHASE_COMPACT,
    _PHASE_MAX,
    _PHASE_RACE,
    _PHASE_TOP_K,
    _PHASE_TOP_P,
    _PHASES,
    _REP_STRIDE,
    _REPLICAS,
    _SCAN_WARPS,
    _SF_MAX,
    _SF_MIN_P,
    _SF_SLOTS,
    _SF_TAU_K,
    _SF_TAU_P,
    _SF_WSUM,
    _ST_COMPACT,
    _ST_MASK,
    _ST_MODE,
    _ST_P20,
    _ST_PREFIX,
    _ST_REMAIN,
    _ST_REMAIN_IN,
    _ST_SLOTS,
    _ST_TARGET,
    _WARP,
    _ordered,
    _unordered,
    block_fold,
    decide_max,
    finish_scan,
    phase_active,
    scan_bins,
    warp_fold,
    write_race,
)
from kernels.sampler.ref import MASS_BITS

__all__ = ["MAX_V", "fused_sample_shipped_configs", "fused_sample_tl"]

# Blocks per row: the largest cluster every Hopper launch accepts without opting in.
_CLUSTER = CLUSTER_BLOCKS
# Entries of a chunk: s of 20480 entries is 80 KiB of shared memory; 8 chunks hold MAX_V.
_CHUNK = MAX_V // _CLUSTER
_THREADS = 512
_WARPS = _THREADS // _WARP
# Vectors a thread loads before storing any, in the load phase: its copy loop holds nothing else,
# so they are all in flight at once (4 spilled on sm_100a at 128 registers when tried).
_COPY_UNROLL = 2
# Entries of s a thread reads before using any, in the passes over shared memory (_THREADS * _BATCH
# divides _CHUNK, so a batch never reads past the chunk's buffer).
_BATCH = 4
# A block's record for its peers: the 256 bins, then its finite count or mass sum, best id, best key
# and sum of w (the float32 ones as their bits), padded to whole warps (the copy's thread guard must
# be warp-uniform: it holds a barrier).
_R_ACC, _R_ID, _R_KEY, _R_SUM = _BINS, _BINS + 1, _BINS + 2, _BINS + 3
_RECORD = _BINS + _WARP
# Candidates a block may hand rank 0 after the compaction pass (top-k's digit 3): every entry whose
# s reaches the bin of the first two digits, about k in all for random logits. Rank 0 receives each
# block's list in that block's own region; a block with more sends none and the row stays split.
_LOCAL_CAP = 256
_CANDS = _CLUSTER * _LOCAL_CAP

assert _CHUNK % (_THREADS * _BATCH) == 0 and _CANDS % _THREADS == 0
assert _CHUNK * _CLUSTER == MAX_V and (_CHUNK // _REPLICAS) << MASS_BITS < 1 << 32


@tilelang.jit(pass_configs=PASS_CONFIGS)
def fused_sample_tl(dtype: str, vec: int, top_k_dtype: str = "int64"):
    """Compiled kernel(logits, temperature, top_k, top_p, min_p, seed, offset, token, logprob,
    empty) for these static arguments (memoised)."""
    check_config("fused_sample_tl", dtype, vec, top_k_dtype)
    B, V, S = T.dynamic("B"), T.dynamic("V"), T.dynamic("row_stride", "int64")

    # Each pass runs one of three loops (the phase decided outside the entry loop), and a thread
    # reads _BATCH entries of s before using any: independent shared-memory loads in flight, not a
    # chain of load, compare, atomic per entry.
    @T.macro
    def read_batch(sv, i, tx, n_local, batch):
        """Batch i of this thread's entries of s: slots from n_local up to the batch's end read as
        -inf, skipped by every pass."""
        for u in T.unroll(_BATCH):
            batch[u] = T.if_then_else((i * _BATCH + u) * _THREADS + tx < n_local, sv[(i * _BATCH + u) * _THREADS + tx], -T.infinity("float32"))

    @T.macro
    def count_digit(s, prefix, mask, shift, bits, digit, hist, replica):
        """Top-k pass: a finite s whose image matches the prefix counts in its digit's bin."""
        if s > -T.infinity("float32"):
            bits[0] = _ordered(s)
            if (bits[0] & mask) == prefix:
                digit[0] = T.cast((bits[0] >> shift) & T.uint32(_BINS - 1), "int32")
                T.atomic_add(hist[replica + digit[0]], T.uint32(1))

    @T.macro
    def weigh_mass(s, m, tau_k, prefix, mask, shift, w, bits, digit, acc, hist, replica):
        """Top-p pass: a finite top-k survivor adds its mass q to the total and, when w matches the
        prefix, to its digit's bin (the expf of the others is never needed)."""
        if s > -T.infinity("float32") and s >= tau_k:
            w[0] = T.exp(T.if_then_else(s == m, T.float32(0), s - m))
            q = T.cast(w[0] * T.float32(1 << MASS_BITS), "int64")
            acc[0] += q
            bits[0] = T.reinterpret("uint32", w[0])
            if q > T.int64(0) and (bits[0] & mask) == prefix:
                digit[0] = T.cast((bits[0] >> shift) & T.uint32(_BINS - 1), "int32")
                T.atomic_add(hist[replica + digit[0]], T.cast(q, "uint32"))

    @T.macro
    def compact_entry(s, v, m, prefix, w, wsum, slot, n_loc, loc_s, loc_id):
        """Compaction pass for entry v: w into the normaliser and, when s reaches the lowest s of
        the bin of top-k's first two digits (prefix), the entry into the block's candidate list (a
        thread whose slot fell past _LOCAL_CAP appends no more: the count still ends above it, and
        the row stays split)."""
        if s > -T.infinity("float32"):
            w[0] = T.exp(T.if_then_else(s == m, T.float32(0), s - m))
            wsum[0] += w[0]
            if s >= _unordered(T.max(prefix, T.uint32(_LOWEST))) and slot[0] < _LOCAL_CAP:
                slot[0] = T.atomic_add(n_loc[0], 1, return_prev=True)
                if slot[0] < _LOCAL_CAP:
                    loc_s[slot[0]] = s
                    loc_id[slot[0]] = v

    @T.macro
    def race_candidate(s, v, m, tau_k, tau_p, min_p, keys, h, w, best_key, best_id):
        """Race pass for candidate v on rank 0 (a sampled row; the normaliser came from the
        compaction pass): candidates arrive in no id order, so ties go to the lower id explicitly."""
        if s > -T.infinity("float32") and s >= tau_k:
            w[0] = T.exp(T.if_then_else(s == m, T.float32(0), s - m))
            if w[0] >= tau_p and w[0] >= min_p:
                noise_bits(v, keys, h)
                take_if_better(best_key, best_id, w[0] / exponential_noise(h), v)

    @T.macro
    def race(s, v, sampled, m, tau_k, tau_p, min_p, keys, h, w, wsum, best_key, best_id):
        """Race pass for entry v: w into the normaliser and, kept, its key w / E into the race; ids
        arrive in ascending order, so only a strictly larger key replaces an earlier best."""
        if s > -T.infinity("float32"):
            w[0] = T.exp(T.if_then_else(s == m, T.float32(0), s - m))
            wsum[0] += w[0]
            if sampled != 0 and s >= tau_k and w[0] >= tau_p and w[0] >= min_p:
                noise_bits(v, keys, h)
                w[0] = w[0] / exponential_noise(h)
                if best_id[0] < 0 or w[0] > best_key[0]:
                    best_key[0] = w[0]
                    best_id[0] = v

    @T.macro
    def load(x32, v, j, sampled, t, sv, acc, best_key, best_id):
        """Phase 0 for entry v (chunk slot j, holding its logit x32): s into shared memory, and the
        max and count."""
        # False for NaN too: NaN counts as -inf, and -inf entries are not finite.
        s = T.if_then_else(x32 > -T.infinity("float32"), T.if_then_else(sampled != 0, x32 / t, x32), -T.infinity("float32"))
        sv[j] = s
        if x32 > -T.infinity("float32"):
            acc[0] += T.int64(1)
            if best_id[0] < 0 or s > best_key[0]:
                best_key[0] = s
                best_id[0] = v

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
    ):
        # A 1-D grid (a grid's y extent stops at 65535 rows): block i is rank i % _CLUSTER of row
        # i // _CLUSTER, and a cluster is _CLUSTER consecutive blocks.
        with T.Kernel(B * _CLUSTER, threads=_THREADS, cluster_dims=(_CLUSTER, 1, 1)) as block:
            rank = block % _CLUSTER
            bx = block // _CLUSTER
            tx = T.get_thread_binding(0)
            warp, lane = tx // _WARP, tx % _WARP
            # 64-bit row: every offset into logits is 64-bit (B * row_stride may pass 2**31).
            row = T.cast(bx, "int64")
            keys = T.alloc_local((2,), "uint32")
            h = T.alloc_local((1,), "uint32")
            w = T.alloc_local((1,), "float32")
            bits = T.alloc_local((1,), "uint32")
            digit = T.alloc_local((1,), "int32")
            acc = T.alloc_local((1,), "int64")
            wsum = T.alloc_local((1,), "float32")
            best_key = T.alloc_local((1,), "float32")
            best_id = T.alloc_local((1,), "int32")
            other_key = T.alloc_local((1,), "float32")
            other_id = T.alloc_local((1,), "int32")
            incl = T.alloc_local((1,), "int64")
            count = T.alloc_local((1,), "int64")
            buf = T.alloc_local((_COPY_UNROLL, vec), dtype)
            batch = T.alloc_local((_BATCH,), "float32")
            # Exchanges so far: the parity of the peer-record set a pass uses (passes a row skips
            # exchange nothing, and every block of the cluster skips the same ones).
            xchg = T.alloc_local((1,), "int32")
            slot = T.alloc_local((1,), "int32")
            sv = T.alloc_shared((_CHUNK,), "float32")
            # The block's candidates (static, apart from s: appends and reads of s in one loop
            # would otherwise get a barrier each), and what rank 0 receives: block j's in region j.
            n_loc = T.alloc_shared((1,), "int32", scope="shared")
            loc_s = T.alloc_shared((_LOCAL_CAP,), "float32", scope="shared")
            loc_id = T.alloc_shared((_LOCAL_CAP,), "int32", scope="shared")
            cand_s = T.alloc_shared((_CANDS,), "float32")
            cand_id = T.alloc_shared((_CANDS,), "int32")
            cand_n = T.alloc_shared((_CLUSTER,), "int32")
            # The row, read back from shared memory where thread 0 writes or reads the row's
            # parameters and outputs: the compiler cannot hoist those addresses out of the phase
            # loop and hold them in registers through every pass (at 128 registers, sm_100a spilled).
            row_s = T.alloc_shared((1,), "int32", scope="shared")
            # The sampler's per-lane histograms, of uint32 here: every atomic is a native 32-bit one.
            hist = T.alloc_shared((_REPLICAS * _REP_STRIDE,), "uint32", scope="shared")
            record = T.alloc_shared((_RECORD,), "int64")
            # Two sets of peer records, by pass parity: a block may publish pass p + 1 while a slower
            # peer still reads pass p, never pass p + 2 (that needs the barrier the peer has not left).
            gathered = T.alloc_shared((2, _CLUSTER, _RECORD), "int64")
            scan_total = T.alloc_shared((_SCAN_WARPS,), "int64")
            red_key = T.alloc_shared((_WARPS,), "float32")
            red_id = T.alloc_shared((_WARPS,), "int32")
            red_acc = T.alloc_shared((_WARPS,), "int64")
            red_sum = T.alloc_shared((_WARPS,), "float32")
            st = T.alloc_shared((_ST_SLOTS,), "int64")
            sf = T.alloc_shared((_SF_SLOTS,), "float32")
            # The interface passes vec-aligned rows: what lets the loads below be vectorised.
            T.assume(S % vec == 0)
            t = temperature[bx]
            sampled = T.cast(t > T.float32(0) and t < T.infinity("float32"), "int32")
            # This block's chunk [lo, lo + n_local): whole vectors, so every chunk but the last is aligned.
            chunk_vecs = T.ceildiv(T.ceildiv(V, _CLUSTER), vec)
            first_vec = rank * chunk_vecs
            lo = T.min(first_vec * vec, V)
            n_local = T.min(V - lo, chunk_vecs * vec)
            n_vec = n_local // vec
            if tx < _ST_SLOTS:
                st[tx] = T.int64(0)
            if tx < _SF_SLOTS:
                sf[tx] = T.float32(0)
            if tx == 0:
                n_loc[0] = 0
                row_s[0] = bx
            xchg[0] = 0
            for phase in T.serial(_PHASES):
                T.sync_threads()
                mode = st[_ST_MODE]
                active = phase_active(phase, mode, st)
                m = sf[_SF_MAX]
                tau_k = sf[_SF_TAU_K]
                tau_p = sf[_SF_TAU_P]
                min_p_w = sf[_SF_MIN_P]
                prefix = T.cast(st[_ST_PREFIX], "uint32")
                mask = T.cast(st[_ST_MASK], "uint32")
                shift = T.cast(_DIGIT_BITS * (_DIGITS - 1 - (phase - 1) % _DIGITS), "uint32")
                par = xchg[0] % 2
                radix = active != 0 and phase >= _PHASE_TOP_K and phase < _PHASE_RACE
                # 1 once rank 0 holds the row's candidates: the passes after the compaction run on
                # rank 0 alone, over those, and exchange nothing.
                compact = T.cast(st[_ST_COMPACT], "int32")
                if radix:
                    for i in T.serial(T.ceildiv(_REPLICAS * _REP_STRIDE, _THREADS)):
                        if i * _THREADS + tx < _REPLICAS * _REP_STRIDE:
                            hist[i * _THREADS + tx] = T.uint32(0)
                acc[0] = T.int64(0)
                best_key[0] = -T.infinity("float32")
                best_id[0] = -1
                wsum[0] = T.float32(0)
                slot[0] = 0
                if phase == _PHASE_RACE:
                    # Derived here, not at the start: two registers the earlier passes do not hold.
                    noise_row_keys(seed[row_s[0]], offset[row_s[0]], keys)
                T.sync_threads()
                if phase == _PHASE_MAX:
                    for r in T.serial(T.ceildiv(n_vec, _THREADS * _COPY_UNROLL)):
                        for u in T.unroll(_COPY_UNROLL):
                            if (r * _COPY_UNROLL + u) * _THREADS + tx < n_vec:
                                for e in T.vectorized(vec):
                                    buf[u, e] = logits[row, (first_vec + (r * _COPY_UNROLL + u) * _THREADS + tx) * vec + e]
                        for u in T.unroll(_COPY_UNROLL):
                            if (r * _COPY_UNROLL + u) * _THREADS + tx < n_vec:
                                for e in T.vectorized(vec):
                                    sv[((r * _COPY_UNROLL + u) * _THREADS + tx) * vec + e] = T.cast(buf[u, e], "float32")
                    if vec > 1:
                        # The n_local % vec entries after the last whole vector (the last chunk only).
                        if tx < n_local % vec:
                            sv[n_vec * vec + tx] = T.cast(logits[T.cast(row_s[0], "int64"), lo + n_vec * vec + tx], "float32")
                    for i in T.serial(T.ceildiv(n_local, _THREADS)):
                        if i * _THREADS + tx < n_local:
                            load(sv[i * _THREADS + tx], lo + i * _THREADS + tx, i * _THREADS + tx, sampled, t, sv, acc, best_key, best_id)
                elif phase == _PHASE_COMPACT:
                    for i in T.serial(T.ceildiv(n_local, _THREADS * _BATCH) * active):
                        read_batch(sv, i, tx, n_local, batch)
                        for u in T.unroll(_BATCH):
                            count_digit(batch[u], prefix, mask, shift, bits, digit, hist, lane * _REP_STRIDE)
                            compact_entry(batch[u], lo + (i * _BATCH + u) * _THREADS + tx, m, prefix, w, wsum, slot, n_loc, loc_s, loc_id)
                else:
                    for i in T.serial(T.ceildiv(n_local, _THREADS * _BATCH) * active * (1 - compact)):
                        read_batch(sv, i, tx, n_local, batch)
                        for u in T.unroll(_BATCH):
                            if phase < _PHASE_TOP_P:
                                count_digit(batch[u], prefix, mask, shift, bits, digit, hist, lane * _REP_STRIDE)
                            elif phase < _PHASE_RACE:
                                weigh_mass(batch[u], m, tau_k, prefix, mask, shift, w, bits, digit, acc, hist, lane * _REP_STRIDE)
                            else:
                                race(batch[u], lo + (i * _BATCH + u) * _THREADS + tx, sampled, m, tau_k, tau_p, min_p_w, keys, h, w, wsum, best_key, best_id)
                if phase > _PHASE_COMPACT:
                    # Rank 0 over the candidates: region j holds cand_n[j] of block j's, the rest -inf.
                    for i in T.serial(_CANDS // _THREADS * active * compact * T.cast(rank == 0, "int32")):
                        batch[0] = T.if_then_else((i * _THREADS + tx) % _LOCAL_CAP < cand_n[(i * _THREADS + tx) // _LOCAL_CAP], cand_s[i * _THREADS + tx], -T.infinity("float32"))
                        if phase < _PHASE_TOP_P:
                            count_digit(batch[0], prefix, mask, shift, bits, digit, hist, lane * _REP_STRIDE)
                        elif phase < _PHASE_RACE:
                            weigh_mass(batch[0], m, tau_k, prefix, mask, shift, w, bits, digit, acc, hist, lane * _REP_STRIDE)
                        else:
                            race_candidate(batch[0], cand_id[i * _THREADS + tx], m, tau_k, tau_p, min_p_w, keys, h, w, best_key, best_id)
                warp_fold(best_key, best_id, acc, wsum, other_key, other_id, red_key, red_id, red_acc, red_sum, warp, lane)
                T.sync_threads()
                # This block's record: its bins summed over the lane replicas (radix passes), its
                # scalars folded in warp order.
                if radix and tx < _BINS:
                    count[0] = T.int64(0)
                    for r in T.unroll(_REPLICAS):
                        count[0] += T.cast(hist[r * _REP_STRIDE + tx], "int64")
                    record[tx] = count[0]
                if tx == 0:
                    block_fold(_WARPS, best_key, best_id, acc, wsum, red_key, red_id, red_acc, red_sum)
                    # The compaction pass reports its candidate count (top-k passes need no acc).
                    if phase == _PHASE_COMPACT:
                        acc[0] = T.cast(n_loc[0], "int64")
                    record[_R_ACC] = acc[0]
                    record[_R_ID] = T.cast(best_id[0], "int64")
                    record[_R_KEY] = T.cast(T.reinterpret("int32", best_key[0]), "int64")
                    record[_R_SUM] = T.cast(T.reinterpret("int32", wsum[0]), "int64")
                T.sync_threads()
                if active != 0 and compact == 0:
                    if radix:
                        for p in T.serial(_CLUSTER):
                            T.copy_cluster(record[0:_BINS], gathered[par, rank, 0:_BINS], dst_block=p)
                    for p in T.serial(_CLUSTER):
                        T.copy_cluster(record[_BINS:_RECORD], gathered[par, rank, _BINS:_RECORD], dst_block=p)
                    cluster_sync()
                    xchg[0] += 1
                if tx == 0 and active != 0:
                    if compact == 0:
                        # The cluster's scalars, folded in rank order by every block alike (rank 0
                        # alone keeps its block's once it holds the candidates).
                        best_key[0] = -T.infinity("float32")
                        best_id[0] = -1
                        acc[0] = T.int64(0)
                        wsum[0] = T.float32(0)
                        for j in T.unroll(_CLUSTER):
                            take_if_better(best_key, best_id, T.reinterpret("float32", T.cast(gathered[par, j, _R_KEY], "int32")), T.cast(gathered[par, j, _R_ID], "int32"))
                            acc[0] += gathered[par, j, _R_ACC]
                            wsum[0] += T.reinterpret("float32", T.cast(gathered[par, j, _R_SUM], "int32"))
                    if phase == _PHASE_MAX:
                        decide_max(row_s[0], V, top_k, top_p, min_p, t, token, logprob, empty, best_key, best_id, acc, st, sf, T.cast(rank == 0, "int32"))
                    elif phase == _PHASE_TOP_P:
                        st[_ST_TARGET] = st[_ST_P20] * acc[0]
                        st[_ST_REMAIN] = T.int64(0)
                    elif phase == _PHASE_COMPACT:
                        # Every block sees the same counts: all agree on compacting.
                        st[_ST_COMPACT] = T.int64(1)
                        for j in T.unroll(_CLUSTER):
                            cand_n[j] = T.cast(gathered[par, j, _R_ACC], "int32")
                            if gathered[par, j, _R_ACC] > T.int64(_LOCAL_CAP):
                                st[_ST_COMPACT] = T.int64(0)
                        sf[_SF_WSUM] = wsum[0]
                    elif phase == _PHASE_RACE and rank == 0:
                        if compact != 0:
                            wsum[0] = sf[_SF_WSUM]
                        write_race(row_s[0], T.cast(row_s[0], "int64"), logits, t, m, mode, best_id, wsum, w, st, token, logprob, empty)
                if tx == 0:
                    st[_ST_REMAIN_IN] = st[_ST_REMAIN]
                T.sync_threads()
                if phase == _PHASE_COMPACT and active != 0 and st[_ST_COMPACT] != 0:
                    # The hand-over: each block's list into its region of rank 0's (whole regions;
                    # the counts travelled in the records), then nobody touches a peer again.
                    T.copy_cluster(loc_s[0:_LOCAL_CAP], cand_s[rank * _LOCAL_CAP : rank * _LOCAL_CAP + _LOCAL_CAP], dst_block=0)
                    T.copy_cluster(loc_id[0:_LOCAL_CAP], cand_id[rank * _LOCAL_CAP : rank * _LOCAL_CAP + _LOCAL_CAP], dst_block=0)
                    cluster_sync()
                # A radix pass: thread i takes the cluster's bin 255 - i (rank 0's own once it holds
                # the candidates), and an inclusive scan over the threads gives each bin the count
                # (or mass) of itself and all above it.
                if radix and tx < _BINS:
                    count[0] = T.int64(0)
                    if compact == 0:
                        for j in T.unroll(_CLUSTER):
                            count[0] += gathered[par, j, _BINS - 1 - tx]
                    else:
                        count[0] = record[_BINS - 1 - tx]
                    scan_bins(incl, count, lane, warp, scan_total)
                T.sync_threads()
                if radix and tx < _BINS:
                    finish_scan(tx, phase, shift, incl, count, warp, scan_total, st, sf)

    return fused_sample
