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
row from global memory on every pass, so a small batch leaves most SMs idle and each row costs four
reads at one SM's share of bandwidth. fused_sample's CUDA kernel splits each row into chunks of
CHUNK entries, one block each, that read the row once between them and list every entry a filter
could keep; the last block of a row to finish runs the sampler's passes over those lists alone.
"""

from __future__ import annotations

from kernels.interface import CUDA_MAX_GRID_Y
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
    "CHUNK",
    "DTYPES",
    "LIST_CAP",
    "MASS_BITS",
    "MAX_ROWS",
    "MAX_VOCAB",
    "TOP_K_DTYPES",
    "check_config",
    "fused_sample_ref",
    "fused_sample_shipped_configs",
    "vector_elements",
]

fused_sample_ref = sampler_ref

# Workspace layout of the CUDA kernel (kernels/fused_sample/cuda.py; the interface allocates it):
# entries of a row one block reads, and candidates one block may list.
CHUNK = 8192
LIST_CAP = 256
# Rows are the grid's second dimension (CUDA_MAX_GRID_Y blocks at most); larger batches take the
# sampler's kernel.
MAX_ROWS = CUDA_MAX_GRID_Y


def fused_sample_shipped_configs() -> list[tuple[str, int, str]]:
    """(dtype, vec, top_k_dtype): the sampler's shipped configurations (the same static arguments,
    the same vec rule: kernels.sampler.ref.sampler_shipped_configs)."""
    return sampler_shipped_configs()
