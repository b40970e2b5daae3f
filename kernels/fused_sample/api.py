"""Interface of `fused_sample`: the sampler's (kernels/sampler/api.py) in one launch from logits to
token. Same arguments, same validation, same result, token for token:

    tokens, logprobs, empty = tilelang_ops.fused_sample(logits, temperature, top_k, top_p, min_p, seed,
                                                        offset, return_logprobs=False, out=None)

logits       (B, V) float32 or bfloat16, 1 <= V < 2**23; rows may be strided, the last dimension
             contiguous. NaN counts as -inf; -inf is never drawn.
temperature  (B,) float32 (t <= 0, NaN or +inf: greedy); top_k (B,) int32 or int64 (k <= 0 or
             k >= V: off); top_p, min_p (B,) float32 (top_p >= 1 or NaN, min_p <= 0 or NaN: off);
seed, offset (B,) int64: the request's noise counters (kernels/random_sampling's noise).
All of these are contiguous tensors on logits' device.
return_logprobs  also return the token's log-probability under softmax(l / t) before filtering.
out          None or caller-owned (tokens (B,) int64, logprobs (B,) float32 or None, empty (B,) bool).
Returns SamplerOutput(tokens, logprobs, empty): tokens (B,) int64 in [-1, V) (-1 and empty = True
for a row without a finite logit), logprobs (B,) float32 or None. The exact rules are
kernels/sampler/ref.py (fused_sample_ref is sampler_ref); the kernel's logprobs match within float32
rounding of the normalising sum.

Dispatch:
  CPU tensors            the PyTorch reference.
  V <= ref.MAX_V and B <= split_batch_limit(device)
                         one fused_sample_tl kernel (on CUDA, a cluster of blocks per row holding
                         the row in shared memory; on Ascend, the sampler's kernel under this name).
  otherwise              the sampler's kernel (sampler_tl): the split kernel needs the whole row in
                         the cluster's shared memory, and a larger row does not fit; and past a few
                         waves of clusters one block per row is faster (see split_batch_limit).
Either kernel takes no host sync and is CUDA-graph capturable; B, V and the row stride are dynamic
(one compile per dtype, load width and top_k dtype). Invalid arguments raise TypeError or ValueError
naming the argument before anything is written. B == 0 launches nothing.
"""

from __future__ import annotations

import sys

import torch

from kernels.fused_sample import ref
from kernels.interface import backend_ops, is_host
from kernels.sampler.api import SamplerOutput, check_arguments, launch, run_reference

__all__ = ["fused_sample", "split_batch_limit"]

# Rows per cluster-sized group of SMs the split kernel may take (the limit is this times SMs // 8).
# On an H200 (132 SMs), fp32 V 129280 with top-k 50 and top-p 0.9, the split kernel took 83 / 123 /
# 162 / 201 / 256 / 301 us at B = 16 / 32 / 48 / 64 / 80 / 96 and the sampler's kernel 248-256 us
# up to B = 80: the split wins up to B = 64 = 4 * 16 and ties at 80 (kernels/fused_sample/PERF.md).
_SPLIT_ROWS_PER_GROUP = 4


def split_batch_limit(device: torch.device) -> int:
    """The largest batch the split (cluster) kernel takes on `device`: _SPLIT_ROWS_PER_GROUP rows per
    ref.CLUSTER_BLOCKS SMs (64 on an H200). Off CUDA there is one kernel, so no limit. Reads cached
    device properties: no host sync."""
    if device.type != "cuda":
        return sys.maxsize
    return _SPLIT_ROWS_PER_GROUP * (torch.cuda.get_device_properties(device).multi_processor_count // ref.CLUSTER_BLOCKS)


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
    name = "fused_sample"
    args = (logits, temperature, top_k, top_p, min_p, seed, offset, return_logprobs)
    result = check_arguments(name, *args, out)
    if logits.shape[0] == 0:
        return result
    if is_host(logits):
        return run_reference(*args, result)
    ops = backend_ops(name, logits).ops
    split = logits.shape[1] <= ref.MAX_V and logits.shape[0] <= split_batch_limit(logits.device)
    factory = ops.fused_sample_tl if split else ops.sampler_tl
    return launch(factory, *args, result)
