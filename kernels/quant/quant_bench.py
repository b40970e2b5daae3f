"""Benchmark cases of `quant`: FP8 / FP4 quantisation of bf16 activations and weights, and dequantisation.

Run with ``python -m testing.benchmark --kernels quant`` (or ``bazel run //kernels/quant:quant_bench``).

Peers, timed in the same run with the same timer:
  torch_eager    the reference function of kernels.quant.ref
  torch_compile  torch.compile(that function, dynamic=False)
(The peers return row-major scales; the tma_col case's peers therefore write the same bytes.)

bytes_moved, the minimum DRAM traffic of one call (inputs read + outputs written, scales included):
  quant_fp8    T*D*2 (x) + T*D (q) + T*(D/g)*4 (scales)
  quant_fp8_block  N*K*2 + N*K + ceil(N/128)*ceil(K/128)*4
  quant_fp4    T*D*2 + T*D/2 (packed) + T*D/g (one byte per scale) [+ 4, the global scale]
  dequant_fp8  T*D (q) + T*(D/g)*4 + T*D*2 (y)
  dequant_fp4  T*D/2 (packed) + T*D/g (scales) [+ 4] + T*D*2 (y)
Every input set has its own x (distinct data, so L2 never serves a previous set's rows; the timer
rotates through enough sets that their inputs exceed 2 x L2); the kernel allocates its outputs, as
the peers do (testing/benchmark.py: output policy).
"""

from __future__ import annotations

import zlib
from typing import Any

import torch

from testing.benchmark import BenchCase, Workload

KERNEL = "quant"
BF16 = torch.bfloat16

# (op, T, D, group, options)
_CASES = [
    ("fp8", 16384, 7168, 128, {}),
    ("fp8", 16384, 4096, 128, {}),
    ("fp8", 16384, 7168, 128, {"scale_layout": "tma_col"}),
    ("fp8", 16384, 7168, 128, {"ue8m0": True}),
    ("fp8_block", 7168, 7168, 128, {}),
    ("fp4_e4m3", 16384, 7168, 16, {}),
    ("fp4_ue8m0", 16384, 7168, 32, {}),
    ("dequant_fp8", 16384, 7168, 128, {}),
    ("dequant_fp4_e4m3", 16384, 7168, 16, {}),
    ("dequant_fp4_ue8m0", 16384, 7168, 32, {}),
] + [("fp8", t, 7168, 128, {}) for t in (1, 8, 64, 256)]


def _seed(text: str) -> int:
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def _bytes(op: str, t: int, d: int, g: int) -> tuple[int, int]:
    """(bytes moved, input bytes) of one call."""
    if op == "fp8":
        return t * d * 2 + t * d + t * (d // g) * 4, t * d * 2
    if op == "fp8_block":
        return t * d * 3 + -(-t // 128) * -(-d // 128) * 4, t * d * 2
    if "fp4" in op:
        extra = 4 if op.endswith("e4m3") else 0  # the global scale
        packed = t * d // 2 + t * d // g + extra  # codes, one byte per scale, the global scale
        if op.startswith("dequant"):
            return packed + t * d * 2, packed
        return t * d * 2 + packed, t * d * 2 + extra
    return t * d + t * (d // g) * 4 + t * d * 2, t * d + t * (d // g) * 4  # dequant_fp8


def _case(op: str, t: int, d: int, g: int, options: dict) -> BenchCase:
    suffix = "".join(f"_{k}-{v}" for k, v in sorted(options.items()))
    case_id = f"{op}_t{t}_d{d}_g{g}{suffix}"
    compiled: dict[str, Any] = {}  # one torch.compile wrapper per case, created on first use
    moved, inputs = _bytes(op, t, d, g)

    def make(device: torch.device, k: int) -> Workload:
        from kernels.quant import api, ref

        gen = torch.Generator(device=device).manual_seed(_seed(f"{case_id}-{k}"))
        x = torch.randn((t, d), generator=gen, device=device, dtype=BF16)
        ue8m0 = options.get("ue8m0", False)
        if op == "fp8":
            fn = lambda: api.quant_fp8(x, g, **options)  # noqa: E731
            reference, args = ref.quant_fp8_ref, (x, g, ue8m0)
        elif op == "fp8_block":
            fn = lambda: api.quant_fp8_block(x)  # noqa: E731
            reference, args = ref.quant_fp8_block_ref, (x, 128, False)
        elif "fp4" in op:
            fmt = "e4m3" if op.endswith("e4m3") else "ue8m0"
            gs = api.fp4_global_scale(x) if fmt == "e4m3" else None
            extra = (gs,) if gs is not None else ()
            if op.startswith("dequant"):
                p, s = api.quant_fp4(x, scale_format=fmt, global_scale=gs)  # the codes it reads back
                fn = lambda: api.dequant_fp4(p, s, global_scale=gs)  # noqa: E731
                reference = ref.dequant_fp4_e4m3_ref if gs is not None else ref.dequant_fp4_ue8m0_ref
                args = (p, s, *extra)
            else:
                fn = lambda: api.quant_fp4(x, scale_format=fmt, global_scale=gs)  # noqa: E731
                reference = ref.quant_fp4_e4m3_ref if gs is not None else ref.quant_fp4_ue8m0_ref
                args = (x, *extra)
        else:
            q, s = api.quant_fp8(x, g)
            fn = lambda: api.dequant_fp8(q, s, g)  # noqa: E731
            reference, args = ref.dequant_fp8_ref, (q, s, g)
        if "fn" not in compiled:
            compiled["fn"] = torch.compile(reference, dynamic=False)
        compiled_ref = compiled["fn"]
        return Workload(
            fn=fn,
            peers={"torch_eager": lambda: reference(*args), "torch_compile": lambda: compiled_ref(*args)},
        )

    return BenchCase(
        kernel=KERNEL,
        case_id=case_id,
        params={"op": op, "T": t, "D": d, "group": g, "dtype": "bfloat16", **options},
        bytes_moved=moved,
        make=make,
        input_bytes=inputs,
    )


def cases() -> list[BenchCase]:
    return [_case(*spec) for spec in _CASES]


# The sweep scans decode batches up to this many requests.
SWEEP_MAX_BATCH = 1024
# DeepSeek-V3's activation quantisation ahead of its FP8 GEMMs: groups of 128 along the hidden size.
_SWEEP_GROUP = 128


def sweep_case(batch: int, model_config: Any, device: torch.device) -> BenchCase:
    """The per-token-group FP8 cast of one decode step with ``batch`` requests, for tools/sweep.py:
    every token of the step (batch x ``model_config.tokens_per_request``) at ``model_config.hidden``
    (a multiple of 128 for every model it serves); the input set is built where the case runs."""
    del device
    return _case("fp8", batch * model_config.tokens_per_request, model_config.hidden, _SWEEP_GROUP, {})
