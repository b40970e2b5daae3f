"""Interface of `fused_sample`: the sampler's (kernels/sampler/api.py) from logits to token, with
the row split over many blocks. Same arguments, same validation, same result, token for token:

    tokens, logprobs, empty = tilelang_ops.fused_sample(logits, temperature, top_k, top_p, min_p, seed,
                                                        offset, return_logprobs=False, out=None)

logits       (B, V) float32 or bfloat16, 1 <= V < 2**23; rows may be strided, the last dimension
             contiguous. NaN counts as -inf; -inf is never drawn.
temperature  (B,) float32 (t <= 0, NaN or +inf: greedy); top_k (B,) int32 or int64 (k <= 0 or
             k >= V: off); top_p, min_p (B,) float32 (top_p >= 1 or NaN, min_p <= 0 or NaN: off);
seed, offset (B,) int64: the request's noise counters (kernels/random_sampling's noise).
All of these are contiguous tensors on logits' device.
return_logprobs  also return the token's log-probability under softmax(l / t) before filtering.
out          None or caller-owned (tokens (B,) int64, logprobs (B,) float32 or None, empty (B,) bool),
             overlapping no input and no other output (as the sampler's).
Returns SamplerOutput(tokens, logprobs, empty): tokens (B,) int64 in [-1, V) (-1 and empty = True
for a row without a logit above -inf, NaN counting as -inf), logprobs (B,) float32 or None. The
exact rules are kernels/sampler/ref.py (fused_sample_ref is sampler_ref); the kernel's logprobs
match within float32 rounding of the normalising sum.

Dispatch:
  CPU tensors            the PyTorch reference.
  B <= ref.MAX_ROWS      On CUDA, every row is split into chunks of ref.CHUNK entries, one block
                         each, and the last block of a row to finish completes it
                         (kernels/fused_sample/cuda.py), with a workspace from the caching
                         allocator (no launch: B * ceil(V / ref.CHUNK) * 2068 bytes, about 1/16 of
                         the fp32 logits' size) and a per-device, per-stream counter array. Below
                         FLAGGING_MIN_ROWS rows, one launch of fused_sample_tl. From there on,
                         fused_sample_flagging_tl (four blocks an SM) leaves a row whose
                         candidate lists could not hold it (many equal logits, top-k above 256 on
                         a large row) flagged in its counter, and a second launch,
                         sampler_flagged_tl (one block a row, the others return at once; a
                         programmatic dependent launch, started during the first's tail), samples
                         those rows with the sampler's passes and zeroes the counters again.
                         Two launches there deviate on purpose from KERNELS.md's "one launch":
                         without the sampler's passes a block fits four to an SM, which is
                         faster from 32 rows despite the second launch (kernels/fused_sample/
                         PERF.md, "Four blocks an SM, from 32 rows"). GPUs before sm_90 (no
                         programmatic dependent launch) take fused_sample_tl at every batch
                         (takes_flagging). On Ascend, the sampler's kernel under this name.
  otherwise              the sampler's kernel (sampler_tl): the chunked grid holds at most
                         ref.MAX_ROWS rows.
Every path takes no host sync and is CUDA-graph capturable; B, V and the row stride are dynamic
(one compile per dtype, load width and top_k dtype). Invalid arguments raise TypeError or ValueError
naming the argument before anything is written. B == 0 launches nothing.

Concurrency: launches on one stream share that stream's counters and run in order. A captured CUDA
graph keeps the counters of the stream it was captured on: do not replay it concurrently with
another graph captured on that stream or with calls on that stream (kernels/interface.py:
stream_counters). A capture takes zeroed counters that calls outside any capture set aside: before
capturing, make one such call on the device with at least as many rows (a warm-up; RuntimeError
otherwise, before anything is written).
"""

from __future__ import annotations


import torch

from kernels.fused_sample import ref
from kernels.interface import PDL_MIN_CAPABILITY, backend_ops, cuda_capability, is_host, stream_counters
from kernels.sampler.api import SamplerOutput, check_arguments, launch, run_reference

__all__ = ["fused_sample"]

NAME = "fused_sample"

# From this many rows the four-blocks-an-SM kernel and its second launch are faster. Same-run H200
# sweep (kernels/fused_sample/PERF.md, "Four blocks an SM, from 32 rows"), top-k 50, top-p 0.9, one
# launch / two, us, fp32 V 129280: B 16 20.8 / 23.5, 24 26.6 / 25.1, 32 28.0 / 27.4,
# 48 38.5 / 34.2, 64 45.1 / 35.7; bf16 V 151936: 16 26.8 / 26.4, 24 28.0 / 28.8, 32 33.5 / 31.6,
# 48 40.1 / 35.9, 64 47.3 / 40.6. At 24 the two dtypes disagree; from 32 on two launches win.
FLAGGING_MIN_ROWS = 32


def takes_flagging(B: int, capability: tuple[int, int]) -> bool:
    """Whether B rows on a CUDA device of this compute capability take fused_sample_flagging_tl and
    sampler_flagged_tl (else fused_sample_tl, one launch)."""
    return B >= FLAGGING_MIN_ROWS and tuple(capability) >= PDL_MIN_CAPABILITY


def _workspace(B: int, V: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """(chunk_f, chunk_i, list_s, list_id, arrivals) of kernels/fused_sample/cuda.py for B rows of
    V entries: one uninitialised allocation (the kernel writes every entry it reads) and the
    stream's counters."""
    slots = B * -(-V // ref.CHUNK)
    words = slots * (2 * ref.LIST_CAP + 5)
    ws = torch.empty(words, dtype=torch.int32, device=device)
    lists = slots * ref.LIST_CAP
    list_id = ws[:lists].view(slots, ref.LIST_CAP)
    list_s = ws[lists : 2 * lists].view(torch.float32).view(slots, ref.LIST_CAP)
    chunk_i = ws[2 * lists : 2 * lists + 3 * slots].view(slots, 3)
    chunk_f = ws[2 * lists + 3 * slots :].view(torch.float32).view(slots, 2)
    # The arrival counters: the last block of a row resets its counter, or fused_sample_flagging_tl's
    # leaves 1 for sampler_flagged_tl, which resets it.
    return chunk_f, chunk_i, list_s, list_id, stream_counters(NAME, device, B)


def fused_sample(
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
    name = NAME
    args = (logits, temperature, top_k, top_p, min_p, seed, offset, return_logprobs)
    result = check_arguments(name, *args, out)
    B, V = logits.shape
    if B == 0:
        return result
    if is_host(logits):
        return run_reference(*args, result)
    ops = backend_ops(name, logits).ops
    if B > ref.MAX_ROWS:
        return launch(ops.sampler_tl, *args, result)
    if logits.device.type != "cuda":
        return launch(ops.fused_sample_tl, *args, result)
    workspace = _workspace(B, V, logits.device)
    if not takes_flagging(B, cuda_capability(logits.device.index)):
        return launch(ops.fused_sample_tl, *args, result, workspace)
    launch(ops.fused_sample_flagging_tl, *args, result, workspace)
    # The rows whose candidate lists could not hold them, flagged in the counters: the sampler's
    # passes over those rows only (every other block returns at once), which zero the flags again.
    return launch(ops.sampler_flagged_tl, *args, result, workspace[-1:])
