"""Numeric helpers: poison values, bitwise comparison, ULP distance."""

from __future__ import annotations

import math

import pytest
import torch

from testing.numeric import (
    as_bits,
    assert_bitwise_equal,
    assert_rejected_without_writes,
    assert_ulp_close,
    case_named,
    case_names,
    chi2_critical,
    poisoned,
    ulp_distance,
)

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn]


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.uint8], ids=str)
def test_poisoned_is_never_a_plain_value(dtype):
    t = poisoned((3, 5), dtype, "cpu")
    if dtype.is_floating_point:
        assert torch.isnan(t.float()).all()
    else:
        assert (t == (torch.iinfo(dtype).min if dtype == torch.int32 else 255)).all()


def test_bitwise_equal_distinguishes_signed_zero_and_nan_payloads():
    a = torch.tensor([0.0, 1.0])
    assert_bitwise_equal(a, a.clone())
    with pytest.raises(AssertionError, match="1 of 2 elements differ; first at \\(0,\\)"):
        assert_bitwise_equal(a, torch.tensor([-0.0, 1.0]))
    nan_a = torch.tensor([math.nan])
    nan_b = as_bits(nan_a.clone()).add_(1).view(torch.float32)
    with pytest.raises(AssertionError):
        assert_bitwise_equal(nan_a, nan_b)


@pytest.mark.parametrize("dtype", FLOATS[:3], ids=str)
def test_ulp_distance_counts_representable_steps(dtype):
    x = (torch.randn(64) * 10).to(dtype)
    for steps in (1, 3):
        y = x.clone()
        for _ in range(steps):
            y = torch.nextafter(y.float(), torch.full_like(y.float(), math.inf)).to(dtype) if dtype == torch.float32 else (
                as_bits(y).add(torch.where(y >= 0, 1, -1).to(as_bits(y).dtype)).view(dtype)
            )
        assert (ulp_distance(y, x) == steps).all()


def test_ulp_distance_across_zero_and_nan():
    a, b = torch.tensor([torch.finfo(torch.float32).tiny * 0]), torch.tensor([-0.0])
    assert int(ulp_distance(a, b)[0]) == 0
    assert int(ulp_distance(torch.tensor([math.nan]), torch.tensor([1.0]))[0]) == 1 << 31
    with pytest.raises(AssertionError, match="max ULP distance"):
        assert_ulp_close(torch.tensor([math.nan]), torch.tensor([math.nan]), max_ulp=4)


def _rejecting(write: bool):
    def fn(out):
        if write:
            out.add_(1)
        raise ValueError("f: out (2, 2) is wrong")

    return fn


def test_rejected_without_writes_passes_when_nothing_is_written():
    out = torch.zeros(2, 2)
    assert_rejected_without_writes(_rejecting(False), {"out": out}, ValueError, "out (2, 2)", [out, None])
    # A meta output holds no data to compare: skipped, not an error.
    meta = torch.zeros(2, 2, device="meta")
    assert_rejected_without_writes(_rejecting(False), {"out": meta}, ValueError, "out (2, 2)", [meta])


def test_rejected_without_writes_catches_a_write_and_a_wrong_message():
    out = torch.zeros(2, 2)
    with pytest.raises(AssertionError, match="wrote"):
        assert_rejected_without_writes(_rejecting(True), {"out": out}, ValueError, "out (2, 2)", [out])
    with pytest.raises(AssertionError):
        assert_rejected_without_writes(_rejecting(False), {"out": out}, ValueError, "other text", [out])


def _two_random_cases():
    return [("a", torch.rand(3)), ("b", torch.rand(3))]


def test_case_names_leave_the_rng_as_it_was():
    state = torch.random.get_rng_state()
    assert case_names(_two_random_cases) == ["a", "b"]
    assert torch.equal(torch.random.get_rng_state(), state)
    with pytest.raises(AssertionError, match="unique"):
        case_names(lambda: [("a", 1), ("a", 2)])


def test_case_named_builds_the_case_from_the_current_seed():
    torch.manual_seed(5)
    first = case_named(_two_random_cases, "b")
    torch.manual_seed(5)
    again = case_named(_two_random_cases, "b")
    assert first[0] == "b" and torch.equal(first[1], again[1]) and first[1] is not again[1]
    torch.manual_seed(6)
    assert not torch.equal(case_named(_two_random_cases, "b")[1], first[1])


def test_chi2_critical_value():
    # Tabulated: chi2(7) upper 1e-4 quantile 29.878; chi2(1) upper 0.05 quantile 3.841.
    assert abs(chi2_critical(7, 1e-4) - 29.878) < 0.01 and abs(chi2_critical(1, 0.05) - 3.841) < 0.01
