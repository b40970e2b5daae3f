"""Benchmark cases of `gather`: y[i] = x[index[i]] (zero row for an out-of-range index).

Run with ``python -m testing.benchmark --kernels gather`` (or ``bazel run //kernels/gather:gather_bench``).

Peers, timed in the same run with the same timer:
  torch_eager    kernels.gather.ref.gather_ref
  torch_compile  torch.compile(ref.gather_ref, dynamic=False)
  index_select   torch.index_select(x, 0, index): the target is to never be slower than it.

bytes_moved = m*D*elem (rows read) + m*D*elem (y written) + m*index_bytes.
Input set k shares x with the other sets of its case (a large random table, built once) and has its
own random index (m distinct rows of [0, n)), so the rows a set reads differ from set to set; the timer rotates
through enough sets that their rows (``input_bytes``) exceed 2 x L2.
"""

from __future__ import annotations

import zlib
from typing import Any

import torch

from testing.benchmark import BenchCase, Workload

KERNEL = "gather"

_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
_INDEX = {"i64": torch.int64, "i32": torch.int32}

# (n, m, D, dtype, index dtype, strided x)
_PREFILL = [
    (65536, 32768, 4096, "bf16", "i64", False),
    (65536, 32768, 4096, "bf16", "i32", False),
    (65536, 32768, 4096, "bf16", "i64", True),  # x = rows of a (n, 2D) table: row stride 2D
    (65536, 32768, 576, "bf16", "i64", False),
    (16384, 16384, 16384, "fp32", "i64", False),
    (65536, 32768, 7168, "bf16", "i64", False),  # shares its table with the decode cases
]
_DECODE_M = (1, 8, 64, 256)
_DECODE = [(65536, m, 7168, "bf16", "i64", False) for m in _DECODE_M]

# One x table at a time (the largest is 1 GiB); cases sharing a table are adjacent.
_table_cache: dict[tuple[Any, ...], torch.Tensor] = {}


def _seed(text: str) -> int:
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def _table(device: torch.device, n: int, d: int, dtype: torch.dtype, strided: bool) -> torch.Tensor:
    width = 2 * d if strided else d
    key = (str(device), n, d, dtype, strided)
    x = _table_cache.get(key)
    if x is None:
        _table_cache.clear()
        gen = torch.Generator(device=device).manual_seed(_seed(f"gather-x-{n}-{width}-{dtype}"))
        full = torch.randn((n, width), generator=gen, dtype=dtype, device=device)
        x = full[:, :d] if strided else full
        _table_cache[key] = x
    return x


def _case(n: int, m: int, d: int, dt: str, it: str, strided: bool) -> BenchCase:
    dtype, index_dtype = _DTYPES[dt], _INDEX[it]
    elem = torch.empty((), dtype=dtype).element_size()
    ibytes = torch.empty((), dtype=index_dtype).element_size()
    case_id = f"n{n}_m{m}_d{d}_{dt}_{it}" + ("_strided" if strided else "")
    compiled: list[Any] = []  # one torch.compile wrapper per case, created on first use

    def make(device: torch.device, k: int) -> Workload:
        from kernels.gather import api, ref

        if not compiled:
            compiled.append(torch.compile(ref.gather_ref, dynamic=False))
        compiled_ref = compiled[0]
        x = _table(device, n, d, dtype, strided)
        gen = torch.Generator(device=device).manual_seed(_seed(f"{case_id}-index-{k}"))
        # Distinct rows (m <= n): a repeated row could come from L2 and overstate the bandwidth.
        index = torch.randperm(n, generator=gen, device=device)[:m].to(index_dtype)
        return Workload(
            fn=lambda: api.gather(x, index),
            peers={
                "torch_eager": lambda: ref.gather_ref(x, index),
                "torch_compile": lambda: compiled_ref(x, index),
                "index_select": lambda: torch.index_select(x, 0, index),
            },
        )

    return BenchCase(
        kernel=KERNEL,
        case_id=case_id,
        params={
            "n": n,
            "m": m,
            "D": d,
            "dtype": str(dtype).replace("torch.", ""),
            "index_dtype": str(index_dtype).replace("torch.", ""),
            "strided": strided,
        },
        bytes_moved=2 * m * d * elem + m * ibytes,
        make=make,
        input_bytes=m * d * elem + m * ibytes,
    )


def cases() -> list[BenchCase]:
    return [_case(*spec) for spec in _PREFILL + _DECODE]


# The batch sweep (tools/sweep.py) scans 1, 2, 4, ... up to this many decode requests by default.
SWEEP_MAX_BATCH = 1024


def sweep_case(batch: int, model_config: Any, device: torch.device) -> BenchCase:
    """The token-embedding lookup of one decode step with ``batch`` requests, for tools/sweep.py.

    ``model_config`` gives ``vocab``, ``hidden`` and ``tokens_per_request`` (1 + MTP draft length):
    the table is vocab x hidden bfloat16 and the index holds the step's batch x tokens_per_request
    token ids (int64, distinct rows as in ``cases()``, so L2 never serves a repeated row).
    ``device`` is not needed here: the case's ``make(device, k)`` builds the inputs where they run.
    """
    del device
    tokens = batch * model_config.tokens_per_request
    if tokens > model_config.vocab:
        raise ValueError(f"gather sweep: {tokens} distinct token ids do not fit a vocab of {model_config.vocab}")
    return _case(model_config.vocab, tokens, model_config.hidden, "bf16", "i64", False)
