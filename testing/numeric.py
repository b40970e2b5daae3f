"""Numeric helpers for kernel tests: poisoned outputs, bit-exact and ULP comparisons, the chi-square
critical values of the sampling kernels' distribution tests."""

from __future__ import annotations

import torch

_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def as_bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bits as a same-size integer tensor (bf16 -> int16, fp8 -> uint8, ...)."""
    return t.view(_SAME_SIZE_INT[t.element_size()])


def poison_value(dtype: torch.dtype) -> float | int:
    """NaN for floating types; the most negative value for signed integers; the max for unsigned."""
    if dtype.is_floating_point:
        return float("nan")
    info = torch.iinfo(dtype)
    return info.min if info.min < 0 else info.max


def poisoned(shape, dtype: torch.dtype, device) -> torch.Tensor:
    """A fresh tensor filled with a value no kernel should produce, so unwritten elements fail.

    fp8 e4m3 has NaN (0x7F); for the integer types the sentinel is a legal value, so tests that use
    it must also draw inputs that avoid it.
    """
    out = torch.empty(shape, dtype=dtype, device=device)
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        as_bits(out).fill_(0x7F)
    else:
        out.fill_(poison_value(dtype))
    return out


# A finite fill for outputs whose elements may rightly be NaN (under the NaN poison a skipped one would
# pass): exact in bf16, fp16 and fp32; a test using it says why its outputs never hold it.
FINITE_POISON = -57344.0

# Two fills for outputs whose every byte value is legal (packed FP4 codes, UE8M0 or e4m3 scale
# bytes): no expected byte equals both, so an element left unwritten fails under one of them.
BYTE_POISONS = (0x7F, 0x80)


def byte_poisoned(shape, dtype: torch.dtype, device, byte: int) -> torch.Tensor:
    """A fresh tensor with every byte set to `byte` (one of BYTE_POISONS)."""
    out = torch.empty(shape, dtype=dtype, device=device)
    out.view(torch.uint8).fill_(byte)
    return out


def assert_bitwise_equal(actual: torch.Tensor, expected: torch.Tensor, what: str = "output") -> None:
    """Exact comparison of shape, dtype and every bit (NaN payloads and -0.0 included)."""
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    a, e = as_bits(actual.contiguous()).cpu(), as_bits(expected.contiguous()).cpu()
    mismatch = a != e
    if bool(mismatch.any()):
        idx = mismatch.nonzero()
        first = tuple(idx[0].tolist())
        raise AssertionError(
            f"{what}: {idx.shape[0]} of {a.numel()} elements differ; first at {first}: "
            f"got {actual.cpu()[first]!r}, expected {expected.cpu()[first]!r}"
        )


def ulp_distance(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Units in the last place between two floating tensors of one dtype (monotone int mapping).

    NaN against anything is reported as the largest distance.
    """
    assert actual.dtype == expected.dtype and actual.dtype.is_floating_point
    bits = 8 * actual.element_size()

    def ordered(t):
        i = as_bits(t.contiguous()).cpu().to(torch.int64)
        if t.element_size() == 1:
            i = torch.where(i >= 128, i - 256, i)  # uint8 view -> signed
        sign_flip = torch.where(i < 0, -(i & ((1 << (bits - 1)) - 1)), i)
        return sign_flip

    dist = (ordered(actual) - ordered(expected)).abs()
    nan = torch.isnan(actual.float().cpu()) | torch.isnan(expected.float().cpu())
    return torch.where(nan, torch.full_like(dist, 1 << (bits - 1)), dist)


def assert_ulp_close(actual: torch.Tensor, expected: torch.Tensor, max_ulp: int, what: str = "output") -> None:
    """Every element within `max_ulp` units in the last place; NaN never passes."""
    dist = ulp_distance(actual, expected)
    worst = int(dist.max()) if dist.numel() else 0
    assert worst <= max_ulp, f"{what}: max ULP distance {worst} > {max_ulp}"


def assert_rejected_without_writes(fn, kwargs: dict, error: type, message: str, written) -> None:
    """fn(**kwargs) raises `error` whose text contains `message` (literally), and none of the `written`
    tensors (the call's outputs; None entries and meta tensors, which hold no data, are skipped)
    changed a bit."""
    import re

    import pytest

    def bits(t: torch.Tensor) -> torch.Tensor:
        return as_bits(t.view(torch.uint8) if t.dtype == torch.bool else t).clone()

    watched = [t for t in written if isinstance(t, torch.Tensor) and t.device.type != "meta"]
    before = [bits(t) for t in watched]
    with pytest.raises(error, match=re.escape(message)):
        fn(**kwargs)
    for t, b in zip(watched, before):
        assert torch.equal(bits(t), b), "a rejected call wrote into one of its outputs"


def near_int32_limit(table: torch.Tensor, per_block: int) -> torch.Tensor:
    """Moves the allocated (non-negative) ids of a block table's columns 0 and 1, in place (a view
    stays a view), next to 2**31 // per_block, where id * per_block + offset crosses 2**31; every
    third row's column 1 becomes 2**31 - 1, whose product needs 37 bits. Returns table."""
    head = table[:, :2]
    big = 2**31 // per_block + torch.randint(-2, 2, head.shape)
    big[::3, 1:] = 2**31 - 1
    head.copy_(torch.where(head >= 0, big.to(head), head))
    return table


def chi2_critical(df: int, alpha: float) -> float:
    """x with P(chi2_df > x) = alpha (bisection on the regularised upper incomplete gamma)."""
    lo, hi = 0.0, 1000.0
    for _ in range(200):
        mid = (lo + hi) / 2
        tail = float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(mid / 2, dtype=torch.float64)))
        lo, hi = (mid, hi) if tail > alpha else (lo, mid)
    return lo


def case_names(factory) -> list[str]:
    """The names (first fields, unique) of the cases factory() returns, to parametrize a test over.
    The cases built here are dropped and the global RNG is left as it was: built at collection,
    their tensors would come from an unseeded RNG and be shared by every test. Each test rebuilds
    its own under its seed with case_named."""
    with torch.random.fork_rng(devices=[]):
        names = [case[0] for case in factory()]
    assert len(set(names)) == len(names), "case names must be unique"
    return names


def case_named(factory, name: str) -> tuple:
    """factory()'s case called `name`, built now (from the calling test's seed)."""
    return next(case for case in factory() if case[0] == name)
