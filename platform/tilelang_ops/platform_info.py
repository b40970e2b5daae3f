"""Which backend serves this process, and why."""

from __future__ import annotations

import dataclasses
import os

BACKENDS = ("cuda", "asc")
BACKEND_ENV = "TILELANG_OPS_BACKEND"


@dataclasses.dataclass(frozen=True)
class Platform:
    """The chosen backend.

    tilelang_ops_backend: "cuda" or "asc".
    chosen_by: "build" (--config=cuda|ascend), "env" (TILELANG_OPS_BACKEND), "device" (a CUDA device or
        an Ascend NPU was found) or "default" (no accelerator: "cuda", so its kernels still lower).
    accelerator: "cuda", "npu" or None — what this process can run kernels on.
    """

    tilelang_ops_backend: str
    chosen_by: str
    accelerator: str | None


def detect_accelerator() -> str | None:
    """'cuda' when torch sees a CUDA device, 'npu' when torch_npu sees an Ascend NPU, else None."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    npu = getattr(torch, "npu", None)
    if npu is not None and npu.is_available():
        return "npu"
    return None


def choose_platform(build_backend: str, environ=os.environ, accelerator: str | None = None) -> Platform:
    """Build setting first, then the environment variable, then the device present."""
    for value, source in ((build_backend, "build"), (environ.get(BACKEND_ENV, ""), "env")):
        if value:
            if value not in BACKENDS:
                raise ValueError(f"{source} backend {value!r} is not one of {BACKENDS}")
            return Platform(value, source, accelerator)
    if accelerator == "cuda":
        return Platform("cuda", "device", accelerator)
    if accelerator == "npu":
        return Platform("asc", "device", accelerator)
    return Platform("cuda", "default", None)
