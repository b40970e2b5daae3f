"""Huawei Ascend 950 TileLang implementation of `schedule_mtp_varlen`: the next varlen step's schedule
after an MTP verification step, and its attention work split. Verified by lowering to AscendC only
(codegen_ascend suite: every configuration lowers and its Unified Buffer footprint fits); no NPU has
run it.

    k = schedule_mtp_varlen_tl(num_draft, block_size, num_sm_parts, len_dtype, acc_dtype)
    k(seq_lens_before, num_accepted, new_seq_lens, query_start_loc, positions, request_ids,
      last_hidden_rows, tile_metadata, num_splits)

Arguments, dtypes, layouts and semantics are those of the CUDA factory (kernels/schedule_mtp_varlen/
cuda.py) and of `kernels.schedule_mtp_varlen.ref` (the contract), exactly; B and num_tokens are
dynamic, 1 <= B <= MAX_BATCH (the interface launches nothing for B == 0).

Where the work runs: one vector core (the prefixes are one sequential dependency, and cores cannot
wait for each other inside one launch). MTE2 brings the inputs into the UB 1024 requests at a time;
the scalar unit walks the batch once (new lengths, hidden rows, the query and block prefixes, kept
whole in the UB), once more for the num_splits prefix, then hands out the parts, each finding the
requests of its first and last block by binary search over the UB block prefix (12 steps). MTE3
stores every per-request and per-part array in one copy each. Tokens follow, 1024 per UB tile: in
a SIMT region each token binary-searches the UB query prefix for its request (12 steps).

UB budget: inputs 2 x 8 KiB (int64), five (MAX_BATCH + 8,) int32 arrays (80 KiB), the metadata
(num_sm_parts x 32 bytes, 32 KiB at 1024 parts) and two 4 KiB token tiles: at most about 136 KiB,
plus the 32 KiB a SIMT region reserves, within the 248 KiB UB (testing/codegen_ascend.py measures
it: 140 KiB in all at 132 parts).
"""

# No `from __future__ import annotations`: T.prim_func evaluates the tensor annotations, which name
# the factory's arguments, and string annotations would lose them.
import tilelang
import tilelang.ascend.language as T

from kernels.schedule_mtp_varlen.ref import (
    BACKEND_INDEX_DTYPES as INDEX_DTYPES,
    MAX_BATCH,
    META_FIELDS,
    check_config,
    max_context,
    schedule_mtp_varlen_shipped_configs,
)

__all__ = ["INDEX_DTYPES", "schedule_mtp_varlen_shipped_configs", "schedule_mtp_varlen_tl"]

_CHUNK = 1024
_TILE = 1024
_SIMT_THREADS = 256
# Binary search over [0, B - 1], B <= MAX_BATCH = 2**12.
_STEPS = 12
_FIELDS = len(META_FIELDS)
# UB arrays of B + 1 entries are padded to a 32-byte multiple.
_PREFIX = MAX_BATCH + 8


@tilelang.jit(target="ascend")
def schedule_mtp_varlen_tl(num_draft: int, block_size: int, num_sm_parts: int, len_dtype: str, acc_dtype: str):
    """Ascend kernel(seq_lens_before, num_accepted, *MtpSchedule fields) (memoised)."""
    check_config("schedule_mtp_varlen", num_draft, block_size, num_sm_parts, len_dtype=len_dtype, acc_dtype=acc_dtype)
    q = 1 + num_draft
    cap = max_context(block_size, num_draft)
    P = num_sm_parts
    B, Bp, n = T.dynamic("B"), T.dynamic("B_plus_1"), T.dynamic("num_tokens")

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
        with T.Kernel(1) as _:
            lens_ub = T.alloc_shared((_CHUNK,), len_dtype)
            acc_ub = T.alloc_shared((_CHUNK,), acc_dtype)
            new_ub = T.alloc_shared((_PREFIX,), "int32")
            rows_ub = T.alloc_shared((_PREFIX,), "int32")
            qsl_ub = T.alloc_shared((_PREFIX,), "int32")
            starts_ub = T.alloc_shared((_PREFIX,), "int32")  # exclusive block prefix, then the total
            splits_ub = T.alloc_shared((_PREFIX,), "int32")
            meta_ub = T.alloc_shared((P, _FIELDS), "int32")
            pos_ub = T.alloc_shared((_TILE,), "int32")
            rid_ub = T.alloc_shared((_TILE,), "int32")
            q_run = T.alloc_var("int32", init=0)
            blk_run = T.alloc_var("int32", init=0)
            split_run = T.alloc_var("int32", init=0)
            fr = T.alloc_var("int32")
            lr = T.alloc_var("int32")

            for c in T.serial(T.ceildiv(B, _CHUNK)):
                count = T.min(_CHUNK, B - c * _CHUNK)
                T.copy(seq_lens_before[c * _CHUNK : c * _CHUNK + count], lens_ub[:count])
                T.copy(num_accepted[c * _CHUNK : c * _CHUNK + count], acc_ub[:count])
                for i in T.serial(_CHUNK):
                    if i < count:
                        s = T.cast(lens_ub[i], "int64")
                        a = T.max(T.min(T.cast(acc_ub[i], "int64"), num_draft), 0)
                        qsl_ub[c * _CHUNK + i] = q_run
                        starts_ub[c * _CHUNK + i] = blk_run
                        if s >= 0 and s <= cap:
                            new_ub[c * _CHUNK + i] = T.cast(s + a + (2 + num_draft), "int32")
                            rows_ub[c * _CHUNK + i] = (c * _CHUNK + i) * q + T.cast(a, "int32")
                            q_run = q_run + q
                            blk_run = blk_run + (T.cast(s + a + (2 + num_draft), "int32") + (block_size - 1)) // block_size
                        else:
                            new_ub[c * _CHUNK + i] = 0
                            rows_ub[c * _CHUNK + i] = -1
            qsl_ub[B] = q_run
            starts_ub[B] = blk_run
            T.copy(new_ub[:B], new_seq_lens[0:B])
            T.copy(rows_ub[:B], last_hidden_rows[0:B])
            T.copy(qsl_ub[:Bp], query_start_loc[0:Bp])

            # Every division by the part size only matters when total > 0, where per_part >= 1.
            per_part = (blk_run + (P - 1)) // P
            pp = T.max(per_part, 1)
            # A request with blocks [c, c + n) is touched by parts c // pp .. (c + n - 1) // pp.
            for b in T.serial(B):
                splits_ub[b] = split_run
                if starts_ub[b + 1] > starts_ub[b]:
                    split_run = split_run + (starts_ub[b + 1] - 1) // pp - starts_ub[b] // pp + 1
            splits_ub[B] = split_run
            T.copy(splits_ub[:Bp], num_splits[0:Bp])

            for p in T.serial(P):
                g0 = T.cast(p, "int64") * per_part
                if g0 < T.cast(blk_run, "int64"):
                    g1 = T.min(g0 + per_part, T.cast(blk_run, "int64"))
                    # The largest b in [0, B - 1] with starts[b] <= g: the request owning block g
                    # (requests without blocks share their start with the next one).
                    fr = 0
                    lr = 0
                    for s in T.unroll(_STEPS):
                        if fr + (MAX_BATCH >> (s + 1)) <= B - 1:
                            if T.cast(starts_ub[fr + (MAX_BATCH >> (s + 1))], "int64") <= g0:
                                fr = fr + (MAX_BATCH >> (s + 1))
                        if lr + (MAX_BATCH >> (s + 1)) <= B - 1:
                            if T.cast(starts_ub[lr + (MAX_BATCH >> (s + 1))], "int64") <= g1 - 1:
                                lr = lr + (MAX_BATCH >> (s + 1))
                    meta_ub[p, 0] = fr
                    meta_ub[p, 1] = T.cast(g0, "int32") - starts_ub[fr]
                    meta_ub[p, 2] = lr
                    meta_ub[p, 3] = T.cast(g1, "int32") - starts_ub[lr]
                    meta_ub[p, 4] = p - starts_ub[fr] // pp
                    meta_ub[p, 5] = T.if_then_else((starts_ub[fr + 1] - 1) // pp > starts_ub[fr] // pp, 1, 0)
                    meta_ub[p, 6] = T.if_then_else((starts_ub[lr + 1] - 1) // pp > starts_ub[lr] // pp, 1, 0)
                    meta_ub[p, 7] = T.cast(g1 - g0, "int32")
                else:
                    for col in T.serial(_FIELDS):
                        meta_ub[p, col] = T.if_then_else(col == 0 or col == 2, -1, 0)
            T.copy(meta_ub, tile_metadata)

            for t in T.serial(T.ceildiv(n, _TILE)):
                valid = T.min(_TILE, n - t * _TILE)
                with T.SimtVF(threads=_SIMT_THREADS):
                    tid = T.get_thread_binding(0)
                    lo = T.alloc_var("int32")
                    pos = T.alloc_var("int32")
                    rid = T.alloc_var("int32")
                    for r in T.serial(_TILE // _SIMT_THREADS):
                        j = r * _SIMT_THREADS + tid
                        if j < valid:
                            # One store per UB slot: a second store to the same slot would make the
                            # synchroniser see a write-write conflict inside the branch.
                            pos = -1
                            rid = -1
                            if t * _TILE + j < qsl_ub[B]:
                                # The largest lo in [0, B - 1] with qsl[lo] <= token: its request
                                # (inactive requests share their start with the next one).
                                lo = 0
                                for s in T.unroll(_STEPS):
                                    if lo + (MAX_BATCH >> (s + 1)) <= B - 1:
                                        if qsl_ub[lo + (MAX_BATCH >> (s + 1))] <= t * _TILE + j:
                                            lo = lo + (MAX_BATCH >> (s + 1))
                                pos = new_ub[lo] - q + (t * _TILE + j - qsl_ub[lo])
                                rid = lo
                            pos_ub[j] = pos
                            rid_ub[j] = rid
                T.copy(pos_ub[:valid], positions[t * _TILE : t * _TILE + valid])
                T.copy(rid_ub[:valid], request_ids[t * _TILE : t * _TILE + valid])

    return schedule_mtp_varlen
