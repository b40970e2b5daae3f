"""tilelang_ops: fused LLM-inference kernels in TileLang, one interface for NVIDIA and Ascend.

    import tilelang_ops
    tilelang_ops.PLATFORM.tilelang_ops_backend   # "cuda" or "asc"
    y = tilelang_ops.gather(x, index)             # interface functions (torch in, torch out)
    k = tilelang_ops.ops.gather_tl(D=4096, ...)   # the chosen backend's compiled-kernel factories

The backend is chosen at build time (`--config=cuda|ascend`), else by TILELANG_OPS_BACKEND, else by
the accelerator present.
"""

from __future__ import annotations

import importlib

from tilelang_ops import dispatcher
from tilelang_ops.errors import KernelNameConflictError, KernelUnavailableError
from tilelang_ops.platform_info import Platform, choose_platform, detect_accelerator

KERNELS, _BUILD_BACKEND = dispatcher.registered_kernels()
PLATFORM: Platform = choose_platform(_BUILD_BACKEND, accelerator=detect_accelerator())
ops = dispatcher.Ops(PLATFORM.tilelang_ops_backend, KERNELS)

_INTERFACE = dispatcher.merge_exports(
    (f"kernels.{k}.api", dispatcher.interface_of(importlib.import_module(f"kernels.{k}.api"))) for k in KERNELS
)
globals().update({name: fn for name, (_, fn) in _INTERFACE.items()})

__all__ = ["PLATFORM", "KERNELS", "ops", "KernelUnavailableError", "KernelNameConflictError", "Platform"]
__all__ += sorted(_INTERFACE)
