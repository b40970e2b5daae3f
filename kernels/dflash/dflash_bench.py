"""Benchmark cases of `dflash`: the block drafter's confidence head over one decode step's drafts.

Run with ``python -m testing.benchmark --kernels dflash`` (or ``bazel run //kernels/dflash:dflash_bench``).

Cases: B = 1, 8, 64, 256 requests, each with a draft of 4 or 8 positions, H = He = 7168 (DeepSeek-V3),
V = 129280, threshold 0.5 as a (1,) device tensor (the form a decode loop passes: no fill launch per
call). Small batches are launch- and latency-bound (two launches on CUDA: every row's confidence,
then each request's proposal); B = 256 x 8 reads about 58 MiB.

Peers, timed in the same run with the same timer:
  torch_eager    kernels.dflash.ref.confidence_head_fused_ref (max_len = the draft length: no sync)
  torch_compile  torch.compile of the same, dynamic=False

bytes_moved, the minimum DRAM traffic of one call (every input read once, every output written once):
  N * H * 2 (hidden rows) + N * He * 2 (the gathered embedding rows) + (H + He) * 4 + 4 (weights, bias)
  + 4 (threshold) + N * 8 * 2 (prev_tokens, draft_tokens, int64) + (B + 1) * 4 (cu_draft_lens)
  + N * 4 + B * 8 + N * 8 (confidence, proposal_len and expected_len, tokens),
with N = B * draft length. The embedding table (1.8 GB) is shared by the input sets (one per device);
the rows a set gathers are random, so L2 rarely serves them.
"""

from __future__ import annotations

import zlib
from typing import Any

import torch

from testing.benchmark import BenchCase, Workload

KERNEL = "dflash"

H = HE = 7168
VOCAB = 129280
THRESHOLD = 0.5
BATCHES = (1, 8, 64, 256)
DRAFT_LENS = (4, 8)

_TABLES: dict[str, torch.Tensor] = {}


def _seed(text: str) -> int:
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def _embedding(device: torch.device) -> torch.Tensor:
    key = str(device)
    if key not in _TABLES:
        gen = torch.Generator(device=device).manual_seed(_seed("dflash-embedding"))
        _TABLES[key] = torch.randn(VOCAB, HE, generator=gen, device=device).to(torch.bfloat16)
    return _TABLES[key]


def decode_inputs(batch: int, draft_len: int, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """A decode step's confidence_head arguments (the threshold aside), drawn from gen: `batch`
    requests of `draft_len` positions, random hidden rows and tokens, weights scaled to O(1) logits,
    zero bias, the shared embedding table. The bench's inputs, and the device probes'
    (testing/device_runs)."""
    n = batch * draft_len
    return dict(
        hidden=torch.randn(n, H, generator=gen, device=device).to(torch.bfloat16),
        prev_tokens=torch.randint(0, VOCAB, (n,), generator=gen, device=device),
        embedding=_embedding(device),
        w_h=torch.randn(H, generator=gen, device=device) * H**-0.5,
        w_e=torch.randn(HE, generator=gen, device=device) * HE**-0.5,
        bias=torch.zeros(1, device=device),
        draft_tokens=torch.randint(0, VOCAB, (n,), generator=gen, device=device),
        cu_draft_lens=torch.arange(batch + 1, dtype=torch.int32, device=device) * draft_len,
    )


def _case(batch: int, draft_len: int) -> BenchCase:
    n = batch * draft_len
    case_id = f"decode_b{batch}_l{draft_len}"
    compiled: list[Any] = []

    def make(device: torch.device, k: int) -> Workload:
        from kernels.dflash import api, ref

        args = decode_inputs(batch, draft_len, torch.Generator(device=device).manual_seed(_seed(f"{case_id}-{k}")), device)
        if not compiled:
            compiled.append(torch.compile(ref.confidence_head_fused_ref, dynamic=False))
        compiled_ref = compiled[0]
        threshold = torch.full((1,), THRESHOLD, device=device)
        return Workload(
            fn=lambda: api.confidence_head(**args, threshold=threshold),
            peers={
                "torch_eager": lambda: ref.confidence_head_fused_ref(**args, threshold=threshold, max_len=draft_len),
                "torch_compile": lambda: compiled_ref(**args, threshold=threshold, max_len=draft_len),
            },
        )

    read = n * H * 2 + n * HE * 2 + (H + HE) * 4 + 4 + 4 + n * 8 * 2 + (batch + 1) * 4
    written = n * 4 + batch * 8 + n * 8
    return BenchCase(
        kernel=KERNEL,
        case_id=case_id,
        params={"B": batch, "draft_len": draft_len, "N": n, "H": H, "He": HE, "V": VOCAB},
        bytes_moved=read + written,
        make=make,
        input_bytes=read,
    )


def cases() -> list[BenchCase]:
    return [_case(b, length) for length in DRAFT_LENS for b in BATCHES]
