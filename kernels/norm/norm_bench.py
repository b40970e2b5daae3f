"""Benchmark cases of `norm`: RMSNorm, plain (y = rmsnorm(x)) and fused (residual += x; y = rmsnorm(residual)).

Run with ``python -m testing.benchmark --kernels norm`` (or ``bazel run //kernels/norm:norm_bench``).

Peers, timed in the same run with the same timer:
  torch_eager    kernels.norm.ref.rms_norm_ref / add_rms_norm_ref
  torch_compile  torch.compile(ref function, dynamic=False)
(The fused peers return the sum as a new tensor instead of writing it in place: the same bytes.)

bytes_moved, the minimum DRAM traffic of one call:
  plain  T*D*elem (x read) + T*D*elem (y written) + D*elem (weight read once)
  fused  2*T*D*elem (x, residual read) + 2*T*D*elem (residual, y written) + D*elem
Every input set has its own x, residual, weight and output (distinct data, so L2 never serves a
previous set's rows; the timer rotates through enough sets that their inputs exceed 2 x L2). The
fused kernel keeps adding x into its residual across calls: the values grow but stay finite, and
the time does not depend on them.
"""

from __future__ import annotations

import zlib
from typing import Any

import torch

from testing.benchmark import BenchCase, Workload

KERNEL = "norm"

_DTYPES = {"bf16": torch.bfloat16}
EPS = 1e-6

# (T, D, dtype, fused)
_PREFILL = [(t, d, "bf16", fused) for t, d in [(16384, 7168), (16384, 4096)] for fused in (False, True)]
_DECODE_T = (1, 8, 64, 256)
_DECODE = [(t, 7168, "bf16", fused) for fused in (False, True) for t in _DECODE_T]


def _seed(text: str) -> int:
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def _case(t: int, d: int, dt: str, fused: bool) -> BenchCase:
    dtype = _DTYPES[dt]
    elem = torch.empty((), dtype=dtype).element_size()
    operands = 2 if fused else 1  # (T, D) tensors read, and written
    case_id = f"{'add_' if fused else ''}t{t}_d{d}_{dt}"
    compiled: list[Any] = []  # one torch.compile wrapper per case, created on first use

    def make(device: torch.device, k: int) -> Workload:
        from kernels.norm import api, ref

        reference = ref.add_rms_norm_ref if fused else ref.rms_norm_ref
        if not compiled:
            compiled.append(torch.compile(reference, dynamic=False))
        compiled_ref = compiled[0]
        gen = torch.Generator(device=device).manual_seed(_seed(f"{case_id}-{k}"))
        x = torch.randn((t, d), generator=gen, device=device, dtype=dtype)
        w = (1.0 + 0.1 * torch.randn((d,), generator=gen, device=device)).to(dtype)
        out = torch.empty((t, d), device=device, dtype=dtype)
        if fused:
            residual = torch.randn((t, d), generator=gen, device=device, dtype=dtype)
            return Workload(
                fn=lambda: api.add_rms_norm(x, residual, w, eps=EPS, out=out),
                peers={
                    "torch_eager": lambda: reference(x, residual, w, EPS),
                    "torch_compile": lambda: compiled_ref(x, residual, w, EPS),
                },
            )
        return Workload(
            fn=lambda: api.rms_norm(x, w, eps=EPS, out=out),
            peers={
                "torch_eager": lambda: reference(x, w, EPS),
                "torch_compile": lambda: compiled_ref(x, w, EPS),
            },
        )

    return BenchCase(
        kernel=KERNEL,
        case_id=case_id,
        params={"T": t, "D": d, "dtype": str(dtype).replace("torch.", ""), "fused_residual": fused},
        bytes_moved=2 * operands * t * d * elem + d * elem,
        make=make,
        input_bytes=operands * t * d * elem + d * elem,
    )


# The sweep scans decode batches up to this many requests.
SWEEP_MAX_BATCH = 1024


def sweep_case(batch: int, model_config: Any, device: torch.device) -> BenchCase:
    """The fused residual add + RMSNorm of one decode step with ``batch`` requests, for tools/sweep.py.

    Every token of the step (batch x ``model_config.tokens_per_request``) is normalised at
    ``model_config.hidden``; the input set is built where the case runs (``make(device, k)``).
    """
    del device
    return _case(batch * model_config.tokens_per_request, model_config.hidden, "bf16", fused=True)


def cases() -> list[BenchCase]:
    return [_case(*spec) for spec in _PREFILL + _DECODE]
