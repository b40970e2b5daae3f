"""Benchmark cases of `store_kv_cache`: MLA latent rows (576 bf16) into BF16, FP4 and FP8 caches at a
prefill size and at decode sizes, and per-head K and V into an NHD cache.

Run with ``python -m testing.benchmark --kernels store_kv_cache`` (or
``bazel run //kernels/store_kv_cache:store_kv_cache_bench``).

Peers, timed in the same run with the same timer:
  torch_eager    kernels.store_kv_cache.ref.scatter_rows: encode (records) and one index_put per cache
  torch_compile  torch.compile(scatter_rows, dynamic=False)
(Every slot of these cases is valid, so the index_put path needs no mask and no host sync.)

bytes_moved, the minimum DRAM traffic of one call: T * (row bytes read + cache bytes written + the
slot's 8 bytes); rows 576 x 2 bytes, records 1152 / 400 / 656 bytes; per head 2 x H x Dh x 2 bytes
read and written. Slots follow serving: each input set's tokens fill whole blocks of 64 (16 per
head) in a random block order, so writes land in scattered blocks but contiguous offsets. Every
input set has its own rows, slots and cache, so L2 never serves a previous set's data.
"""

from __future__ import annotations

import zlib
from typing import Any

import torch

from testing.benchmark import BenchCase, Workload

KERNEL = "store_kv_cache"

WIDTH = 576
_CACHE = {"bf16": (torch.bfloat16, WIDTH * 2), "fp4": (torch.float4_e2m1fn_x2, 400), "fp8": (torch.float8_e4m3fn, 656)}
# (kind, T): the prefill size for every cache, decode sizes for BF16 and FP4.
_MLA = [(kind, 4096) for kind in _CACHE] + [(kind, t) for kind in ("bf16", "fp4") for t in (1, 8, 64, 256)]
# (T, H, Dh, block_size): per-head K and V, NHD.
_HEADS = [(4096, 8, 128, 16), (64, 8, 128, 16)]


def _seed(text: str) -> int:
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def _slots(t: int, block_size: int, gen: torch.Generator, device) -> tuple[torch.Tensor, int]:
    """(slots filling whole blocks in a random block order, num_blocks)."""
    num_blocks = -(-t // block_size)
    order = torch.randperm(num_blocks, generator=gen, device=device)
    offsets = torch.arange(t, device=device)
    return order[offsets // block_size] * block_size + offsets % block_size, num_blocks


def _mla_case(kind: str, t: int) -> BenchCase:
    cache_dtype, slot_bytes = _CACHE[kind]
    case_id = f"mla_{kind}_t{t}_d{WIDTH}"
    compiled: list[Any] = []

    def make(device: torch.device, k: int) -> Workload:
        from kernels.store_kv_cache import api, ref

        if not compiled:
            compiled.append(torch.compile(ref.scatter_rows, dynamic=False))
        gen = torch.Generator(device=device).manual_seed(_seed(f"{case_id}-{k}"))
        kv = torch.randn((t, WIDTH), generator=gen, device=device).to(torch.bfloat16)
        slots, num_blocks = _slots(t, 64, gen, device)
        cache = torch.zeros((num_blocks, 64, slot_bytes if kind != "bf16" else WIDTH), dtype=torch.uint8 if kind != "bf16" else torch.bfloat16, device=device)
        cache = cache.view(cache_dtype) if kind != "bf16" else cache
        return Workload(
            fn=lambda: api.store_kv_cache(kv, cache, slots),
            peers={"torch_eager": lambda: ref.scatter_rows(kv, cache, slots), "torch_compile": lambda: compiled[0](kv, cache, slots)},
        )

    read = t * (WIDTH * 2 + 8)
    return BenchCase(
        kernel=KERNEL,
        case_id=case_id,
        params={"layout": "mla", "cache": kind, "T": t, "D": WIDTH, "block_size": 64},
        bytes_moved=read + t * slot_bytes,
        make=make,
        input_bytes=read,
    )


def _heads_case(t: int, h: int, dh: int, block_size: int) -> BenchCase:
    case_id = f"nhd_kv_t{t}_h{h}_dh{dh}_bs{block_size}"
    compiled: list[Any] = []

    def make(device: torch.device, k: int) -> Workload:
        from kernels.store_kv_cache import api, ref

        if not compiled:
            compiled.append(torch.compile(ref.scatter_rows, dynamic=False))
        gen = torch.Generator(device=device).manual_seed(_seed(f"{case_id}-{k}"))
        # k and v are views of a fused QKV projection, as an attention layer produces them.
        qkv = torch.randn((t, 3 * h * dh), generator=gen, device=device).to(torch.bfloat16)
        key, value = qkv[:, h * dh : 2 * h * dh].view(t, h, dh), qkv[:, 2 * h * dh :].view(t, h, dh)
        slots, num_blocks = _slots(t, block_size, gen, device)
        pool = torch.zeros((num_blocks, 2, block_size, h, dh), dtype=torch.bfloat16, device=device)
        k_cache, v_cache = pool[:, 0], pool[:, 1]

        def peer(fn):
            return lambda: (fn(key, k_cache, slots), fn(value, v_cache, slots))

        return Workload(
            fn=lambda: api.store_kv_cache(key, k_cache, slots, v=value, v_cache=v_cache),
            peers={"torch_eager": peer(ref.scatter_rows), "torch_compile": peer(lambda *a: compiled[0](*a))},
        )

    read = t * (2 * h * dh * 2 + 8)
    return BenchCase(
        kernel=KERNEL,
        case_id=case_id,
        params={"layout": "NHD", "T": t, "H": h, "Dh": dh, "block_size": block_size, "dtype": "bfloat16"},
        bytes_moved=read + t * 2 * h * dh * 2,
        make=make,
        input_bytes=read,
    )


# The sweep scans decode batches up to this many requests.
SWEEP_MAX_BATCH = 1024


def sweep_case(batch: int, model_config: Any, device: torch.device) -> BenchCase:
    """The FP4 latent-cache store of one decode step with ``batch`` requests, for tools/sweep.py:
    every token of the step (batch x ``model_config.tokens_per_request``)."""
    del device
    return _mla_case("fp4", batch * model_config.tokens_per_request)


def cases() -> list[BenchCase]:
    return [_mla_case(*spec) for spec in _MLA] + [_heads_case(*spec) for spec in _HEADS]
