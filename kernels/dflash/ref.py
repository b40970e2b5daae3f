"""PyTorch reference for `dflash`: the confidence head of a block drafter (DeepSeek DSpark style). The
contract.

    confidence, proposal_len, expected_len, tokens = confidence_head_fused_ref(
        hidden, prev_tokens, embedding, w_h, w_e, bias, draft_tokens, cu_draft_lens, threshold)

Inputs
    N, B          N draft positions (rows) of B requests.
    hidden        (N, H) bfloat16: the drafter's hidden state per position; rows may be strided
                  (row stride >= H), the last dimension contiguous.
    prev_tokens   (N,) int32 or int64: the token before each draft position, a row of `embedding`.
    embedding     (V, He) bfloat16, contiguous rows.
    w_h           (H,) float32; w_e (He,) float32: the head's weights (fp32, so no rounding of the
                  weights is part of the contract).
    bias          (1,) float32 tensor on the inputs' device (a tensor: retuning it neither recompiles
                  a kernel nor synchronises the host).
    draft_tokens  (N,) int32 or int64: the drafted tokens.
    cu_draft_lens (B + 1,) int32 or int64, non-decreasing, cu_draft_lens[0] canonically 0 (other
                  values are handled as below): request b owns rows [lo_b, hi_b),
                  lo_b = clamp(cu_draft_lens[b], 0, N), hi_b = clamp(cu_draft_lens[b + 1], lo_b, N),
                  its draft positions t = 0, 1, ... in order. Nothing checks on the host that
                  cu_draft_lens[B] == N (that needs the values); rows outside every request (before
                  lo_0, or from hi_{B-1} on when cu_draft_lens[B] < N) are *padding*; only rows < N
                  are ever read.
    threshold     a Python real number in [0, 1], compared in float32 (`fp32_threshold`), or a (1,)
                  float32 tensor on the inputs' device, compared as it is: its value is not checked
                  (that would read it on the host); NaN keeps like 0, a value above 1 keeps nothing.

Outputs
    confidence    (N,) float32, every row (padding included):
                      c = sigmoid(w_h . hidden[i] + w_e . embedding[prev_tokens[i]] + bias[0]),
                  both dot products accumulated in float32 (their order is the backend's: kernels
                  match this reference to within fp32 rounding, not bit for bit). A row whose
                  prev_token is outside [0, V), or whose logit is NaN (NaN or Inf - Inf in the
                  inputs), has confidence 0: it stops its request's proposal (see below).
    proposal_len  (B,) int32: the first t whose confidence c_t is < threshold or == 0, else the
                  request's length hi_b - lo_b. So threshold 0 keeps every position of nonzero
                  confidence (an invalid position, confidence 0, always stops; so does a logit below
                  about -88, where sigmoid underflows to 0 in fp32), threshold 1 keeps only c_t == 1.
    expected_len  (B,) float32: sum over t < proposal_len of P_t, P_t = c_0 * c_1 * ... * c_t, both the
                  products and the sum taken in float32 one term at a time in order t = 0, 1, ...
                  (P_t = P_{t-1} * c_t, then acc = acc + P_t, each rounded: no fused multiply-add).
                  0 for an empty proposal.
    tokens        (N,) the dtype of draft_tokens: draft_tokens[i] where row i is position t of a
                  request with t < proposal_len, else -1 (padding rows too).

proposal_len, expected_len and tokens are an exact function of the confidences
(`derive_from_confidence`): every backend derives them from its own confidences bit for bit as this
reference does. No host synchronisation and no data-dependent shapes when `max_len` is given.
"""

from __future__ import annotations

import math
import numbers
import struct

import torch

__all__ = [
    "BACKEND_INDEX_DTYPES",
    "ALIGNMENTS",
    "MAX_WIDTH",
    "check_config",
    "check_index_dtypes",
    "confidence_head_fused_ref",
    "derive_from_confidence",
    "dflash_shipped_configs",
    "fp32_threshold",
    "request_bounds",
    "vector_elems",
]


def fp32_threshold(threshold, name: str = "dflash") -> float:
    """threshold rounded to float32 (what every backend compares with). TypeError unless a real
    number (bool excluded); ValueError unless in [0, 1] (NaN included)."""
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
        raise TypeError(f"{name}: threshold must be a real number or a (1,) float32 tensor, got {type(threshold).__name__}")
    value = float(threshold)
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name}: threshold must be in [0, 1], got {value}")
    return struct.unpack("<f", struct.pack("<f", value))[0]


def request_bounds(cu_draft_lens: torch.Tensor, n_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(lo, hi) (B,) int64: the rows [lo_b, hi_b) of each request, clamped into [0, N]."""
    cu = cu_draft_lens.to(torch.int64)
    lo = cu[:-1].clamp(0, n_rows)
    hi = torch.maximum(cu[1:].clamp(0, n_rows), lo)
    return lo, hi


def derive_from_confidence(
    confidence: torch.Tensor,
    draft_tokens: torch.Tensor,
    cu_draft_lens: torch.Tensor,
    threshold,
    max_len: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(proposal_len (B,) int32, expected_len (B,) float32, tokens (N,)) from (N,) float32 confidences;
    see the module docstring.

    The in-order float32 products and sums are a Python loop over draft positions t (vectorised over
    requests) up to `max_len`, any bound >= the longest request; None reads the longest request from
    cu_draft_lens (a host synchronisation for device tensors).
    """
    thr = threshold if isinstance(threshold, torch.Tensor) else fp32_threshold(threshold)
    n_rows = confidence.shape[0]
    device = confidence.device
    lo, hi = request_bounds(cu_draft_lens, n_rows)
    lens = hi - lo
    if max_len is None:
        max_len = int(lens.max()) if lens.numel() else 0
    plen = lens.clone()
    alive = torch.ones_like(lens, dtype=torch.bool)
    prod = torch.ones(lens.shape, dtype=torch.float32, device=device)
    acc = torch.zeros(lens.shape, dtype=torch.float32, device=device)
    for t in range(max_len):
        live = alive & (t < lens)
        c = confidence[(lo + t).clamp(max=max(n_rows - 1, 0))] if n_rows else prod
        stop = live & ((c < thr) | (c == 0) | torch.isnan(c))
        plen = torch.where(stop, t, plen)
        alive &= ~stop
        keep = live & ~stop
        prod = torch.where(keep, prod * c, prod)
        acc = torch.where(keep, acc + prod, acc)
    rows = torch.arange(n_rows, dtype=torch.int64, device=device)
    # Request of each row: the last b with lo_b <= row (requests are non-decreasing); padding rows
    # fall outside [lo_b, hi_b).
    b = (torch.searchsorted(lo, rows, right=True) - 1).clamp(min=0)
    if lens.numel():
        kept = (lo[b] <= rows) & (rows < lo[b] + plen[b])
    else:
        kept = torch.zeros(n_rows, dtype=torch.bool, device=device)
    tokens = torch.where(kept, draft_tokens, torch.full_like(draft_tokens, -1))
    return plen.to(torch.int32), acc, tokens


def confidence_of(
    hidden: torch.Tensor,
    prev_tokens: torch.Tensor,
    embedding: torch.Tensor,
    w_h: torch.Tensor,
    w_e: torch.Tensor,
    bias: torch.Tensor,
) -> torch.Tensor:
    """(N,) float32 confidences: sigmoid of the fp32 logit; 0 for an out-of-range prev_token or a
    NaN logit."""
    n_vocab = embedding.shape[0]
    tok = prev_tokens.to(torch.int64)
    valid = (tok >= 0) & (tok < n_vocab)
    emb = embedding[tok.clamp(0, max(n_vocab - 1, 0))] if n_vocab else embedding.new_zeros((tok.shape[0], embedding.shape[1]))
    logit = (hidden.float() * w_h).sum(-1) + (emb.float() * w_e).sum(-1) + bias.to(torch.float32)
    c = torch.sigmoid(logit)
    return torch.where(valid & ~torch.isnan(logit), c, torch.zeros_like(c))


def confidence_head_fused_ref(
    hidden: torch.Tensor,
    prev_tokens: torch.Tensor,
    embedding: torch.Tensor,
    w_h: torch.Tensor,
    w_e: torch.Tensor,
    bias: torch.Tensor,
    draft_tokens: torch.Tensor,
    cu_draft_lens: torch.Tensor,
    threshold,
    max_len: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(confidence (N,) float32, proposal_len (B,) int32, expected_len (B,) float32, tokens (N,));
    see the module docstring. `max_len` as in `derive_from_confidence`."""
    confidence = confidence_of(hidden, prev_tokens, embedding, w_h, w_e, bias)
    return (confidence, *derive_from_confidence(confidence, draft_tokens, cu_draft_lens, threshold, max_len))


# ----------------------------------------------------------------------------------------------------
# Static arguments of the backend factories (cuda.py and asc.py share them).

# Element type names of the index inputs the factories take.
BACKEND_INDEX_DTYPES = ("int32", "int64")
# Widest hidden / embedding row (the Ascend kernel stages a whole row of each in its Unified Buffer).
MAX_WIDTH = 16384
# Base-pointer alignments (bytes) the interface passes: the largest power of two <= 16 dividing it.
ALIGNMENTS = (2, 4, 8, 16)


def check_config(name: str, H: int, He: int, h_stride: int, h_align: int, e_align: int, *, w_align: int = 16, **dtypes: str) -> None:
    """ValueError/TypeError unless 1 <= H, He <= MAX_WIDTH, h_stride >= H, h_align, e_align and
    w_align (the weights' base alignment) are in ALIGNMENTS and every index dtype name is one of
    BACKEND_INDEX_DTYPES."""
    aligns = (("h_align", h_align), ("e_align", e_align), ("w_align", w_align))
    for arg, value in (("H", H), ("He", He), ("h_stride", h_stride), *aligns):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name}: {arg} must be an int, got {type(value).__name__}")
    for arg, value in (("H", H), ("He", He)):
        if not 1 <= value <= MAX_WIDTH:
            raise ValueError(f"{name}: {arg} must be in [1, {MAX_WIDTH}], got {value}")
    if h_stride < H:
        raise ValueError(f"{name}: h_stride {h_stride} is smaller than H {H}")
    for arg, align in aligns:
        if align not in ALIGNMENTS:
            raise ValueError(f"{name}: {arg} must be one of {ALIGNMENTS}, got {align}")
    check_index_dtypes(name, **dtypes)


def check_index_dtypes(name: str, **dtypes: str) -> None:
    """ValueError unless every index dtype name is one of BACKEND_INDEX_DTYPES."""
    for arg, dtype in dtypes.items():
        if dtype not in BACKEND_INDEX_DTYPES:
            raise ValueError(f"{name}: {arg} {dtype!r} is not one of {', '.join(BACKEND_INDEX_DTYPES)}")


def vector_elems(width: int, stride: int, align: int) -> int:
    """bf16 elements per vector load of rows of `width` at `stride` from an `align`-byte base: at
    most 8 (one 16-byte load), every row start vector-aligned."""
    return math.gcd(2 * width, 2 * stride, align, 16) // 2


def dflash_shipped_configs() -> list[tuple[int, int, int, str, str, str, int, int]]:
    """(H, He, h_stride, prev_dtype, draft_dtype, cu_dtype, h_align, e_align): the DeepSeek-V3 and a
    4096 model width with 16-byte vectors, an odd small head (576, 320) with strided hidden rows and
    with 4- and 8-byte vectors (misaligned base pointers), both dtypes of every index input. N, B, V
    and the threshold (a kernel input) are dynamic."""
    return [
        (7168, 7168, 7168, "int32", "int32", "int32", 16, 16),
        (4096, 4096, 4096, "int64", "int64", "int64", 16, 16),
        (576, 320, 640, "int64", "int32", "int64", 16, 16),
        (576, 320, 576, "int32", "int64", "int32", 4, 8),
    ]
