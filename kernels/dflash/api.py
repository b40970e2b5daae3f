"""Interface of `dflash`: the confidence head of a block drafter, fused with its proposal.

    confidence, proposal_len, expected_len, tokens = tilelang_ops.confidence_head(
        hidden, prev_tokens, embedding, w_h, w_e, bias, draft_tokens, cu_draft_lens,
        threshold=THRESHOLD, out=None)                   # threshold: required, keyword-only

hidden         (N, H) bfloat16, 1 <= H <= 16384; rows may be strided (a view of a wider tensor), the
               last dimension contiguous.
prev_tokens    (N,) int32 or int64, contiguous: the token before each draft position.
embedding      (V, He) bfloat16, contiguous, V >= 1, 1 <= He <= 16384.
w_h (H,), w_e (He,), bias (1,): float32, contiguous; bias is a device tensor (no recompile, no sync
               when it changes).
draft_tokens   (N,) int32 or int64, contiguous: the drafted tokens.
cu_draft_lens  (B + 1,) int32 or int64, contiguous, non-decreasing, cu_draft_lens[0] canonically 0
               (other values are handled as below): request b owns rows cu_draft_lens[b] ..
               cu_draft_lens[b + 1] - 1, clamped into [0, N). Checking its order or
               cu_draft_lens[B] == N would need the values on the host: neither is checked (a
               decreasing entry gives requests overlapping rows, which of them a row's token goes
               to is unspecified); rows before cu_draft_lens[0] or past cu_draft_lens[B] are
               padding (confidence computed, token -1) and only rows < N are ever read.
threshold      a Python real number in [0, 1], rounded to float32 (each call then fills a (1,) device
               tensor: a tiny allocation and fill launch), or a (1,) float32 tensor on the inputs'
               device, read by the kernel as it is: no recompile when it changes, and a captured
               CUDA graph sees its current value on every replay. A tensor's value is not checked
               (that would read it on the host): NaN keeps like 0, a value above 1 keeps nothing.
out            caller-owned outputs (contiguous, exact shapes and dtypes): a DflashOutput or 4-tuple
               of tensors in the order returned. No output may overlap an input or another output
               (compared by the byte ranges they span, so an output inside a strided view's padding
               counts as overlapping).

Returns DflashOutput(confidence (N,) float32, proposal_len (B,) int32, expected_len (B,) float32,
tokens (N,) of draft_tokens' dtype); the exact rules (out-of-range prev_tokens and NaN logits give
confidence 0 and stop the proposal) are in kernels/dflash/ref.py.

CUDA tensors run two TileLang kernels per call, the confidence of every row, then each request's
proposal from them (kernels/dflash/cuda.py; on sm_90+ the second starts during the first's tail,
a programmatic dependent launch); a backend without them (Ascend) runs its one-launch
dflash_tl. No host sync, every size fixed by the arguments: CUDA-graph capturable; N, B and V are
dynamic. CPU tensors are served by the PyTorch reference.
Invalid arguments raise TypeError or ValueError naming the argument before anything is written. B == 0
or N == 0 builds and launches no TileLang kernel: the PyTorch reference runs on the tensors' device
(ordinary torch ops, no host sync: for B == 0 every row is padding, so the embedding-row gather, the
two fp32 dot products and the sigmoid for the confidences and -1 tokens; for N == 0 zero
proposal_len and expected_len) and its results are copied into the outputs with copy_.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kernels.dflash import ref
from kernels.interface import (
    INDEX_DTYPES,
    backend_ops,
    base_alignment,
    check_indptr,
    check_no_overlap,
    check_out,
    check_rows,
    check_scalar,
    check_tensor,
    dense_rows,
    is_host,
    scalar_tensor,
    takes_pdl,
)

__all__ = ["DflashOutput", "confidence_head"]


class DflashOutput(NamedTuple):
    confidence: torch.Tensor
    proposal_len: torch.Tensor
    expected_len: torch.Tensor
    tokens: torch.Tensor


OUTPUTS = DflashOutput._fields


def _check_width(name: str, arg: str, width: int) -> None:
    if not 1 <= width <= ref.MAX_WIDTH:
        raise ValueError(f"{name}: {arg} must be in [1, {ref.MAX_WIDTH}], got {width}")


def _outputs(name: str, n_rows: int, n_req: int, draft_tokens: torch.Tensor, like: torch.Tensor, out) -> DflashOutput:
    """The caller's outputs, validated, or fresh ones."""
    specs = (((n_rows,), torch.float32), ((n_req,), torch.int32), ((n_req,), torch.float32), ((n_rows,), draft_tokens.dtype))
    if out is None:
        return DflashOutput(*(torch.empty(shape, dtype=dtype, device=like.device) for shape, dtype in specs))
    if not isinstance(out, (tuple, list)) or len(out) != len(OUTPUTS):
        raise TypeError(f"{name}: out must be a DflashOutput or tuple ({', '.join(OUTPUTS)}), got {type(out).__name__}")
    for field, t, (shape, dtype) in zip(OUTPUTS, out, specs):
        check_out(name, f"out.{field}", t, shape, dtype, like, required=True)
    return DflashOutput(*out)


def confidence_head(
    hidden: torch.Tensor,
    prev_tokens: torch.Tensor,
    embedding: torch.Tensor,
    w_h: torch.Tensor,
    w_e: torch.Tensor,
    bias: torch.Tensor,
    draft_tokens: torch.Tensor,
    cu_draft_lens: torch.Tensor,
    *,
    threshold,
    out: DflashOutput | tuple[torch.Tensor, ...] | None = None,
) -> DflashOutput:
    name = "confidence_head"
    n_req = check_indptr(name, "cu_draft_lens", cu_draft_lens)
    check_rows(name, "hidden", hidden, [torch.bfloat16])
    check_tensor(name, "hidden", hidden, like=cu_draft_lens)
    n_rows, width_h = hidden.shape
    _check_width(name, "H (hidden.shape[1])", width_h)
    check_tensor(name, "prev_tokens", prev_tokens, dtypes=INDEX_DTYPES, shape=(n_rows,), like=cu_draft_lens, contiguous=True)
    check_tensor(name, "embedding", embedding, dtypes=[torch.bfloat16], dim=2, like=cu_draft_lens, contiguous=True)
    n_vocab, width_e = embedding.shape
    if n_vocab == 0:
        raise ValueError(f"{name}: embedding must have V >= 1 rows, got shape {tuple(embedding.shape)}")
    _check_width(name, "He (embedding.shape[1])", width_e)
    check_tensor(name, "w_h", w_h, dtypes=[torch.float32], shape=(width_h,), like=cu_draft_lens, contiguous=True)
    check_tensor(name, "w_e", w_e, dtypes=[torch.float32], shape=(width_e,), like=cu_draft_lens, contiguous=True)
    check_tensor(name, "bias", bias, dtypes=[torch.float32], shape=(1,), like=cu_draft_lens)
    check_tensor(name, "draft_tokens", draft_tokens, dtypes=INDEX_DTYPES, shape=(n_rows,), like=cu_draft_lens, contiguous=True)
    thr32 = check_scalar(name, "threshold", threshold, cu_draft_lens, ref.fp32_threshold)
    outs = _outputs(name, n_rows, n_req, draft_tokens, cu_draft_lens, out)
    read = {
        "hidden": hidden,
        "prev_tokens": prev_tokens,
        "embedding": embedding,
        "w_h": w_h,
        "w_e": w_e,
        "bias": bias,
        "threshold": threshold,
        "draft_tokens": draft_tokens,
        "cu_draft_lens": cu_draft_lens,
    }
    check_no_overlap(name, {f"out.{f}": t for f, t in zip(OUTPUTS, outs)}, read)
    if n_req == 0 or n_rows == 0 or is_host(cu_draft_lens):
        # No TileLang kernel: CPU tensors, or an empty batch on a device (every request then has
        # no position, so max_len = 0 needs no host read).
        max_len = None if is_host(cu_draft_lens) else 0
        got = ref.confidence_head_fused_ref(hidden, prev_tokens, embedding, w_h, w_e, bias, draft_tokens, cu_draft_lens, threshold, max_len)
        for dst, src in zip(outs, got):
            dst.copy_(src)
        return outs
    tl = backend_ops(name, cu_draft_lens)
    hidden_k, h_stride = dense_rows(hidden)
    prev_dtype, draft_dtype, cu_dtype = (INDEX_DTYPES[t.dtype] for t in (prev_tokens, draft_tokens, cu_draft_lens))
    aligns = dict(h_align=base_alignment(hidden_k), e_align=base_alignment(embedding))
    thr = scalar_tensor(threshold, thr32, cu_draft_lens)
    try:
        confidence_factory, derive_factory = tl.ops.dflash_confidence_tl, tl.ops.dflash_derive_tl
    except LookupError:  # a backend without the two-launch kernels (Ascend) runs the one-launch one
        kernel = tl.ops.dflash_tl(width_h, width_e, h_stride, prev_dtype, draft_dtype, cu_dtype, **aligns)
        kernel(hidden_k, prev_tokens, embedding, w_h, w_e, bias, thr, draft_tokens, cu_draft_lens, *outs)
        return outs
    pdl = takes_pdl(hidden)
    confidence_kernel = confidence_factory(width_h, width_e, h_stride, prev_dtype, **aligns, w_align=base_alignment(w_h, w_e), pdl=pdl)
    confidence_kernel(hidden_k, prev_tokens, embedding, w_h, w_e, bias, outs.confidence)
    derive_factory(draft_dtype, cu_dtype, pdl=pdl)(outs.confidence, thr, draft_tokens, cu_draft_lens, *outs[1:])
    return outs
