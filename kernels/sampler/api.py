"""Interface of `sampler`: one token per request from logits, with per-request temperature, top-k,
top-p and min-p, drawn with the library's counter-based noise (kernels/random_sampling).

    tokens, logprobs, empty = tilelang_ops.sampler(logits, temperature, top_k, top_p, min_p, seed,
                                                   offset, return_logprobs=False, out=None)

logits       (B, V) float32 or bfloat16, 1 <= V < 2**23 (V * 2**40 must fit in int64: the top-p
             mass arithmetic); rows may be strided (a view of a wider tensor), the last dimension
             must be contiguous. NaN counts as -inf; -inf is never drawn.
temperature  (B,) float32: 0 < t < inf samples from softmax(l / t); t <= 0, NaN or +inf is greedy
             (the lowest id with the largest logit).
top_k        (B,) int32 or int64: keep the k largest (ties at the k-th all kept); k <= 0 or k >= V
             disables it.
top_p        (B,) float32: keep the smallest set of largest probabilities whose mass reaches top_p
             (integer masses, see ref.py; ties at the threshold all kept); top_p >= 1 or NaN
             disables it, top_p <= 0 keeps the maximum and its ties.
min_p        (B,) float32: keep probabilities >= min(min_p, 1) * the largest; min_p <= 0 or NaN
             disables it.
seed, offset (B,) int64: the request's noise counters. Same inputs and counters -> same token on
             every run and in any batch.
All of these are contiguous tensors on logits' device (device tensors: a captured CUDA graph
samples with new parameters when they change).
return_logprobs  also return the token's log-probability under softmax(l / t) (softmax(l) for
             greedy rows) before filtering.
out          None or caller-owned (tokens (B,) int64, logprobs (B,) float32 or None, empty (B,) bool),
             contiguous, on logits' device; logprobs is a tensor exactly when return_logprobs. No
             output may overlap an input or another output (compared by the byte ranges they span,
             so an output inside the padding of strided logits counts as overlapping).
Returns SamplerOutput(tokens, logprobs, empty): tokens (B,) int64 in [-1, V), -1 for a row without
a logit above -inf (NaN counts as -inf; flagged in empty); a row holding +inf (or whose l / t
overflows) gives the lowest such id, logprob 0; logprobs (B,) float32 (NaN for empty rows), or None
when not asked. The exact rules are kernels/sampler/ref.py (the contract); the kernel matches it
token for token, and its logprobs within float32 rounding of the normalising sum.

CUDA tensors run one TileLang kernel per call (one block per request, no sort, no host sync:
CUDA-graph capturable; B, V and the row stride are dynamic, one compile per dtype, load width and
top_k dtype: top_k is read as given, int32 or int64).
CPU tensors are served by the PyTorch reference. Invalid arguments raise TypeError or ValueError
naming the argument before anything is written. B == 0 launches nothing.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kernels.interface import (
    INDEX_DTYPES,
    backend_ops,
    base_alignment,
    check_flag,
    check_no_overlap,
    check_out,
    check_rows,
    check_tensor,
    dense_rows,
    is_host,
)
from kernels.sampler import ref

__all__ = ["SamplerOutput", "sampler"]

# torch dtype -> the element type name the backend factories take.
LOGITS_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16"}


class SamplerOutput(NamedTuple):
    tokens: torch.Tensor
    logprobs: torch.Tensor | None
    empty: torch.Tensor


def _check_params(name: str, n: int, like: torch.Tensor, params: dict) -> None:
    for arg, (t, dtypes) in params.items():
        check_tensor(name, arg, t, dtypes=dtypes, shape=(n,), like=like, contiguous=True)


def _outputs(name: str, out, n: int, like: torch.Tensor, return_logprobs: bool) -> SamplerOutput:
    """The caller's outputs, validated, or fresh ones."""
    if out is None:
        def new(dtype):
            return torch.empty((n,), dtype=dtype, device=like.device)

        return SamplerOutput(new(torch.int64), new(torch.float32) if return_logprobs else None, new(torch.bool))
    if not isinstance(out, tuple) or len(out) != 3:
        raise TypeError(f"{name}: out must be a (tokens, logprobs, empty) tuple, got {type(out).__name__}")
    tokens, logprobs, empty = out
    check_out(name, "out tokens", tokens, (n,), torch.int64, like, required=True)
    if return_logprobs != (logprobs is not None):
        raise ValueError(f"{name}: out logprobs must be a tensor exactly when return_logprobs is True")
    check_out(name, "out logprobs", logprobs, (n,), torch.float32, like)
    check_out(name, "out empty", empty, (n,), torch.bool, like, required=True)
    return SamplerOutput(tokens, logprobs, empty)


def check_arguments(
    name: str,
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
    seed: torch.Tensor,
    offset: torch.Tensor,
    return_logprobs: bool,
    out,
) -> SamplerOutput:
    """Every check of the module docstring (TypeError or ValueError naming `name` and the argument,
    before anything is written); returns the outputs to write: the caller's `out`, or fresh ones.
    fused_sample validates with it too."""
    check_rows(name, "logits", logits, LOGITS_DTYPES)
    n, V = logits.shape
    if V == 0:
        raise ValueError(f"{name}: logits has V = 0 columns; at least 1 is needed")
    if V >= ref.MAX_VOCAB:
        raise ValueError(f"{name}: logits has V = {V} columns; at most {ref.MAX_VOCAB - 1} are supported")
    f32, i64 = [torch.float32], [torch.int64]
    params = {
        "temperature": (temperature, f32),
        "top_k": (top_k, INDEX_DTYPES),
        "top_p": (top_p, f32),
        "min_p": (min_p, f32),
        "seed": (seed, i64),
        "offset": (offset, i64),
    }
    _check_params(name, n, logits, params)
    check_flag(name, "return_logprobs", return_logprobs)
    result = _outputs(name, out, n, logits, return_logprobs)
    written = {"out tokens": result.tokens, "out logprobs": result.logprobs, "out empty": result.empty}
    check_no_overlap(name, written, {"logits": logits, **{arg: t for arg, (t, _) in params.items()}})
    return result


def run_reference(logits, temperature, top_k, top_p, min_p, seed, offset, return_logprobs: bool, result: SamplerOutput) -> SamplerOutput:
    """ref.sampler_ref's outputs copied into `result` (checked arguments, CPU tensors)."""
    tokens, logprobs, empty = ref.sampler_ref(logits, temperature, top_k, top_p, min_p, seed, offset, return_logprobs)
    result.tokens.copy_(tokens)
    result.empty.copy_(empty)
    if return_logprobs:
        result.logprobs.copy_(logprobs)
    return result


def launch(factory, logits, temperature, top_k, top_p, min_p, seed, offset, return_logprobs: bool, result: SamplerOutput, workspace: tuple = ()) -> SamplerOutput:
    """Runs factory(dtype, vec, top_k_dtype)'s kernel (the sampler's or fused_sample's: the same
    arguments, then fused_sample's CUDA workspace when given) on checked device tensors with
    B >= 1, writing `result`."""
    n = logits.shape[0]
    x, row_stride = dense_rows(logits)
    dtype = LOGITS_DTYPES[logits.dtype]
    kernel = factory(dtype, ref.vector_elements(dtype, row_stride, base_alignment(x)), INDEX_DTYPES[top_k.dtype])
    # The kernel always writes a logprob; when none is asked for it goes to a scratch row.
    logprobs = result.logprobs if return_logprobs else torch.empty((n,), dtype=torch.float32, device=logits.device)
    kernel(x, temperature, top_k, top_p, min_p, seed, offset, result.tokens, logprobs, result.empty.view(torch.uint8), *workspace)
    return result


def sampler(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
    seed: torch.Tensor,
    offset: torch.Tensor,
    *,
    return_logprobs: bool = False,
    out: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor] | None = None,
) -> SamplerOutput:
    name = "sampler"
    args = (logits, temperature, top_k, top_p, min_p, seed, offset, return_logprobs)
    result = check_arguments(name, *args, out)
    if logits.shape[0] == 0:
        return result
    if is_host(logits):
        return run_reference(*args, result)
    return launch(backend_ops(name, logits).ops.sampler_tl, *args, result)
