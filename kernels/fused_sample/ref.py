"""PyTorch reference for `fused_sample`: the sampler's contract, unchanged. One token per request from
logits (B, V) float32 or bfloat16 with per-request temperature, top-k, top-p and min-p, drawn by an
exponential race with the library's counter-based noise (kernels/random_sampling); tokens (B,) int64,
logprobs (B,) float32 or None, empty (B,) bool. Every step, and every argument's dtype and shape, is
kernels/sampler/ref.py's docstring:

    tokens, logprobs, empty = fused_sample_ref(logits, temperature, top_k, top_p, min_p, seed, offset,
                                               return_logprobs=False)

fused_sample_ref IS sampler_ref, so "fused_sample == sampler, token for token" holds by definition
here, and the device tests hold both kernels to it.

Why a second kernel for the same contract: the sampler runs one block per request and streams the
row from global memory on every pass, so a small batch leaves most SMs idle and each row costs
about ten reads at one SM's share of bandwidth. fused_sample's CUDA kernel splits each row across a
thread-block cluster of 8 blocks, each holding 1/8 of the row in shared memory (read from global
memory once, not once per pass), the blocks combining their partial results across the cluster.
Holding the row bounds the vocabulary: V <= MAX_V = 8 blocks x 20480 entries (DeepSeek-V3's 129280
and Qwen's 151936 fit); the interface hands larger rows to the sampler's kernel.
"""

from __future__ import annotations

from kernels.sampler.ref import (
    DTYPES,
    MASS_BITS,
    MAX_VOCAB,
    TOP_K_DTYPES,
    check_config,
    sampler_ref,
    sampler_shipped_configs,
    vector_elements,
)

__all__ = [
    "CLUSTER_BLOCKS",
    "DTYPES",
    "MASS_BITS",
    "MAX_V",
    "MAX_VOCAB",
    "TOP_K_DTYPES",
    "check_config",
    "fused_sample_ref",
    "fused_sample_shipped_configs",
    "vector_elements",
]

fused_sample_ref = sampler_ref

# Blocks of the split kernel's cluster, one per SM (the largest cluster every Hopper launch accepts).
CLUSTER_BLOCKS = 8
# The largest vocabulary the split kernel holds on chip: one cluster x 20480 entries.
MAX_V = CLUSTER_BLOCKS * 20480


def fused_sample_shipped_configs() -> list[tuple[str, int, str]]:
    """(dtype, vec, top_k_dtype): the sampler's shipped configurations (the same static arguments,
    the same vec rule: kernels.sampler.ref.sampler_shipped_configs)."""
    return sampler_shipped_configs()
