"""Bit tricks on 32-bit registers that the CUDA backends share (TileLang expressions, no state)."""

# No `from __future__ import annotations`: TileLang parses the callers' bodies.
import tilelang.language as T


def lowest_set_bit(word):
    """Index (int32) of the lowest set bit of a nonzero uint32: word & -word isolates it, and the
    count of leading zeros places it. A zero word gives -1."""
    return 31 - T.cast(T.clz(word & (T.uint32(0) - word)), "int32")
