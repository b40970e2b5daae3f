"""PyTorch reference for `candidate_blocks`: the KV blocks each query attends to in block-sparse
attention. The contract.

    ids = candidate_blocks_ref(scores, n_t, k, num_sink=0, num_local=0, block_table=None, req_index=None)

scores       (T, NB) float32, contiguous: the score of query t for KV block j.
n_t          (T,) int32 or int64: query t's causal block count; blocks j >= n_t are not candidates.
             Invalid counts are clamped to [0, NB] (negative -> no candidates, > NB -> all NB).
k            static int in [1, MAX_K]: the output width.
num_sink     static int >= 0: the first num_sink blocks [0, min(num_sink, n)) are always kept.
num_local    static int >= 0: the last num_local blocks [max(n - num_local, 0), n) are always kept.
block_table  optional (B, max_blocks) int32 with req_index (T,) int32/int64: map each selected
             block id j of query t to the physical page block_table[req_index[t], j].
Returns ids (T, k) int32.

Selection, for one query with n = clamp(n_t, 0, NB) candidates:
  1. Every candidate gets a 32-bit ranking key (compared as unsigned):
       sink block j < num_sink                  0xFFFFFFFF
       local block at distance d = n - 1 - j    0xFFFFFFFE - d       (d < num_local; newest first)
       any other candidate                      the order-preserving map of its fp32 score: -0.0 is
                                                read as +0.0, then bits ^ 0x80000000 for sign 0 and
                                                ~bits for sign 1, so -inf < finite < +inf; the
                                                keys of real scores lie in [0x007FFFFF, 0xFF800000]
       a candidate whose score is NaN           1 (below -inf: NaN ranks lowest)
     A block both sink and local is a sink. Forced keys are above every score key (d < NB <= 2048).
  2. The min(k, n) candidates with the largest keys are selected; equal keys go to the lower block
     id. So forced blocks take k slots first; when num_sink + num_local > k the sinks win (lowest
     ids first), then local blocks from the newest (j = n - 1) backwards. When n <= k every
     candidate is selected.
  3. The selected ids are written in ascending order to ids[t, :min(k, n)], then -1 up to k.
  4. With block_table: each selected id j becomes block_table[r, j] for r = req_index[t], kept as
     is when >= 0; it becomes -1 when r is outside [0, B), j >= max_blocks, or the entry is negative
     (unallocated). Positions keep the ascending block-id order (pages need not be ascending).

Everything is integer and comparison logic, so every backend matches this exactly. The reference
uses torch.topk over a composite int64 key (ranking key, then inverted block id), which makes every
key distinct, so topk's tie order never matters; no host sync and no data-dependent shape, so it is
CUDA-graph capturable and torch.compile traces it whole.
"""

from __future__ import annotations

import torch

__all__ = [
    "BACKEND_INDEX_DTYPES",
    "MAX_K",
    "MAX_NB",
    "SINK_KEY",
    "candidate_blocks_ref",
    "check_static",
    "ranking_keys",
    "shipped_configs",
]

# 131072 tokens of 64-token KV blocks.
MAX_NB = 2048
MAX_K = 2048
SINK_KEY = 0xFFFFFFFF
# Candidates whose score is NaN, and blocks that are not candidates.
NAN_KEY = 1
NO_KEY = 0
# Element type names of the index inputs the factories take.
BACKEND_INDEX_DTYPES = ("int32", "int64")


def ranking_keys(scores: torch.Tensor, n_t: torch.Tensor, num_sink: int, num_local: int) -> torch.Tensor:
    """(T, NB) int64 ranking keys in [0, 2**32) of step 1 (0 for non-candidates)."""
    nb = scores.shape[1]
    s = scores.float()
    # -0.0 + 0.0 is +0.0 in IEEE arithmetic: equal scores tie whatever their sign bit.
    bits = torch.where(s == 0, torch.zeros_like(s), s).view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    keys = torch.where(bits >= 0x80000000, bits ^ 0xFFFFFFFF, bits | 0x80000000)
    keys = torch.where(torch.isnan(s), NAN_KEY, keys)
    n = n_t.to(torch.int64).clamp(0, nb)[:, None]
    j = torch.arange(nb, dtype=torch.int64, device=scores.device)[None, :]
    d = n - 1 - j
    keys = torch.where(d < num_local, SINK_KEY - 1 - d, keys)
    keys = torch.where(j < num_sink, SINK_KEY, keys)
    return torch.where(j < n, keys, NO_KEY)


def candidate_blocks_ref(
    scores: torch.Tensor,
    n_t: torch.Tensor,
    k: int,
    num_sink: int = 0,
    num_local: int = 0,
    block_table: torch.Tensor | None = None,
    req_index: torch.Tensor | None = None,
) -> torch.Tensor:
    """ids (T, k) int32: step 1-4 of the module docstring."""
    t, nb = scores.shape
    device = scores.device
    keys = ranking_keys(scores, n_t, num_sink, num_local)
    j = torch.arange(nb, dtype=torch.int64, device=device)
    # Distinct composite keys: a larger ranking key first, then the lower block id.
    composite = torch.where(keys > 0, keys * 4096 + (4095 - j), -1)
    width = min(k, nb)
    top, idx = torch.topk(composite, width, dim=1)
    # Unselected slots (non-candidates) sort after every id, then become -1.
    ids = torch.where(top >= 0, idx, nb).sort(dim=1).values
    ids = torch.where(ids < nb, ids, -1)
    if width < k:
        ids = torch.cat([ids, torch.full((t, k - width), -1, dtype=ids.dtype, device=device)], dim=1)
    if block_table is not None:
        n_req, max_blocks = block_table.shape
        r = req_index.to(torch.int64)[:, None]
        ok = (ids >= 0) & (ids < max_blocks) & (r >= 0) & (r < n_req)
        if n_req > 0 and max_blocks > 0:
            page = block_table[r.clamp(0, n_req - 1), ids.clamp(0, max_blocks - 1)].to(torch.int64)
            ids = torch.where(ok & (page >= 0), page, -1)
        else:
            ids = torch.full_like(ids, -1)
    return ids.to(torch.int32)


# ----------------------------------------------------------------------------------------------------
# Static arguments of the backend factories (cuda.py and asc.py share them).


def check_static(name: str, NB: int, k: int, num_sink: int, num_local: int, n_dtype: str, req_dtype: str | None) -> None:
    """ValueError/TypeError unless 1 <= NB <= MAX_NB, 1 <= k <= MAX_K, num_sink, num_local >= 0 and
    the index dtypes are int32/int64 (req_dtype None: no block table)."""
    for arg, value, low, high in (("NB", NB, 1, MAX_NB), ("k", k, 1, MAX_K), ("num_sink", num_sink, 0, None), ("num_local", num_local, 0, None)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name}: {arg} must be an int, got {type(value).__name__}")
        if value < low or (high is not None and value > high):
            raise ValueError(f"{name}: {arg} must be in [{low}, {high if high is not None else 'inf'}], got {value}")
    for arg, dtype in (("n_dtype", n_dtype), ("req_dtype", req_dtype)):
        if dtype is None and arg == "req_dtype":
            continue
        if dtype not in BACKEND_INDEX_DTYPES:
            raise ValueError(f"{name}: {arg} {dtype!r} is not one of {', '.join(BACKEND_INDEX_DTYPES)}")


def shipped_configs() -> list[tuple[int, int, int, int, str, str | None]]:
    """(NB, k, num_sink, num_local, n_dtype, req_dtype): the bench target (2048 blocks, k = 64,
    unpaged), the widest output (k = 2048 = NB, paged, int64 counts), and a small NB (100) that
    leaves partial thread tiles, with sink/local sets larger than k."""
    return [
        (2048, 64, 1, 2, "int32", None),
        (2048, 2048, 1, 2, "int64", "int32"),
        (100, 16, 8, 12, "int32", "int64"),
    ]
