"""Benchmark cases of `swa_index`: the sliding-window KV slots of one decode step.

Run with ``python -m testing.benchmark --kernels swa_index`` (or
``bazel run //kernels/swa_index:swa_index_bench``).

Cases: batch 1, 8, 64, 256, 1024 decode requests, each with 1 + MTP query tokens (MTP = 1 and 3,
consecutive positions at the end of a CONTEXT-token request), windows W = 128, 512, 4096, pad
"minus_one" (the "repeat" mode differs by one select per row). Small windows are launch-bound
(target: within 1.5x of an empty kernel's CUDA-graph replay); W = 4096 at large batches writes tens
of MiB and is store-bandwidth-bound.

Peers, timed in the same run with the same timer:
  torch_eager    kernels.swa_index.ref.swa_index_ref
  torch_compile  torch.compile(swa_index_ref, dynamic=False)
(The reference has no host sync and no data-dependent shapes, so it compiles whole.)

bytes_moved, the minimum DRAM traffic of one call (every input read once, every output written once):
  (B + 1) * 4 (query_start_loc) + T * 8 (positions) + B * 4 (seq_lens)
  + T * ceil(W / block_size + 1) * 4 (the block-table entries a window spans, at most)
  + T * W * 4 (slots) + T * 4 (valid_len) + B * 4 + 2 * B * 8 (per-request outputs),
with T = B * (1 + MTP). Every input set has its own tensors (the timer rotates sets so that L2 does
not serve them all).
"""

from __future__ import annotations

import zlib
from typing import Any

import torch

from testing.benchmark import BenchCase, Workload

KERNEL = "swa_index"

BLOCK_SIZE = 64
CONTEXT = 8192  # KV tokens of each request before the step
MAX_BLOCKS = (CONTEXT + 64) // BLOCK_SIZE
BATCHES = (1, 8, 64, 256, 1024)
WINDOWS = (128, 512, 4096)
MTPS = (1, 3)


def _seed(text: str) -> int:
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def decode_inputs(batch: int, q: int, device: torch.device, gen: torch.Generator):
    """(query_start_loc int32, positions int64, block_table int32, seq_lens int32): every request has
    CONTEXT + q tokens after the step, its q new ones last; physical blocks shuffled."""
    qsl = torch.arange(batch + 1, dtype=torch.int32, device=device) * q
    pos = (torch.arange(q, device=device) + CONTEXT).repeat(batch)
    table = torch.randperm(batch * MAX_BLOCKS, generator=gen, device=device).to(torch.int32).reshape(batch, MAX_BLOCKS)
    lens = torch.full((batch,), CONTEXT + q, dtype=torch.int32, device=device)
    return qsl, pos, table, lens


def _case(batch: int, mtp: int, window: int) -> BenchCase:
    q = 1 + mtp
    tokens = batch * q
    case_id = f"decode_b{batch}_mtp{mtp}_w{window}"
    compiled: list[Any] = []

    def make(device: torch.device, k: int) -> Workload:
        from kernels.swa_index import api, ref

        gen = torch.Generator(device=device).manual_seed(_seed(f"{case_id}-{k}"))
        qsl, pos, table, lens = decode_inputs(batch, q, device, gen)
        args = (qsl, pos, table, lens, window, BLOCK_SIZE, "minus_one")
        if not compiled:
            compiled.append(torch.compile(ref.swa_index_ref, dynamic=False))
        compiled_ref = compiled[0]
        return Workload(
            fn=lambda: api.swa_index(qsl, pos, table, lens, window=window, block_size=BLOCK_SIZE),
            peers={"torch_eager": lambda: ref.swa_index_ref(*args), "torch_compile": lambda: compiled_ref(*args)},
        )

    spanned = -(-window // BLOCK_SIZE) + 1
    read = (batch + 1) * 4 + tokens * 8 + batch * 4 + tokens * spanned * 4
    written = tokens * window * 4 + tokens * 4 + batch * 4 + 2 * batch * 8
    return BenchCase(
        kernel=KERNEL,
        case_id=case_id,
        params={"B": batch, "mtp": mtp, "tokens": tokens, "window": window, "block_size": BLOCK_SIZE, "max_blocks": MAX_BLOCKS},
        bytes_moved=read + written,
        make=make,
        # The whole block table is an input set's footprint (the rotation keeps L2 from serving it).
        input_bytes=read + batch * MAX_BLOCKS * 4,
    )


def cases() -> list[BenchCase]:
    return [_case(b, m, w) for w in WINDOWS for m in MTPS for b in BATCHES]
