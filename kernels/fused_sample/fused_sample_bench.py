"""Benchmark cases of `fused_sample`: one token per request with top-k 50, top-p 0.9 and temperature
0.7 (the decode settings of the design's target: batch 128 x vocab 129280 in <= 50 us on an H200).

Run with ``python -m testing.benchmark --kernels fused_sample`` (or
``bazel run //kernels/fused_sample:fused_sample_bench``).

Cases (10): float32 logits over vocab 129280 (DeepSeek-V3) and bfloat16 logits over vocab 151936
(Qwen), each at batch 1, 8, 64, 128, 512. Every row samples (no greedy rows) with top-k and top-p
both enabled, the costliest path. Every case runs the interface: fused_sample_tl below
api.FLAGGING_MIN_ROWS rows, fused_sample_flagging_tl and sampler_flagged_tl from there on.

Peers, timed in the same run with the same timer:
  torch_eager    kernels.fused_sample.ref.fused_sample_ref (= sampler_ref: it sorts every row twice)
  torch_compile  torch.compile of the same function (dynamic=False)
  sampler        kernels.sampler.api.sampler on the same inputs: the one-block-per-row kernel that
                 returns the same tokens, the baseline the chunked kernel has to beat

bytes_moved: the logits read once plus the outputs written, B * V * element size + B * (8 + 1)
(tokens and empty flags; logprobs are not asked), as the sampler's bench counts it. The per-request
parameters (40 bytes a row) are left out.
"""

from __future__ import annotations

import torch

from kernels.sampler.sampler_bench import sampler_interface, sampling_case
from testing.benchmark import BenchCase

KERNEL = "fused_sample"

# (dtype, V, batches)
SWEEPS = (
    (torch.float32, 129280, (1, 8, 64, 128, 512)),
    (torch.bfloat16, 151936, (1, 8, 64, 128, 512)),
)


def _fused_sample():
    from kernels.fused_sample import api

    return api.fused_sample


def cases() -> list[BenchCase]:
    # The sampler's cases (inputs, ids, byte counts), with the sampler's kernel as a peer.
    return [sampling_case(KERNEL, dtype, V, b, _fused_sample, lambda: {"sampler": sampler_interface()}) for dtype, V, batches in SWEEPS for b in batches]
