"""PyTorch reference for `swa_index`: the KV slots a sliding-window attention layer reads, per query
token, and what each request may free or must replay. The contract.

    slots, valid_len, first_block, replay_start, replay_end = swa_index_ref(
        query_start_loc, positions, block_table, seq_lens, window, block_size, pad)

Inputs
    B                 the number of requests: query_start_loc has B + 1 entries, block_table B rows,
                      seq_lens B entries.
    query_start_loc   (B + 1,) int32 or int64, non-decreasing: request b owns tokens
                      [query_start_loc[b], query_start_loc[b + 1]). A token in no request (before
                      query_start_loc[0], at or past query_start_loc[B]) is padding. Monotonicity is
                      not checked (it would need the values on the host); with a non-monotone
                      query_start_loc a token is padding or belongs to *some* b whose range holds it
                      (which one is unspecified) and nothing is read or written out of bounds.
    positions         (T,) int32 or int64: the position of each query token in its request. MTP
                      tokens of one request have consecutive positions, each with its own window.
    block_table       (B, max_blocks) int32: physical blocks of each request, `block_size` slots each.
    seq_lens          (B,) int32 or int64: L, each request's KV length after this step.
    window            W >= 1, the layer's sliding window (a token attends to W positions, itself
                      included).
    block_size        slots per block, >= 1.
    pad               "minus_one" or "repeat" (see slots).

Per query token i (T rows). Token i is *valid* when it belongs to a request b and pos = positions[i]
is >= 0; its window is the n = min(pos + 1, W) positions [pos - n + 1, pos], i.e.
[max(0, pos - W + 1), pos].
    valid_len   (T,) int32: n for a valid token, 0 for padding or a negative position.
    slots       (T, W) int32: column j < valid_len holds the slot of position p = pos - n + 1 + j
                (ascending positions: column valid_len - 1 is the token's own position),
                slot = block_table[b, p // block_size] * block_size + p % block_size. An entry is
                *invalid* when p // block_size >= max_blocks, the block id is negative (an
                unallocated or freed entry) or the slot exceeds 2**31 - 1 (all computed in int64).
                Invalid entries and every column j >= valid_len hold the pad value:
                  pad="minus_one": -1;
                  pad="repeat":    the row's *fill slot*, a legal slot for kernels that reject -1:
                                   the slot of the token's own position (the window's last entry,
                                   the last valid slot of every consistent row) when that entry is
                                   valid, else 0 (a row with no own slot: padding tokens, negative
                                   positions, an unallocated own block; slot 0 exists in any
                                   non-empty cache). Consumers mask with valid_len in this mode.

Per request b (B entries), with L = max(seq_lens[b], 0) (a negative length is an empty request):
    replay_start (B,) int64: max(0, L - W). [replay_start, L) is the window of the request's last
                 token (position L - 1): the positions to recompute to rebuild the window after
                 preemption.
    replay_end   (B,) int64: L.
    first_block  (B,) int32: min(replay_start // block_size, max_blocks), the first block-table
                 column still inside that window; columns before it hold no position any later
                 token of the request attends to, so their blocks may be freed once this step's
                 attention has run (this step's earlier MTP tokens may still read them). Pass the
                 committed length (after rejecting drafts) as seq_lens when deciding what to free.
                 It is 0 while L <= W and max_blocks when the window starts past the table.

Everything is integer arithmetic, so every backend matches this exactly. No host synchronisation
and no data-dependent shapes, so the reference is CUDA-graph capturable and torch.compile traces it.
"""

from __future__ import annotations

import torch

__all__ = [
    "BACKEND_INDEX_DTYPES",
    "INT32_MAX",
    "PADS",
    "check_static",
    "swa_index_ref",
    "swa_index_shipped_configs",
]

INT32_MAX = 2**31 - 1
PADS = ("minus_one", "repeat")


def _request_of(indptr: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(request, valid) per token: the b with indptr[b] <= token < indptr[b + 1], valid False for
    padding tokens; request is clamped into [0, B) either way (B >= 1)."""
    ind = indptr.to(torch.int64)
    n_req = ind.shape[0] - 1
    b = (torch.searchsorted(ind, tokens, right=True) - 1).clamp(0, n_req - 1)
    return b, (ind[b] <= tokens) & (tokens < ind[b + 1])


def swa_index_ref(
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    window: int,
    block_size: int,
    pad: str = "minus_one",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(slots (T, W) int32, valid_len (T,) int32, first_block (B,) int32, replay_start (B,) int64,
    replay_end (B,) int64); see the module docstring."""
    if pad not in PADS:
        raise ValueError(f"swa_index_ref: pad must be one of {PADS}, got {pad!r}")
    device = positions.device
    n_tok = positions.shape[0]
    n_req, max_blocks = block_table.shape
    lens = seq_lens.to(torch.int64).clamp(min=0)
    replay_start = (lens - window).clamp(min=0)
    first_block = torch.div(replay_start, block_size, rounding_mode="floor").clamp(max=max_blocks).to(torch.int32)
    if n_req == 0 or n_tok == 0:
        fill = -1 if pad == "minus_one" else 0
        slots = torch.full((n_tok, window), fill, dtype=torch.int32, device=device)
        return slots, torch.zeros(n_tok, dtype=torch.int32, device=device), first_block, replay_start, lens
    tokens = torch.arange(n_tok, dtype=torch.int64, device=device)
    b, valid = _request_of(query_start_loc, tokens)
    pos = positions.to(torch.int64)
    valid &= pos >= 0
    n = torch.where(valid, torch.minimum(pos, torch.full_like(pos, window - 1)) + 1, 0)
    cols = torch.arange(window, dtype=torch.int64, device=device)
    p = (pos - n + 1)[:, None] + cols[None, :]  # (T, W), meaningful where j < n

    def slot_of(p: torch.Tensor, live: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(slot, ok) of positions p of each token's request, ok False for invalid entries."""
        blk = torch.div(p, block_size, rounding_mode="floor")
        ok = live & (p >= 0) & (blk < max_blocks)
        rows = b.reshape(b.shape + (1,) * (p.dim() - 1)).expand_as(p)
        block = block_table[rows, blk.clamp(0, max_blocks - 1)].to(torch.int64)
        slot = block * block_size + (p - blk * block_size)
        ok &= (block >= 0) & (slot <= INT32_MAX)
        return slot, ok

    slot, ok = slot_of(p, cols[None, :] < n[:, None])
    if pad == "minus_one":
        fill = torch.full((n_tok, 1), -1, dtype=torch.int64, device=device)
    else:
        own, own_ok = slot_of(pos, valid)
        fill = torch.where(own_ok, own, 0)[:, None]
    slots = torch.where(ok, slot, fill).to(torch.int32)
    return slots, n.to(torch.int32), first_block, replay_start, lens


# ----------------------------------------------------------------------------------------------------
# Static arguments of the backend factories (cuda.py and asc.py share them).

# Element type names of the index inputs the factories take.
BACKEND_INDEX_DTYPES = ("int32", "int64")


def check_static(name: str, block_size: int, pad: str, **dtypes: str) -> None:
    """ValueError/TypeError unless 1 <= block_size <= 2**31 - 1, pad is one of PADS and every index
    dtype name is one of BACKEND_INDEX_DTYPES."""
    if isinstance(block_size, bool) or not isinstance(block_size, int):
        raise TypeError(f"{name}: block_size must be an int, got {type(block_size).__name__}")
    if not 1 <= block_size <= INT32_MAX:
        raise ValueError(f"{name}: block_size must be in [1, 2**31 - 1], got {block_size}")
    if pad not in PADS:
        raise ValueError(f"{name}: pad must be one of {', '.join(map(repr, PADS))}, got {pad!r}")
    for arg, dtype in dtypes.items():
        if dtype not in BACKEND_INDEX_DTYPES:
            raise ValueError(f"{name}: {arg} {dtype!r} is not one of {', '.join(BACKEND_INDEX_DTYPES)}")


def swa_index_shipped_configs() -> list[tuple[int, str, str, str, str]]:
    """(block_size, pad, indptr_dtype, pos_dtype, len_dtype): both pads, both dtypes of every index
    input, power-of-two block sizes (shifts) and an odd one (true divisions). The window is dynamic."""
    return [
        (64, "minus_one", "int32", "int64", "int32"),
        (64, "repeat", "int32", "int64", "int32"),
        (16, "repeat", "int64", "int32", "int64"),
        (48, "minus_one", "int64", "int32", "int64"),
    ]
