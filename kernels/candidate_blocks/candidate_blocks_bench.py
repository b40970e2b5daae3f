"""Benchmark cases of `candidate_blocks`: per-query top-k KV blocks with sink and local blocks.

Run with ``python -m testing.benchmark --kernels candidate_blocks`` (or
``bazel run //kernels/candidate_blocks:candidate_blocks_bench``).

Cases (NB = 2048 blocks: a 131072-token context of 64-token blocks; num_sink 1, num_local 2):
  full     T = 4096 queries, k = 64, every query sees all NB blocks: the whole score matrix is
           read; the target is >= 70% of the copy ceiling for that read
  prefill  T = 4096, k = 64, causal counts spread evenly over [1, NB] (a prefill chunk over the
           context), shuffled: 97% of the rows run the radix select, the rest take every candidate
  decode   T = 1 and T = 64, k = 64, n = NB: launch-bound (the block-per-query kernel)
  wide     T = 4096, k = 2048 (= NB), spread counts: every candidate is kept, no score is read
The counts of a case are a fixed multiset (shuffled per input set), so its bytes are exact.

Peers, timed in the same run with the same timer:
  torch_eager    kernels.candidate_blocks.ref.candidate_blocks_ref (torch.topk over a composite
                 int64 key, then a sort of the k selected ids)
  torch_compile  torch.compile(that function, dynamic=False)

bytes_moved, the minimum DRAM traffic of one call: the scores of the candidates of every row that
runs the select (n > k: sum of n * 4; a row with n <= k keeps every candidate and needs no score),
T * 4 for n_t and T * k * 4 for the ids written. The rotation pool is sized by the reads.
"""

from __future__ import annotations

import zlib
from typing import Any

import torch

from testing.benchmark import BenchCase, Workload

KERNEL = "candidate_blocks"

NB = 2048
NUM_SINK = 1
NUM_LOCAL = 2
# (label, T, k, spread): spread counts 1 + i * NB // T (i < T), else every count NB.
_CASES = [("full", 4096, 64, False), ("prefill", 4096, 64, True), ("decode", 1, 64, False), ("decode", 64, 64, False), ("wide", 4096, 2048, True)]


def _seed(text: str) -> int:
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def _counts(t: int, spread: bool) -> list[int]:
    return [1 + i * NB // t for i in range(t)] if spread else [NB] * t


def _case(label: str, t: int, k: int, spread: bool) -> BenchCase:
    case_id = f"{label}_t{t}_nb{NB}_k{k}"
    counts = _counts(t, spread)
    compiled: list[Any] = []  # one torch.compile wrapper per case, created on first use

    def make(device: torch.device, i: int) -> Workload:
        from kernels.candidate_blocks import api, ref

        if not compiled:
            compiled.append(torch.compile(ref.candidate_blocks_ref, dynamic=False))
        compiled_ref = compiled[0]
        gen = torch.Generator(device=device).manual_seed(_seed(f"{case_id}-{i}"))
        scores = torch.randn((t, NB), generator=gen, device=device)
        order = torch.randperm(t, generator=gen, device=device)
        n_t = torch.tensor(counts, dtype=torch.int32, device=device)[order]
        return Workload(
            fn=lambda: api.select_candidate_blocks(scores, n_t, k, num_sink=NUM_SINK, num_local=NUM_LOCAL),
            peers={
                "torch_eager": lambda: ref.candidate_blocks_ref(scores, n_t, k, NUM_SINK, NUM_LOCAL),
                "torch_compile": lambda: compiled_ref(scores, n_t, k, NUM_SINK, NUM_LOCAL),
            },
        )

    read = sum(n for n in counts if n > k) * 4 + t * 4
    return BenchCase(
        kernel=KERNEL,
        case_id=case_id,
        params={"T": t, "NB": NB, "k": k, "num_sink": NUM_SINK, "num_local": NUM_LOCAL, "counts": "spread" if spread else "full"},
        bytes_moved=read + t * k * 4,
        make=make,
        input_bytes=t * NB * 4 + t * 4,
    )


# The sweep scans decode batches up to this many requests.
SWEEP_MAX_BATCH = 1024


def sweep_case(batch: int, model_config: Any, device: torch.device) -> BenchCase:
    """The block selection of one decode step with ``batch`` requests, for tools/sweep.py: every
    token of the step (batch x ``model_config.tokens_per_request``) over all NB blocks, k = 64."""
    del device
    return _case("sweep", batch * model_config.tokens_per_request, 64, False)


def cases() -> list[BenchCase]:
    return [_case(*spec) for spec in _CASES]
