"""Huawei Ascend 950 TileLang implementation of `get_kv_index`: slot mapping, paged-KV index set,
and batch indices / positions of an append. Verified by lowering to AscendC only (codegen_ascend
suite: every configuration lowers and its Unified Buffer footprint fits); no NPU has run it.

    k = slot_mapping_tl(block_size, indptr_dtype, pos_dtype)
    k(query_start_loc, positions, block_table, slot_mapping)
    k = paged_kv_indices_tl(block_size, page_size, len_dtype)
    k(block_table, seq_lens, kv_indptr, kv_indices, kv_last_page_len)
    k = batch_indices_positions_tl(indptr_dtype, len_dtype)
    k(append_indptr, seq_lens, batch_indices, positions)

Arguments, dtypes, layouts and semantics are those of the CUDA factories (kernels/get_kv_index/
cuda.py) and of `kernels.get_kv_index.ref` (the contract), exactly; every size but block_size and
page_size is dynamic.

Where the work runs (vector (AIV) cores, SIMT regions for the per-element index arithmetic):
  * slot_mapping / batch_indices_positions: one persistent block per vector core over tiles of 1024
    tokens. In a SIMT region of 256 threads each token binary-searches the indptr in global memory
    (scalar loads, at most 31 steps, fewer for small B: steps past B issue no load), reads its
    position and block-table entry, and writes its result into a UB tile, which MTE3 stores.
    No shared prefix is staged: the cores never need each other's data.
  * paged_kv_indices: one core (the page-count prefix is one sequential dependency, and cores
    cannot wait for each other inside one launch). Per chunk of 1024 requests, MTE2 brings the
    lengths into the UB, the scalar unit computes the pages, the prefix, kv_indptr and
    kv_last_page_len into UB buffers that MTE3 stores; then SIMT threads fill the chunk's kv_indices
    range, 1024 entries per UB tile, each entry binary-searching the UB prefix (10 steps). The -1
    padding follows, a tile at a time.

UB budget: token kernels 2 x 8 KiB output tiles; paged kernel about 20 KiB (lengths, prefix,
indptr, last-page and one index tile), all far below the UB (testing/codegen_ascend.py measures it).
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import tilelang
import tilelang.ascend.language as T

from kernels.get_kv_index.ref import (
    BACKEND_INDEX_DTYPES as INDEX_DTYPES,
    INT32_MAX,
    batch_indices_positions_shipped_configs,
    check_dtypes,
    check_sizes,
    paged_kv_indices_shipped_configs,
    slot_mapping_shipped_configs,
)

__all__ = [
    "INDEX_DTYPES",
    "batch_indices_positions_shipped_configs",
    "batch_indices_positions_tl",
    "paged_kv_indices_shipped_configs",
    "paged_kv_indices_tl",
    "slot_mapping_shipped_configs",
    "slot_mapping_tl",
]

# One persistent block per vector core, the count TileLang's Ascend 950 vector examples launch.
_VECTOR_CORES = 64
_SIMT_THREADS = 256
_TILE = 1024
# Steps of a binary search over any int32 range.
_GM_STEPS = 31
# Paged kernel: requests per chunk (the prefix lives in the UB) and its search depth.
_CHUNK = 1024
_CHUNK_STEPS = 10


@tilelang.jit(target="ascend")
def slot_mapping_tl(block_size: int, indptr_dtype: str, pos_dtype: str):
    """Ascend kernel(query_start_loc, positions, block_table, slot_mapping) (memoised)."""
    check_sizes("slot_mapping", block_size)
    check_dtypes("slot_mapping", indptr_dtype=indptr_dtype, pos_dtype=pos_dtype)
    B, M, S = T.dynamic("B"), T.dynamic("max_blocks"), T.dynamic("bt_stride", "int64")
    Q, P, n = T.dynamic("Q"), T.dynamic("P"), T.dynamic("n")

    @T.prim_func
    def slot_mapping(
        query_start_loc: T.Tensor((Q,), indptr_dtype),
        positions: T.Tensor((P,), pos_dtype),
        block_table: T.StridedTensor((B, M), (S, 1), "int32"),
        slots: T.Tensor((n,), "int64"),
    ):
        with T.Kernel(_VECTOR_CORES) as core:
            out_ub = T.alloc_shared((_TILE,), "int64")
            for k in T.Persistent([T.ceildiv(n, _TILE)], _VECTOR_CORES, core, group_size=1, num_stages=2):
                t0 = k * _TILE
                valid = T.min(_TILE, n - t0)
                with T.SimtVF(threads=_SIMT_THREADS):
                    tid = T.get_thread_binding(0)
                    req = T.alloc_var("int32")
                    lo = T.alloc_var("int32")
                    slot = T.alloc_var("int64")
                    for r in T.serial(_TILE // _SIMT_THREADS):
                        j = r * _SIMT_THREADS + tid
                        slot = -1
                        if j < valid:
                            req = -1
                            if query_start_loc[0] <= t0 + j and t0 + j < query_start_loc[B]:
                                # The largest lo <= B - 1 with query_start_loc[lo] <= tok (scalar loads; steps past B load nothing).
                                lo = 0
                                for s in T.unroll(_GM_STEPS):
                                    if lo + (1 << (_GM_STEPS - 1 - s)) <= B - 1:
                                        if query_start_loc[lo + (1 << (_GM_STEPS - 1 - s))] <= t0 + j:
                                            lo = lo + (1 << (_GM_STEPS - 1 - s))
                                # Always true for a non-decreasing indptr; keeps a non-monotone one in bounds.
                                if t0 + j < query_start_loc[lo + 1]:
                                    req = lo
                            if req >= 0:
                                p = T.cast(positions[t0 + j], "int64")
                                if p >= 0 and p // block_size < T.cast(M, "int64"):
                                    block = block_table[T.cast(req, "int64"), p // block_size]
                                    if block >= 0:
                                        slot = T.cast(block, "int64") * block_size + p % block_size
                        out_ub[j] = slot
                T.copy(out_ub[:valid], slots[t0 : t0 + valid])

    return slot_mapping


@tilelang.jit(target="ascend")
def batch_indices_positions_tl(indptr_dtype: str, len_dtype: str):
    """Ascend kernel(append_indptr, seq_lens, batch_indices, positions) (memoised)."""
    check_dtypes("batch_indices_positions", indptr_dtype=indptr_dtype, len_dtype=len_dtype)
    B, Q, n = T.dynamic("B"), T.dynamic("Q"), T.dynamic("n")

    @T.prim_func
    def batch_indices_positions(
        append_indptr: T.Tensor((Q,), indptr_dtype),
        seq_lens: T.Tensor((B,), len_dtype),
        batch_indices: T.Tensor((n,), "int32"),
        positions: T.Tensor((n,), "int32"),
    ):
        with T.Kernel(_VECTOR_CORES) as core:
            batch_ub = T.alloc_shared((_TILE,), "int32")
            pos_ub = T.alloc_shared((_TILE,), "int32")
            for k in T.Persistent([T.ceildiv(n, _TILE)], _VECTOR_CORES, core, group_size=1, num_stages=2):
                t0 = k * _TILE
                valid = T.min(_TILE, n - t0)
                with T.SimtVF(threads=_SIMT_THREADS):
                    tid = T.get_thread_binding(0)
                    req = T.alloc_var("int32")
                    lo = T.alloc_var("int32")
                    pos = T.alloc_var("int64")
                    for r in T.serial(_TILE // _SIMT_THREADS):
                        j = r * _SIMT_THREADS + tid
                        pos = -1
                        req = -1
                        if j < valid:
                            req = -1
                            if append_indptr[0] <= t0 + j and t0 + j < append_indptr[B]:
                                # The largest lo <= B - 1 with append_indptr[lo] <= tok (scalar loads; steps past B load nothing).
                                lo = 0
                                for s in T.unroll(_GM_STEPS):
                                    if lo + (1 << (_GM_STEPS - 1 - s)) <= B - 1:
                                        if append_indptr[lo + (1 << (_GM_STEPS - 1 - s))] <= t0 + j:
                                            lo = lo + (1 << (_GM_STEPS - 1 - s))
                                # Always true for a non-decreasing indptr; keeps a non-monotone one in bounds.
                                if t0 + j < append_indptr[lo + 1]:
                                    req = lo
                            if req >= 0:
                                pos = (
                                    T.cast(seq_lens[req], "int64")
                                    - T.cast(append_indptr[req + 1], "int64")
                                    + T.cast(t0 + j, "int64")
                                )
                        if pos >= 0 and pos <= INT32_MAX:
                            batch_ub[j] = req
                            pos_ub[j] = T.cast(pos, "int32")
                        else:
                            batch_ub[j] = -1
                            pos_ub[j] = -1
                T.copy(batch_ub[:valid], batch_indices[t0 : t0 + valid])
                T.copy(pos_ub[:valid], positions[t0 : t0 + valid])

    return batch_indices_positions


@tilelang.jit(target="ascend")
def paged_kv_indices_tl(block_size: int, page_size: int, len_dtype: str):
    """Ascend kernel(block_table, seq_lens, kv_indptr, kv_indices, kv_last_page_len) (memoised)."""
    check_sizes("paged_kv_indices", block_size, page_size)
    check_dtypes("paged_kv_indices", len_dtype=len_dtype)
    r = block_size // page_size
    B, M, S = T.dynamic("B"), T.dynamic("max_blocks"), T.dynamic("bt_stride", "int64")
    Bp, cap = T.dynamic("B_plus_1"), T.dynamic("capacity")

    @T.prim_func
    def paged_kv_indices(
        block_table: T.StridedTensor((B, M), (S, 1), "int32"),
        seq_lens: T.Tensor((B,), len_dtype),
        kv_indptr: T.Tensor((Bp,), "int32"),
        kv_indices: T.Tensor((cap,), "int32"),
        kv_last_page_len: T.Tensor((B,), "int32"),
    ):
        with T.Kernel(1) as _:
            lens_ub = T.alloc_shared((_CHUNK,), len_dtype)
            starts_ub = T.alloc_shared((_CHUNK + 8,), "int32")  # chunk-local prefix, then its end
            indptr_ub = T.alloc_shared((_CHUNK + 8,), "int32")
            last_ub = T.alloc_shared((_CHUNK,), "int32")
            tile_ub = T.alloc_shared((_TILE,), "int32")
            carry = T.alloc_var("int32", init=0)  # pages of every earlier chunk
            for c in T.serial(T.ceildiv(B, _CHUNK)):
                count = T.min(_CHUNK, B - c * _CHUNK)
                T.copy(seq_lens[c * _CHUNK : c * _CHUNK + count], lens_ub[:count])
                run = T.alloc_var("int32", init=0)
                run = carry
                for i in T.serial(_CHUNK):
                    starts_ub[i] = run
                    if i < count:
                        length = T.max(T.min(T.cast(lens_ub[i], "int64"), T.cast(M, "int64") * block_size), 0)
                        pages = T.cast((length + (page_size - 1)) // page_size, "int32")
                        indptr_ub[i] = T.min(run, cap)
                        last_ub[i] = T.if_then_else(pages > 0, T.cast(length - T.cast(pages - 1, "int64") * page_size, "int32"), 0)
                        run = run + pages
                starts_ub[_CHUNK] = run
                T.copy(indptr_ub[:count], kv_indptr[c * _CHUNK : c * _CHUNK + count])
                T.copy(last_ub[:count], kv_last_page_len[c * _CHUNK : c * _CHUNK + count])
                # This chunk's entries [carry, min(run, cap)), a UB tile at a time.
                for t in T.serial(T.ceildiv(T.max(T.min(run, cap) - carry, 0), _TILE)):
                    e0 = carry + t * _TILE
                    valid = T.min(_TILE, T.min(run, cap) - e0)
                    with T.SimtVF(threads=_SIMT_THREADS):
                        tid = T.get_thread_binding(0)
                        lo = T.alloc_var("int32")
                        for q in T.serial(_TILE // _SIMT_THREADS):
                            j = q * _SIMT_THREADS + tid
                            if j < valid:
                                lo = 0
                                for s in T.unroll(_CHUNK_STEPS):
                                    if starts_ub[lo + (_CHUNK >> (s + 1))] <= e0 + j:
                                        lo = lo + (_CHUNK >> (s + 1))
                                p = e0 + j - starts_ub[lo]
                                block = block_table[T.cast(c * _CHUNK + lo, "int64"), p // r]
                                page = T.cast(block, "int64") * r + p % r
                                tile_ub[j] = T.if_then_else(block >= 0 and page <= INT32_MAX, T.cast(page, "int32"), -1)
                    T.copy(tile_ub[:valid], kv_indices[e0 : e0 + valid])
                carry = run
            # -1 padding of [min(total, cap), cap), then kv_indptr[B].
            for i in T.serial(_TILE):
                tile_ub[i] = -1
            filled = T.min(carry, cap)
            for t in T.serial(T.ceildiv(cap - filled, _TILE)):
                T.copy(tile_ub[: T.min(_TILE, cap - filled - t * _TILE)], kv_indices[filled + t * _TILE : filled + t * _TILE + T.min(_TILE, cap - filled - t * _TILE)])
            indptr_ub[0] = filled
            T.copy(indptr_ub[0:1], kv_indptr[B : B + 1])

    return paged_kv_indices
