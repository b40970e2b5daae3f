"""PyTorch reference for `schedule_mtp_varlen`: the schedule of the next varlen step after an MTP
verification step, and its attention work split. The contract.

    sched = schedule_mtp_varlen_ref(seq_lens_before, num_accepted, num_draft, block_size,
                                    num_sm_parts, num_tokens=None)

The step being scheduled
    B                 requests; k = num_draft (static, 0 <= k <= MAX_DRAFT) draft tokens per request.
    seq_lens_before   (B,) int32 or int64: KV length of each request *before* the verification step.
                      The verification step ran 1 + k query tokens per request (the last sampled
                      token, then k drafts) at positions s .. s + k (s = seq_lens_before[b]); its
                      hidden states are laid out per request as 1 + k consecutive rows, request b's
                      at rows b * (1 + k) .. b * (1 + k) + k.
    num_accepted      (B,) int32 or int64: accepted drafts a of each request, clamped to [0, k] (a
                      value outside is an invalid input and is clamped, never an error).
    Request b is *active* when 0 <= s <= max_context(block_size, k); any other s (a negative value
    marks an unused slot of a CUDA-graph padded batch; a longer one is invalid) makes it *inactive*:
    no query tokens, no KV blocks, -1 / 0 in every per-request output below.
    After verification an active request keeps the KV of positions s .. s + a (the first token and
    the accepted drafts) and samples a bonus token at position s + 1 + a. The next step runs the same
    1 + k query tokens per request (the bonus token, then k new drafts) at positions
    s + 1 + a .. s + 1 + a + k.

Outputs (MtpSchedule, every tensor int32, on the inputs' device)
    new_seq_lens      (B,): s + a + 2 + k, the KV length the next step's attention sees (its query
                      tokens included); 0 for an inactive request.
    query_start_loc   (B + 1,): exclusive prefix sum of the query counts (1 + k, or 0 when
                      inactive); query_start_loc[B] is the number of real tokens.
    positions         (num_tokens,): for token j of request b (query_start_loc[b] + j):
                      new_seq_lens[b] - (1 + k) + j. num_tokens is the fixed (CUDA-graph) length,
                      default B * (1 + k); entries from query_start_loc[B] on are -1, tokens at or
                      past num_tokens are not produced (query_start_loc still counts them).
    request_ids       (num_tokens,): the request b of each token, -1 for padding.
    last_hidden_rows  (B,): b * (1 + k) + a, the verification row of the last accepted token (the
                      hidden state the next MTP draft starts from); -1 for an inactive request.
    tile_metadata     (num_sm_parts, 8): the attention work split (below), one row per part.
    num_splits        (B + 1,): exclusive prefix sum of splits_b (below): request b's partial
                      results of the split-KV attention live at rows num_splits[b] ..
                      num_splits[b + 1] - 1 of the combine buffer.

The work split (FlashMLA's get_mla_metadata idea: contiguous runs of KV blocks per SM part)
    blocks_b = ceil(new_seq_lens[b] / block_size) KV blocks (0 for inactive); cost is counted in
    blocks only (no fixed per-request cost). Blocks are numbered globally in request order:
    request b's block j is global block cu[b] + j, cu the exclusive prefix of blocks_b, total =
    cu[B]. per_part = ceil(total / num_sm_parts); part p owns global blocks
    [p * per_part, min((p + 1) * per_part, total)) — a contiguous run, every (request, block) in
    exactly one part, at most per_part (<= ceil(total / parts) + 1) blocks per part; trailing parts
    may be empty. Request b is touched by parts cu[b] // per_part .. (cu[b + 1] - 1) // per_part, so
    splits_b = that count (0 for a request without blocks); it is *split* when splits_b > 1.
    tile_metadata[p] columns (META_FIELDS order):
      first_req       request of the part's first block;
      first_block     that block's index within first_req;
      last_req        request of the part's last block;
      last_block_end  one past the part's last block's index within last_req (exclusive);
      first_split     which of first_req's pieces this part holds (p - cu[first_req] // per_part):
                      its partial result goes to combine row num_splits[first_req] + first_split;
                      every later request of the part starts in it (piece 0);
      first_is_split  1 when first_req is split across parts, else 0;
      last_is_split   1 when last_req is split across parts, else 0;
      num_blocks      blocks the part owns.
    An empty part has first_req = last_req = -1 and every other column 0.

Everything is integer arithmetic, so every backend matches this exactly. The reference uses no host
synchronisation and no data-dependent shapes (cumsum, searchsorted, gathers), so it is CUDA-graph
capturable and torch.compile traces it whole.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = [
    "BACKEND_INDEX_DTYPES",
    "INT32_MAX",
    "LANE_KERNEL_WARPS",
    "MAX_BATCH",
    "MAX_BLOCK_SIZE",
    "MAX_DRAFT",
    "MAX_SM_PARTS",
    "META_FIELDS",
    "MtpSchedule",
    "WARP_KERNEL_SLOTS",
    "check_config",
    "max_context",
    "schedule_mtp_varlen_ref",
    "schedule_mtp_varlen_shipped_configs",
]

INT32_MAX = 2**31 - 1
# Largest batch: the device kernels keep the whole block prefix of the batch on chip (one block).
MAX_BATCH = 4096
MAX_DRAFT = 15
MAX_BLOCK_SIZE = 4096
MAX_SM_PARTS = 1024
META_FIELDS = (
    "first_req",
    "first_block",
    "last_req",
    "last_block_end",
    "first_split",
    "first_is_split",
    "last_is_split",
    "num_blocks",
)


class MtpSchedule(NamedTuple):
    new_seq_lens: torch.Tensor
    query_start_loc: torch.Tensor
    positions: torch.Tensor
    request_ids: torch.Tensor
    last_hidden_rows: torch.Tensor
    tile_metadata: torch.Tensor
    num_splits: torch.Tensor


def max_context(block_size: int, num_draft: int) -> int:
    """Largest seq_lens_before of an active request: its next length s + a + 2 + k stays within
    (INT32_MAX // MAX_BATCH) blocks, so the block total of any batch fits int32."""
    return (INT32_MAX // MAX_BATCH) * block_size - (2 + 2 * num_draft)


def schedule_mtp_varlen_ref(
    seq_lens_before: torch.Tensor,
    num_accepted: torch.Tensor,
    num_draft: int,
    block_size: int,
    num_sm_parts: int,
    num_tokens: int | None = None,
) -> MtpSchedule:
    """The MtpSchedule of the step (module docstring); num_tokens defaults to B * (1 + num_draft)."""
    k, q = num_draft, 1 + num_draft
    n_req = seq_lens_before.shape[0]
    n_tok = n_req * q if num_tokens is None else num_tokens
    device = seq_lens_before.device
    i64 = dict(dtype=torch.int64, device=device)
    zero = torch.zeros(1, **i64)
    s = seq_lens_before.to(torch.int64)
    a = num_accepted.to(torch.int64).clamp(0, k)
    active = (s >= 0) & (s <= max_context(block_size, k))
    new_len = torch.where(active, s + a + 2 + k, 0)
    qsl = torch.cat([zero, torch.cumsum(torch.where(active, q, 0), 0)])
    rows = torch.where(active, torch.arange(n_req, **i64) * q + a, -1)

    # Tokens: the request of token i is the last b with qsl[b] <= i (inactive requests hold none).
    tokens = torch.arange(n_tok, **i64)
    b = (torch.searchsorted(qsl, tokens, right=True) - 1).clamp(0, max(n_req - 1, 0))
    real = tokens < qsl[-1]
    # With B == 0 every token is padding; b == 0 then indexes nothing, so the tokens stand in.
    pos = new_len[b] - q + (tokens - qsl[b]) if n_req else tokens
    positions = torch.where(real, pos, -1)
    request_ids = torch.where(real, b, -1)

    # The split over global KV blocks.
    blocks = torch.div(new_len + block_size - 1, block_size, rounding_mode="floor")
    ends = torch.cumsum(blocks, 0)
    cu = torch.cat([zero, ends])
    total = cu[-1]
    per_part = torch.div(total + num_sm_parts - 1, num_sm_parts, rounding_mode="floor")
    # Every division by per_part below only matters when total > 0, where per_part >= 1.
    pp = per_part.clamp(min=1)
    first_part = torch.div(cu[:-1], pp, rounding_mode="floor")
    splits = torch.where(blocks > 0, torch.div(cu[1:] - 1, pp, rounding_mode="floor") - first_part + 1, 0)
    num_splits = torch.cat([zero, torch.cumsum(splits, 0)])

    parts = torch.arange(num_sm_parts, **i64)
    g0 = parts * per_part
    g1 = torch.minimum(g0 + per_part, total)
    owned = g0 < total
    empty = torch.tensor([-1, 0, -1, 0, 0, 0, 0, 0], **i64)
    if n_req:
        # The request of global block g is the number of requests ending at or before it.
        fr = torch.searchsorted(ends, g0, right=True).clamp(max=n_req - 1)
        lr = torch.searchsorted(ends, g1 - 1, right=True).clamp(max=n_req - 1)
        cols = [
            fr,
            g0 - cu[fr],
            lr,
            g1 - cu[lr],
            parts - first_part[fr],
            (splits[fr] > 1).to(torch.int64),
            (splits[lr] > 1).to(torch.int64),
            g1 - g0,
        ]
        meta = torch.where(owned[:, None], torch.stack(cols, 1), empty)
    else:
        meta = empty.repeat(num_sm_parts, 1)
    return MtpSchedule(
        new_len.to(torch.int32),
        qsl.to(torch.int32),
        positions.to(torch.int32),
        request_ids.to(torch.int32),
        rows.to(torch.int32),
        meta.to(torch.int32),
        num_splits.to(torch.int32),
    )


# ----------------------------------------------------------------------------------------------------
# Static arguments of the backend factories (cuda.py and asc.py share them).

BACKEND_INDEX_DTYPES = ("int32", "int64")
# Requests per lane of the NVIDIA warp kernel (cuda.schedule_mtp_varlen_warp_tl, a static argument):
# it serves batches up to 32 * slots requests; the interface compiles the smallest that holds B.
WARP_KERNEL_SLOTS = (1, 2, 4)
# Warps of the NVIDIA lane kernel (cuda.schedule_mtp_varlen_lane_tl, a static argument): a thread per
# request, so it serves batches up to 32 * warps requests; the interface compiles the fewest that hold B.
LANE_KERNEL_WARPS = (8, 16, 32)


def _check_int(name: str, arg: str, value, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: {arg} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name}: {arg} must be in [{low}, {high}], got {value}")


def check_config(name: str, num_draft: int, block_size: int, num_sm_parts: int, **dtypes: str) -> None:
    """TypeError/ValueError unless 0 <= num_draft <= MAX_DRAFT, 1 <= block_size <= MAX_BLOCK_SIZE,
    1 <= num_sm_parts <= MAX_SM_PARTS and every dtype name is one of BACKEND_INDEX_DTYPES."""
    _check_int(name, "num_draft", num_draft, 0, MAX_DRAFT)
    _check_int(name, "block_size", block_size, 1, MAX_BLOCK_SIZE)
    _check_int(name, "num_sm_parts", num_sm_parts, 1, MAX_SM_PARTS)
    for arg, dtype in dtypes.items():
        if dtype not in BACKEND_INDEX_DTYPES:
            raise ValueError(f"{name}: {arg} {dtype!r} is not one of {', '.join(BACKEND_INDEX_DTYPES)}")


def schedule_mtp_varlen_shipped_configs() -> list[tuple[int, int, int, str, str]]:
    """(num_draft, block_size, num_sm_parts, len_dtype, acc_dtype): DeepSeek-V3's MTP draft lengths
    1 and 3 at block size 64 over the H200's 132 SMs, both dtypes of each input; one odd shape (no
    drafts, block size 48, more parts than threads in a pass) for the divisions and part loop."""
    return [
        (1, 64, 132, "int32", "int32"),
        (3, 64, 132, "int64", "int64"),
        (0, 48, 600, "int32", "int64"),
    ]
