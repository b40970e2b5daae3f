"""Benchmark cases of `get_kv_index`: slot mapping, paged-KV index set, batch indices / positions.

Run with ``python -m testing.benchmark --kernels get_kv_index`` (or
``bazel run //kernels/get_kv_index:get_kv_index_bench``).

These kernels are launch-bound (a few KiB per decode step): the goal is one launch within 1.5x of an
empty kernel's CUDA-graph replay time at every batch. Cases: batch 1, 8, 64, 256, 1024, each decode-
like (one token per request, 4 KiB-token contexts) and prefill-like (512 new tokens per request up to
16384 tokens in all, i.e. fewer tokens per request at large batches).

Peers, timed in the same run with the same timer:
  torch_eager    the kernel's function in kernels.get_kv_index.ref
  torch_compile  torch.compile(ref function, dynamic=False)
(The reference uses searchsorted, cumsum and gathers, no host sync, so it compiles whole.)

bytes_moved, the minimum DRAM traffic of one call (every index read once, every output written once):
  slots   (B + 1) * 4 (query_start_loc) + T * 8 (positions) + T * 4 (one block-table entry per
          token) + T * 8 (slot_mapping)
  paged   B * 4 (seq_lens) + P * 4 (the block-table entries of the P pages) + (B + 1) * 4 + capacity
          * 4 + B * 4 (outputs; capacity = B * max_blocks * r, -1 padded)
  append  (B + 1) * 4 + B * 4 + T * 8 (batch_indices and positions)
Every input set has its own tensors (the timer rotates sets so that L2 does not serve them all).
"""

from __future__ import annotations

import zlib
from typing import Any

import torch

from testing.benchmark import BenchCase, Workload

KERNEL = "get_kv_index"

BLOCK_SIZE = 64
PAGE_SIZE = 16
CONTEXT = 4096  # tokens of KV per request before the step
MAX_BLOCKS = (CONTEXT + 16384) // BLOCK_SIZE
PREFILL_TOKENS = 16384
BATCHES = (1, 8, 64, 256, 1024)


def _seed(text: str) -> int:
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def _tokens_per_request(phase: str, batch: int) -> int:
    return 1 if phase == "decode" else max(1, min(512, PREFILL_TOKENS // batch))


def _inputs(batch: int, q: int, device: torch.device, gen: torch.Generator):
    """(query_start_loc int32, positions int64, block_table int32, seq_lens int32): every request
    has CONTEXT + q tokens after the step, its q new ones at the end; blocks shuffled."""
    lens = torch.full((batch,), CONTEXT + q, dtype=torch.int32, device=device)
    qsl = torch.arange(batch + 1, dtype=torch.int32, device=device) * q
    pos = (torch.arange(q, device=device) + CONTEXT).repeat(batch)
    table = torch.randperm(batch * MAX_BLOCKS, generator=gen, device=device).to(torch.int32).reshape(batch, MAX_BLOCKS)
    return qsl, pos, table, lens


def _case(fn_name: str, phase: str, batch: int) -> BenchCase:
    q = _tokens_per_request(phase, batch)
    tokens = batch * q
    case_id = f"{fn_name}_{phase}_b{batch}_t{tokens}"
    r = BLOCK_SIZE // PAGE_SIZE
    pages = batch * -(-(CONTEXT + q) // PAGE_SIZE)
    capacity = batch * MAX_BLOCKS * r
    compiled: list[Any] = []

    def make(device: torch.device, k: int) -> Workload:
        from kernels.get_kv_index import api, ref

        gen = torch.Generator(device=device).manual_seed(_seed(f"{case_id}-{k}"))
        qsl, pos, table, lens = _inputs(batch, q, device, gen)
        if fn_name == "slots":
            reference = ref.slot_mapping_ref
            args = (qsl, pos, table, BLOCK_SIZE)
            fn = lambda: api.get_slot_mapping(qsl, pos, table, block_size=BLOCK_SIZE)  # noqa: E731
        elif fn_name == "paged":
            reference = ref.paged_kv_indices_ref
            args = (table, lens, BLOCK_SIZE, PAGE_SIZE)
            fn = lambda: api.get_paged_kv_indices(table, lens, block_size=BLOCK_SIZE, page_size=PAGE_SIZE)  # noqa: E731
        else:
            reference = ref.batch_indices_positions_ref
            args = (qsl, lens, tokens)
            fn = lambda: api.get_batch_indices_positions(qsl, lens, tokens)  # noqa: E731
        if not compiled:
            compiled.append(torch.compile(reference, dynamic=False))
        compiled_ref = compiled[0]
        return Workload(
            fn=fn,
            peers={"torch_eager": lambda: reference(*args), "torch_compile": lambda: compiled_ref(*args)},
        )

    if fn_name == "slots":
        read, written = (batch + 1) * 4 + tokens * 8 + tokens * 4, tokens * 8
    elif fn_name == "paged":
        read, written = batch * 4 + pages * 4 // r, (batch + 1) * 4 + capacity * 4 + batch * 4
    else:
        read, written = (batch + 1) * 4 + batch * 4, tokens * 8
    return BenchCase(
        kernel=KERNEL,
        case_id=case_id,
        params={
            "function": fn_name,
            "phase": phase,
            "B": batch,
            "tokens": tokens,
            "block_size": BLOCK_SIZE,
            "page_size": PAGE_SIZE,
            "max_blocks": MAX_BLOCKS,
        },
        bytes_moved=read + written,
        make=make,
        # The whole block table is an input set's footprint (the rotation keeps L2 from serving it).
        input_bytes=read + batch * MAX_BLOCKS * 4,
    )


# The sweep scans decode batches up to this many requests.
SWEEP_MAX_BATCH = 1024


def sweep_case(batch: int, model_config: Any, device: torch.device) -> BenchCase:
    """The slot mapping of one decode step with ``batch`` requests (``model_config`` is unused:
    the step's tokens are one per request here), for tools/sweep.py."""
    del device, model_config
    return _case("slots", "decode", batch)


def cases() -> list[BenchCase]:
    return [_case(f, phase, b) for f in ("slots", "paged", "append") for phase in ("decode", "prefill") for b in BATCHES]
