"""PyTorch reference for `get_kv_index`: the KV-cache index tensors one decode or prefill step needs.
The contract.

    slot_mapping = slot_mapping_ref(query_start_loc, positions, block_table, block_size, num_tokens)
    kv_indptr, kv_indices, kv_last_page_len = paged_kv_indices_ref(block_table, seq_lens, block_size,
                                                                   page_size, capacity)
    batch_indices, positions = batch_indices_positions_ref(append_indptr, seq_lens, num_tokens)

Shared conventions
    B                 the number of requests (query_start_loc / append_indptr have B + 1 entries).
    block_table       (B, max_blocks) int32: the physical KV blocks of each request, in allocation
                      blocks of `block_size` slots; rows may be strided, the last dim is contiguous.
    query_start_loc,  (B + 1,) int32 or int64, non-decreasing (vLLM's query_start_loc, FlashInfer's
    append_indptr     qo_indptr / append_indptr): request b owns tokens [indptr[b], indptr[b + 1]).
                      Token i belongs to request b exactly when indptr[b] <= i < indptr[b + 1]; a
                      token in no request (before indptr[0], at or past indptr[B]) is padding.
                      Monotonicity is not checked (that would need the values on the host); with a
                      non-monotone indptr a token is either padding or given to *some* b whose range
                      holds it (which one is unspecified), and nothing is read or written out of
                      bounds.
    seq_lens          (B,) int32 or int64: KV length of each request after this step.
    -1                marks every output element that is padding or invalid (never a legal index).

slot_mapping_ref (vLLM's slot_mapping)
    For token i of request b: pos = positions[i], slot = block_table[b, pos // block_size] *
    block_size + pos % block_size, as int64. The slot is -1 when i is padding (no request, or
    i >= num_tokens is never produced: the output has exactly num_tokens entries), pos < 0,
    pos // block_size >= max_blocks, or the block id is negative (an unallocated table entry).
    Kernel vs allocation block size: for a kernel block size k dividing block_size, the slot of a
    position is the same number in either unit (block * block_size + off == (block * r + off // k)
    * k + off % k with r = block_size // k), so one slot mapping serves both; block_size is the
    allocation block size of block_table.

paged_kv_indices_ref (FlashInfer's paged-KV index set, page_size dividing block_size)
    r = block_size // page_size kernel pages per allocation block. Each length is first clamped to
    [0, max_blocks * block_size] (what the table can describe; a negative length is an empty
    request). Request b has pages_b = ceil(len_b / page_size) pages; its page p is
    block_table[b, p // r] * r + p % r, or -1 when that block id is negative or the page id does
    not fit int32.
    kv_indptr         (B + 1,) int32: exclusive prefix sum of pages_b, each entry clamped to the
                      capacity (a too-small capacity truncates the last requests' page lists, so a
                      consumer never reads past kv_indices).
    kv_indices        (capacity,) int32: the pages of request 0, then request 1, ...; -1 from
                      kv_indptr[B] on. Capacity defaults to B * max_blocks * r, enough for any
                      lengths; it is fixed, so the call is CUDA-graph capturable.
    kv_last_page_len  (B,) int32: len_b - (pages_b - 1) * page_size, in [1, page_size] for a
                      nonempty request; 0 for an empty one (FlashInfer's convention; an empty
                      request has no last page).

batch_indices_positions_ref (FlashInfer's get_batch_indices_positions)
    For token j of request b's append (append_indptr[b] <= j < append_indptr[b + 1]): batch index b
    and position seq_lens[b] - (append_indptr[b + 1] - append_indptr[b]) + (j - append_indptr[b]),
    both int32, for j < num_tokens. Padding tokens, and tokens whose position is negative or does
    not fit int32 (seq_lens[b] shorter than the append: inconsistent input), get -1 in both.

Everything is integer arithmetic, so every backend matches this exactly. No host synchronisation
and no data-dependent shapes (searchsorted, cumsum and gathers), so the reference itself is
CUDA-graph capturable and torch.compile traces it whole.
"""

from __future__ import annotations

import torch

__all__ = [
    "BACKEND_INDEX_DTYPES",
    "INT32_MAX",
    "batch_indices_positions_ref",
    "batch_indices_positions_shipped_configs",
    "check_dtypes",
    "check_sizes",
    "paged_kv_indices_ref",
    "paged_kv_indices_shipped_configs",
    "slot_mapping_ref",
    "slot_mapping_shipped_configs",
]

INT32_MAX = 2**31 - 1


def _request_of(indptr: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(request, valid) per token: the request b with indptr[b] <= token < indptr[b + 1] (indptr
    non-decreasing), valid False for padding tokens; request is clamped into [0, B) either way."""
    ind = indptr.to(torch.int64)
    b = torch.searchsorted(ind, tokens, right=True) - 1
    n_req = ind.shape[0] - 1
    inside = (b >= 0) & (b < n_req)
    b = b.clamp(0, max(n_req - 1, 0))
    valid = inside & (ind[b] <= tokens) & (tokens < ind[b + 1]) if n_req > 0 else inside
    return b, valid


def slot_mapping_ref(
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    block_table: torch.Tensor,
    block_size: int,
    num_tokens: int | None = None,
) -> torch.Tensor:
    """slot_mapping (num_tokens,) int64; num_tokens defaults to positions.shape[0] (at most that)."""
    n = positions.shape[0] if num_tokens is None else num_tokens
    device = positions.device
    if block_table.shape[0] == 0 or n == 0:
        return torch.full((n,), -1, dtype=torch.int64, device=device)
    tokens = torch.arange(n, dtype=torch.int64, device=device)
    b, valid = _request_of(query_start_loc, tokens)
    pos = positions[:n].to(torch.int64)
    blk = torch.div(pos, block_size, rounding_mode="floor")
    valid &= (pos >= 0) & (blk < block_table.shape[1])
    block = block_table[b, blk.clamp(0, block_table.shape[1] - 1)].to(torch.int64)
    valid &= block >= 0
    return torch.where(valid, block * block_size + (pos - blk * block_size), -1)


def paged_kv_indices_ref(
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    block_size: int,
    page_size: int,
    capacity: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(kv_indptr (B + 1,), kv_indices (capacity,), kv_last_page_len (B,)), all int32."""
    n_req, max_blocks = block_table.shape
    r = block_size // page_size
    cap = n_req * max_blocks * r if capacity is None else capacity
    device = block_table.device
    lens = seq_lens.to(torch.int64).clamp(0, max_blocks * block_size)
    pages = torch.div(lens + page_size - 1, page_size, rounding_mode="floor")
    ends = torch.cumsum(pages, 0)
    starts = ends - pages
    indptr = torch.cat([torch.zeros(1, dtype=torch.int64, device=device), ends]).clamp(max=cap)
    last = torch.where(pages > 0, lens - (pages - 1) * page_size, 0)
    entries = torch.arange(cap, dtype=torch.int64, device=device)
    if n_req == 0:
        return indptr.to(torch.int32), torch.full((cap,), -1, dtype=torch.int32, device=device), last.to(torch.int32)
    # The request of entry e is the number of requests ending at or before e.
    b = torch.searchsorted(ends, entries, right=True).clamp(max=n_req - 1)
    p = entries - starts[b]
    valid = entries < ends[-1]
    block = block_table[b, torch.div(p, r, rounding_mode="floor").clamp(0, max_blocks - 1)].to(torch.int64)
    page = block * r + p % r
    valid &= (block >= 0) & (page <= INT32_MAX)
    kv_indices = torch.where(valid, page, -1).to(torch.int32)
    return indptr.to(torch.int32), kv_indices, last.to(torch.int32)


def batch_indices_positions_ref(
    append_indptr: torch.Tensor, seq_lens: torch.Tensor, num_tokens: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(batch_indices (num_tokens,), positions (num_tokens,)), both int32."""
    device = append_indptr.device
    if seq_lens.shape[0] == 0 or num_tokens == 0:
        empty = torch.full((num_tokens,), -1, dtype=torch.int32, device=device)
        return empty, empty.clone()
    tokens = torch.arange(num_tokens, dtype=torch.int64, device=device)
    b, valid = _request_of(append_indptr, tokens)
    pos = seq_lens.to(torch.int64)[b] - append_indptr.to(torch.int64)[b + 1] + tokens
    valid &= (pos >= 0) & (pos <= INT32_MAX)
    return torch.where(valid, b, -1).to(torch.int32), torch.where(valid, pos, -1).to(torch.int32)


# ----------------------------------------------------------------------------------------------------
# Static arguments of the backend factories (cuda.py and asc.py share them: the same sizes and index
# dtypes reach both from the interface).

# Element type names of the index inputs the factories take.
BACKEND_INDEX_DTYPES = ("int32", "int64")


def check_sizes(name: str, block_size: int, page_size: int = 1) -> None:
    """ValueError unless 1 <= page_size, page_size divides block_size and block_size < 2**31."""
    for arg, value in (("block_size", block_size), ("page_size", page_size)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name}: {arg} must be an int, got {type(value).__name__}")
        if not 1 <= value <= INT32_MAX:
            raise ValueError(f"{name}: {arg} must be in [1, 2**31 - 1], got {value}")
    if block_size % page_size:
        raise ValueError(f"{name}: page_size {page_size} does not divide block_size {block_size}")


def check_dtypes(name: str, **dtypes: str) -> None:
    """ValueError unless every index dtype name is one of BACKEND_INDEX_DTYPES."""
    for arg, dtype in dtypes.items():
        if dtype not in BACKEND_INDEX_DTYPES:
            raise ValueError(f"{name}: {arg} {dtype!r} is not one of {', '.join(BACKEND_INDEX_DTYPES)}")


def slot_mapping_shipped_configs() -> list[tuple[int, str, str]]:
    """(block_size, indptr_dtype, pos_dtype): both dtypes of each index, a power-of-two block size
    (shifts) and an odd one (true divisions), vLLM's int32 indptr with int64 positions."""
    return [(64, "int32", "int64"), (16, "int64", "int32"), (48, "int32", "int32"), (1, "int64", "int64")]


def paged_kv_indices_shipped_configs() -> list[tuple[int, int, str]]:
    """(block_size, page_size, len_dtype): pages equal to blocks, several pages per block (a
    power of two and not), both length dtypes."""
    return [(64, 64, "int32"), (64, 16, "int64"), (48, 16, "int32"), (1, 1, "int64")]


def batch_indices_positions_shipped_configs() -> list[tuple[str, str]]:
    """(indptr_dtype, len_dtype): every pair."""
    return [(a, b) for a in BACKEND_INDEX_DTYPES for b in BACKEND_INDEX_DTYPES]
