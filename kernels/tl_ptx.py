"""PTX instructions that TileLang has no builtin for, as TileLang expressions (CUDA kernels only).

A kernel that calls one of them calls its `declare_*` once inside its `T.Kernel` scope: that puts
the instruction's inline-assembly wrapper at the top of the generated CUDA source (guarded, so
that declaring it twice is harmless).
"""

# No `from __future__ import annotations`: TileLang parses the callers' bodies.
import tilelang.language as T

_EX2_FTZ = "tl_ops_ex2_ftz"
_EX2_FTZ_SOURCE = f"""
#ifndef TL_OPS_EX2_FTZ
#define TL_OPS_EX2_FTZ
__device__ __forceinline__ float {_EX2_FTZ}(float x) {{
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}}
#endif
"""


def declare_ex2_ftz():
    """Makes ex2_ftz callable in the enclosing kernel."""
    T.import_source(_EX2_FTZ_SOURCE)


def ex2_ftz(x):
    """2**x (float32) by the multi-function unit alone: PTX's ex2.approx.ftz.f32, the approximation
    that exp2f's ex2.approx.f32 also takes, but with a subnormal input or result flushed to zero,
    which saves the four or so instructions exp2f spends to keep them. -inf gives 0, NaN gives NaN."""
    return T.call_extern("float32", _EX2_FTZ, x)


def warp_sum(x):
    """The int32 x summed over the 32 lanes of the warp, in every lane: one redux.sync.add.s32
    (CUDA's __reduce_add_sync over the full warp, sm_80 and later; every lane must execute it). An
    integer sum is exact in any order, so it stands in for a scan where only a total is needed."""
    return T.call_extern("int32", "__reduce_add_sync", T.uint32(0xFFFFFFFF), x)
