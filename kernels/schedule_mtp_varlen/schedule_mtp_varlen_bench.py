"""Benchmark cases of `schedule_mtp_varlen`: the next varlen step's schedule after MTP verification.

Run with ``python -m testing.benchmark --kernels schedule_mtp_varlen`` (or
``bazel run //kernels/schedule_mtp_varlen:schedule_mtp_varlen_bench``).

The kernel is launch-bound (a few KiB per decode step): the goal is one launch within 1.5x of an
empty kernel's CUDA-graph replay time at every batch. Cases: batch 1, 8, 64, 256, 1024, draft
length k = 1 and 3 (DeepSeek-V3's MTP), num_sm_parts = 132 (an H200's SMs), block size 64,
contexts uniform in [0, 8192) tokens, every request active, num_accepted uniform in [0, k].

Peers, timed in the same run with the same timer:
  torch_eager    kernels.schedule_mtp_varlen.ref.schedule_mtp_varlen_ref
  torch_compile  torch.compile(that function, dynamic=False)
(The reference uses cumsum, searchsorted and gathers, no host sync, so it compiles whole.)

bytes_moved, the minimum DRAM traffic of one call: B * 4 (seq_lens_before, int32) + B * 4
(num_accepted, int32) read; B * 4 * 2 (new_seq_lens, last_hidden_rows) + (B + 1) * 4 * 2
(query_start_loc, num_splits) + T * 4 * 2 (positions, request_ids; T = B * (1 + k)) +
num_sm_parts * 32 (tile_metadata) written.
"""

from __future__ import annotations

import zlib
from typing import Any

import torch

from testing.benchmark import BenchCase, Workload

KERNEL = "schedule_mtp_varlen"

BLOCK_SIZE = 64
NUM_SM_PARTS = 132
MAX_CONTEXT = 8192
BATCHES = (1, 8, 64, 256, 1024)
DRAFTS = (1, 3)


def _seed(text: str) -> int:
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def _case(batch: int, k: int) -> BenchCase:
    tokens = batch * (1 + k)
    case_id = f"decode_b{batch}_k{k}"
    compiled: list[Any] = []

    def make(device: torch.device, rotation: int) -> Workload:
        from kernels.schedule_mtp_varlen import api, ref

        gen = torch.Generator(device=device).manual_seed(_seed(f"{case_id}-{rotation}"))
        lens = torch.randint(0, MAX_CONTEXT, (batch,), generator=gen, device=device, dtype=torch.int32)
        acc = torch.randint(0, k + 1, (batch,), generator=gen, device=device, dtype=torch.int32)
        args = (lens, acc, k, BLOCK_SIZE, NUM_SM_PARTS, tokens)
        if not compiled:
            compiled.append(torch.compile(ref.schedule_mtp_varlen_ref, dynamic=False))
        compiled_ref = compiled[0]
        return Workload(
            fn=lambda: api.schedule_mtp_varlen(lens, acc, num_draft=k, block_size=BLOCK_SIZE, num_sm_parts=NUM_SM_PARTS, num_tokens=tokens),
            peers={
                "torch_eager": lambda: ref.schedule_mtp_varlen_ref(*args),
                "torch_compile": lambda: compiled_ref(*args),
            },
        )

    read = batch * 4 * 2
    written = batch * 4 * 2 + (batch + 1) * 4 * 2 + tokens * 4 * 2 + NUM_SM_PARTS * 32
    return BenchCase(
        kernel=KERNEL,
        case_id=case_id,
        params={"B": batch, "num_draft": k, "tokens": tokens, "block_size": BLOCK_SIZE, "num_sm_parts": NUM_SM_PARTS},
        bytes_moved=read + written,
        make=make,
        input_bytes=read,
    )


# The sweep scans decode batches up to this many requests.
SWEEP_MAX_BATCH = 1024


def sweep_case(batch: int, model_config: Any, device: torch.device) -> BenchCase:
    """The schedule of one MTP decode step with ``batch`` requests at the model's draft length
    (``model_config.mtp``), for tools/sweep.py."""
    del device
    return _case(batch, model_config.mtp)


def cases() -> list[BenchCase]:
    return [_case(b, k) for k in DRAFTS for b in BATCHES]
