"""Checks of the static arguments every backend factory shares (row width, element type, row stride,
pointer alignment), so each `*_config` function raises the same ValueError for the same mistake
before TileLang builds anything (an exception inside a TileLang build leaves the builder unusable).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["ALIGNMENTS", "element_bytes", "head_staging_bytes", "next_pow2", "row_elements"]

# Base-pointer alignments (bytes) the interfaces pass: the largest power of two <= 16 dividing it.
ALIGNMENTS = (1, 2, 4, 8, 16)
_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8_e4m3": 1, "float8_e4m3fn": 1, "uint8": 1, "int32": 4}


def next_pow2(v: int) -> int:
    """The smallest power of two >= v (v >= 1)."""
    return 1 << (v - 1).bit_length()


def row_elements(
    name: str,
    D: int,
    dtype: str,
    dtypes: Sequence[str],
    x_stride: int,
    *,
    max_D: int | None = None,
    x_align: int | None = None,
    align_below_element: bool = False,
) -> int:
    """Validates the static arguments of a kernel over (rows, D) rows of `dtype` with row stride
    `x_stride`; returns the element size in bytes.

    D must be >= 1 (and <= max_D when given), x_stride >= D, dtype one of `dtypes`; x_align, when
    given, one of ALIGNMENTS and, unless `align_below_element` (kernels whose outputs are narrower
    than their input fold their pointers into x_align), at least the element size.
    """
    if dtype not in dtypes:
        raise ValueError(f"{name}: dtype {dtype!r} is not one of {', '.join(dtypes)}")
    if max_D is not None and not 1 <= D <= max_D:
        raise ValueError(f"{name}: D must be in [1, {max_D}], got {D}")
    if D < 1:
        raise ValueError(f"{name}: D must be >= 1, got {D}")
    if x_stride < D:
        raise ValueError(f"{name}: x_stride {x_stride} is smaller than D {D}")
    elem = element_bytes(dtype)
    if x_align is not None:
        low = 1 if align_below_element else elem
        if x_align not in ALIGNMENTS or x_align < low:
            raise ValueError(f"{name}: x_align must be a power of two in [{low}, 16] for {dtype}, got {x_align}")
    return elem


def element_bytes(dtype: str) -> int:
    """Bytes of one element of a TileLang element type name."""
    return _BYTES[dtype]


def head_staging_bytes(name: str, H: int, Dh: int, dtype: str, copies: int, budget: int) -> int:
    """Bytes of Ascend Unified Buffer that `copies` rows of H heads of Dh `dtype` values take when
    each head starts 32-byte aligned (a DMA's UB address must be); ValueError naming the heads when
    that passes `budget`."""
    staged = copies * H * -(-Dh * element_bytes(dtype) // 32) * 32
    if staged > budget:
        raise ValueError(f"{name}: {H} heads of {Dh} values padded to 32 bytes each need {staged} bytes of Ascend staging, over {budget}")
    return staged
