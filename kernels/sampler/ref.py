"""PyTorch reference for `sampler`: one token per request from logits, with per-request temperature,
top-k, top-p and min-p, drawn by an exponential race with the library's counter-based noise. The
contract.

    tokens, logprobs, empty = sampler_ref(logits, temperature, top_k, top_p, min_p, seed, offset,
                                          return_logprobs=False)

Inputs (all on logits' device):
    logits       (B, V) float32 or bfloat16 (bfloat16 is widened exactly); rows may be strided, the
                 last dimension contiguous. 1 <= V < MAX_VOCAB = 2**23 (the interface checks it).
    temperature  (B,) float32.
    top_k        (B,) int32 or int64.
    top_p, min_p (B,) float32.
    seed, offset (B,) int64: the noise counters of kernels.random_sampling.ref.
Every step is float32 unless said. Per row:
 1. l = float32(logits); NaN -> -inf. finite = entries with l > -inf. A row with no finite entry:
    token -1, logprob NaN, empty = True (every other row has empty = False).
 2. Greedy rows are those whose temperature t is not in (0, inf) (t <= 0, NaN, +inf): s = l.
    Sampled rows: s = l / t (IEEE float32 division). Non-finite entries have s = -inf.
    m = max of s over the finite entries; best = the lowest finite id with s = m.
 3. A row whose s holds +inf (l holds +inf; or, sampled, a finite l / t overflowed): token = best
    (the lowest id holding +inf), logprob 0; nothing else applies.
 4. d_v = s_v - m for finite entries, except d_v = 0 where s_v = m (this only matters when every
    finite l / t underflowed to -inf: m = -inf); d = -inf for non-finite entries.
    w_v = expf(d_v), the accurate expf (no fast math): w = 1 at the max, w in [0, 1].
 5. Greedy rows: token = best. Sampled rows are filtered, then raced (6.). kept starts as finite.
    top_k (enabled when 0 < k < V): tau_k = the k-th largest s among the finite entries counting
    repeats (-inf when fewer than k are finite: no-op); kept &= s >= tau_k.
    Integer mass: q_v = floor(w_v * 2**20) as int64 (exact: the scaling by 2**20 is exact and
    q in [0, 2**20]); Q = sum of q over kept (exact in any order, so top-p is deterministic and
    the same on every backend; Q >= 2**20: the max is kept).
    top_p (enabled when top_p < 1, NaN disabled): P20 = the integer nearest to
    clamp(top_p, 0, 1) * 2**20 (exact scaling, round half to even); C(tau) = sum of q_u over kept
    u with w_u >= tau; tau_p = the largest w among kept entries with C(tau_p) * 2**20 >= P20 * Q
    (int64: V * 2**20 * 2**20 < 2**63 because V < 2**23); kept &= w >= tau_p. top_p <= 0 (P20 = 0)
    keeps w >= 1: the maximum and its ties.
    min_p (enabled when min_p > 0, NaN disabled): kept &= w >= min(min_p, 1) (float32 compare;
    the same as P_v >= min_p * P_max because w = 1 at the max).
    top_k, top_p and min_p are intersected; top_p's mass is over the top-k survivors.
 6. token = argmax over kept of w_v / E_v, E = kernels.random_sampling.ref.exponential_noise(seed,
    offset, V), float32 IEEE division, ties to the lowest id. The max (w = 1, key > 0) is always
    kept, so a sampled row always has a token; kept entries with w = 0 never win.
 7. logprob = d_token - log(sum over finite entries of w): the token's log-probability under the
    temperature-scaled distribution (s) before filtering. Its float32 sum order is the backend's
    (compare with a tolerance); everything else above is exact, so tokens and empty flags match
    token for token on every backend that has the same expf.
Outputs: tokens (B,) int64 in [-1, V); logprobs (B,) float32, or None when not asked; empty (B,)
bool.

Pure torch on the tensors' device (it sorts: it is the contract, not the fast path), no host
synchronisation and no data-dependent shapes: CPU and CUDA tensors alike, CUDA-graph capturable.
"""

from __future__ import annotations

import torch

# The noise, and the vector-load width rule of rows like these, are random_sampling's.
from kernels.random_sampling.ref import check_vector, exponential_noise, vector_elements

__all__ = [
    "DTYPES",
    "MASS_BITS",
    "MAX_VOCAB",
    "TOP_K_DTYPES",
    "check_config",
    "sampler_ref",
    "sampler_shipped_configs",
    "vector_elements",
]

# q = floor(w * 2**MASS_BITS): the integer probability mass behind top-p.
MASS_BITS = 20
# V * 2**20 * 2**20 must stay below 2**63 (C(tau) * 2**20 and P20 * Q are int64).
MAX_VOCAB = 2 ** (63 - 2 * MASS_BITS)
_INF = float("inf")


def _first(mask: torch.Tensor) -> torch.Tensor:
    """(B,) int64: the lowest column where mask holds per row, -1 where it holds nowhere."""
    # argmax of a 0/1 tensor returns the first maximal index.
    first = mask.to(torch.uint8).argmax(dim=-1)
    return torch.where(mask.any(dim=-1), first, -1)


def _top_k_threshold(s: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """(B, 1) tau_k: the k-th largest s counting repeats (non-finite entries hold -inf, so fewer
    than k finite entries give -inf); -inf where top-k is disabled."""
    V = s.shape[-1]
    k = top_k.to(torch.int64)
    on = (k > 0) & (k < V)
    ranked = s.sort(dim=-1, descending=True).values
    tau = ranked.gather(-1, (torch.where(on, k, 1) - 1)[:, None])
    return torch.where(on[:, None], tau, -_INF)


def _top_p_threshold(w: torch.Tensor, q: torch.Tensor, kept: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """(B, 1) tau_p of step 5 (0 where top-p is disabled: keeps every w >= 0)."""
    p = top_p.to(torch.float32)
    on = p < 1
    p20 = torch.round(torch.where(on, p, 1.0).clamp(0, 1) * 2.0**MASS_BITS).to(torch.int64)
    q = torch.where(kept, q, 0)
    target = p20 * q.sum(dim=-1)
    # Kept entries first by decreasing w (the others hold -1): the first prefix whose mass reaches
    # the target ends at tau_p; ties of tau_p after it only add mass, larger w values have less.
    ranked, order = torch.where(kept, w, -1.0).sort(dim=-1, descending=True)
    reached = q.gather(-1, order).cumsum(dim=-1) * 2**MASS_BITS >= target[:, None]
    tau = ranked.gather(-1, _first(reached).clamp(min=0)[:, None])
    return torch.where(on[:, None], tau, 0.0)


def sampler_ref(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
    seed: torch.Tensor,
    offset: torch.Tensor,
    return_logprobs: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """(tokens (B,) int64, logprobs (B,) float32 or None, empty (B,) bool): the module docstring's
    steps 1-7 for every row."""
    l = logits.to(torch.float32)
    l = torch.where(torch.isnan(l), -_INF, l)
    finite = l > -_INF
    empty = ~finite.any(dim=-1)
    t = temperature.to(torch.float32)
    sampled = (t > 0) & (t < _INF)
    s = torch.where(sampled[:, None], l / t[:, None], l)
    s = torch.where(finite, s, -_INF)
    m = s.amax(dim=-1, keepdim=True)
    best = _first(finite & (s == m))
    overflow = (s == _INF).any(dim=-1)
    d = torch.where(finite, torch.where(s == m, 0.0, s - m), -_INF)
    w = torch.exp(d)

    kept = finite & (s >= _top_k_threshold(s, top_k))
    q = torch.floor(w * 2.0**MASS_BITS).to(torch.int64)
    kept = kept & (w >= _top_p_threshold(w, q, kept, top_p))
    mp = min_p.to(torch.float32)[:, None]
    kept = kept & ((mp <= 0) | torch.isnan(mp) | (w >= mp.clamp(max=1)))
    keys = w / exponential_noise(seed, offset, l.shape[-1])
    race_best = torch.where(kept, keys, -_INF).amax(dim=-1, keepdim=True)
    raced = _first(kept & (keys == race_best))

    tokens = torch.where(empty, -1, torch.where(sampled & ~overflow, raced, best))
    if not return_logprobs:
        return tokens, None, empty
    d_token = d.gather(-1, tokens.clamp(min=0)[:, None])[:, 0]
    logprobs = d_token - torch.log(w.sum(dim=-1))
    logprobs = torch.where(overflow, 0.0, logprobs)
    logprobs = torch.where(empty, float("nan"), logprobs)
    return tokens, logprobs, empty


# ----------------------------------------------------------------------------------------------------
# Static arguments of the backend factories (cuda.py and asc.py share them).

DTYPES = ("float32", "bfloat16")
# top_k is read as given (int32 or int64): no widening launch before the kernel.
TOP_K_DTYPES = ("int32", "int64")


def check_config(name: str, dtype: str, vec: int, top_k_dtype: str = "int64") -> int:
    """ValueError/TypeError unless dtype is one of DTYPES, vec (elements per vector load) a power
    of two with vec * element size <= 16 bytes and top_k_dtype one of TOP_K_DTYPES; returns the
    element size."""
    if dtype not in DTYPES:
        raise ValueError(f"{name}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    if top_k_dtype not in TOP_K_DTYPES:
        raise ValueError(f"{name}: top_k_dtype {top_k_dtype!r} is not one of {', '.join(TOP_K_DTYPES)}")
    return check_vector(name, dtype, vec)


def sampler_shipped_configs() -> list[tuple[str, int, str]]:
    """(dtype, vec, top_k_dtype): both logit dtypes with 16-byte vectors (aligned rows, the models'
    vocabularies) and element-wide loads (misaligned views), and each top_k dtype with both kinds of
    loads (int64, torch's default, with fp32's 16-byte vectors). B, V and the row stride are
    dynamic."""
    return [("float32", 4, "int64"), ("float32", 1, "int32"), ("bfloat16", 8, "int32"), ("bfloat16", 1, "int64")]
