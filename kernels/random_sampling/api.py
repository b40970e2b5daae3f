"""Interface of `random_sampling`: one token per request by exponential race (probs) or Gumbel-max
(logits), with counter-based noise keyed by (seed, offset, vocab id) only.

    token = tilelang_ops.random_sample_probs(probs, seed, offset, out=None)
    token = tilelang_ops.random_sample_logits(logits, seed, offset, temperature=None, out=None)
    e     = tilelang_ops.exponential_noise(seed, offset, vocab_size)

probs        (B, V) float32, 1 <= V <= 2**31 - 1 (the kernels' vocab ids are int32): unnormalised
             weights; entries <= 0 or NaN are never drawn.
logits       (B, V) float32 or bfloat16, 1 <= V <= 2**31 - 1: NaN counts as -inf; -inf is never drawn.
             Rows of either may be strided (a view of a wider tensor); the last dimension must be
             contiguous.
seed, offset (B,) int64, contiguous, on the input's device: the request's noise counters (device
             tensors, so a captured CUDA graph samples new tokens when they change). Same (seed,
             offset) -> same noise -> same token on every run, whatever else is in the batch.
temperature  None (t = 1 for every row) or (B,) float32, contiguous, on logits' device: rows with
             0 < t < inf sample from softmax(l / t); t <= 0, NaN or +inf select greedy argmax.
out          None or a caller-owned (B,) int64 contiguous tensor on the input's device that
             overlaps no input (compared by the byte ranges they span, so an out inside the padding
             of strided rows counts as overlapping).
vocab_size   exponential_noise's V: an int in [0, 2**31 - 1]; there seed and offset need not be
             contiguous.
Returns token (B,) int64: the sampled id, ties to the lowest id; -1 for a row with nothing to draw
(every prob <= 0 / NaN, every logit -inf / NaN). The exact rules are kernels/random_sampling/ref.py
(the contract); the kernel matches it token for token.

exponential_noise returns the library's (B, vocab_size) float32 Exp(1) noise on seed's device (the
reference computes it; for callers that want to apply the same noise themselves).

CUDA tensors run one TileLang kernel per call (kernels/random_sampling/cuda.py). Mostly the chunked
kernel: every row is cut into chunks of ref.CHUNK entries, one block each, and the last block of a
row to finish folds the chunks' winners, with a workspace from the caching allocator (no launch:
B * ceil(V / ref.CHUNK) * 8 bytes) and a per-device, per-stream counter array. Batches whose last
wave of one row an SM is nearly full, and rows of more than MAX_CHUNKS chunks (use_row_kernel),
take the row kernel, one block a row and no workspace. Tokens are the same either way (the
contract's). On sm_90+ the launch is a programmatic dependent one (kernels/tl_launch.py). No
host sync: CUDA-graph capturable; B, V and the row stride are dynamic, one
compile per kernel, source, dtype and load width. Ascend tensors run one persistent block per vector core
over the rows (kernels/random_sampling/asc.py). CPU tensors are served by the PyTorch reference. Invalid
arguments raise TypeError or ValueError naming the argument before anything is written. B == 0
launches nothing.

Concurrency (CUDA): launches on one stream share that stream's counters and run in order. A
captured CUDA graph keeps the counters of the stream it was captured on: do not replay it
concurrently with another graph captured on that stream or with calls on that stream
(kernels/interface.py: stream_counters). A capture takes zeroed counters that calls outside any
capture set aside: before capturing, make one such call on the device with at least as many rows
(a warm-up; RuntimeError otherwise, before anything is written).
"""

from __future__ import annotations

import functools

import torch

from kernels.interface import (
    CUDA_MAX_GRID_Y,
    INT32_MAX,
    backend_ops,
    base_alignment,
    check_device,
    check_int,
    check_no_overlap,
    check_out,
    check_rows,
    check_tensor,
    dense_rows,
    is_host,
    launch_options,
    stream_counters,
)
from kernels.random_sampling import ref

__all__ = ["exponential_noise", "random_sample_logits", "random_sample_probs"]

# The owner of this kernel's stream counters (kernels/interface.py).
NAME = "random_sampling"
# The row kernel (one block a row) is 7-24% faster an entry than the chunked one, but runs in
# waves of one row an SM: it takes B rows when its last wave is at least this full (1 / 1.25).
# Same-run H200 probe at 1 to 512 rows in kernels/random_sampling/PERF.md.
ROW_KERNEL_WAVE_FILL = 0.8
# The chunked kernel's grid has a row's chunks on its y dimension, which CUDA caps at 65535
# (V up to 268,431,360 entries); longer rows take the row kernel.
MAX_CHUNKS = CUDA_MAX_GRID_Y
# torch dtype -> the element type name the backend factories take, per source.
PROBS_DTYPES = {torch.float32: "float32"}
LOGITS_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16"}


def _check_counters(name: str, seed, offset, n: int, like: torch.Tensor) -> None:
    for arg, t in (("seed", seed), ("offset", offset)):
        check_tensor(name, arg, t, dtypes=[torch.int64], shape=(n,), like=like, contiguous=True)


def _check_input(name: str, arg: str, x, dtypes) -> None:
    check_rows(name, arg, x, dtypes)
    if x.shape[1] == 0:
        raise ValueError(f"{name}: {arg} has V = 0 columns; at least 1 is needed")
    if x.shape[1] > INT32_MAX:
        raise ValueError(f"{name}: {arg} has V = {x.shape[1]} columns; at most {INT32_MAX} are supported (int32 vocab ids)")


def _sample(name: str, source: str, x, dtypes, seed, offset, temperature, out) -> torch.Tensor:
    """Validated launch shared by both sources (temperature None for probs)."""
    n = x.shape[0]
    check_out(name, "out", out, (n,), torch.int64, x)
    token = out if out is not None else torch.empty((n,), dtype=torch.int64, device=x.device)
    check_no_overlap(name, {"out": token}, {source: x, "seed": seed, "offset": offset, "temperature": temperature})
    if n == 0:
        return token
    if is_host(x):
        if source == "probs":
            token.copy_(ref.random_sample_probs_ref(x, seed, offset))
        else:
            token.copy_(ref.random_sample_logits_ref(x, seed, offset, temperature))
        return token
    ops = backend_ops(name, x).ops
    xk, row_stride = dense_rows(x)
    dtype = dtypes[x.dtype]
    config = (source, dtype, ref.vector_elements(dtype, row_stride, base_alignment(xk)))
    if temperature is None:
        # The probs kernel never reads it (and the logits kernel's default is t = 1): a plain
        # allocation for probs, a fill for logits, both capturable.
        shape = (n,)
        temperature = torch.empty(shape, dtype=torch.float32, device=x.device) if source == "probs" else torch.ones(shape, dtype=torch.float32, device=x.device)
    if x.device.type != "cuda" or use_row_kernel(n, x.shape[1], _multiprocessors(x.device)):
        ops.random_sample_tl(*config, **launch_options(x))(xk, seed, offset, temperature, token)
        return token
    ops.random_sample_chunked_tl(*config, **launch_options(x))(xk, seed, offset, temperature, token, *_workspace(n, x.shape[1], x.device))
    return token


def use_row_kernel(B: int, V: int, sms: int) -> bool:
    """Whether B rows of V entries go to the row kernel on a GPU of `sms` SMs: when its last wave of
    one row an SM is at least ROW_KERNEL_WAVE_FILL full, or when a row has more chunks than a grid
    dimension holds (MAX_CHUNKS)."""
    waves = -(-B // sms)
    return B >= ROW_KERNEL_WAVE_FILL * waves * sms or -(-V // ref.CHUNK) > MAX_CHUNKS


@functools.cache
def _multiprocessors(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def _workspace(B: int, V: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """(chunk_key, chunk_id, arrivals) of kernels/random_sampling/cuda.py for B rows of V entries:
    one uninitialised allocation (the kernel writes every record it reads) and the stream's
    counters, which its last blocks leave zero."""
    slots = B * -(-V // ref.CHUNK)
    ws = torch.empty(2 * slots, dtype=torch.int32, device=device)
    return ws[:slots].view(torch.float32), ws[slots:], stream_counters(NAME, device, B)


def random_sample_probs(probs: torch.Tensor, seed: torch.Tensor, offset: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    name = "random_sample_probs"
    _check_input(name, "probs", probs, PROBS_DTYPES)
    _check_counters(name, seed, offset, probs.shape[0], probs)
    return _sample(name, "probs", probs, PROBS_DTYPES, seed, offset, None, out)


def random_sample_logits(
    logits: torch.Tensor,
    seed: torch.Tensor,
    offset: torch.Tensor,
    *,
    temperature: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    name = "random_sample_logits"
    _check_input(name, "logits", logits, LOGITS_DTYPES)
    n = logits.shape[0]
    _check_counters(name, seed, offset, n, logits)
    if temperature is not None:
        check_tensor(name, "temperature", temperature, dtypes=[torch.float32], shape=(n,), like=logits, contiguous=True)
    return _sample(name, "logits", logits, LOGITS_DTYPES, seed, offset, temperature, out)


def exponential_noise(seed: torch.Tensor, offset: torch.Tensor, vocab_size: int) -> torch.Tensor:
    name = "exponential_noise"
    check_tensor(name, "seed", seed, dtypes=[torch.int64], dim=1)
    check_device(name, "seed", seed)
    check_tensor(name, "offset", offset, dtypes=[torch.int64], shape=tuple(seed.shape), like=seed)
    check_int(name, "vocab_size", vocab_size, 0)
    return ref.exponential_noise(seed, offset, vocab_size)
