"""NVIDIA TileLang implementation of `random_sampling`: exponential-race / Gumbel-max sampling with
counter-based noise, and the noise macros other sampling kernels import.

    k = random_sample_chunked_tl(source, dtype, vec)
    k(x, seed, offset, temperature, token, chunk_key, chunk_id, arrivals)
    k = random_sample_tl(source, dtype, vec)            # one block a row, no workspace
    k(x, seed, offset, temperature, token)
    (each factory also takes pdl=False: True builds a programmatic dependent launch,
    kernels/tl_launch.py, sm_90+)

source       "probs" or "logits" (what x holds; the rules are in kernels.random_sampling.ref).
x            (B, V) of `dtype` (probs: float32; logits: float32 or bfloat16), row stride
             `row_stride` >= V elements (a view of a wider tensor is fine), last dimension
             contiguous; base pointer and row stride (in bytes) multiples of vec * element size.
seed, offset (B,) int64: the per-request noise counters (device tensors: CUDA-graph safe).
temperature  (B,) float32: read by the logits kernel only (the probs kernel ignores it).
token        (B,) int64 output: the sampled id, or -1 for a row with nothing to sample.
chunk_key    (>= B * ceil(V / ref.CHUNK),) float32 and chunk_id (same length) int32: workspace, one
             record per chunk of a row (no value needed before the launch); chunked kernel only.
arrivals     (>= B,) int32: zero before the launch, zero after it; chunked kernel only.

Semantics are `kernels.random_sampling.ref` (the contract), token for token: the float32 keys are
computed with the same operations (IEEE division, the accurate `logf` that torch.log also uses on
CUDA: the kernel is built with fast math off, and the codegen test checks the source), and the
argmax with ties to the lowest id is a total order, so the reduction order cannot change the token.

B, V and the row stride are dynamic: one compile per (source, dtype, vec) serves every batch and
vocabulary. B >= 1 and V >= 1 (the interface launches nothing otherwise).

Each row is cut into chunks of ref.CHUNK entries, one block of _THREADS threads each (grid B x
chunks), so a single request spreads over the SMs: the hash and the two logs of an entry make the
kernel arithmetic-bound, and one block a row (the previous design) took about 58 us for any batch
up to one row per SM (kernels/random_sampling/PERF.md). A block:
  1. loads its chunk into registers (every load in flight before any is used; the V % vec entries
     after the last whole vector go one a thread to the chunk that holds them);
  2. takes the chunk's largest drawable value (two barriers: the second keeps the shared value
     until every thread has read it): that entry's key is at least a bound
     computed from it and the noise's range (p / 16.64, or l / t - 2.81), so an entry whose key
     cannot reach the bound, or the thread's best so far, skips the noise (p * 1.678e7, or
     l / t + 16.64, is below it): it cannot win, not even a tie;
  3. folds the rest into the thread's best (ids ascending), a shuffle butterfly per warp and the
     warps' winners in warp order;
  4. writes the chunk's (key, id) record; thread 0's acquire-release add on arrivals[b] tells the
     last block of the row, which resets the counter, reads the records through L2 and folds them
     in chunk order into token[b].
Entries that cannot be drawn (p <= 0, NaN, -inf logits) never get noise.

The row kernel (random_sample_tl) is the chunked one's predecessor, kept for batches that fill the
SMs' waves: one block of _ROW_THREADS threads a row, threads striding the row in rounds of _UNROLL
vectors loaded before any is used, every drawable entry hashed (no bound), then the same folds. With
no per-block set-up or records and a single barrier it is 7-24% faster an entry than the chunked
kernel where a full wave of rows runs (H200, kernels/random_sampling/PERF.md), so it wins when its
last wave of rows is nearly full; the interface chooses (api.ROW_KERNEL_WAVE_FILL).

Noise macros for other kernels (`from kernels.random_sampling.cuda import ...`):
    noise_row_keys(seed, offset, keys)     keys: local (2,) uint32 <- (k0, k1); seed, offset int64
    noise_bits(v, keys, h)                 h: local (1,) uint32 <- bits(v) (v an int32 vocab id)
    exponential_noise(h)                   float32 E = -logf(u) of the bits in h[0]
    take_if_better(best_key, best_id, key, idx)   the fold step of a deterministic block argmax
    arrive(arrivals, b, n, slot, last)     a block's arrival on row b's counter: last[0] <- whether
                                           it is the n-th, which resets the counter
    read_l2(buf, i)                        buf[i] through L2: what another block wrote this launch
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import tilelang
import tilelang.language as T
from tilelang.transform import PassConfigKey

from kernels.random_sampling.ref import (
    CHUNK,
    MIX_MUL1,
    MIX_MUL2,
    OFFSET_SALT,
    SEED_SALT,
    U_SCALE,
    U_SHIFT,
    check_config,
    random_sampling_shipped_configs,
)
from kernels.tl_launch import dependent_entry

__all__ = [
    "PASS_CONFIGS",
    "arrive",
    "exponential_noise",
    "mix32",
    "noise_bits",
    "noise_row_keys",
    "random_sample_chunked_tl",
    "random_sample_tl",
    "random_sampling_shipped_configs",
    "read_l2",
    "take_if_better",
]

# The keys must equal torch's float32 logf and division bit for bit: never --use_fast_math
# (__logf, approximate division, flush to zero). Kernels that use the noise macros pass these too.
PASS_CONFIGS = {PassConfigKey.TL_ENABLE_FAST_MATH: False}

# Eight warps a block, several blocks an SM: short per-thread work (a chunk a block) hides the
# loads' and the logs' latency across blocks.
_THREADS = 256
_WARP = 32
_WARPS = _THREADS // _WARP
# Shuffle rounds of a butterfly over one warp: log2(_WARP).
_SHUFFLES = 5
# Entries a thread holds: CHUNK = _THREADS * _PER_THREAD (four 16-byte vectors of float32).
_PER_THREAD = CHUNK // _THREADS
_NAN = float("nan")
# The row kernel: one block a row, threads striding it in rounds of _UNROLL vectors (4 x 16 B in
# flight, 16 registers of row data).
_ROW_THREADS = 1024
_ROW_WARPS = _ROW_THREADS // _WARP
_UNROLL = 4


@T.macro
def mix32(h, i):
    """h[i] (a local uint32) <- mix32(h[i]), the murmur3 finaliser of ref.mix32."""
    h[i] = h[i] ^ (h[i] >> T.uint32(16))
    h[i] = h[i] * T.uint32(MIX_MUL1)
    h[i] = h[i] ^ (h[i] >> T.uint32(13))
    h[i] = h[i] * T.uint32(MIX_MUL2)
    h[i] = h[i] ^ (h[i] >> T.uint32(16))


@T.macro
def noise_row_keys(seed, offset, keys):
    """keys (local (2,) uint32) <- (k0, k1) of ref.row_keys for int64 values seed and offset."""
    keys[0] = T.cast(seed >> T.int64(32), "uint32") ^ T.uint32(SEED_SALT)
    mix32(keys, 0)
    keys[0] = keys[0] ^ T.cast(seed, "uint32")
    mix32(keys, 0)
    keys[1] = T.cast(offset >> T.int64(32), "uint32") ^ keys[0] ^ T.uint32(OFFSET_SALT)
    mix32(keys, 1)
    keys[1] = keys[1] ^ T.cast(offset, "uint32")
    mix32(keys, 1)


@T.macro
def noise_bits(v, keys, h):
    """h (local (1,) uint32) <- bits(v) of ref.noise_bits, for the row keys in `keys`."""
    h[0] = T.cast(v, "uint32") ^ keys[1]
    mix32(h, 0)
    h[0] = h[0] + keys[0]
    mix32(h, 0)


@T.macro
def exponential_noise(h):
    """float32 E = -logf(u), u = ((h[0] >> 9) + 0.5) * 2**-23 (exact), as ref.exponential_noise."""
    return -T.log((T.cast(h[0] >> T.uint32(U_SHIFT), "float32") + T.float32(0.5)) * T.float32(U_SCALE))


@T.macro
def take_if_better(best_key, best_id, key, idx):
    """(best_key, best_id) <- (key, idx) when idx is a candidate (>= 0) that beats the best: a larger
    key, or an equal key and a lower id; id -1 means no candidate yet (its key is meaningless)."""
    if idx >= 0:
        if best_id[0] < 0 or key > best_key[0] or (key == best_key[0] and idx < best_id[0]):
            best_key[0] = key
            best_id[0] = idx


@T.macro
def _drawable(probs, v):
    """Whether float32 entry value v may be drawn: p > 0, or l > -inf (false for NaN in both;
    probs: static)."""
    if probs:
        return v > T.float32(0)
    return v > -T.infinity("float32")


@T.macro
def _take_later(best_key, best_id, key, idx):
    """(best_key, best_id) <- (key, idx) when it beats the thread's best so far. A thread meets its
    ids in ascending order, so only a strictly larger key replaces an earlier one."""
    if best_id[0] < 0 or key > best_key[0]:
        best_key[0] = key
        best_id[0] = idx


# The range of the noise (ref.py): E = -logf(u) lies in [5.9604645e-08, 16.635532] and log(E) in
# [-16.635532, 2.8115408]. The constants below are float32 values at least 5e-5 outside those
# ranges (far more than logf's rounding), so every bound built from them is conservative.
# Every E is at least 5.96e-8, so p / E <= p * _INV_E_LOW (1 / 5.96e-8 = 16778523.49).
_INV_E_LOW = 16780000.0
# Every E is at most 16.6356, so p * _INV_E_HIGH <= p / E (1 / 16.6356 = 0.0601120).
_INV_E_HIGH = 0.0601
# -log(E) <= _NEG_LOG_E_HIGH and log(E) <= _LOG_E_HIGH.
_NEG_LOG_E_HIGH = 16.6356
_LOG_E_HIGH = 2.8116


def read_l2(buf, i):
    """Element i of buf (flat) read from L2 (__ldcg): another block wrote it during this launch, and
    this SM's L1 may hold a stale copy of the line (L1 is not coherent across SMs)."""
    return T.call_extern(buf.dtype, "__ldcg", buf.access_ptr("r", offset=i))


@T.macro
def arrive(arrivals, b, n, slot, last):
    """Thread 0 of a block that has written its part of row b, once a barrier has ordered the
    block's writes before it: an acquire-release add at GPU scope on arrivals[b] (no fences needed:
    the add is cumulative), and last[0] (shared int32) <- whether this block is the n-th to arrive.
    The last one resets the counter (no block of this launch touches it again) and may read the
    others' writes through L2 (read_l2)."""
    slot[0] = T.atomic_add(arrivals[b], 1, memory_order="acq_rel", return_prev=True)
    last[0] = T.cast(slot[0] == n - 1, "int32")
    if slot[0] == n - 1:
        arrivals[b] = 0


@T.macro
def _row_setup(probs, seed, offset, temperature, b, keys, t, scaled):
    """Row b's noise keys into keys; t[0] <- its temperature and scaled[0] <- 1 where it samples
    (0 < t < inf), else 0 (greedy). The probs kernel (probs: static) reads neither: t = 1."""
    noise_row_keys(seed[b], offset[b], keys)
    t[0] = T.float32(1)
    scaled[0] = 0
    if not probs:
        t[0] = temperature[b]
        scaled[0] = T.cast(t[0] > T.float32(0) and t[0] < T.infinity("float32"), "int32")


@T.macro
def _block_fold(warps, warp, lane, tx, best_key, best_id, other_key, other_id, red_key, red_id):
    """Thread 0's (best_key, best_id) <- the best of a block of `warps` warps: a butterfly per warp,
    then the warps' winners in warp order (red_key / red_id: shared, one slot a warp; thread 0 reads
    them after the barrier, so a barrier must come before they are written again)."""
    for i in T.unroll(_SHUFFLES):
        other_key[0] = T.shfl_xor(best_key[0], 1 << i)
        other_id[0] = T.shfl_xor(best_id[0], 1 << i)
        take_if_better(best_key, best_id, other_key[0], other_id[0])
    if lane == 0:
        red_key[warp] = best_key[0]
        red_id[warp] = best_id[0]
    T.sync_threads()
    if tx == 0:
        for w in T.unroll(1, warps):
            take_if_better(best_key, best_id, red_key[w], red_id[w])


@tilelang.jit(pass_configs=PASS_CONFIGS)
def random_sample_tl(source: str, dtype: str, vec: int, *, pdl: bool = False):
    """Compiled kernel(x, seed, offset, temperature, token) for these static arguments (memoised): one
    block of _ROW_THREADS threads a row, no workspace."""
    check_config("random_sample_tl", source, dtype, vec)
    # Static: probs and logits differ only in the key of one entry; the dtype is widened exactly.
    probs = source == "probs"
    B, V, S = T.dynamic("B"), T.dynamic("V"), T.dynamic("row_stride", "int64")

    @T.macro
    def consider(val, v, keys, h, scaled, t, key, best_key, best_id):
        """Folds entry v (value val of x) into this thread's best; ids arrive in ascending order, so
        only a strictly larger key replaces an earlier one."""
        x32 = T.cast(val, "float32")
        if _drawable(probs, x32):
            if probs:
                noise_bits(v, keys, h)
                key[0] = x32 / exponential_noise(h)
            else:
                key[0] = x32
                if scaled[0] != 0:
                    noise_bits(v, keys, h)
                    key[0] = x32 / t[0] - T.log(exponential_noise(h))
            _take_later(best_key, best_id, key[0], v)

    @T.prim_func
    def random_sample(
        x: T.StridedTensor((B, V), (S, 1), dtype),
        seed: T.Tensor((B,), "int64"),
        offset: T.Tensor((B,), "int64"),
        temperature: T.Tensor((B,), "float32"),
        token: T.Tensor((B,), "int64"),
    ):
        with T.Kernel(B, threads=_ROW_THREADS) as bx:
            dependent_entry(pdl)
            tx = T.get_thread_binding(0)
            warp, lane = tx // _WARP, tx % _WARP
            # 64-bit row: every offset into x is 64-bit (B * row_stride may pass 2**31).
            row = T.cast(bx, "int64")
            keys = T.alloc_local((2,), "uint32")
            h = T.alloc_local((1,), "uint32")
            t = T.alloc_local((1,), "float32")
            scaled = T.alloc_local((1,), "int32")
            key = T.alloc_local((1,), "float32")
            buf = T.alloc_local((_UNROLL, vec), dtype)
            best_key = T.alloc_local((1,), "float32")
            best_id = T.alloc_local((1,), "int32")
            other_key = T.alloc_local((1,), "float32")
            other_id = T.alloc_local((1,), "int32")
            red_key = T.alloc_shared((_ROW_WARPS,), "float32")
            red_id = T.alloc_shared((_ROW_WARPS,), "int32")
            # The interface passes vec-aligned rows: what lets the loads below be vectorised.
            T.assume(S % vec == 0)
            _row_setup(probs, seed, offset, temperature, bx, keys, t, scaled)
            best_key[0] = -T.infinity("float32")
            best_id[0] = -1
            n_vec = V // vec
            for r in T.serial(T.ceildiv(n_vec, _ROW_THREADS * _UNROLL)):
                for u in T.unroll(_UNROLL):
                    if (r * _UNROLL + u) * _ROW_THREADS + tx < n_vec:
                        for e in T.vectorized(vec):
                            buf[u, e] = x[row, ((r * _UNROLL + u) * _ROW_THREADS + tx) * vec + e]
                for u in T.unroll(_UNROLL):
                    if (r * _UNROLL + u) * _ROW_THREADS + tx < n_vec:
                        for e in T.unroll(vec):
                            consider(buf[u, e], ((r * _UNROLL + u) * _ROW_THREADS + tx) * vec + e, keys, h, scaled, t, key, best_key, best_id)
            if vec > 1:
                # The V % vec entries after the last whole vector: ids above all of the loop's.
                if tx < V - n_vec * vec:
                    buf[0, 0] = x[row, n_vec * vec + tx]
                    consider(buf[0, 0], n_vec * vec + tx, keys, h, scaled, t, key, best_key, best_id)
            _block_fold(_ROW_WARPS, warp, lane, tx, best_key, best_id, other_key, other_id, red_key, red_id)
            if tx == 0:
                token[bx] = T.cast(best_id[0], "int64")

    return random_sample


@tilelang.jit(pass_configs=PASS_CONFIGS)
def random_sample_chunked_tl(source: str, dtype: str, vec: int, *, pdl: bool = False):
    """Compiled kernel(x, seed, offset, temperature, token, chunk_key, chunk_id, arrivals) for these
    static arguments (memoised): one launch, arrivals left zero."""
    check_config("random_sample_chunked_tl", source, dtype, vec)
    # Static: probs and logits differ in what may be drawn, its key and the key's bound.
    probs = source == "probs"
    # Loads of `vec` elements a thread makes to hold its _PER_THREAD entries.
    loads = _PER_THREAD // vec
    B, V, S = T.dynamic("B"), T.dynamic("V"), T.dynamic("row_stride", "int64")
    W, A = T.dynamic("chunk_slots"), T.dynamic("arrival_slots")

    @T.macro
    def consider(v, idx, keys, h, scaled, t, bound, up, key, best_key, best_id):
        """Folds entry idx (value v) into this thread's best. Ids arrive in ascending order, so only
        a strictly larger key replaces an earlier one. An entry whose key cannot reach the chunk's
        bound or this thread's best (`up`, an upper bound of its key, is below either) skips the
        noise: it cannot be drawn, not even on a tie."""
        if _drawable(probs, v):
            if probs:
                up[0] = v * T.float32(_INV_E_LOW)
                if up[0] >= bound[0] and (best_id[0] < 0 or up[0] >= best_key[0]):
                    noise_bits(idx, keys, h)
                    key[0] = v / exponential_noise(h)
                    _take_later(best_key, best_id, key[0], idx)
            elif scaled[0] != 0:
                key[0] = v / t[0]
                up[0] = key[0] + T.float32(_NEG_LOG_E_HIGH)
                if up[0] >= bound[0] and (best_id[0] < 0 or up[0] >= best_key[0]):
                    noise_bits(idx, keys, h)
                    key[0] = key[0] - T.log(exponential_noise(h))
                    _take_later(best_key, best_id, key[0], idx)
            else:
                _take_later(best_key, best_id, v, idx)

    @T.prim_func
    def random_sample_chunked(
        x: T.StridedTensor((B, V), (S, 1), dtype),
        seed: T.Tensor((B,), "int64"),
        offset: T.Tensor((B,), "int64"),
        temperature: T.Tensor((B,), "float32"),
        token: T.Tensor((B,), "int64"),
        chunk_key: T.Tensor((W,), "float32"),
        chunk_id: T.Tensor((W,), "int32"),
        arrivals: T.Tensor((A,), "int32"),
    ):
        # Rows on the grid's x (up to 2**31 - 1 of them), chunks on y.
        with T.Kernel(B, T.ceildiv(V, CHUNK), threads=_THREADS) as (bx, cx):
            dependent_entry(pdl)
            tx = T.get_thread_binding(0)
            warp, lane = tx // _WARP, tx % _WARP
            # 64-bit row and record index: every offset into x and the workspace is 64-bit.
            row = T.cast(bx, "int64")
            n_chunks = T.ceildiv(V, CHUNK)
            rec = row * T.cast(n_chunks, "int64") + T.cast(cx, "int64")
            # The thread's entries widened to float32 (NaN past the row: never drawn), and the
            # V % vec entries after the last whole vector, one a thread, in the last slot.
            vals = T.alloc_local((_PER_THREAD + 1,), "float32")
            xs = T.alloc_local((loads, vec), dtype)
            keys = T.alloc_local((2,), "uint32")
            h = T.alloc_local((1,), "uint32")
            t = T.alloc_local((1,), "float32")
            scaled = T.alloc_local((1,), "int32")
            bound = T.alloc_local((1,), "float32")
            up = T.alloc_local((1,), "float32")
            key = T.alloc_local((1,), "float32")
            peak = T.alloc_local((1,), "float32")
            best_key = T.alloc_local((1,), "float32")
            best_id = T.alloc_local((1,), "int32")
            other_key = T.alloc_local((1,), "float32")
            other_id = T.alloc_local((1,), "int32")
            slot = T.alloc_local((1,), "int32")
            red_key = T.alloc_shared((_WARPS,), "float32", scope="shared")
            red_id = T.alloc_shared((_WARPS,), "int32", scope="shared")
            last = T.alloc_shared((1,), "int32", scope="shared")
            # The interface passes vec-aligned rows: what lets the loads below be vectorised.
            T.assume(S % vec == 0)
            n_vec = V // vec
            base = cx * (CHUNK // vec)

            # 1. The chunk into registers: every load in flight before any is used.
            for p in T.unroll(_PER_THREAD + 1):
                vals[p] = T.float32(_NAN)
            for j in T.unroll(loads):
                if base + j * _THREADS + tx < n_vec:
                    for e in T.vectorized(vec):
                        xs[j, e] = x[row, (base + j * _THREADS + tx) * vec + e]
            if vec > 1:
                if cx == (n_vec * vec) // CHUNK and tx < V - n_vec * vec:
                    vals[_PER_THREAD] = T.cast(x[row, n_vec * vec + tx], "float32")
            for j in T.unroll(loads):
                if base + j * _THREADS + tx < n_vec:
                    for e in T.unroll(vec):
                        vals[j * vec + e] = T.cast(xs[j, e], "float32")
            _row_setup(probs, seed, offset, temperature, bx, keys, t, scaled)

            # 2. The chunk's largest drawable value (-inf if none). Its entry's key is at least
            # `bound`, so an entry whose key is surely below it needs no noise.
            peak[0] = -T.infinity("float32")
            for p in T.unroll(_PER_THREAD + 1):
                if _drawable(probs, vals[p]):
                    peak[0] = T.max(peak[0], vals[p])
            for i in T.unroll(_SHUFFLES):
                peak[0] = T.max(peak[0], T.shfl_xor(peak[0], 1 << i))
            if lane == 0:
                red_key[warp] = peak[0]
            T.sync_threads()
            for w in T.unroll(_WARPS):
                peak[0] = T.max(peak[0], red_key[w])
            # Every thread has read red_key before the warps write it again in _block_fold.
            T.sync_threads()
            if probs:
                bound[0] = peak[0] * T.float32(_INV_E_HIGH)
            else:
                bound[0] = peak[0] / t[0] - T.float32(_LOG_E_HIGH)

            # 3. The thread's best, then the chunk's.
            best_key[0] = -T.infinity("float32")
            best_id[0] = -1
            for j in T.unroll(loads):
                for e in T.unroll(vec):
                    consider(vals[j * vec + e], (base + j * _THREADS + tx) * vec + e, keys, h, scaled, t, bound, up, key, best_key, best_id)
            if vec > 1:
                consider(vals[_PER_THREAD], n_vec * vec + tx, keys, h, scaled, t, bound, up, key, best_key, best_id)
            _block_fold(_WARPS, warp, lane, tx, best_key, best_id, other_key, other_id, red_key, red_id)

            # 4. The chunk's record (thread 0 holds the block's best), then the arrival.
            if tx == 0:
                chunk_key[rec] = best_key[0]
                chunk_id[rec] = best_id[0]
                arrive(arrivals, bx, n_chunks, slot, last)
            T.sync_threads()

            # 5. The last block of the row folds the records in chunk order (ids ascending).
            if last[0] != 0:
                best_key[0] = -T.infinity("float32")
                best_id[0] = -1
                for i in T.serial(T.ceildiv(n_chunks, _THREADS)):
                    if i * _THREADS + tx < n_chunks:
                        other_key[0] = read_l2(chunk_key, row * T.cast(n_chunks, "int64") + T.cast(i * _THREADS + tx, "int64"))
                        other_id[0] = read_l2(chunk_id, row * T.cast(n_chunks, "int64") + T.cast(i * _THREADS + tx, "int64"))
                        take_if_better(best_key, best_id, other_key[0], other_id[0])
                _block_fold(_WARPS, warp, lane, tx, best_key, best_id, other_key, other_id, red_key, red_id)
                if tx == 0:
                    token[bx] = T.cast(best_id[0], "int64")

    return random_sample_chunked
