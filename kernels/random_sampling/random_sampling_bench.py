"""Benchmark cases of `random_sampling`: one token per request from a vocabulary-wide row.

Run with ``python -m testing.benchmark --kernels random_sampling`` (or
``bazel run //kernels/random_sampling:random_sampling_bench``).

Cases (12): float32 logits at batch 1, 8, 64, 128, 512 over vocab 129280 (DeepSeek-V3), bfloat16
logits at batch 1, 64, 128, 512 over vocab 151936 (Qwen), float32 probs at batch 1, 128, 512 over
129280. Temperatures are drawn in [0.5, 1.5) (every row takes the Gumbel path: the costlier one).
An entry that gets noise costs a hash and two logs, so the kernels are bound by arithmetic rather
than by bandwidth. Below a full wave of one row an SM (B 1, 8, 64 here) rows are split into
4096-entry chunks, one block each, so a single request spreads over the SMs; B 128 and 512 fill
their last wave and take one block a row (api.use_row_kernel). In the chunked kernel, entries whose
key cannot reach their chunk's bound skip the noise: with these logits (randn * 4) few whole warps
do; with these probabilities (uniform in [0, 1)) none do.

Peers, timed in the same run with the same timer:
  torch_eager    kernels.random_sampling.ref (random_sample_logits_ref / random_sample_probs_ref)
  torch_compile  torch.compile of the same function (dynamic=False)

bytes_moved: the row data read once plus the tokens written, B * V * element size + B * 8 (the
per-request seed, offset and temperature, 20 bytes a row, are left out as the brief defines it).
"""

from __future__ import annotations

import zlib
from typing import Any

import torch

from testing.benchmark import BenchCase, Workload

KERNEL = "random_sampling"

# (source, dtype, V, batches)
SWEEPS = (
    ("logits", torch.float32, 129280, (1, 8, 64, 128, 512)),
    ("logits", torch.bfloat16, 151936, (1, 64, 128, 512)),
    ("probs", torch.float32, 129280, (1, 128, 512)),
)


def _seed(text: str) -> int:
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def _case(source: str, dtype: torch.dtype, V: int, batch: int) -> BenchCase:
    dname = str(dtype).removeprefix("torch.")
    case_id = f"{source}_{dname}_b{batch}_v{V}"
    compiled: list[Any] = []

    def make(device: torch.device, k: int) -> Workload:
        from kernels.random_sampling import api, ref

        gen = torch.Generator(device=device).manual_seed(_seed(f"{case_id}-{k}"))
        if source == "probs":
            x = torch.rand((batch, V), generator=gen, device=device)
        else:
            x = (torch.randn((batch, V), generator=gen, device=device) * 4).to(dtype)
        big = 2**62
        seed = torch.randint(-big, big, (batch,), generator=gen, device=device, dtype=torch.int64)
        offset = torch.randint(0, big, (batch,), generator=gen, device=device, dtype=torch.int64)
        temperature = torch.rand((batch,), generator=gen, device=device) + 0.5
        if source == "probs":
            reference, args = ref.random_sample_probs_ref, (x, seed, offset)

            def fn():
                return api.random_sample_probs(x, seed, offset)

        else:
            reference, args = ref.random_sample_logits_ref, (x, seed, offset, temperature)

            def fn():
                return api.random_sample_logits(x, seed, offset, temperature=temperature)

        if not compiled:
            compiled.append(torch.compile(reference, dynamic=False))
        compiled_ref = compiled[0]
        return Workload(fn=fn, peers={"torch_eager": lambda: reference(*args), "torch_compile": lambda: compiled_ref(*args)})

    read = batch * V * dtype.itemsize
    return BenchCase(
        kernel=KERNEL,
        case_id=case_id,
        params={"source": source, "dtype": dname, "B": batch, "V": V},
        bytes_moved=read + batch * 8,
        make=make,
        input_bytes=read + batch * 20,
    )


def cases() -> list[BenchCase]:
    return [_case(source, dtype, V, b) for source, dtype, V, batches in SWEEPS for b in batches]
