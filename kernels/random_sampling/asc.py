"""Huawei Ascend 950 TileLang implementation of `random_sampling`. Verified by lowering to AscendC
only (codegen_ascend suite: every configuration lowers and its Unified Buffer footprint fits); no
NPU has run it.

    k = random_sample_tl(source, dtype, vec)
    k(x, seed, offset, temperature, token)

Arguments, dtypes, layouts and semantics are those of the CUDA factory
(kernels/random_sampling/cuda.py) without its workspace (chunk records and arrival counters: a row
here stays on one core), and of `kernels.random_sampling.ref` (the contract), token for token: the same uint32 noise, the same float32 keys (IEEE division and the accurate natural log),
argmax with ties to the lowest id. B, V and the row stride are dynamic. `vec` is accepted for
signature parity and validated but unused: the global-memory side of an Ascend DMA is
byte-granular, so rows need no alignment class.

Where the work runs: one persistent block per vector core over rows. For each row, MTE2 copies the
row in tiles of _TILE elements into the UB; a SIMT region of _SIMT_THREADS threads computes the
row keys (k0, k1), then each thread folds its strided entries of the tile into its best (key, id),
kept in two UB vectors between tiles (ids reach a thread in ascending order, so only a strictly
larger key replaces its best). The scalar unit folds the _SIMT_THREADS bests in thread order with
the full comparison (larger key, or equal key and lower id) and MTE3 stores the token. Rows are
independent: no core waits for another.

Noise macros for other Ascend kernels (`from kernels.random_sampling.asc import ...`; hk is a local
(3,) uint32 holding k0, k1 and the bits): mix32(h, i), noise_row_keys(seed, offset, hk),
noise_bits(v, hk) and exponential_noise(hk), the transcriptions of ref's formulas.

UB budget: one tile (32 KiB of float32, 16 KiB of bfloat16), two 1 KiB vectors of per-thread bests
and a 32-byte token cell, plus the SIMT reserve (testing/codegen_ascend.py measures it).
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import tilelang
import tilelang.ascend.language as T

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

__all__ = ["exponential_noise", "mix32", "noise_bits", "noise_row_keys", "random_sample_tl", "random_sampling_shipped_configs"]

# One persistent block per vector core, the count TileLang's Ascend 950 vector examples launch.
_VECTOR_CORES = 64
_SIMT_THREADS = 256
# Row elements per UB tile: 32 per thread.
_TILE = 8192


@T.macro
def mix32(h, i):
    """h[i] (a local uint32) <- mix32(h[i]), the murmur3 finaliser of ref.mix32."""
    h[i] = h[i] ^ (h[i] >> T.uint32(16))
    h[i] = h[i] * T.uint32(MIX_MUL1)
    h[i] = h[i] ^ (h[i] >> T.uint32(13))
    h[i] = h[i] * T.uint32(MIX_MUL2)
    h[i] = h[i] ^ (h[i] >> T.uint32(16))


@T.macro
def noise_row_keys(seed, offset, hk):
    """hk[0], hk[1] (a local (3,) uint32) <- (k0, k1) of ref.row_keys for int64 values seed, offset."""
    hk[0] = T.cast(seed >> T.int64(32), "uint32") ^ T.uint32(SEED_SALT)
    mix32(hk, 0)
    hk[0] = hk[0] ^ T.cast(seed, "uint32")
    mix32(hk, 0)
    hk[1] = T.cast(offset >> T.int64(32), "uint32") ^ hk[0] ^ T.uint32(OFFSET_SALT)
    mix32(hk, 1)
    hk[1] = hk[1] ^ T.cast(offset, "uint32")
    mix32(hk, 1)


@T.macro
def noise_bits(v, hk):
    """hk[2] <- bits(v) of ref.noise_bits, for the row keys in hk[0], hk[1]."""
    hk[2] = T.cast(v, "uint32") ^ hk[1]
    mix32(hk, 2)
    hk[2] = hk[2] + hk[0]
    mix32(hk, 2)


@T.macro
def exponential_noise(hk):
    """float32 E = -log(u) of the bits in hk[2], as ref.exponential_noise."""
    return -T.log((T.cast(hk[2] >> T.uint32(U_SHIFT), "float32") + T.float32(0.5)) * T.float32(U_SCALE))


@tilelang.jit(target="ascend")
def random_sample_tl(source: str, dtype: str, vec: int):
    """Ascend kernel(x, seed, offset, temperature, token) (memoised)."""
    check_config("random_sample_tl", source, dtype, vec)
    # Static: probs and logits differ only in the key of one entry; the dtype is widened exactly.
    probs = source == "probs"
    B, V, S = T.dynamic("B"), T.dynamic("V"), T.dynamic("row_stride", "int64")

    @T.prim_func
    def random_sample(
        x: T.StridedTensor((B, V), (S, 1), dtype),
        seed: T.Tensor((B,), "int64"),
        offset: T.Tensor((B,), "int64"),
        temperature: T.Tensor((B,), "float32"),
        token: T.Tensor((B,), "int64"),
    ):
        with T.Kernel(_VECTOR_CORES) as core:
            tile = T.alloc_shared((_TILE,), dtype)
            key_ub = T.alloc_shared((_SIMT_THREADS,), "float32")
            id_ub = T.alloc_shared((_SIMT_THREADS,), "int32")
            tok_ub = T.alloc_shared((4,), "int64")
            best_key = T.alloc_var("float32")
            best_id = T.alloc_var("int32")
            for b in T.Persistent([B], _VECTOR_CORES, core, group_size=1, num_stages=1):
                row = T.cast(b, "int64")
                for c in T.serial(T.ceildiv(V, _TILE)):
                    valid = T.min(_TILE, V - c * _TILE)
                    T.copy(x[row, c * _TILE : c * _TILE + valid], tile[:valid])
                    with T.SimtVF(threads=_SIMT_THREADS):
                        tid = T.get_thread_binding(0)
                        # (k0, k1, bits): a local array, so the hash steps store in place.
                        hk = T.alloc_local((3,), "uint32")
                        t = T.alloc_var("float32")
                        key = T.alloc_var("float32")
                        mine_key = T.alloc_var("float32")
                        mine_id = T.alloc_var("int32")
                        # The row keys of ref.row_keys.
                        noise_row_keys(seed[b], offset[b], hk)
                        t = temperature[b]
                        mine_key = -T.infinity("float32")
                        mine_id = -1
                        if c > 0:
                            mine_key = key_ub[tid]
                            mine_id = id_ub[tid]
                        for r in T.serial(_TILE // _SIMT_THREADS):
                            j = r * _SIMT_THREADS + tid
                            if j < valid:
                                v = c * _TILE + j
                                x32 = T.cast(tile[j], "float32")
                                # NaN compares false: NaN and -inf logits, and p <= 0, are excluded.
                                if (probs and x32 > T.float32(0)) or (not probs and x32 > -T.infinity("float32")):
                                    key = x32
                                    if probs or (t > T.float32(0) and t < T.infinity("float32")):
                                        noise_bits(v, hk)
                                        key = exponential_noise(hk)
                                        if probs:
                                            key = x32 / key
                                        else:
                                            key = x32 / t - T.log(key)
                                    if mine_id < 0 or key > mine_key:
                                        mine_key = key
                                        mine_id = v
                        key_ub[tid] = mine_key
                        id_ub[tid] = mine_id
                best_key = key_ub[0]
                best_id = id_ub[0]
                for w in T.serial(1, _SIMT_THREADS):
                    if id_ub[w] >= 0:
                        if best_id < 0 or key_ub[w] > best_key or (key_ub[w] == best_key and id_ub[w] < best_id):
                            best_key = key_ub[w]
                            best_id = id_ub[w]
                tok_ub[0] = T.cast(best_id, "int64")
                T.copy(tok_ub[0:1], token[b : b + 1])

    return random_sample
