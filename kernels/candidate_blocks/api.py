"""Interface of `candidate_blocks`: the KV blocks (or pages) each query attends to in block-sparse
attention, chosen on device from per-block scores.

    ids = tilelang_ops.select_candidate_blocks(scores, n_t, k, num_sink=0, num_local=0,
                                               block_table=None, req_index=None, out=None)

scores       (T, NB) float32, contiguous, 1 <= NB <= 2048: query t's score for KV block j.
n_t          (T,) int32 or int64, contiguous: query t's causal block count (clamped to [0, NB]).
k            int in [1, 2048]: the output width.
num_sink     int >= 0: the first num_sink causal blocks are always kept.
num_local    int >= 0: the last num_local causal blocks are always kept.
block_table  optional (B, max_blocks) int32, B >= 1, max_blocks >= 1; rows may be strided (a view of
             a wider table), the last dimension must be contiguous. Given together with req_index.
req_index    optional (T,) int32 or int64, contiguous: the block-table row of each query.
out          optional caller-owned (T, k) int32, contiguous.
Returns ids (T, k) int32: per query the selected block ids in ascending order (or their pages
block_table[req_index[t], id], same order), then -1. The rules (ranking keys, forced blocks taking
k slots first, ties to the lower id, NaN ranking lowest, invalid counts, rows and entries) are in
kernels/candidate_blocks/ref.py, the contract; every backend matches it exactly.

CUDA tensors run one TileLang kernel launch (no host sync: CUDA-graph capturable): a block per
query below PAIR_KERNEL_MIN_QUERIES queries, two warps per query from there on (where the backend
has that kernel; see kernels/candidate_blocks/cuda.py); both give the same ids. On sm_90+ the launch
is a programmatic dependent one (kernels/tl_launch.py). k, NB, num_sink and
num_local are compiled in (num_sink and num_local are clamped to NB first: larger values select
the same blocks). CPU tensors are served by the PyTorch reference. Invalid arguments raise
TypeError or ValueError naming the argument before anything is written. T == 0 launches nothing.
"""

from __future__ import annotations

import torch

from kernels.candidate_blocks import ref
from kernels.interface import (
    INDEX_DTYPES,
    backend_ops,
    check_block_table,
    check_device,
    check_int,
    check_no_overlap,
    check_out,
    check_tensor,
    dense_table,
    is_host,
    launch_options,
)

__all__ = ["select_candidate_blocks"]

# From this many queries the two-warps-per-query kernel is faster. Same-run sweep on an H100 80GB
# (2048 blocks, k = 64; kernels/candidate_blocks/PERF.md), block / pair kernel in us, every query
# seeing all blocks: 64 queries 4.92 / 5.08, 128: 5.15 / 5.23, 160: 5.45 / 5.30, 192: 5.63 / 5.40,
# 384: 6.90 / 6.19; with spread counts, 128: 5.03 / 5.05, 160: 5.32 / 5.05.
PAIR_KERNEL_MIN_QUERIES = 160


def select_candidate_blocks(
    scores: torch.Tensor,
    n_t: torch.Tensor,
    k: int,
    *,
    num_sink: int = 0,
    num_local: int = 0,
    block_table: torch.Tensor | None = None,
    req_index: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    name = "select_candidate_blocks"
    check_tensor(name, "scores", scores, dtypes=[torch.float32], dim=2, contiguous=True)
    check_device(name, "scores", scores)
    n_q, nb = scores.shape
    if not 1 <= nb <= ref.MAX_NB:
        raise ValueError(f"{name}: scores has {nb} blocks per query; NB must be in [1, {ref.MAX_NB}]")
    check_tensor(name, "n_t", n_t, dtypes=INDEX_DTYPES, shape=(n_q,), like=scores, contiguous=True)
    check_int(name, "k", k, 1, ref.MAX_K)
    check_int(name, "num_sink", num_sink, 0, None)
    check_int(name, "num_local", num_local, 0, None)
    if (block_table is None) != (req_index is None):
        raise ValueError(f"{name}: block_table and req_index must be given together")
    if block_table is not None:
        check_block_table(name, block_table, scores)
        check_tensor(name, "req_index", req_index, dtypes=INDEX_DTYPES, shape=(n_q,), like=scores, contiguous=True)
    check_out(name, "out", out, (n_q, k), torch.int32, scores)
    read = {"scores": scores, "n_t": n_t, "block_table": block_table, "req_index": req_index}
    check_no_overlap(name, {"out": out}, read)
    ids = out if out is not None else torch.empty((n_q, k), dtype=torch.int32, device=scores.device)
    if n_q == 0:
        return ids
    # Sinks and local blocks beyond NB select exactly what NB of them do: fewer compiled variants.
    num_sink, num_local = min(num_sink, nb), min(num_local, nb)
    if is_host(scores):
        return ids.copy_(ref.candidate_blocks_ref(scores, n_t, k, num_sink, num_local, block_table, req_index))
    tl = backend_ops(name, scores)
    req_dtype = None if req_index is None else INDEX_DTYPES[req_index.dtype]
    factory = tl.ops.candidate_blocks_tl
    if n_q >= PAIR_KERNEL_MIN_QUERIES:
        try:
            factory = tl.ops.candidate_blocks_pair_tl
        except LookupError:  # a backend without the pair kernel serves every batch with the other
            pass
    kernel = factory(nb, k, num_sink, num_local, INDEX_DTYPES[n_t.dtype], req_dtype, **launch_options(scores))
    if block_table is None:
        kernel(scores, n_t, ids)
    else:
        kernel(scores, n_t, dense_table(block_table), req_index, ids)
    return ids
