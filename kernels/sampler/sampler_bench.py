"""Benchmark cases of `sampler`: one token per request with top-k 50, top-p 0.9 and temperature 0.7
(the decode settings of the design's target: batch 128 x vocab 129280 in <= 50 us on an H200).

Run with ``python -m testing.benchmark --kernels sampler`` (or
``bazel run //kernels/sampler:sampler_bench``).

Cases (8): float32 logits at batch 1, 8, 64, 128, 512 over vocab 129280 (DeepSeek-V3), bfloat16
logits at batch 1, 128, 512 over vocab 151936 (Qwen). Every row samples (no greedy rows) with top-k
and top-p both enabled, the costliest path: the kernel reads its row 4 times (max, then the top-k
radix digits; the last of these lists the candidates) and runs top-p's digits and the race over the
candidates in shared memory (kernels/sampler/cuda.py), so rows beyond L2 cost 4 reads from HBM.

Peers, timed in the same run with the same timer:
  torch_eager    kernels.sampler.ref.sampler_ref (it sorts every row twice)
  torch_compile  torch.compile of the same function (dynamic=False)

bytes_moved: the logits read once plus the outputs written, B * V * element size + B * (8 + 1)
(tokens and empty flags; logprobs are not asked). The per-request parameters (40 bytes a row) are
left out, as the brief defines it.
"""

from __future__ import annotations

import zlib
from typing import Any, Callable

import torch

from testing.benchmark import BenchCase, Workload

KERNEL = "sampler"

# (dtype, V, batches)
SWEEPS = (
    (torch.float32, 129280, (1, 8, 64, 128, 512)),
    (torch.bfloat16, 151936, (1, 128, 512)),
)
TOP_K, TOP_P, TEMPERATURE = 50, 0.9, 0.7


def _seed(text: str) -> int:
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def sampler_interface() -> Callable:
    from kernels.sampler import api

    return api.sampler


def decode_inputs(dtype: torch.dtype, V: int, batch: int, gen: torch.Generator, device: torch.device) -> tuple[torch.Tensor, ...]:
    """A decode step's (logits, temperature, top_k, top_p, min_p, seed, offset), drawn from gen:
    logits randn * 4, the same TEMPERATURE / TOP_K / TOP_P for every row, no min-p, random
    counters. The bench's inputs, and the device probes' (testing/device_runs)."""
    logits = (torch.randn((batch, V), generator=gen, device=device) * 4).to(dtype)
    big = 2**62
    seed = torch.randint(-big, big, (batch,), generator=gen, device=device, dtype=torch.int64)
    offset = torch.randint(0, big, (batch,), generator=gen, device=device, dtype=torch.int64)

    def full(value, dt=torch.float32):
        return torch.full((batch,), value, dtype=dt, device=device)

    return (logits, full(TEMPERATURE), full(TOP_K, torch.int64), full(TOP_P), full(0.0), seed, offset)


def sampling_case(
    kernel: str,
    dtype: torch.dtype,
    V: int,
    batch: int,
    interface: Callable[[], Callable],
    peer_interfaces: Callable[[], dict[str, Callable]] = dict,
) -> BenchCase:
    """A decode-step case of an interface with the sampler's signature and contract (the sampler,
    fused_sample): random logits, per-request top-k / top-p / temperature and counters. interface()
    returns the function timed, peer_interfaces() other such functions timed beside the references
    (both resolved on first use, so collecting cases imports no backend)."""
    dname = str(dtype).removeprefix("torch.")
    case_id = f"{dname}_b{batch}_v{V}_k{TOP_K}_p{TOP_P}"
    compiled: list[Any] = []

    def make(device: torch.device, k: int) -> Workload:
        from kernels.sampler import ref

        gen = torch.Generator(device=device).manual_seed(_seed(f"{case_id}-{k}"))
        logits, *params = decode_inputs(dtype, V, batch, gen, device)

        def timed(fn: Callable) -> Callable[[], Any]:
            """fn on this case's inputs, allocating its outputs as the references do."""
            return lambda: fn(logits, *params)

        if not compiled:
            compiled.append(torch.compile(ref.sampler_ref, dynamic=False))
        compiled_ref = compiled[0]
        peers = {"torch_eager": lambda: ref.sampler_ref(logits, *params), "torch_compile": lambda: compiled_ref(logits, *params)}
        peers.update({name: timed(fn) for name, fn in peer_interfaces().items()})
        return Workload(fn=timed(interface()), peers=peers)

    read = batch * V * dtype.itemsize
    return BenchCase(
        kernel=kernel,
        case_id=case_id,
        params={"dtype": dname, "B": batch, "V": V, "top_k": TOP_K, "top_p": TOP_P, "temperature": TEMPERATURE},
        bytes_moved=read + batch * 9,
        make=make,
        input_bytes=read + batch * 40,
    )


def cases() -> list[BenchCase]:
    return [sampling_case(KERNEL, dtype, V, b, sampler_interface) for dtype, V, batches in SWEEPS for b in batches]
