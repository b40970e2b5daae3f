"""NVIDIA TileLang implementation of `random_sampling`: exponential-race / Gumbel-max sampling with
counter-based noise, and the noise macros other sampling kernels import.

    k = random_sample_tl(source, dtype, vec)
    k(x, seed, offset, temperature, token)

source       "probs" or "logits" (what x holds; the rules are in kernels.random_sampling.ref).
x            (B, V) of `dtype` (probs: float32; logits: float32 or bfloat16), row stride
             `row_stride` >= V elements (a view of a wider tensor is fine), last dimension
             contiguous; base pointer and row stride (in bytes) multiples of vec * element size.
seed, offset (B,) int64: the per-request noise counters (device tensors: CUDA-graph safe).
temperature  (B,) float32: read by the logits kernel only (the probs kernel ignores it).
token        (B,) int64 output: the sampled id, or -1 for a row with nothing to sample.

Semantics are `kernels.random_sampling.ref` (the contract), token for token: the float32 keys are
computed with the same operations (IEEE division, the accurate `logf` that torch.log also uses on
CUDA: the kernel is built with fast math off, and the codegen test checks the source), and the
argmax with ties to the lowest id is a total order, so the reduction order cannot change the token.

B, V and the row stride are dynamic: one compile per (source, dtype, vec) serves every batch and
vocabulary. B >= 1 and V >= 1 (the interface launches nothing otherwise).

Speed: the hash, the logs and the division make the kernel arithmetic-bound, not bandwidth-bound
(measured on an H200 from this kernel's generated source: about 60 us for a 129280-wide row of
float32 or bfloat16 logits, 44 us for probs, the same for any B up to one row per SM; B = 512 took
about 235 us). Splitting a row across blocks for small B is left to `fused_sample`.

One block of 1024 threads per row (grid = B): every thread derives the row's keys (k0, k1) from
seed/offset once (four mix32 rounds: cheaper than a shared-memory broadcast and its barrier).
Threads stride the row in vectors of `vec` elements, _UNROLL vectors loaded before any is used
(several 16-byte loads in flight per thread), each keeping its best (key, id); the V % vec
elements after the last whole vector go one per thread. Then a shuffle butterfly per warp
and the per-warp winners, from shared memory, folded in warp order by thread 0. Entries that
cannot win (p <= 0, NaN, -inf logits) skip the noise.

Noise macros for other kernels (`from kernels.random_sampling.cuda import ...`):
    noise_row_keys(seed, offset, keys)     keys: local (2,) uint32 <- (k0, k1); seed, offset int64
    noise_bits(v, keys, h)                 h: local (1,) uint32 <- bits(v) (v an int32 vocab id)
    exponential_noise(h)                   float32 E = -logf(u) of the bits in h[0]
    take_if_better(best_key, best_id, key, idx)   the fold step of a deterministic block argmax
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import tilelang
import tilelang.language as T
from tilelang.transform import PassConfigKey

from kernels.random_sampling.ref import (
    MIX_MUL1,
    MIX_MUL2,
    OFFSET_SALT,
    SEED_SALT,
    U_SCALE,
    U_SHIFT,
    check_config,
    random_sampling_shipped_configs,
)

__all__ = [
    "PASS_CONFIGS",
    "exponential_noise",
    "mix32",
    "noise_bits",
    "noise_row_keys",
    "random_sample_tl",
    "random_sampling_shipped_configs",
    "take_if_better",
]

# The keys must equal torch's float32 logf and division bit for bit: never --use_fast_math
# (__logf, approximate division, flush to zero). Kernels that use the noise macros pass these too.
PASS_CONFIGS = {PassConfigKey.TL_ENABLE_FAST_MATH: False}

_THREADS = 1024
_WARP = 32
_WARPS = _THREADS // _WARP
# Shuffle rounds of a butterfly over one warp: log2(_WARP).
_SHUFFLES = 5
# Vectors a thread loads before using any: 4 x 16 B in flight, 16 registers of row data.
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


@tilelang.jit(pass_configs=PASS_CONFIGS)
def random_sample_tl(source: str, dtype: str, vec: int):
    """Compiled kernel(x, seed, offset, temperature, token) for these static arguments (memoised)."""
    check_config("random_sample_tl", source, dtype, vec)
    # Static: probs and logits differ only in the key of one entry; the dtype is widened exactly.
    probs = source == "probs"
    B, V, S = T.dynamic("B"), T.dynamic("V"), T.dynamic("row_stride", "int64")

    @T.macro
    def consider(val, v, keys, h, scaled, t, key, best_key, best_id):
        """Folds entry v (value val of x) into this thread's best; ids arrive in ascending order, so
        only a strictly larger key replaces an earlier one."""
        x32 = T.cast(val, "float32")
        if probs:
            if x32 > T.float32(0):
                noise_bits(v, keys, h)
                key[0] = x32 / exponential_noise(h)
                if best_id[0] < 0 or key[0] > best_key[0]:
                    best_key[0] = key[0]
                    best_id[0] = v
        else:
            # False for NaN too: NaN counts as -inf, and -inf entries are excluded.
            if x32 > -T.infinity("float32"):
                key[0] = x32
                if scaled[0] != 0:
                    noise_bits(v, keys, h)
                    key[0] = x32 / t[0] - T.log(exponential_noise(h))
                if best_id[0] < 0 or key[0] > best_key[0]:
                    best_key[0] = key[0]
                    best_id[0] = v

    @T.prim_func
    def random_sample(
        x: T.StridedTensor((B, V), (S, 1), dtype),
        seed: T.Tensor((B,), "int64"),
        offset: T.Tensor((B,), "int64"),
        temperature: T.Tensor((B,), "float32"),
        token: T.Tensor((B,), "int64"),
    ):
        with T.Kernel(B, threads=_THREADS) as bx:
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
            red_key = T.alloc_shared((_WARPS,), "float32")
            red_id = T.alloc_shared((_WARPS,), "int32")
            # The interface passes vec-aligned rows: what lets the loads below be vectorised.
            T.assume(S % vec == 0)
            noise_row_keys(seed[bx], offset[bx], keys)
            t[0] = T.float32(1)
            scaled[0] = 0
            if not probs:
                t[0] = temperature[bx]
                scaled[0] = T.cast(t[0] > T.float32(0) and t[0] < T.infinity("float32"), "int32")
            best_key[0] = -T.infinity("float32")
            best_id[0] = -1
            n_vec = V // vec
            for r in T.serial(T.ceildiv(n_vec, _THREADS * _UNROLL)):
                for u in T.unroll(_UNROLL):
                    if (r * _UNROLL + u) * _THREADS + tx < n_vec:
                        for e in T.vectorized(vec):
                            buf[u, e] = x[row, ((r * _UNROLL + u) * _THREADS + tx) * vec + e]
                for u in T.unroll(_UNROLL):
                    if (r * _UNROLL + u) * _THREADS + tx < n_vec:
                        for e in T.unroll(vec):
                            consider(buf[u, e], ((r * _UNROLL + u) * _THREADS + tx) * vec + e, keys, h, scaled, t, key, best_key, best_id)
            if vec > 1:
                # The V % vec entries after the last whole vector: ids above all of the loop's.
                if tx < V - n_vec * vec:
                    buf[0, 0] = x[row, n_vec * vec + tx]
                    consider(buf[0, 0], n_vec * vec + tx, keys, h, scaled, t, key, best_key, best_id)
            for i in T.unroll(_SHUFFLES):
                other_key[0] = T.shfl_xor(best_key[0], 1 << i)
                other_id[0] = T.shfl_xor(best_id[0], 1 << i)
                take_if_better(best_key, best_id, other_key[0], other_id[0])
            if lane == 0:
                red_key[warp] = best_key[0]
                red_id[warp] = best_id[0]
            T.sync_threads()
            if tx == 0:
                for w in T.unroll(1, _WARPS):
                    take_if_better(best_key, best_id, red_key[w], red_id[w])
                token[bx] = T.cast(best_id[0], "int64")

    return random_sample
