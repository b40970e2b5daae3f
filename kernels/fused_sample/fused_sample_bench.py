"""Benchmark cases of `fused_sample`: one token per request with top-k 50, top-p 0.9 and temperature
0.7 (the decode settings of the design's target: batch 128 x vocab 129280 in <= 50 us on an H200).

Run with ``python -m testing.benchmark --kernels fused_sample`` (or
``bazel run //kernels/fused_sample:fused_sample_bench``).

Cases (10): float32 logits over vocab 129280 (DeepSeek-V3) and bfloat16 logits over vocab 151936
(Qwen), each at batch 1, 8, 64, 128, 512. Every row samples (no greedy rows) with top-k and top-p
both enabled, the costliest path. Both vocabularies are <= ref.MAX_V: every case runs the split
kernel (fused_sample_tl).

Peers, timed in the same run with the same timer:
  torch_eager    kernels.fused_sample.ref.fused_sample_ref (= sampler_ref: it sorts every row twice)
  torch_compile  torch.compile of the same function (dynamic=False)
  sampler        kernels.sampler.api.sampler on the same inputs: the one-block-per-row kernel that
                 returns the same tokens, the baseline the vocabulary split has to beat

bytes_moved: the logits read once plus the outputs written, B * V * element size + B * (8 + 1)
(tokens and empty flags; logprobs are not asked), as the sampler's bench counts it. The per-request
parameters (40 bytes a row) are left out.
"""

from __future__ import annotations

import zlib
from typing import Any

import torch

from testing.benchmark import BenchCase, Workload

KERNEL = "fused_sample"

# (dtype, V, batches)
SWEEPS = (
    (torch.float32, 129280, (1, 8, 64, 128, 512)),
    (torch.bfloat16, 151936, (1, 8, 64, 128, 512)),
)
TOP_K, TOP_P, TEMPERATURE = 50, 0.9, 0.7


def _seed(text: str) -> int:
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def _case(dtype: torch.dtype, V: int, batch: int) -> BenchCase:
    dname = str(dtype).removeprefix("torch.")
    case_id = f"{dname}_b{batch}_v{V}_k{TOP_K}_p{TOP_P}"
    compiled: list[Any] = []

    def make(device: torch.device, k: int) -> Workload:
        from kernels.fused_sample import api, ref
        from kernels.sampler import api as sampler_api

        gen = torch.Generator(device=device).manual_seed(_seed(f"{case_id}-{k}"))
        logits = (torch.randn((batch, V), generator=gen, device=device) * 4).to(dtype)
        big = 2**62
        seed = torch.randint(-big, big, (batch,), generator=gen, device=device, dtype=torch.int64)
        offset = torch.randint(0, big, (batch,), generator=gen, device=device, dtype=torch.int64)

        def full(value, dt=torch.float32):
            return torch.full((batch,), value, dtype=dt, device=device)

        params = (full(TEMPERATURE), full(TOP_K, torch.int64), full(TOP_P), full(0.0), seed, offset)

        def outputs():
            return (torch.empty((batch,), dtype=torch.int64, device=device), None, torch.empty((batch,), dtype=torch.bool, device=device))

        out, sampler_out = outputs(), outputs()

        def fn():
            return api.fused_sample(logits, *params, out=out)

        if not compiled:
            compiled.append(torch.compile(ref.fused_sample_ref, dynamic=False))
        compiled_ref = compiled[0]
        return Workload(
            fn=fn,
            peers={
                "torch_eager": lambda: ref.fused_sample_ref(logits, *params),
                "torch_compile": lambda: compiled_ref(logits, *params),
                "sampler": lambda: sampler_api.sampler(logits, *params, out=sampler_out),
            },
        )

    read = batch * V * dtype.itemsize
    return BenchCase(
        kernel=KERNEL,
        case_id=case_id,
        params={"dtype": dname, "B": batch, "V": V, "top_k": TOP_K, "top_p": TOP_P, "temperature": TEMPERATURE},
        bytes_moved=read + batch * 9,
        make=make,
        input_bytes=read + batch * 40,
    )


def cases() -> list[BenchCase]:
    return [_case(dtype, V, b) for dtype, V, batches in SWEEPS for b in batches]
