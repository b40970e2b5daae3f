"""Benchmark cases of `outlier_detection`: row mode (absmax, flags, compacted ids, count) and column
mode (per-channel outlier counts).

Run with ``python -m testing.benchmark --kernels outlier_detection`` (or
``bazel run //kernels/outlier_detection:outlier_detection_bench``).

Peers, timed in the same run with the same timer:
  torch_eager    kernels.outlier_detection.ref.outlier_rows_ref / outlier_columns_ref
  torch_compile  torch.compile(ref function, dynamic=False)
(The reference compacts with a cumsum and a scatter, no host sync, so it compiles whole.)

bytes_moved, the minimum DRAM traffic of one call (the threshold is a (1,) fp32 device tensor):
  rows     T*D*elem (x read) + T*(4 + 1 + 4) (absmax, flag, flagged_rows written) + 4 (count) + 4
           (the compaction's re-read of the flags is served by L2)
  columns  T*D*elem (x read) + D*4 (counts written) + 4
Every input set has its own x (distinct data, so L2 never serves a previous set's rows; the timer
rotates through enough sets that their inputs exceed 2 x L2); the kernel allocates its outputs, as
the peers do (testing/benchmark.py: output policy). x is standard normal with
a threshold of 5.0: P(|x| > 5) is about 6e-7, so about 0.4% of the rows of 7168 are flagged and
about 1% of the columns of 16384 rows count one outlier (a sparse pattern, as real outliers are:
the column mode's atomics stay rare).
"""

from __future__ import annotations

import zlib
from typing import Any

import torch

from testing.benchmark import BenchCase, Workload

KERNEL = "outlier_detection"

_DTYPES = {"bf16": torch.bfloat16}
THRESHOLD = 5.0

# (mode, T, D, dtype)
_PREFILL = [("rows", 16384, 7168, "bf16"), ("columns", 16384, 7168, "bf16")]
_DECODE = [("rows", t, 7168, "bf16") for t in (1, 8, 64, 256)]


def _seed(text: str) -> int:
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def _case(mode: str, t: int, d: int, dt: str) -> BenchCase:
    dtype = _DTYPES[dt]
    elem = torch.empty((), dtype=dtype).element_size()
    case_id = f"{mode}_t{t}_d{d}_{dt}"
    compiled: list[Any] = []  # one torch.compile wrapper per case, created on first use

    def make(device: torch.device, k: int) -> Workload:
        from kernels.outlier_detection import api, ref

        reference = ref.outlier_rows_ref if mode == "rows" else ref.outlier_columns_ref
        if not compiled:
            compiled.append(torch.compile(reference, dynamic=False))
        compiled_ref = compiled[0]
        gen = torch.Generator(device=device).manual_seed(_seed(f"{case_id}-{k}"))
        x = torch.randn((t, d), generator=gen, device=device, dtype=dtype)
        threshold = torch.tensor([THRESHOLD], dtype=torch.float32, device=device)
        if mode == "rows":
            fn = lambda: api.detect_outlier_rows(x, threshold)  # noqa: E731
        else:
            fn = lambda: api.count_outlier_columns(x, threshold)  # noqa: E731
        return Workload(
            fn=fn,
            peers={
                "torch_eager": lambda: reference(x, threshold),
                "torch_compile": lambda: compiled_ref(x, threshold),
            },
        )

    written = t * (4 + 1 + 4) + 4 if mode == "rows" else d * 4
    return BenchCase(
        kernel=KERNEL,
        case_id=case_id,
        params={"mode": mode, "T": t, "D": d, "dtype": str(dtype).replace("torch.", ""), "threshold": THRESHOLD},
        bytes_moved=t * d * elem + written + 4,
        make=make,
        input_bytes=t * d * elem + 4,
    )


# The sweep scans decode batches up to this many requests.
SWEEP_MAX_BATCH = 1024


def sweep_case(batch: int, model_config: Any, device: torch.device) -> BenchCase:
    """The row-mode guard of one decode step with ``batch`` requests, for tools/sweep.py: every token
    of the step (batch x ``model_config.tokens_per_request``) at ``model_config.hidden``; the input
    set is built where the case runs (``make(device, k)``)."""
    del device
    return _case("rows", batch * model_config.tokens_per_request, model_config.hidden, "bf16")


def cases() -> list[BenchCase]:
    return [_case(*spec) for spec in _PREFILL + _DECODE]
