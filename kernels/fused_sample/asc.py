"""Huawei Ascend 950 implementation of `fused_sample`: the sampler's Ascend kernel, under this name.

    k = fused_sample_tl(dtype, vec, top_k_dtype)
    k(logits, temperature, top_k, top_p, min_p, seed, offset, token, logprob, empty)

Arguments, dtypes, layouts and semantics are kernels/sampler/asc.py's (and kernels/fused_sample/
ref.py's, which is the sampler's contract): logits (B, V) float32 or bfloat16 with a dynamic row
stride, per-request (B,) parameters, token (B,) int64, logprob (B,) float32, empty (B,) uint8 out.

Why no kernel of its own: the CUDA kernel's vocabulary split rests on a device-wide arrival counter
per row and L2-coherent reads of other blocks' lists (the last block of a row finishes it), which
this Ascend port does not have; the sampler's Ascend kernel already spreads rows over every vector
core. The Ascend kernel takes no workspace (the interface passes none off CUDA). Re-exporting it keeps `ops.fused_sample_tl` available
on both backends with one implementation to verify (the sampler's codegen_ascend suite lowers it;
this package's checks that it is the same factory). Verified by lowering to AscendC only; no NPU has run it.
"""

# No `from __future__ import annotations` in backend modules (TileLang evaluates annotations).
from kernels.fused_sample.ref import fused_sample_shipped_configs
from kernels.sampler.asc import sampler_tl as fused_sample_tl

__all__ = ["fused_sample_shipped_configs", "fused_sample_tl"]
