"""Interface of `schedule_mtp_varlen`: the next varlen step's schedule after an MTP verification step,
computed on the device in one launch.

    sched = tilelang_ops.schedule_mtp_varlen(seq_lens_before, num_accepted, num_draft=K,
                                             block_size=BS, num_sm_parts=P, num_tokens=None,
                                             out=None)
    (num_draft, block_size and num_sm_parts are required keyword arguments)
    sched.new_seq_lens, sched.query_start_loc, sched.positions, sched.request_ids,
    sched.last_hidden_rows, sched.tile_metadata, sched.num_splits

seq_lens_before  (B,) int32 or int64, contiguous: KV length before the verification step; a value
                 outside [0, max_context] marks an inactive request (see ref.py).
num_accepted     (B,) int32 or int64, contiguous, same device: accepted drafts, clamped to [0, k].
num_draft        k, draft tokens per request, an int in [0, 15]; every request runs 1 + k query
                 tokens in the verification step and in the next one.
block_size       KV block size of the attention split, an int in [1, 4096].
num_sm_parts     parts of the attention work split, an int in [1, 1024] (FlashMLA's num_sm_parts).
num_tokens       the fixed (CUDA-graph padded) length of positions / request_ids, an int in
                 [0, 2**31 - 1], default B * (1 + k).
out              caller-owned outputs: an MtpSchedule (or tuple in its order) of contiguous int32
                 tensors of exactly the shapes below.
B                at most 4096 (the device kernel holds the batch's block prefix on chip).

Returns an MtpSchedule (every field int32; exact rules in kernels/schedule_mtp_varlen/ref.py):
  new_seq_lens (B,), query_start_loc (B + 1,), positions (num_tokens,), request_ids (num_tokens,),
  last_hidden_rows (B,), tile_metadata (num_sm_parts, 8), num_splits (B + 1,).

CUDA tensors run one TileLang kernel launch (no host sync, every size fixed by the arguments:
CUDA-graph capturable): the warp kernel up to WARP_KERNEL_MAX_BATCH requests, the lane kernel up to
LANE_KERNEL_MAX_BATCH (where the backend has them), the block kernel above (see
kernels/schedule_mtp_varlen/cuda.py); all give the same schedule.
On sm_90+ the launch is a programmatic dependent one (kernels/tl_launch.py): it overlaps the kernel
before it in the stream and waits on the device for it, so results are those of a plain launch.
CPU tensors are served by the PyTorch reference. Invalid arguments raise TypeError or ValueError
naming the argument before anything is written. An empty batch (B == 0) launches no
kernel: outputs are filled by torch (query_start_loc = num_splits = [0], -1 tokens, empty parts).
"""

from __future__ import annotations

import torch

from kernels.interface import INDEX_DTYPES, backend_ops, check_device, check_no_overlap, check_out, check_tensor, is_host, launch_options
from kernels.schedule_mtp_varlen import ref
from kernels.schedule_mtp_varlen.ref import MtpSchedule

__all__ = ["MtpSchedule", "schedule_mtp_varlen"]

NAME = "schedule_mtp_varlen"
OUTPUTS = MtpSchedule._fields
# Batches up to this many requests take the warp kernel, all it holds (32 lanes x 4 slots), and
# larger ones up to LANE_KERNEL_MAX_BATCH the lane kernel (a thread per request, all it holds:
# 32 x 32 warps); the block kernel the rest. Same-run probe on an H100 (PERF.md, "lane kernel"), us,
# k = 3, block / warp / lane kernel: B 64 3.63 / 1.71 / 2.31, B 128 3.67 / 1.89 / 2.35, B 144
# 3.73 / 2.51 / 2.18, B 256 4.11 / 2.52 / 2.24, B 1024 10.55 / - / 3.69 (k = 1 alike).
WARP_KERNEL_MAX_BATCH = 128
LANE_KERNEL_MAX_BATCH = 1024


def output_shapes(n_req: int, n_tok: int, parts: int) -> tuple[tuple[int, ...], ...]:
    """Shapes of the outputs of a batch of n_req requests, in MtpSchedule order (for callers
    allocating persistent `out` buffers)."""
    return ((n_req,), (n_req + 1,), (n_tok,), (n_tok,), (n_req,), (parts, len(ref.META_FIELDS)), (n_req + 1,))


def _fill_empty(outs: MtpSchedule) -> MtpSchedule:
    """The schedule of an empty batch, by torch fills: no request, no token, every part empty."""
    outs.query_start_loc.zero_()
    outs.num_splits.zero_()
    outs.positions.fill_(-1)
    outs.request_ids.fill_(-1)
    outs.tile_metadata.zero_()
    outs.tile_metadata[:, ref.META_FIELDS.index("first_req")] = -1
    outs.tile_metadata[:, ref.META_FIELDS.index("last_req")] = -1
    return outs


def schedule_mtp_varlen(
    seq_lens_before: torch.Tensor,
    num_accepted: torch.Tensor,
    *,
    num_draft: int,
    block_size: int,
    num_sm_parts: int,
    num_tokens: int | None = None,
    out: MtpSchedule | tuple[torch.Tensor, ...] | None = None,
) -> MtpSchedule:
    check_tensor(NAME, "seq_lens_before", seq_lens_before, dtypes=INDEX_DTYPES, dim=1, contiguous=True)
    check_device(NAME, "seq_lens_before", seq_lens_before)
    n_req = seq_lens_before.shape[0]
    check_tensor(NAME, "num_accepted", num_accepted, dtypes=INDEX_DTYPES, like=seq_lens_before, contiguous=True)
    if tuple(num_accepted.shape) != (n_req,):
        raise ValueError(f"{NAME}: num_accepted must have shape ({n_req},) like seq_lens_before, got {tuple(num_accepted.shape)}")
    ref.check_config(NAME, num_draft, block_size, num_sm_parts)
    if n_req > ref.MAX_BATCH:
        raise ValueError(f"{NAME}: seq_lens_before has B = {n_req} requests; at most {ref.MAX_BATCH} are supported")
    n_tok = n_req * (1 + num_draft) if num_tokens is None else num_tokens
    if isinstance(n_tok, bool) or not isinstance(n_tok, int):
        raise TypeError(f"{NAME}: num_tokens must be an int, got {type(n_tok).__name__}")
    if not 0 <= n_tok <= ref.INT32_MAX:
        raise ValueError(f"{NAME}: num_tokens must be in [0, {ref.INT32_MAX}], got {n_tok}")
    specs = output_shapes(n_req, n_tok, num_sm_parts)
    if out is None:
        outs = MtpSchedule(*(torch.empty(shape, dtype=torch.int32, device=seq_lens_before.device) for shape in specs))
    else:
        if not isinstance(out, (tuple, list)) or len(out) != len(OUTPUTS):
            raise TypeError(f"{NAME}: out must be an MtpSchedule or tuple ({', '.join(OUTPUTS)}), got {type(out).__name__}")
        for field, t, shape in zip(OUTPUTS, out, specs):
            check_out(NAME, f"out.{field}", t, shape, torch.int32, seq_lens_before)
        outs = MtpSchedule(*out)
    written = {f"out.{f}": t for f, t in zip(OUTPUTS, outs)}
    check_no_overlap(NAME, written, {"seq_lens_before": seq_lens_before, "num_accepted": num_accepted})
    if n_req == 0:
        return _fill_empty(outs)
    if is_host(seq_lens_before):
        got = ref.schedule_mtp_varlen_ref(seq_lens_before, num_accepted, num_draft, block_size, num_sm_parts, n_tok)
        for dst, src in zip(outs, got):
            dst.copy_(src)
        return outs
    tl = backend_ops(NAME, seq_lens_before)
    config = (num_draft, block_size, num_sm_parts, INDEX_DTYPES[seq_lens_before.dtype], INDEX_DTYPES[num_accepted.dtype])
    options = launch_options(seq_lens_before)
    _kernel_for(tl, n_req, config, options)(seq_lens_before, num_accepted, *outs)
    return outs


def _kernel_for(tl, n_req: int, config: tuple, options: dict):
    """The first small-batch kernel whose limit holds n_req and that the backend has (compiled at the
    smallest size holding the batch: a lane's or a block's work grows with it), else the block
    kernel."""
    # (batch limit, factory, the sizes it compiles: each holds 32 x size requests), smallest first.
    small = (
        (WARP_KERNEL_MAX_BATCH, "schedule_mtp_varlen_warp_tl", ref.WARP_KERNEL_SLOTS),
        (LANE_KERNEL_MAX_BATCH, "schedule_mtp_varlen_lane_tl", ref.LANE_KERNEL_WARPS),
    )
    for limit, name, sizes in small:
        if n_req <= limit:
            try:
                factory = getattr(tl.ops, name)
            except LookupError:  # a backend without this kernel serves the batch with a later one
                continue
            return factory(*config, next(s for s in sizes if 32 * s >= n_req), **options)
    return tl.ops.schedule_mtp_varlen_tl(*config, **options)
