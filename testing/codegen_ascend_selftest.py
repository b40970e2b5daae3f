"""The UB footprint check of codegen_ascend rejects an oversized kernel and accepts a small one.

Lowering alone would accept both: the oversized kernel's buffer is not multi-buffered in a
pipelined loop, so the auto-scheduler never compares it with the capacity.
"""

import pytest
import tilelang
import tilelang.ascend.language as T

from testing import codegen_ascend


@tilelang.jit(target="ascend")
def staged_copy_tl(elems: int, *, simt: bool = False):
    """Copies `elems` float32 through one UB buffer; `simt` doubles them in a SIMT region."""

    @T.prim_func
    def staged_copy(a: T.Tensor((elems,), "float32"), b: T.Tensor((elems,), "float32")):
        with T.Kernel(1):
            ub = T.alloc_shared((elems,), "float32")
            T.copy(a, ub)
            if simt:
                with T.SimtVF(threads=64):
                    for i in T.Parallel(elems):
                        ub[i] = ub[i] * 2
            T.copy(ub, b)

    return staged_copy


def test_small_kernel_fits():
    codegen_ascend.assert_ub_fits(staged_copy_tl, 1024)
    assert codegen_ascend.ub_footprint_bytes(staged_copy_tl, 1024) == 4096
    assert "__ubuf__" in codegen_ascend.ascend_source(staged_copy_tl, 1024)


def test_oversized_kernel_lowers_but_is_rejected():
    elems = 1_390_000 // 4
    assert "asc_copy_gm2ub" in codegen_ascend.ascend_source(staged_copy_tl, elems)
    assert codegen_ascend.ub_footprint_bytes(staged_copy_tl, elems) == elems * 4
    with pytest.raises(AssertionError, match=rf"staged_copy_tl\({elems}\).*UB footprint {elems * 4} bytes.*{codegen_ascend.UB_CAPACITY_BYTES}"):
        codegen_ascend.assert_ub_fits(staged_copy_tl, elems)


def test_simt_reservation_counts_against_the_ub():
    # 230 KiB fits the 248 KiB UB alone but not beside the 32 KiB SIMT thread context.
    elems = 230 * 1024 // 4
    codegen_ascend.assert_ub_fits(staged_copy_tl, elems)
    assert codegen_ascend.ub_footprint_bytes(staged_copy_tl, elems, simt=True) == elems * 4 + codegen_ascend.SIMT_VF_UB_RESERVE_BYTES
    with pytest.raises(AssertionError, match="UB footprint"):
        codegen_ascend.assert_ub_fits(staged_copy_tl, elems, simt=True)
