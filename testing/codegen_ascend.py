"""CPU-side code generation checks for Ascend kernels: AscendC lowering and on-chip footprint.

No NPU and no bisheng are needed: a `*_tl` factory is elaborated to its TileLang program and run
through TileLang's Ascend pass pipeline and AscendC source generator, which stops before the
device compiler.

    source = ascend_source(gather_tl, 7168, "bfloat16", "int32", 7168)
    assert_ub_fits(gather_tl, 7168, "bfloat16", "int32", 7168)

Lowering is the only check that runs here, and it does not bound on-chip memory: the auto-scheduler
enforces capacities only on buffers it multi-buffers inside pipelined loops, so a straight-line
kernel with a 2 MiB UB buffer lowers without complaint and would fail only on the device.
`ub_footprint_bytes` measures what the lowered kernel really allocates:

  * Every on-chip allocation left in the lowered device IR is an `AllocBuffer` node whose storage
    scope names the memory: "shared.dyn" is the Unified Buffer (TileLang merges all of a kernel's
    `T.alloc_shared` buffers, their multi-buffer versions and 32-byte alignment padding into one
    "shared.dyn" pool, also recorded as the kernel's `dyn_shared_memory_buf` attribute; the larger
    of the two is taken), "shared.l1*" is L1, "shared.l0a/l0b/l0c" are the Cube buffers. The
    static "shared" scope is rejected by the Ascend code generator, so it cannot appear.
  * The code generator adds one UB cost of its own: a kernel with a SIMT vector function (a
    "SIMT_VF" block in its IR, `__simt_vf__` in the source; the test the auto-scheduler uses) has
    SIMT_VF_UB_RESERVE_BYTES of UB reserved for thread context, which is added to its footprint.
  * Each device kernel is a separate launch with the whole UB to itself, so a module with several
    kernels reports the largest one.

Not counted: scratch that a library template allocates internally (the L0A/L0B staging of
`ascend_gemm_l1`), which no TileLang program controls.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import tilelang
import tvm
from tilelang.engine.param import CompiledArtifact
from tvm import tirx
from tvm.target import Target

__all__ = [
    "L0A_CAPACITY_BYTES",
    "L0B_CAPACITY_BYTES",
    "L0C_CAPACITY_BYTES",
    "L1_CAPACITY_BYTES",
    "SIMT_VF_UB_RESERVE_BYTES",
    "UB_CAPACITY_BYTES",
    "ascend_source",
    "assert_ub_fits",
    "lower_ascend",
    "onchip_footprint_bytes",
    "ub_footprint_bytes",
]

# Ascend 950 (dav-3510) capacities, from TileLang's Ascend auto-scheduler
# (src/ascend/transform/auto_schedule.cc, GetSharedMemoryLimit and Get*MemoryLimit; tilelang 0.1.15):
# 248 KiB of physical Unified Buffer per vector core, of which a kernel with a SIMT vector function
# loses 32 KiB to thread context. The installed build reports the same numbers when a pipelined
# kernel overflows ("capacity 253952" without SIMT, "capacity 221184" with it). The Python side
# (carver/arch/driver/ascend_driver.py) only queries torch_npu at run time and the AscendC
# templates state no size, so there is no second source here to disagree with; no CANN headers
# are installed to cross-check.
UB_CAPACITY_BYTES = 248 * 1024
SIMT_VF_UB_RESERVE_BYTES = 32 * 1024
L1_CAPACITY_BYTES = 512 * 1024
L0A_CAPACITY_BYTES = 64 * 1024
L0B_CAPACITY_BYTES = 64 * 1024
L0C_CAPACITY_BYTES = 256 * 1024

# Storage-scope prefix -> on-chip memory, most specific first.
_SCOPE_MEMORY = (
    ("shared.dyn", "UB"),
    ("shared.l1", "L1"),
    ("shared.l0a", "L0A"),
    ("shared.l0b", "L0B"),
    ("shared.l0c", "L0C"),
)
_CAPACITY = {
    "UB": UB_CAPACITY_BYTES,
    "L1": L1_CAPACITY_BYTES,
    "L0A": L0A_CAPACITY_BYTES,
    "L0B": L0B_CAPACITY_BYTES,
    "L0C": L0C_CAPACITY_BYTES,
}


@dataclasses.dataclass(frozen=True)
class _Lowered:
    source: str
    footprints: dict[str, dict[str, int]]  # device kernel name -> memory -> bytes


# Lowering takes seconds; a test that asks for the source and the footprint lowers once. Keyed by
# the factory object's identity (factories are module-level, so it stays alive) and the arguments.
_cache: dict[tuple, _Lowered] = {}


def _describe(factory: Any, args: tuple, kwargs: dict) -> str:
    name = getattr(factory, "__name__", None) or getattr(getattr(factory, "func", None), "__name__", repr(factory))
    params = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in sorted(kwargs.items())]
    return f"{name}({', '.join(params)})"


def _program(factory: Any, args: tuple, kwargs: dict) -> tirx.PrimFunc:
    # A tilelang.jit factory elaborates without compiling through get_tir; a plain factory is
    # called and must return the program.
    program = factory.get_tir(*args, **kwargs) if hasattr(factory, "get_tir") else factory(*args, **kwargs)
    if not isinstance(program, tirx.PrimFunc):
        raise TypeError(f"{_describe(factory, args, kwargs)} returned {type(program).__name__}, not a TileLang program")
    return program


def _pass_configs(factory: Any, program: tirx.PrimFunc) -> dict[str, Any]:
    # The same precedence as tilelang.compile: the program's own configs, overridden by the jit's.
    configs = dict(program.attrs["tilelang_pass_configs"]) if program.attrs and "tilelang_pass_configs" in program.attrs else {}
    configs.update(getattr(factory, "pass_configs", None) or {})
    return configs


def _memory_of(scope: str) -> str | None:
    for prefix, memory in _SCOPE_MEMORY:
        if scope.startswith(prefix):
            return memory
    return None


def _kernel_footprint(func: tirx.PrimFunc, kernel: str) -> dict[str, int]:
    footprint: dict[str, int] = {}

    simt = False

    def visit(node: Any) -> None:
        nonlocal simt
        if isinstance(node, tirx.SBlock) and node.name_hint == "SIMT_VF":
            simt = True
        if not isinstance(node, tirx.AllocBuffer):
            return
        buffer = node.buffer
        memory = _memory_of(buffer.scope())
        if memory is None:
            return
        if not all(isinstance(dim, (int, tirx.IntImm)) for dim in buffer.shape):
            raise ValueError(f"{kernel}: {memory} buffer {buffer.name} has a dynamic shape {list(buffer.shape)}")
        nbytes = math.prod(int(dim) for dim in buffer.shape) * tvm.DataType(buffer.dtype).bits // 8
        footprint[memory] = footprint.get(memory, 0) + nbytes

    tirx.stmt_functor.post_order_visit(func.body, visit)
    if func.attrs and "dyn_shared_memory_buf" in func.attrs:
        footprint["UB"] = max(footprint.get("UB", 0), int(func.attrs["dyn_shared_memory_buf"]))
    if simt:
        footprint["UB"] = footprint.get("UB", 0) + SIMT_VF_UB_RESERVE_BYTES
    return footprint


def lower_ascend(factory: Any, *args: Any, **kwargs: Any) -> CompiledArtifact:
    """Lower factory(*args, **kwargs) for the Ascend target on the CPU; returns TileLang's artifact.

    Runs under the factory's pass configs and an Ascend target context, as tilelang.compile does,
    but stops at the AscendC source (no bisheng, no device).
    """
    program = _program(factory, args, kwargs)
    target = Target("ascend")
    with tvm.transform.PassContext(opt_level=3, config=_pass_configs(factory, program)), target:
        return tilelang.lower(program, target=target)


def _lowered(factory: Any, args: tuple, kwargs: dict) -> _Lowered:
    key = (id(factory), args, tuple(sorted(kwargs.items())))
    if key not in _cache:
        artifact = lower_ascend(factory, *args, **kwargs)
        footprints = {
            gvar.name_hint: _kernel_footprint(func, gvar.name_hint)
            for gvar, func in artifact.device_mod.functions.items()
            if isinstance(func, tirx.PrimFunc)
        }
        _cache[key] = _Lowered(source=artifact.kernel_source, footprints=footprints)
    return _cache[key]


def ascend_source(factory: Any, *args: Any, **kwargs: Any) -> str:
    """The AscendC source that factory(*args, **kwargs) lowers to."""
    return _lowered(factory, args, kwargs).source


def onchip_footprint_bytes(factory: Any, *args: Any, **kwargs: Any) -> dict[str, int]:
    """Bytes per on-chip memory ("UB", "L1", "L0A", "L0B", "L0C") of the largest device kernel.

    Memories the kernel does not use are absent. See the module docstring for the method.
    """
    total: dict[str, int] = {}
    for footprint in _lowered(factory, args, kwargs).footprints.values():
        for memory, nbytes in footprint.items():
            total[memory] = max(total.get(memory, 0), nbytes)
    return total


def ub_footprint_bytes(factory: Any, *args: Any, **kwargs: Any) -> int:
    """Unified Buffer bytes one launch of factory(*args, **kwargs) needs per vector core."""
    return onchip_footprint_bytes(factory, *args, **kwargs).get("UB", 0)


def assert_ub_fits(factory: Any, *args: Any, **kwargs: Any) -> None:
    """AssertionError naming the kernel, its footprint and the capacity if any on-chip memory overflows.

    Checks the UB (the SIMT reservation included) and, where the kernel uses them, L1 and L0A/B/C.
    """
    lowered = _lowered(factory, args, kwargs)
    overflows = [
        f"{kernel}: {memory} footprint {nbytes} bytes exceeds the Ascend 950 capacity of {_CAPACITY[memory]} bytes"
        for kernel, footprint in lowered.footprints.items()
        for memory, nbytes in footprint.items()
        if nbytes > _CAPACITY[memory]
    ]
    if overflows:
        raise AssertionError(f"{_describe(factory, args, kwargs)}: " + "; ".join(overflows))
