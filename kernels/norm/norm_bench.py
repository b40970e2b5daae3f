"""Benchmark cases of `norm`: RMSNorm, plain (y = rmsnorm(x)) and fused (residual += x; y = rmsnorm(residual)),
and both with an FP8 output (q, scale = e4m3 per group of 128 of y; `fp8_*` case ids).

Run with ``python -m testing.benchmark --kernels norm`` (or ``bazel run //kernels/norm:norm_bench``).

Peers, timed in the same run with the same timer, each computing what the kernel's contract says:
  torch_eager    kernels.norm.ref's function (plain), or the fused one in place: residual.add_(x),
                 then the plain reference on residual (the kernel's contract: the sum is written
                 back into residual, y is returned)
  torch_compile  torch.compile(that function, dynamic=False)
  torch_compile_out_of_place  (fused norm cases only) torch.compile(add_rms_norm_ref): the sum is
                 returned as a new tensor and residual is left alone, which is a different contract
                 (kept beside the in-place peer because earlier baselines compared against it)

Outputs: the kernel's call allocates its outputs, as the peers do (testing/benchmark.py: output
policy; this bench is where the difference was measured, kernels/norm/PERF.md). The fused peers'
in-place form puts the residual's write on the same footing for both.

bytes_moved, the minimum DRAM traffic of one call:
  plain  T*D*elem (x read) + T*D*elem (y written) + D*elem (weight read once)
  fused  2*T*D*elem (x, residual read) + 2*T*D*elem (residual, y written) + D*elem
  FP8    the same reads, and in place of y: T*D (q) + 4*T*D/group (scales) [+ T*D*elem with y]
The FP8 peers are the reference (rms_norm_fp8_ref: the norm, then the group quantisation), eager
and compiled; they return row-major scales (the tma_col case's layout only moves where the kernel
writes them).
Every input set has its own x, residual and weight (distinct data, so L2 never serves a previous
set's rows; the timer rotates through enough sets that their inputs exceed 2 x L2). The fused
kernel and its in-place peers keep adding x into the set's residual across calls: the values grow
but stay finite, and the time does not depend on them.
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


def _inputs(key: str, t: int, d: int, dtype: torch.dtype, fused: bool, device: torch.device):
    """(x, residual or None, weight): one input set, drawn from a generator seeded by `key` (x, then
    the weight, then the residual)."""
    gen = torch.Generator(device=device).manual_seed(_seed(key))
    x = torch.randn((t, d), generator=gen, device=device, dtype=dtype)
    w = (1.0 + 0.1 * torch.randn((d,), generator=gen, device=device)).to(dtype)
    residual = torch.randn((t, d), generator=gen, device=device, dtype=dtype) if fused else None
    return x, residual, w


def _operands(x, residual, w) -> tuple:
    """The reference's leading arguments: (x, w), or (x, residual, w) for the fused variant."""
    return (x, w) if residual is None else (x, residual, w)


def _peers(compiled: list, reference, *args) -> dict:
    """torch eager and torch.compile of `reference` on args; the compiled wrapper is made once per
    case (kept in `compiled`)."""
    if not compiled:
        compiled.append(torch.compile(reference, dynamic=False))
    compiled_ref = compiled[0]
    return {"torch_eager": lambda: reference(*args), "torch_compile": lambda: compiled_ref(*args)}


def add_rms_norm_in_place(x, residual, weight, eps):
    """The fused reference under the kernel's contract: residual <- x + residual, returns y."""
    from kernels.norm import ref

    residual.add_(x)
    return ref.rms_norm_ref(residual, weight, eps)


def add_rms_norm_fp8_in_place(x, residual, weight, eps, group, ue8m0):
    """The fused FP8 reference under the kernel's contract: residual <- x + residual, returns (q, scale, y)."""
    from kernels.norm import ref

    residual.add_(x)
    return ref.rms_norm_fp8_ref(residual, weight, eps, group, ue8m0)


def _case(t: int, d: int, dt: str, fused: bool) -> BenchCase:
    dtype = _DTYPES[dt]
    elem = torch.empty((), dtype=dtype).element_size()
    operands = 2 if fused else 1  # (T, D) tensors read, and written
    case_id = f"{'add_' if fused else ''}t{t}_d{d}_{dt}"
    compiled: list[Any] = []  # one torch.compile wrapper per case, created on first use
    out_of_place: list[Any] = []

    def make(device: torch.device, k: int) -> Workload:
        from kernels.norm import api, ref

        reference = add_rms_norm_in_place if fused else ref.rms_norm_ref
        x, residual, w = _inputs(f"{case_id}-{k}", t, d, dtype, fused, device)
        if fused:
            fn = lambda: api.add_rms_norm(x, residual, w, eps=EPS)  # noqa: E731
        else:
            fn = lambda: api.rms_norm(x, w, eps=EPS)  # noqa: E731
        peers = _peers(compiled, reference, *_operands(x, residual, w), EPS)
        if fused:
            if not out_of_place:
                out_of_place.append(torch.compile(ref.add_rms_norm_ref, dynamic=False))
            peers["torch_compile_out_of_place"] = lambda: out_of_place[0](x, residual, w, EPS)
        return Workload(fn=fn, peers=peers)

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


# (T, D, dtype, fused, ue8m0, scale_layout): group 128, row scales, at the prefill and decode sizes,
# and one DeepGEMM-style (UE8M0, TMA-aligned column-major) case.
_FP8_GROUP = 128
_FP8 = (
    [(t, d, "bf16", fused, False, "row") for t, d in [(16384, 7168), (16384, 4096)] for fused in (False, True)]
    + [(16384, 7168, "bf16", False, True, "tma_col")]
    + [(t, 7168, "bf16", fused, False, "row") for fused in (False, True) for t in _DECODE_T]
)


def _fp8_case(t: int, d: int, dt: str, fused: bool, ue8m0: bool, layout: str) -> BenchCase:
    dtype = _DTYPES[dt]
    elem = torch.empty((), dtype=dtype).element_size()
    variant = "_ue8m0_tmacol" if ue8m0 else ""
    case_id = f"{'add_' if fused else ''}fp8_g{_FP8_GROUP}{variant}_t{t}_d{d}_{dt}"
    compiled: list[Any] = []

    def make(device: torch.device, k: int) -> Workload:
        from kernels.norm import api, ref

        reference = add_rms_norm_fp8_in_place if fused else ref.rms_norm_fp8_ref
        x, residual, w = _inputs(f"{case_id}-{k}", t, d, dtype, fused, device)
        opts = dict(group_size=_FP8_GROUP, ue8m0=ue8m0, scale_layout=layout)
        if fused:
            fn = lambda: api.add_rms_norm_fp8(x, residual, w, EPS, **opts)  # noqa: E731
        else:
            fn = lambda: api.rms_norm_fp8(x, w, EPS, **opts)  # noqa: E731
        return Workload(fn=fn, peers=_peers(compiled, reference, *_operands(x, residual, w), EPS, _FP8_GROUP, ue8m0))

    operands = 2 if fused else 1
    read = operands * t * d * elem + d * elem
    written = (operands - 1) * t * d * elem + t * d + 4 * t * (d // _FP8_GROUP)
    return BenchCase(
        kernel=KERNEL,
        case_id=case_id,
        params={
            "T": t,
            "D": d,
            "dtype": str(dtype).replace("torch.", ""),
            "fused_residual": fused,
            "fp8_group": _FP8_GROUP,
            "ue8m0": ue8m0,
            "scale_layout": layout,
        },
        bytes_moved=read + written,
        make=make,
        input_bytes=read,
    )


def cases() -> list[BenchCase]:
    return [_case(*spec) for spec in _PREFILL + _DECODE] + [_fp8_case(*spec) for spec in _FP8]
