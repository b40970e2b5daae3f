"""Benchmark cases of `load_paged_kv_cache`: prefill-sized loads (64 requests x 2048 tokens) from
bf16, FP4 and FP8 MLA caches and a per-head HND cache (8 heads x 128, kind "hnd"), and decode-ish
sizes.

Run with ``python -m testing.benchmark --kernels load_paged_kv_cache`` (or
``bazel run //kernels/load_paged_kv_cache:load_paged_kv_cache_bench``).

Peers, timed in the same run with the same timer:
  torch_eager    kernels.load_paged_kv_cache.ref.load_paged_kv_cache_ref (searchsorted rows ->
                 slots, index_select, decode_records for record caches)
  torch_compile  torch.compile(the same function, dynamic=False)
Both get num_tokens, so neither syncs the host.

bytes_moved, the minimum DRAM traffic of one call: tokens * record bytes (read; D * 2 for bf16,
D = H * Dh per head) + tokens * D * 2 (bf16 rows written) + the block table, lengths and starts read + the
cu_seqlens written. Each input set has its own cache, so L2 never serves a previous set's rows (the
timer rotates through enough sets to exceed 2 x L2). Requests get shuffled physical blocks
(randperm) and unaligned starts, as a serving engine's block table after churn.
"""

from __future__ import annotations

import zlib
from typing import Any

import torch

from testing.benchmark import BenchCase, Workload

KERNEL = "load_paged_kv_cache"
BLOCK_SIZE = 64
D = 576
# The per-head cache: a GQA layer's K, (num_blocks, HEADS, block_size, HEAD_DIM) ("HND").
HEADS, HEAD_DIM = 8, 128

# (kind, requests, tokens per request)
_PREFILL = [("bf16", 64, 2048), ("fp4", 64, 2048), ("fp8", 64, 2048), ("hnd", 64, 2048)]
_DECODE = [("bf16", 1, 4096), ("fp4", 1, 4096), ("bf16", 8, 1024), ("fp4", 8, 1024), ("fp8", 8, 1024), ("hnd", 8, 1024)]


def _seed(text: str) -> int:
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def _record_bytes(kind: str) -> int:
    from kernels.store_kv_cache import layout

    return {"bf16": 2 * D, "hnd": 2 * HEADS * HEAD_DIM, "fp4": layout.FP4.record_bytes, "fp8": layout.FP8.record_bytes}[kind]


def _case(kind: str, b: int, tokens: int) -> BenchCase:
    width = HEADS * HEAD_DIM if kind == "hnd" else D
    case_id = f"{kind}_b{b}_t{tokens}_" + (f"h{HEADS}x{HEAD_DIM}" if kind == "hnd" else f"d{D}")
    kv_layout = "HND" if kind == "hnd" else "NHD"
    # Room for the unaligned start: one more block per request.
    max_blocks = -(-tokens // BLOCK_SIZE) + 1
    num_blocks = b * max_blocks
    total = b * tokens
    compiled: list[Any] = []

    def make(device: torch.device, k: int) -> Workload:
        from kernels.load_paged_kv_cache import api, ref
        from kernels.store_kv_cache import layout

        if not compiled:
            compiled.append(torch.compile(ref.load_paged_kv_cache_ref, dynamic=False))
        compiled_ref = compiled[0]
        gen = torch.Generator(device=device).manual_seed(_seed(f"{case_id}-{k}"))
        if kind == "bf16":
            cache = torch.randn((num_blocks, BLOCK_SIZE, D), generator=gen, device=device).to(torch.bfloat16)
        elif kind == "hnd":
            cache = torch.randn((num_blocks, HEADS, BLOCK_SIZE, HEAD_DIM), generator=gen, device=device).to(torch.bfloat16)
        else:
            records = layout.FP4 if kind == "fp4" else layout.FP8
            rows = torch.randn((num_blocks * BLOCK_SIZE, D), generator=gen, device=device).to(torch.bfloat16)
            cache = layout.encode_rows(rows, records).view(records.cache_dtype).reshape(num_blocks, BLOCK_SIZE, -1)
        perm = torch.randperm(num_blocks, generator=gen, device=device)
        block_table = perm.to(torch.int32).reshape(b, max_blocks)
        seq_lens = torch.full((b,), tokens, dtype=torch.int32, device=device)
        seq_starts = torch.randint(0, BLOCK_SIZE, (b,), generator=gen, device=device, dtype=torch.int32)

        def fn():
            return api.load_paged_kv_cache(cache, block_table, seq_lens, seq_starts, num_tokens=total, layout=kv_layout)

        return Workload(
            fn=fn,
            peers={
                "torch_eager": lambda: ref.load_paged_kv_cache_ref(cache, block_table, seq_lens, seq_starts, total, kv_layout),
                "torch_compile": lambda: compiled_ref(cache, block_table, seq_lens, seq_starts, total, kv_layout),
            },
        )

    read = total * _record_bytes(kind) + b * max_blocks * 4 + b * 8
    return BenchCase(
        kernel=KERNEL,
        case_id=case_id,
        params={"kind": kind, "B": b, "tokens": tokens, "D": width, "block_size": BLOCK_SIZE},
        bytes_moved=read + total * width * 2 + (b + 1) * 4,
        make=make,
        input_bytes=num_blocks * BLOCK_SIZE * _record_bytes(kind) + b * max_blocks * 4 + b * 8,
    )


def cases() -> list[BenchCase]:
    return [_case(*spec) for spec in _PREFILL + _DECODE]
