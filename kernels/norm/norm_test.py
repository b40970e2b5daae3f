"""Tests of `norm`: reference vs an fp64 oracle, interface validation, codegen, and the device kernels.

Suites (markers, selected by `--tl-suite`; see testing/plugin.py): ref, codegen_cuda, codegen_ascend,
device. Inputs are drawn fresh per test from the plugin's per-test seed; outputs are poisoned first.

Tolerances (y; the residual sum is always bit-exact):
  * reference vs the fp64 oracle (a numpy float64 loop, correctly rounded to the dtype at the end):
    bf16/fp16 within 1 ULP - the reference's fp32 error (a few fp32 ulps) is far below half an
    ulp of bf16/fp16, so it can only flip a rounding; fp32 within FP32_ORACLE_ULP.
  * kernel vs reference on the device: both compute in fp32 in the same order except the sum of
    squares, so bf16/fp16 within 1 ULP, fp32 within FP32_KERNEL_ULP (two summation orders of up to
    16384 squares; a CPU simulation of the kernel's order against torch's gives at most 6).
  * NaN must appear exactly where the reference has NaN (and nowhere else).

FP8 outputs (q, scale) are exact: the reference against a numpy loop that quantises the
reference's own y group by group, the kernels against quantising the kernel's own y (so the
reduction's 1-ULP freedom in y never shows up as a quantisation difference). A NaN code compares
as NaN whatever its sign (ref.py: the sign of a NaN is not part of the contract).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch

from kernels.norm import api, ref
from kernels.quant import formats
from testing.numeric import FINITE_POISON, as_bits, assert_bitwise_equal, assert_rejected_without_writes, case_named, case_names, poisoned, ulp_distance

DTYPES = list(api.DTYPES)
FP32_ORACLE_ULP = 8
FP32_KERNEL_ULP = 16


def _ulp_bound(dtype: torch.dtype, fp32_bound: int) -> int:
    return fp32_bound if dtype == torch.float32 else 1


def random_rows(t: int, d: int, dtype: torch.dtype, device="cpu", row_stride: int | None = None, col_offset=0, spread=True):
    """(t, d) normal rows with a random per-row scale (10^-2..10^2); with row_stride/col_offset a
    view into a wider tensor."""
    width = (row_stride or d) + col_offset
    base = torch.randn((t, width), device=device)
    if spread:
        base = base * torch.pow(10.0, torch.empty((t, 1), device=device).uniform_(-2, 2))
    return base.to(dtype)[:, col_offset : col_offset + d]


def random_weight(d: int, dtype: torch.dtype, device="cpu") -> torch.Tensor:
    return (1.0 + 0.5 * torch.randn(d, device=device)).to(dtype)


# ----------------------------------------------------------------------------------------------------
# The independent oracle: float64, a Python loop over rows, correct rounding into the dtype.

# (significand bits incl. the implicit one, smallest normal exponent, largest finite value)
_FORMATS = {
    torch.bfloat16: (8, -126, float(torch.finfo(torch.bfloat16).max)),
    torch.float16: (11, -14, float(torch.finfo(torch.float16).max)),
    torch.float32: (24, -126, float(torch.finfo(torch.float32).max)),
    torch.float8_e4m3fn: (4, -6, 448.0),
}


def round_f64(values: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """float64 values rounded once, to nearest-even, into dtype (no float32 detour: no double rounding)."""
    bits, emin, fmax = _FORMATS[dtype]
    v = np.asarray(values, dtype=np.float64)
    out = v.copy()
    finite = np.isfinite(v) & (v != 0)
    _, e = np.frexp(v[finite])  # v = m * 2^e with 0.5 <= |m| < 1
    quantum = np.ldexp(1.0, np.maximum(e - 1, emin) - (bits - 1))  # ulp at v (subnormals: fixed)
    rounded = np.rint(v[finite] / quantum) * quantum  # exact scaling; rint is ties-to-even
    # Past the largest finite value by half an ulp or more rounds to infinity.
    top_quantum = math.ldexp(1.0, math.frexp(fmax)[1] - bits)
    rounded = np.where(np.abs(rounded) > fmax, np.copysign(np.inf, rounded), rounded)
    rounded = np.where(np.abs(v[finite]) >= fmax + top_quantum / 2, np.copysign(np.inf, v[finite]), rounded)
    out[finite] = rounded
    return torch.from_numpy(out).to(dtype)  # every value is representable: the cast is exact


def fp64_oracle(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """y = x / sqrt(mean(x^2) + eps) * w in float64, row by row, rounded once into x's dtype."""
    xs = x.double().numpy()
    w = weight.double().numpy()
    eps32 = float(np.float32(eps))
    y = np.empty_like(xs)
    with np.errstate(invalid="ignore", over="ignore"):
        for i in range(xs.shape[0]):
            row = xs[i]
            ms = sum(float(v) * float(v) for v in row) / row.shape[0]
            # IEEE all the way: a NaN row stays NaN, an Inf row gives r = 0 (NaN where x is Inf).
            y[i] = row * (1.0 / math.sqrt(ms + eps32)) * w
    return round_f64(y, x.dtype)


def assert_norm_close(actual: torch.Tensor, expected: torch.Tensor, max_ulp: int, what: str = "y") -> None:
    """NaN exactly where expected has NaN; every other element within max_ulp (inf must match exactly)."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, what
    a, e = actual.cpu(), expected.cpu()
    nan_a, nan_e = torch.isnan(a.float()), torch.isnan(e.float())
    if not torch.equal(nan_a, nan_e):
        idx = (nan_a != nan_e).nonzero()[0].tolist()
        raise AssertionError(f"{what}: NaN mismatch at {idx}: got {a[tuple(idx)]!r}, expected {e[tuple(idx)]!r}")
    inf_a, inf_e = torch.isinf(a.float()), torch.isinf(e.float())
    # One ulp from the largest finite value is already inf: infinities must match exactly.
    if not torch.equal(inf_a, inf_e) or not torch.equal(a[inf_e], e[inf_e]):
        idx = ((inf_a != inf_e) | (inf_e & (a != e))).nonzero()[0].tolist()
        raise AssertionError(f"{what}: inf mismatch at {idx}: got {a[tuple(idx)]!r}, expected {e[tuple(idx)]!r}")
    keep = ~nan_e
    dist = ulp_distance(a[keep], e[keep])
    if dist.numel() and int(dist.max()) > max_ulp:
        flat = torch.where(keep.flatten())[0][int(dist.argmax())]
        pos = np.unravel_index(int(flat), tuple(a.shape))
        raise AssertionError(
            f"{what}: max ULP distance {int(dist.max())} > {max_ulp} at {pos}: got {a[pos]!r}, expected {e[pos]!r}"
        )


# ----------------------------------------------------------------------------------------------------
# Reference suite.

REF_SHAPES = [(1, 1), (3, 7), (5, 128), (4, 576), (3, 1536), (2, 2880), (2, 7168), (1, 16384)]


@pytest.mark.ref
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("t,d", REF_SHAPES)
@pytest.mark.parametrize("eps", [1e-6, 1e-5, 0.25])
def test_ref_matches_fp64_oracle(dtype, t, d, eps):
    x = random_rows(t, d, dtype, row_stride=d + 5, col_offset=1)
    w = random_weight(d, dtype)
    y = ref.rms_norm_ref(x, w, eps)
    assert y.shape == (t, d) and y.dtype == dtype and y.is_contiguous()
    assert_norm_close(y, fp64_oracle(x, w, eps), _ulp_bound(dtype, FP32_ORACLE_ULP))


def _special_rows(d: int, dtype: torch.dtype) -> tuple[torch.Tensor, dict[str, int]]:
    """Rows of edge cases (and normal rows between them); returns x and {name: row index}."""
    big = {torch.float16: 8e3, torch.bfloat16: 1e15, torch.float32: 1e15}[dtype]  # sum of squares < fp32 max
    tiny = {torch.float16: 1e-7, torch.bfloat16: 1e-39, torch.float32: 1e-39}[dtype]  # subnormal in dtype / fp32
    rows = {
        "zeros": torch.zeros(d),
        "huge": torch.randn(d) * big,
        "tiny": torch.randn(d) * tiny,
        "one_nonzero": torch.zeros(d).index_fill_(0, torch.tensor([d // 2]), -3.0),
        "nan": torch.randn(d).index_fill_(0, torch.tensor([d - 1]), float("nan")),
        "pos_inf": torch.randn(d).index_fill_(0, torch.tensor([0]), float("inf")),
        "neg_inf": torch.randn(d).index_fill_(0, torch.tensor([d // 3]), float("-inf")),
        "inf_and_nan": torch.randn(d).index_fill_(0, torch.tensor([0]), math.inf).index_fill_(0, torch.tensor([d - 1]), math.nan),
    }
    names, out = {}, []
    for name, row in rows.items():
        out.append(torch.randn(d))
        names[name] = len(out)
        out.append(row)
    out.append(torch.randn(d))
    return torch.stack(out).to(dtype), names


@pytest.mark.ref
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("d", [7, 576, 4096])
def test_ref_special_rows(dtype, d):
    x, rows = _special_rows(d, dtype)
    w = random_weight(d, dtype)
    y = ref.rms_norm_ref(x, w, 1e-6)
    # The oracle agrees everywhere, NaN/Inf rows included (IEEE arithmetic in both).
    assert_norm_close(y, fp64_oracle(x, w, 1e-6), _ulp_bound(dtype, FP32_ORACLE_ULP))
    yf = y.float()
    assert torch.equal(yf[rows["zeros"]], torch.zeros(d)), "an all-zero row must give zeros (eps > 0)"
    assert torch.isfinite(yf[rows["huge"]]).all() and torch.isfinite(yf[rows["tiny"]]).all()
    assert torch.isnan(yf[rows["nan"]]).all(), "a NaN row is NaN throughout"
    assert torch.isnan(yf[rows["inf_and_nan"]]).all()
    for name in ("pos_inf", "neg_inf"):
        inf = torch.isinf(x[rows[name]].float())
        assert torch.isnan(yf[rows[name]][inf]).all() and torch.equal(yf[rows[name]][~inf], torch.zeros(d - 1)), name
    bad = {rows[k] for k in ("nan", "inf_and_nan", "pos_inf", "neg_inf")}
    finite_rows = [i for i in range(x.shape[0]) if i not in bad]
    assert torch.isfinite(yf[finite_rows]).all(), "non-finite values leaked into other rows"


@pytest.mark.ref
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_ref_sum_of_squares_overflow_is_documented(dtype):
    # |x| ~ 1e20: x^2 overflows fp32, so the row behaves like an Inf row: y = +-0 (ref.py says so).
    x = torch.full((2, 64), 1e20).to(dtype)
    x[1] = 1.0
    y = ref.rms_norm_ref(x, random_weight(64, dtype), 1e-6).float()
    assert torch.equal(y[0].abs(), torch.zeros(64)) and torch.isfinite(y[1]).all()


@pytest.mark.ref
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("t,d", [(1, 1), (9, 576), (3, 7168), (2, 16384)])
def test_ref_residual_sum_is_exactly_rounded(dtype, t, d):
    x = random_rows(t, d, dtype, row_stride=d + 3)
    residual = random_rows(t, d, dtype)
    w = random_weight(d, dtype)
    s, y = ref.add_rms_norm_ref(x, residual, w, 1e-6)
    # x + residual rounded once from the exact (float64) sum: bit for bit.
    assert_bitwise_equal(s, round_f64(x.double().numpy() + residual.double().numpy(), dtype), what="residual sum")
    # y is the norm of the rounded sum.
    assert_norm_close(y, fp64_oracle(s, w, 1e-6), _ulp_bound(dtype, FP32_ORACLE_ULP))


@pytest.mark.ref
def test_round_f64_matches_torch_where_torch_is_exact(seed):
    # fp64 -> fp32 in numpy is correctly rounded; the oracle's rounding must agree with it, and with
    # torch's float32 -> bf16/fp16 casts (correct) on fp32 inputs, including subnormals and overflow.
    rng = np.random.default_rng(seed)
    v = np.concatenate(
        [
            rng.standard_normal(4096) * 10.0 ** rng.integers(-45, 39, 4096).astype(np.float64),
            [0.0, -0.0, 65504.0, 65519.0, 65520.0, 3.3895e38, 3.4e38, 1e-45, 6e-8, 3e-8, np.inf, -np.inf],
        ]
    )
    with np.errstate(over="ignore"):
        v32 = v.astype(np.float32)
    assert_bitwise_equal(round_f64(v, torch.float32), torch.from_numpy(v32), what="float32")
    for dtype in (torch.bfloat16, torch.float16):
        assert_bitwise_equal(round_f64(v32.astype(np.float64), dtype), torch.from_numpy(v32).to(dtype), what=str(dtype))


@pytest.mark.ref
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cpu_interface_writes_every_element_of_out(dtype):
    x = random_rows(40, 24, dtype, row_stride=31, col_offset=2)
    w = random_weight(24, dtype)
    out = poisoned((40, 24), dtype, "cpu")
    assert api.rms_norm(x, w, eps=1e-5, out=out) is out
    assert_bitwise_equal(out, ref.rms_norm_ref(x, w, 1e-5))
    y = api.rms_norm(x, w)
    assert y.shape == (40, 24) and y.is_contiguous()
    assert_bitwise_equal(y, ref.rms_norm_ref(x, w, 1e-6))


@pytest.mark.ref
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cpu_interface_updates_residual_in_place(dtype):
    x = random_rows(33, 576, dtype, row_stride=600)
    residual = random_rows(33, 576, dtype).contiguous()
    w = random_weight(576, dtype)
    s, y_ref = ref.add_rms_norm_ref(x, residual, w, 1e-6)
    out = poisoned((33, 576), dtype, "cpu")
    ptr = residual.data_ptr()
    assert api.add_rms_norm(x, residual, w, out=out) is out
    assert residual.data_ptr() == ptr
    assert_bitwise_equal(residual, s, what="residual")
    assert_bitwise_equal(out, y_ref)


@pytest.mark.ref
def test_cpu_single_row_with_any_stride():
    x = random_rows(1, 64, torch.bfloat16, row_stride=100)
    x = x.as_strided((1, 64), (7, 1))  # a single row's stride is irrelevant
    w = random_weight(64, torch.bfloat16)
    assert_bitwise_equal(api.rms_norm(x, w), ref.rms_norm_ref(x, w))


@pytest.mark.ref
@pytest.mark.parametrize("t,d", [(0, 64), (0, 0), (5, 0)])
def test_empty_input_calls_nothing(monkeypatch, t, d):
    def fail(*_, **__):
        raise AssertionError("an empty input must not reach the reference or a kernel")

    monkeypatch.setattr(ref, "rms_norm_ref", fail)
    monkeypatch.setattr(ref, "add_rms_norm_ref", fail)
    x = torch.randn(t, d).to(torch.bfloat16)
    w = torch.randn(d).to(torch.bfloat16)
    residual = torch.randn(t, d).to(torch.bfloat16)
    before = residual.clone()
    y = api.rms_norm(x, w)
    assert y.shape == (t, d) and y.dtype == torch.bfloat16
    y = api.add_rms_norm(x, residual, w)
    assert y.shape == (t, d) and torch.equal(residual, before)


def _bad_inputs():
    bf = torch.bfloat16
    x = random_rows(6, 8, bf)
    w = random_weight(8, bf)
    wide = random_rows(6, 16, bf)
    big = torch.zeros(2, 16385, dtype=bf)
    res = lambda: random_rows(6, 8, bf).contiguous()  # noqa: E731
    out = lambda *shape, dtype=bf: poisoned(shape or (6, 8), dtype, "cpu")  # noqa: E731
    shared = torch.zeros(6, 8, dtype=bf)
    common = [
        ("x-not-tensor", dict(x=x.tolist(), weight=w), TypeError, "x must be a torch.Tensor"),
        ("x-float64", dict(x=x.double(), weight=w.double()), TypeError, "x has dtype torch.float64"),
        ("x-int32", dict(x=x.int(), weight=w), TypeError, "x has dtype torch.int32"),
        ("x-1d", dict(x=x[0], weight=w), ValueError, "x must be 2-D"),
        ("x-3d", dict(x=x[None], weight=w), ValueError, "x must be 2-D"),
        ("x-too-wide", dict(x=big, weight=torch.zeros(16385, dtype=bf)), ValueError, "x has width 16385"),
        ("x-last-dim-strided", dict(x=wide[:, ::2], weight=w), ValueError, "x's last dimension must be contiguous"),
        ("x-overlapping-rows", dict(x=wide.as_strided((6, 8), (4, 1)), weight=w), ValueError, "x's row stride 4"),
        ("weight-not-tensor", dict(x=x, weight=w.tolist()), TypeError, "weight must be a torch.Tensor"),
        ("weight-fp32", dict(x=x, weight=w.float()), TypeError, "weight has dtype torch.float32"),
        ("weight-wrong-length", dict(x=x, weight=random_weight(9, bf)), ValueError, "weight must have shape (8,)"),
        ("weight-2d", dict(x=x, weight=w[None]), ValueError, "weight must have shape (8,)"),
        ("weight-strided", dict(x=x, weight=random_weight(16, bf)[::2]), ValueError, "weight must be contiguous"),
        ("weight-other-device", dict(x=x, weight=w.to("meta")), ValueError, "weight is on meta"),
        ("eps-string", dict(x=x, weight=w, eps="1e-6"), TypeError, "eps must be a real number"),
        ("eps-bool", dict(x=x, weight=w, eps=True), TypeError, "eps must be a real number"),
        ("eps-tensor", dict(x=x, weight=w, eps=torch.tensor(1e-6)), TypeError, "eps must be a real number"),
        ("eps-zero", dict(x=x, weight=w, eps=0.0), ValueError, "eps must be positive"),
        ("eps-negative", dict(x=x, weight=w, eps=-1e-6), ValueError, "eps must be positive"),
        ("eps-nan", dict(x=x, weight=w, eps=float("nan")), ValueError, "eps must be positive"),
        ("eps-inf", dict(x=x, weight=w, eps=float("inf")), ValueError, "eps must be positive"),
        ("eps-fp32-underflow", dict(x=x, weight=w, eps=1e-50), ValueError, "eps must be positive"),
        ("eps-fp32-overflow", dict(x=x, weight=w, eps=1e39), ValueError, "eps must be positive"),
        ("out-not-tensor", dict(x=x, weight=w, out=[0.0]), TypeError, "out must be a torch.Tensor"),
        ("out-wrong-shape", dict(x=x, weight=w, out=out(6, 9)), ValueError, "out must be (6, 8)"),
        ("out-wrong-dtype", dict(x=x, weight=w, out=out(6, 8, dtype=torch.float16)), ValueError, "out must be (6, 8)"),
        ("out-strided", dict(x=x, weight=w, out=poisoned((6, 16), bf, "cpu")[:, ::2]), ValueError, "out must be contiguous"),
        ("out-is-x", dict(x=shared, weight=w, out=shared), ValueError, "out overlaps x"),
        ("out-overlaps-weight", dict(x=x, weight=shared[0], out=shared), ValueError, "out overlaps weight"),
        ("x-on-meta", dict(x=x.to("meta"), weight=w.to("meta")), ValueError, "x is on meta; tensors on meta are not supported"),
    ]
    plain = [(f"rms_norm-{n}", api.rms_norm, kw, e, m) for n, kw, e, m in common]
    # The fused function gets the same cases with a valid residual (on x's device, so the error is
    # still the one the case names), plus the residual's own.
    fused = []
    for n, kw, e, m in common:
        device = kw["x"].device if isinstance(kw["x"], torch.Tensor) else "cpu"
        fused.append((f"add_rms_norm-{n}", api.add_rms_norm, {**kw, "residual": res().to(device)}, e, m))
    x_ = random_rows(6, 8, bf)
    for n, r, e, m, extra in [
        ("residual-not-tensor", 0.0, TypeError, "residual must be a torch.Tensor", {}),
        ("residual-fp16", res().half(), TypeError, "residual has dtype torch.float16", {}),
        ("residual-wrong-shape", random_rows(5, 8, bf), ValueError, "residual must have shape (6, 8)", {}),
        ("residual-strided", random_rows(6, 8, bf, row_stride=9), ValueError, "residual must be contiguous", {}),
        ("residual-other-device", res().to("meta"), ValueError, "residual is on meta", {}),
        ("residual-is-x", shared, ValueError, "residual overlaps x", {"x": shared}),
        ("out-is-residual", shared, ValueError, "out overlaps residual", {"out": shared}),
    ]:
        fused.append((f"add_rms_norm-{n}", api.add_rms_norm, {"x": x_, "residual": r, "weight": w, **extra}, e, m))
    return plain + fused


@pytest.mark.ref
@pytest.mark.parametrize("name", case_names(_bad_inputs))
def test_bad_input_raises_and_writes_nothing(name):
    _, fn, kwargs, error, message = case_named(_bad_inputs, name)
    assert_rejected_without_writes(fn, kwargs, error, message, [kwargs.get(k) for k in ("out", "residual")])


# ----------------------------------------------------------------------------------------------------
# FP8 output: reference vs an independent numpy oracle, interface.

FP8_GROUP_SIZES = [16, 32, 64, 128, None]  # None: one scale per token
_E4M3_NAN_BITS = 0x7F


def _group(d: int, group_size) -> int:
    return d if group_size is None else group_size


def fp8_oracle(y: torch.Tensor, group: int, ue8m0: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale) of y (T, D), one numpy float32 group at a time: amax by nanmax, the scale rounded up
    to a power of two with frexp (not the bit trick), e4m3 rounding by round_f64 (not torch's cast)."""
    yv = y.float().numpy()
    t, d = yv.shape
    floor, fmax = np.float32(448.0 * 2.0**-126), np.float32(448.0)
    scale = np.empty((t, d // group), dtype=np.float32)
    scaled = np.empty((t, d), dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        for i in range(t):
            for g in range(d // group):
                vals = yv[i, g * group : (g + 1) * group]
                mag = np.abs(vals[~np.isnan(vals)])
                amax = np.float32(mag.max()) if mag.size else np.float32(0)
                sc = np.float32(max(amax, floor) / fmax)
                if ue8m0 and np.isfinite(sc):
                    mant, exp = math.frexp(float(sc))
                    sc = np.float32(sc if mant == 0.5 else math.ldexp(1.0, exp))
                scale[i, g] = sc
                v = vals * (np.float32(1) / sc)  # float32 arithmetic throughout
                scaled[i, g * group : (g + 1) * group] = np.where(np.isnan(v), v, np.clip(v, -fmax, fmax))
    return round_f64(scaled, torch.float8_e4m3fn), torch.from_numpy(scale)


def assert_fp8_equal(actual: torch.Tensor, expected: torch.Tensor, what: str = "q") -> None:
    """Bit-exact e4m3 codes, except that every NaN code (0x7F or 0xFF) counts as the same NaN."""
    assert actual.dtype == expected.dtype == torch.float8_e4m3fn, what

    def canonical(t):
        bits = as_bits(t.contiguous()).cpu()
        return torch.where((bits & 0x7F) == _E4M3_NAN_BITS, torch.full_like(bits, _E4M3_NAN_BITS), bits)

    assert_bitwise_equal(canonical(actual), canonical(expected), what=what)


def _dividing(widths, group_sizes=FP8_GROUP_SIZES):
    """(d, group_size) pairs where the group divides the width."""
    return [(d, g) for d in widths for g in group_sizes if g is None or d % g == 0]


@pytest.mark.ref
@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32", "ue8m0"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("d,group_size", _dividing([128, 576, 1536, 7168]))
def test_ref_fp8_matches_oracle(dtype, d, group_size, ue8m0):
    t = {128: 1, 576: 3, 1536: 5, 7168: 2}[d]
    x = random_rows(t, d, dtype, row_stride=d + 3, col_offset=1)
    w = random_weight(d, dtype)
    group = _group(d, group_size)
    q, scale, y = ref.rms_norm_fp8_ref(x, w, 1e-6, group, ue8m0)
    assert q.shape == (t, d) and q.dtype == torch.float8_e4m3fn and scale.shape == (t, d // group)
    assert scale.dtype == torch.float32
    assert_bitwise_equal(y, ref.rms_norm_ref(x, w, 1e-6), what="y")
    q_oracle, scale_oracle = fp8_oracle(y, group, ue8m0)
    assert_bitwise_equal(scale, scale_oracle, what="scale")
    assert_fp8_equal(q, q_oracle)


@pytest.mark.ref
@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32", "ue8m0"])
def test_ref_fp8_scales_bound_the_group(ue8m0):
    # fp32 scales map each group's amax onto 448; UE8M0 scales are powers of two, never below the
    # fp32 scale (rounded up, so nothing saturates), which puts the amax in [224, 448].
    x = random_rows(64, 1024, torch.bfloat16)
    w = random_weight(1024, torch.bfloat16)
    q, scale, y = ref.rms_norm_fp8_ref(x, w, 1e-6, 64, ue8m0)
    q_amax = q.float().abs().reshape(64, 16, 64).amax(-1)
    if not ue8m0:
        assert (q_amax == 448).all()
    else:
        assert ((q_amax >= 224) & (q_amax <= 448)).all()
        mant, _ = torch.frexp(scale)
        assert (mant == 0.5).all(), "UE8M0 scales are powers of two"
        assert (scale >= ref.quantize_fp8_ref(y, 64, False)[1]).all()


@pytest.mark.ref
@pytest.mark.parametrize("group_size", [16, None], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_ref_fp8_special_rows(dtype, group_size):
    d = 576
    x, rows = _special_rows(d, dtype)
    w = random_weight(d, dtype)
    group = _group(d, group_size)
    q, scale, y = ref.rms_norm_fp8_ref(x, w, 1e-6, group, False)
    q_oracle, scale_oracle = fp8_oracle(y, group, False)
    assert_bitwise_equal(scale, scale_oracle, what="scale")
    assert_fp8_equal(q, q_oracle)
    qf, floor = q.float(), 2.0**-126
    # The documented edge behaviour (ref.py): zero, NaN and Inf rows all have the floor scale.
    for name in ("zeros", "nan", "inf_and_nan", "pos_inf", "neg_inf"):
        assert (scale[rows[name]] == floor).all(), name
    assert torch.equal(qf[rows["zeros"]], torch.zeros(d))
    assert torch.isnan(qf[rows["nan"]]).all() and torch.isnan(qf[rows["inf_and_nan"]]).all()
    for name in ("pos_inf", "neg_inf"):
        inf = torch.isinf(x[rows[name]].float())
        assert torch.isnan(qf[rows[name]][inf]).all() and torch.equal(qf[rows[name]][~inf].abs(), torch.zeros(d - 1))
    bad = {rows[k] for k in ("nan", "inf_and_nan", "pos_inf", "neg_inf")}
    assert torch.isfinite(qf[[i for i in range(x.shape[0]) if i not in bad]]).all()


@pytest.mark.ref
def test_ref_fp8_inf_in_y_gives_an_inf_scale():
    # fp16 overflow in y (a huge weight): the group's scale is Inf, its finite values encode as 0.
    y = torch.tensor([[1.0, -2.0, float("inf"), 3.0] * 4, [1.0] * 16], dtype=torch.float16)
    q, scale = ref.quantize_fp8_ref(y, 16, True)
    assert math.isinf(scale[0, 0]) and scale[1, 0] == 2.0**-8  # 1/448 rounded up
    assert torch.isnan(q[0].float()[2::4]).all() and (q[0].float()[[0, 1, 3]] == 0).all()
    q_oracle, scale_oracle = fp8_oracle(y, 16, True)
    assert_bitwise_equal(scale, scale_oracle, what="scale")
    assert_fp8_equal(q, q_oracle)


@pytest.mark.ref
@pytest.mark.parametrize("group_size", [128, None], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_ref_add_fp8_quantises_the_norm_of_the_rounded_sum(dtype, group_size):
    x = random_rows(9, 1536, dtype, row_stride=1600)
    residual = random_rows(9, 1536, dtype)
    w = random_weight(1536, dtype)
    group = _group(1536, group_size)
    s, q, scale, y = ref.add_rms_norm_fp8_ref(x, residual, w, 1e-6, group, True)
    s_ref, y_ref = ref.add_rms_norm_ref(x, residual, w, 1e-6)
    assert_bitwise_equal(s, s_ref, what="residual sum")
    assert_bitwise_equal(y, y_ref, what="y")
    q_oracle, scale_oracle = fp8_oracle(y, group, True)
    assert_bitwise_equal(scale, scale_oracle, what="scale")
    assert_fp8_equal(q, q_oracle)


@pytest.mark.ref
def test_fp8_oracle_rounds_like_torch_where_torch_is_exact():
    # round_f64 into e4m3 against torch's (correct, nearest-even) float32 -> e4m3 cast, on values
    # already within +-448: subnormals, ties and the top of the range included.
    edges = torch.tensor([0.0, -0.0, 448.0, -448.0, 440.0, 2.0**-9, 2.0**-10, 3 * 2.0**-10, 0.5625 * 2.0**-6])
    v = torch.cat([torch.randn(4096) * 10.0 ** torch.randint(-4, 3, (4096,)).float(), edges]).clamp(-448, 448)
    assert_fp8_equal(round_f64(v.double().numpy(), torch.float8_e4m3fn), v.to(torch.float8_e4m3fn))


def _poisoned_scale(t: int, groups: int, layout: str, device="cpu") -> torch.Tensor:
    if layout == "row":
        return poisoned((t, groups), torch.float32, device)
    return poisoned((groups, formats.tma_aligned_rows(t)), torch.float32, device).t()[:t]


def assert_scale_padding_untouched(scale: torch.Tensor, layout: str, what: str) -> None:
    """A tma_col scale view's padding rows T..T_pad-1 (in the buffer behind the (T, groups) view)
    still hold _poisoned_scale's NaN: the kernels never write them."""
    t, groups = scale.shape
    t_pad = formats.tma_aligned_rows(t)
    if layout == "tma_col" and t_pad > t:
        padding = scale.as_strided((groups, t_pad), (t_pad, 1))[:, t:]
        assert torch.isnan(padding).all(), f"{what}: a padding row of the tma_col scales was written"


@pytest.mark.ref
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("layout", ["row", "tma_col"])
@pytest.mark.parametrize("t", [1, 6, 33])
def test_cpu_fp8_interface_writes_every_output(residual, layout, t):
    d, dtype = 256, torch.bfloat16
    x = random_rows(t, d, dtype, row_stride=300, col_offset=2)
    w = random_weight(d, dtype)
    res = random_rows(t, d, dtype).contiguous()
    q = poisoned((t, d), torch.float8_e4m3fn, "cpu")
    scale = _poisoned_scale(t, 2, layout)
    y = poisoned((t, d), dtype, "cpu")
    kwargs = dict(group_size=128, ue8m0=True, scale_layout=layout, return_y=True, out=q, scale_out=scale, y_out=y)
    if residual:
        s_ref, q_ref, scale_ref, y_ref = ref.add_rms_norm_fp8_ref(x, res, w, 1e-6, 128, True)
        got = api.add_rms_norm_fp8(x, res, w, **kwargs)
        assert_bitwise_equal(res, s_ref, what="residual")
    else:
        q_ref, scale_ref, y_ref = ref.rms_norm_fp8_ref(x, w, 1e-6, 128, True)
        got = api.rms_norm_fp8(x, w, **kwargs)
    assert got[0] is q and got[1] is scale and got[2] is y
    assert_fp8_equal(q, q_ref)
    assert_bitwise_equal(scale, scale_ref, what="scale")
    assert_scale_padding_untouched(scale, layout, "cpu interface")
    assert_bitwise_equal(y, y_ref, what="y")


@pytest.mark.ref
@pytest.mark.parametrize("layout", ["row", "tma_col"])
@pytest.mark.parametrize("t", [1, 5, 8])
def test_cpu_fp8_allocates_the_scale_layout(layout, t):
    x = random_rows(t, 512, torch.bfloat16)
    w = random_weight(512, torch.bfloat16)
    q, scale = api.rms_norm_fp8(x, w, group_size=64, scale_layout=layout)
    assert q.shape == (t, 512) and q.dtype == torch.float8_e4m3fn and q.is_contiguous()
    assert scale.shape == (t, 8) and scale.dtype == torch.float32
    if layout == "row":
        assert scale.is_contiguous()
    else:
        pad = -(-t // 4) * 4
        assert scale.stride() == (1, pad) and scale.untyped_storage().nbytes() >= 8 * pad * 4
    q_ref, scale_ref, _ = ref.rms_norm_fp8_ref(x, w, 1e-6, 64, False)
    assert_fp8_equal(q, q_ref)
    assert_bitwise_equal(scale, scale_ref, what="scale")
    # Per token: one scale per row; without return_y, two outputs.
    got = api.rms_norm_fp8(x, w, group_size=None, scale_layout=layout)
    assert len(got) == 2 and got[1].shape == (t, 1)
    assert_bitwise_equal(got[1], ref.rms_norm_fp8_ref(x, w, 1e-6, 512, False)[1], what="per-token scale")


@pytest.mark.ref
@pytest.mark.parametrize("t,d", [(0, 128), (0, 0), (5, 0)])
def test_fp8_empty_input_calls_nothing(monkeypatch, t, d):
    def fail(*_, **__):
        raise AssertionError("an empty input must not reach the reference or a kernel")

    for fn in ("rms_norm_fp8_ref", "add_rms_norm_fp8_ref", "quantize_fp8_ref"):
        monkeypatch.setattr(ref, fn, fail)
    x = torch.randn(t, d).to(torch.bfloat16)
    w = torch.randn(d).to(torch.bfloat16)
    residual = torch.randn(t, d).to(torch.bfloat16)
    before = residual.clone()
    q, scale, y = api.rms_norm_fp8(x, w, group_size=None, scale_layout="tma_col", return_y=True)
    assert q.shape == (t, d) and y.shape == (t, d) and scale.shape[0] == t
    q, scale = api.add_rms_norm_fp8(x, residual, w)
    assert q.shape == (t, d) and scale.shape == (t, d // 128) and torch.equal(residual, before)


def _fp8_bad_inputs():
    bf, fp8, f32 = torch.bfloat16, torch.float8_e4m3fn, torch.float32
    x = random_rows(6, 256, bf)
    w = random_weight(256, bf)
    kw = lambda **extra: dict(x=x, weight=w, **extra)  # noqa: E731
    q = lambda *shape, dtype=fp8: poisoned(shape or (6, 256), dtype, "cpu")  # noqa: E731
    row_scale = lambda *shape, dtype=f32: poisoned(shape or (6, 2), dtype, "cpu")  # noqa: E731
    tma = dict(scale_layout="tma_col")
    # Contiguous views of one byte buffer: a bf16 (6, 256) and an e4m3 (6, 256) over its first half.
    raw = torch.zeros(6 * 256 * 2, dtype=torch.uint8)
    shared_x, shared_q = raw.view(bf).view(6, 256), raw[: 6 * 256].view(fp8).view(6, 256)
    narrow = dict(x=x[:, :144], weight=w[:144].contiguous())
    cases = [
        ("x-float64", dict(x=x.double(), weight=w.double()), TypeError, "x has dtype torch.float64"),
        ("x-fp8", dict(x=x.to(fp8), weight=w), TypeError, "x has dtype torch.float8_e4m3fn"),
        ("weight-fp32", dict(x=x, weight=w.float()), TypeError, "weight has dtype torch.float32"),
        ("group-not-dividing", narrow, ValueError, "group_size 128 does not divide the width 144"),
        ("group-256", kw(group_size=256), ValueError, "group_size must be None"),
        ("group-8", kw(group_size=8), ValueError, "group_size must be None"),
        ("group-bool", kw(group_size=True), TypeError, "group_size must be an int or None, got bool"),
        ("group-string", kw(group_size="128"), TypeError, "group_size must be an int or None, got str"),
        ("group-float", kw(group_size=128.0), TypeError, "group_size must be an int or None, got float"),
        ("layout-unknown", kw(scale_layout="col"), ValueError, "scale_layout must be one of"),
        ("layout-none", kw(scale_layout=None), ValueError, "scale_layout must be one of"),
        ("ue8m0-int", kw(ue8m0=1), TypeError, "ue8m0 must be a bool"),
        ("return_y-none", kw(return_y=None), TypeError, "return_y must be a bool"),
        ("eps-zero", kw(eps=0.0), ValueError, "eps must be positive"),
        ("out-bf16", kw(out=q(dtype=bf)), ValueError, "out must be (6, 256) torch.float8_e4m3fn"),
        ("out-uint8", kw(out=q(dtype=torch.uint8)), ValueError, "out must be (6, 256) torch.float8_e4m3fn"),
        ("out-wrong-shape", kw(out=q(6, 128)), ValueError, "out must be (6, 256)"),
        ("scale-too-small", kw(scale_out=row_scale(6, 1)), ValueError, "scale_out must be (6, 2)"),
        ("scale-too-few-rows", kw(scale_out=row_scale(5, 2)), ValueError, "scale_out must be (6, 2)"),
        ("scale-per-token-shape", kw(group_size=None, scale_out=row_scale()), ValueError, "scale_out must be (6, 1)"),
        ("scale-bf16", kw(scale_out=row_scale(dtype=bf)), ValueError, "scale_out must be (6, 2) torch.float32"),
        ("scale-not-tensor", kw(scale_out=[0.0] * 12), TypeError, "scale_out must be a torch.Tensor"),
        ("scale-row-but-tma", kw(scale_out=_poisoned_scale(6, 2, "tma_col")), ValueError, "scale_out must be contiguous"),
        ("scale-tma-but-row", kw(scale_out=row_scale(), **tma), ValueError, "scale_out must have strides (1, 8)"),
        ("scale-tma-unpadded", kw(scale_out=row_scale(2, 6).t(), **tma), ValueError, "scale_out must have strides (1, 8)"),
        ("scale-tma-too-small", kw(scale_out=_poisoned_scale(6, 1, "tma_col"), **tma), ValueError, "scale_out must be (6, 2)"),
        ("scale-tma-bf16", kw(scale_out=_poisoned_scale(6, 2, "tma_col").to(bf), **tma), ValueError, "scale_out must be (6, 2) torch.float32"),
        ("y-without-return_y", kw(y_out=q(dtype=bf)), ValueError, "y_out is given but return_y is False"),
        ("y-wrong-dtype", kw(return_y=True, y_out=q(dtype=torch.float16)), ValueError, "y_out must be (6, 256) torch.bfloat16"),
        ("out-overlaps-x", dict(x=shared_x, weight=w, out=shared_q), ValueError, "out overlaps x"),
        ("scale-overlaps-weight", kw(scale_out=w.view(f32)[:12].view(6, 2)), ValueError, "scale_out overlaps weight"),
        ("y-overlaps-out", kw(return_y=True, out=shared_q, y_out=shared_x), ValueError, "out overlaps y_out"),
    ]
    plain = [(f"rms_norm_fp8-{n}", api.rms_norm_fp8, kwargs, e, m) for n, kwargs, e, m in cases]
    fused = []
    for n, kwargs, e, m in cases:
        residual = random_rows(6, kwargs["x"].shape[1], bf).contiguous()
        fused.append((f"add_rms_norm_fp8-{n}", api.add_rms_norm_fp8, {**kwargs, "residual": residual}, e, m))
    scale_in_residual = raw[:48].view(f32).view(6, 2)
    fused.append(
        (
            "add_rms_norm_fp8-scale-overlaps-residual",
            api.add_rms_norm_fp8,
            {"x": x, "weight": w, "residual": shared_x, "scale_out": scale_in_residual},
            ValueError,
            "scale_out overlaps residual",
        )
    )
    return plain + fused


@pytest.mark.ref
@pytest.mark.parametrize("name", case_names(_fp8_bad_inputs))
def test_fp8_bad_input_raises_and_writes_nothing(name):
    _, fn, kwargs, error, message = case_named(_fp8_bad_inputs, name)
    written = [kwargs.get(k) for k in ("out", "scale_out", "y_out", "residual")]
    assert_rejected_without_writes(fn, kwargs, error, message, written)


# ----------------------------------------------------------------------------------------------------
# Codegen (CPU): every configuration the dispatcher can pick lowers, compiles and fits on chip.

# The alignments the interface can pass (it folds every operand's base pointer into x_align).
_ALIGNS = (1, 2, 4, 8, 16)
_ELEM_DTYPE = {2: "bfloat16", 4: "float32"}
FACTORIES = ("rmsnorm_tl", "add_rmsnorm_tl")


def _worst_case_steps(config_of, configs) -> dict[tuple[int, int], int]:
    """{(element bytes, vector bytes): most vectors per thread} over the given factory arguments,
    config_of(D, dtype, x_stride, x_align) giving the launch shape."""
    worst: dict[tuple[int, int], int] = {}
    for d, dtype, stride, align in configs:
        cfg = config_of(d, dtype, stride, align)
        key = (4 if dtype == "float32" else 2, cfg.vector_bytes)
        worst[key] = max(worst.get(key, 0), cfg.steps)
    return worst


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_cuda_shipped_configs_cover_every_reachable_width(residual):
    # Register pressure grows with the vectors a thread holds: for every (element size, vector
    # width) class that any D in 1..16384 and any alignment reach, the shipped set must hold that
    # class's worst case (which the spill test then compiles). The fused kernel's shape is
    # add_norm_config's.
    from kernels.norm import cuda

    config_of = cuda.add_norm_config if residual else functools.partial(cuda.norm_config, residual=False)
    reachable = [(d, _ELEM_DTYPE[e], d, a) for e in (2, 4) for a in _ALIGNS if a >= e for d in range(1, cuda.MAX_D + 1)]
    shipped = cuda.norm_shipped_configs()
    assert _worst_case_steps(config_of, shipped) == _worst_case_steps(config_of, reachable)
    assert {c[1] for c in shipped} == set(api.DTYPES.values())
    # Every reachable configuration holds at most 32 registers' worth of row data per thread, in
    # one block of at most 1024 threads.
    inputs = 2 if residual else 1
    for d, dtype, stride, align in reachable:
        cfg = config_of(d, dtype, stride, align)
        words = cfg.steps * max(cfg.vector_elems, cfg.vector_bytes * inputs // 4)
        assert cfg.threads <= 1024 and words <= 32, (d, dtype, align, cfg)


def _cuda_configs():
    from kernels.norm import cuda

    return cuda.norm_shipped_configs()


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("factory", FACTORIES)
@pytest.mark.parametrize("config", _cuda_configs(), ids=lambda c: "-".join(map(str, c)))
def test_cuda_config_compiles_without_spills(arch, factory, config):
    from kernels.norm import cuda
    from testing import codegen_cuda

    d, dtype, stride, align = config
    fn = getattr(cuda, factory)
    # Built as the interface builds it for these archs: a programmatic dependent launch.
    lowered = codegen_cuda.lower_cuda(fn, d, dtype, 1e-6, stride, x_align=align, arch=arch, pdl=True)
    # 64-bit offsets: the row is widened before it meets the stride.
    assert "int64_t" in lowered.source
    assert "rsqrtf" in lowered.source
    # check_cuda_resources asserts 0 spill bytes, no stack frame and shared memory within the limit.
    report = codegen_cuda.check_cuda_resources(fn, d, dtype, 1e-6, stride, x_align=align, arch=arch, pdl=True)
    assert report.spill_store_bytes == report.spill_load_bytes == report.stack_frame_bytes == 0


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("factory", [*FACTORIES, "rmsnorm_fp8_tl", "add_rmsnorm_fp8_tl"])
def test_cuda_dependent_launch_waits_before_memory(factory):
    # pdl=True: nvcc keeps every global access (the weight's read-only loads included) after the
    # wait for the grids before, but the weight's L2 prefetch, which is there to overlap them;
    # pdl=False emits neither call.
    from kernels.norm import cuda
    from testing import codegen_cuda

    fn = getattr(cuda, factory)
    args = (7168, "bfloat16", 1e-6, 7168) + ((128,) if "fp8" in factory else ())
    assert codegen_cuda.check_dependent_launch(fn, *args), "no weight prefetch before the wait"


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("eps", [1e-6, 1.1920929e-07, 0.1])
def test_cuda_eps_is_compiled_exactly(eps):
    # The factory rounds eps to fp32 once; the constant the kernel adds must be exactly that value.
    import re

    from kernels.norm import cuda
    from testing import codegen_cuda

    source = codegen_cuda.cuda_source(cuda.rmsnorm_tl, 576, "bfloat16", eps, 576)
    literal = re.search(r"rsqrtf\(\(\(.*\) \+ (-?0x[0-9a-fA-F.]+p[-+]?\d+)f", source)
    assert literal, "no eps constant next to rsqrtf"
    assert float.fromhex(literal.group(1)) == float(np.float32(eps))
    # (Checked on the shared helper: an exception raised inside a TileLang build leaves its builder
    # unusable for the rest of the process.)
    with pytest.raises(ValueError, match="eps must be positive"):
        cuda.fp32_eps(0.0)


FP8_FACTORIES = ("rmsnorm_fp8_tl", "add_rmsnorm_fp8_tl")
# (ue8m0, scale_layout, with_y): the last is the heaviest (most registers), compiled for every config.
FP8_VARIANTS = [(u, lay, wy) for u in (False, True) for lay in ("row", "tma_col") for wy in (False, True)]


def _fp8_cuda_configs():
    from kernels.norm import cuda

    return cuda.fp8_shipped_configs()


def _fp8_kwargs(align, variant) -> dict:
    ue8m0, layout, with_y = variant
    return dict(x_align=align, ue8m0=ue8m0, scale_layout=layout, with_y=with_y)


@pytest.mark.codegen_cuda
def test_cuda_fp8_shipped_configs_cover_every_path():
    from kernels.norm import cuda

    shipped = cuda.fp8_shipped_configs()
    shapes = [cuda.fp8_config(d, dt, s, g, "row", a) for d, dt, s, a, g in shipped]
    groups = [grp for _, grp in shapes]
    assert {c[1] for c in shipped} == set(api.DTYPES.values())
    assert {g for d, _, _, _, g in shipped if g != d} == set(ref.FP8_GROUPS) and any(g == d for d, *_, g in shipped)
    assert {576, 1536, 4096, 7168, 16384} <= {c[0] for c in shipped} and any(s > d for d, _, s, *_ in shipped)
    per_group = [grp for grp in groups if grp.groups > 1]
    assert any(g.group_steps > 1 for g in per_group), "a group spanning several steps of a short row"
    assert any(g.group_warps > 1 for g in per_group), "a group spanning several warps"
    assert any(g.group_warps > 1 for g in groups if g.groups == 1), "a row per token of several warps"
    assert any(g.lanes < 32 and g.group_steps == 1 for g in per_group), "groups within a warp"
    partial = [cfg.row_vectors % cfg.threads_per_row for cfg, _ in shapes]
    assert any(partial), "a partial last step"
    # For each (element size, vector width) class the most steps any width and alignment reach
    # (one scale per token: per-group rows never take more steps) is shipped.
    worst: dict[tuple[int, int], int] = {}
    for e in (2, 4):
        for a in (x for x in _ALIGNS if x >= e):
            for d in range(1, cuda.MAX_D + 1):
                cfg, _ = cuda.fp8_config(d, _ELEM_DTYPE[e], d, d, "row", a)
                worst[e, cfg.vector_bytes] = max(worst.get((e, cfg.vector_bytes), 0), cfg.steps)
                # Every per-group configuration maps whole groups to lanes and steps.
                for g in (g for g in ref.FP8_GROUPS if d % g == 0 and g != d):
                    cfg, grp = cuda.fp8_config(d, _ELEM_DTYPE[e], d, g, "row", a)
                    tpr = cfg.threads_per_row
                    assert grp.lanes * grp.group_steps == grp.group_vectors and tpr % grp.lanes == 0, (d, e, a, g)
                    assert cfg.steps % grp.group_steps == 0 and cfg.row_vectors % tpr % grp.lanes == 0, (d, e, a, g)
                    assert cfg.threads <= 1024 and cfg.steps <= worst[e, cfg.vector_bytes], (d, e, a, g)
    shipped_worst: dict[tuple[int, int], int] = {}
    for (d, dt, *_), (cfg, _) in zip(shipped, shapes):
        key = (4 if dt == "float32" else 2, cfg.vector_bytes)
        shipped_worst[key] = max(shipped_worst.get(key, 0), cfg.steps)
    assert shipped_worst == worst


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("factory", FP8_FACTORIES)
@pytest.mark.parametrize("config", _fp8_cuda_configs(), ids=lambda c: "-".join(map(str, c)))
def test_cuda_fp8_config_compiles_without_spills(arch, factory, config):
    from kernels.norm import cuda
    from testing import codegen_cuda

    d, dtype, stride, align, group = config
    fn = getattr(cuda, factory)
    # Built as the interface builds it for these archs: a programmatic dependent launch.
    kwargs = dict(_fp8_kwargs(align, FP8_VARIANTS[-1]), pdl=True)
    source = codegen_cuda.lower_cuda(fn, d, dtype, 1e-6, stride, group, arch=arch, **kwargs).source
    assert "int64_t" in source and "rsqrtf" in source
    # The e4m3 output is stored, and (ue8m0) the scale is read off the amax's bits above its
    # mantissa field (tl_formats.group_scale masks 0x7FFFFF = 8388607).
    assert "fp8_e4_t" in source and "8388607" in source
    report = codegen_cuda.check_cuda_resources(fn, d, dtype, 1e-6, stride, group, arch=arch, **kwargs)
    assert report.spill_store_bytes == report.spill_load_bytes == report.stack_frame_bytes == 0


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("factory", FP8_FACTORIES)
@pytest.mark.parametrize("variant", FP8_VARIANTS[:-1], ids=lambda v: "-".join(map(str, v)))
@pytest.mark.parametrize(
    "config",
    [(7168, "bfloat16", 7168, 16, 128), (4096, "bfloat16", 4096, 16, 64), (576, "bfloat16", 577, 4, 576)],
    ids=lambda c: "-".join(map(str, c)),
)
def test_cuda_fp8_variants_compile_without_spills(arch, factory, variant, config):
    # The other (ue8m0, layout, with_y) variants, on the model width, the configuration with the
    # least register headroom (128 threads at 64 registers) and a per-token row of narrow vectors.
    from kernels.norm import cuda
    from testing import codegen_cuda

    d, dtype, stride, align, group = config
    fn = getattr(cuda, factory)
    kwargs = dict(_fp8_kwargs(align, variant), pdl=True)
    source = codegen_cuda.lower_cuda(fn, d, dtype, 1e-6, stride, group, arch=arch, **kwargs).source
    # with_y adds y's argument and store; nothing else changes the signature.
    assert (" y," in source or "* __restrict__ y" in source) == variant[2]
    assert ("8388607" in source) == variant[0]
    codegen_cuda.check_cuda_resources(fn, d, dtype, 1e-6, stride, group, arch=arch, **kwargs)


@pytest.mark.codegen_cuda
def test_cuda_fp8_config_rejects_bad_static_arguments():
    # Checked on fp8_config (what the factories call first): an exception raised inside a TileLang
    # build leaves its builder unusable for the rest of the process.
    from kernels.norm import cuda

    with pytest.raises(ValueError, match="group must be D"):
        cuda.fp8_config(576, "bfloat16", 576, 128)
    with pytest.raises(ValueError, match="group must be D"):
        cuda.fp8_config(512, "bfloat16", 512, 256)
    with pytest.raises(ValueError, match="scale_layout"):
        cuda.fp8_config(512, "bfloat16", 512, 128, "col")


def _asc_configs():
    from kernels.norm import asc

    return asc.norm_shipped_configs()


@pytest.mark.codegen_ascend
@pytest.mark.parametrize("factory", FACTORIES)
@pytest.mark.parametrize("config", _asc_configs(), ids=lambda c: "-".join(map(str, c)))
def test_ascend_config_lowers_and_fits_ub(factory, config):
    from kernels.norm import asc
    from testing import codegen_ascend

    d, dtype, stride, align = config
    fn = getattr(asc, factory)
    source = codegen_ascend.ascend_source(fn, d, dtype, 1e-6, stride, x_align=align)
    assert "__global__" in source or "__aicore__" in source
    codegen_ascend.assert_ub_fits(fn, d, dtype, 1e-6, stride, x_align=align)
    # The tiling's own account of its UB bounds what the lowered kernel allocates.
    cfg = asc.norm_config(d, dtype, stride, residual=factory == "add_rmsnorm_tl")
    assert codegen_ascend.ub_footprint_bytes(fn, d, dtype, 1e-6, stride, x_align=align) <= cfg.ub_bytes


@pytest.mark.codegen_ascend
def test_ascend_tiles_fit_for_every_width():
    # The tiling alone bounds the footprint; the shipped configs are checked on the lowered kernel.
    from kernels.norm import asc
    from testing import codegen_ascend

    for dtype in asc.DTYPES:
        for residual in (False, True):
            for d in range(1, asc.MAX_D + 1):
                cfg = asc.norm_config(d, dtype, d, residual=residual)
                assert cfg.ub_bytes <= codegen_ascend.UB_CAPACITY_BYTES, (d, dtype, residual, cfg)


@pytest.mark.codegen_ascend
def test_ascend_shipped_configs_cover_the_tiling():
    from kernels.norm import asc

    configs = asc.norm_shipped_configs()
    plain = [asc.norm_config(d, dt, s, residual=False) for d, dt, s, _ in configs]
    fused = [asc.norm_config(d, dt, s, residual=True) for d, dt, s, _ in configs]
    assert {c[1] for c in configs} == set(asc.DTYPES)
    assert {c.stages for c in fused} == {1, 2} and {c.stages for c in plain} == {2}
    assert {c.rows for c in plain} >= {1, 64} and any(1 < c.rows < 64 for c in plain)
    assert any(c.tail and c.full_vregs for c in plain) and any(c.tail and not c.full_vregs for c in plain)
    assert any(not c.tail for c in plain) and any(s > d for d, _, s, _ in configs)


# ----------------------------------------------------------------------------------------------------
# Device: the backend's kernels against the reference, on the accelerator.

DEVICE_D = [128, 576, 1536, 2880, 4096, 7168, 16384]
DEVICE_T = [0, 1, 7, 65, 4096]


# A second poison for outputs whose rows may rightly be all NaN (a NaN input row): testing.numeric's
# FINITE_POISON, which no norm output reaches (|y| <= sqrt(D) * max|w|, a few hundred here), and
# -0.0 (0x80) for e4m3 codes.
FINITE_POISON_E4M3 = 0x80


def _output(shape, dtype, device, finite_poison: bool) -> torch.Tensor:
    """A poisoned output: NaN (0x7F for e4m3), or the finite poison when finite_poison."""
    if not finite_poison:
        return poisoned(shape, dtype, device)
    if dtype == torch.float8_e4m3fn:
        out = torch.empty(shape, dtype=dtype, device=device)
        out.view(torch.uint8).fill_(FINITE_POISON_E4M3)
        return out
    return torch.full(shape, FINITE_POISON, dtype=dtype, device=device)


def _check_device(device, dtype, t, d, *, residual: bool, row_stride=None, col_offset=0, eps=1e-6, x=None, finite_poison=False):
    if x is None:
        x = random_rows(t, d, dtype, device=device, row_stride=row_stride, col_offset=col_offset)
    w = random_weight(d, dtype, device=device)
    out = _output((t, d), dtype, device, finite_poison)
    tol = _ulp_bound(dtype, FP32_KERNEL_ULP)
    what = f"{'add_' if residual else ''}rms_norm {dtype} T={t} D={d}"
    if residual:
        res = random_rows(t, d, dtype, device=device).contiguous()
        s_ref, y_ref = ref.add_rms_norm_ref(x, res, w, eps)
        assert api.add_rms_norm(x, res, w, eps=eps, out=out) is out
        assert_bitwise_equal(res, s_ref, what=f"{what} residual")
    else:
        y_ref = ref.rms_norm_ref(x, w, eps)
        assert api.rms_norm(x, w, eps=eps, out=out) is out
    assert_norm_close(out, y_ref, tol, what=what)


@pytest.mark.device
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("d", DEVICE_D)
@pytest.mark.parametrize("t", DEVICE_T)
def test_device_rms_norm(device, dtype, d, t):
    _check_device(device, dtype, t, d, residual=False)


@pytest.mark.device
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("d", DEVICE_D)
@pytest.mark.parametrize("t", DEVICE_T)
def test_device_add_rms_norm(device, dtype, d, t):
    _check_device(device, dtype, t, d, residual=True)


@pytest.mark.device
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "d,row_stride,col_offset",
    [(4096, 7168, 0), (7168, 7168 + 64, 0), (576, 577, 0), (2880, 3000, 3), (16384, 16385, 1), (1000, 1003, 1), (7, 9, 1)],
)
def test_device_strided_and_misaligned_rows(device, residual, dtype, d, row_stride, col_offset):
    # Odd strides and offsets shrink the vectors (down to one element); a view into a wider tensor.
    _check_device(device, dtype, 300, d, residual=residual, row_stride=row_stride, col_offset=col_offset)


@pytest.mark.device
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("d", [576, 7168])
def test_device_special_rows(device, residual, dtype, d):
    # Zero, huge, tiny (subnormal: no flush to zero), NaN and Inf rows next to normal ones; twice,
    # since a NaN row's expected output equals the NaN poison.
    x, _ = _special_rows(d, dtype)
    for finite_poison in (False, True):
        _check_device(device, dtype, x.shape[0], d, residual=residual, x=x.to(device), finite_poison=finite_poison)


@pytest.mark.device
@pytest.mark.parametrize("eps", [1e-5, 0.1, 1.1920929e-07])
def test_device_other_eps(device, eps):
    _check_device(device, torch.bfloat16, 65, 7168, residual=False, eps=eps)
    _check_device(device, torch.float32, 65, 576, residual=True, eps=eps)


@pytest.mark.device
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_device_64bit_offsets(device, residual):
    # t * D passes 2**31 elements: rows near the end sit past any 32-bit offset.
    d = 16384
    t = (2**31) // d + 64
    x = torch.randn((t, d), device=device, dtype=torch.bfloat16)
    w = random_weight(d, torch.bfloat16, device=device)
    out = poisoned((t, d), torch.bfloat16, device)
    check = torch.cat([torch.arange(0, 8), torch.arange(t - 72, t)]).to(device)
    if residual:
        res = torch.randn((t, d), device=device, dtype=torch.bfloat16)
        s_ref, y_ref = ref.add_rms_norm_ref(x[check], res[check], w)
        api.add_rms_norm(x, res, w, out=out)
        assert_bitwise_equal(res[check], s_ref, what="residual")
    else:
        y_ref = ref.rms_norm_ref(x[check], w)
        api.rms_norm(x, w, out=out)
    assert_norm_close(out[check], y_ref, 1)


@pytest.mark.device
def test_device_empty_batch_launches_nothing(device, no_kernel_launches):
    x = random_rows(0, 7168, torch.bfloat16, device=device)
    w = random_weight(7168, torch.bfloat16, device=device)
    assert api.rms_norm(x, w).shape == (0, 7168)
    assert api.add_rms_norm(x, x.clone(), w).shape == (0, 7168)


@pytest.mark.device
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_device_cuda_graph_replay(device, backend, residual):
    if backend != "cuda":
        pytest.skip("CUDA graphs are a CUDA feature")
    t, d = 64, 7168
    x = random_rows(t, d, torch.bfloat16, device=device)
    w = random_weight(d, torch.bfloat16, device=device)
    res = random_rows(t, d, torch.bfloat16, device=device).contiguous()
    out = poisoned((t, d), torch.bfloat16, device)

    def call():
        return api.add_rms_norm(x, res, w, out=out) if residual else api.rms_norm(x, w, out=out)

    call()  # compile and load outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    for _ in range(3):
        x.copy_(random_rows(t, d, torch.bfloat16, device=device))
        res.copy_(random_rows(t, d, torch.bfloat16, device=device))
        out.copy_(poisoned((t, d), torch.bfloat16, device))
        if residual:
            s_ref, y_ref = ref.add_rms_norm_ref(x, res, w)
        else:
            y_ref = ref.rms_norm_ref(x, w)
        graph.replay()
        if residual:
            assert_bitwise_equal(res, s_ref, what="residual")
        assert_norm_close(out, y_ref, 1)


# ----------------------------------------------------------------------------------------------------
# Device: the FP8 kernels. q and scale must equal quantising the kernel's own y (on the CPU, by the
# reference); y is held to the norm's tolerance against the reference; without return_y the
# kernel writes the same q and scale.


def _check_device_fp8(
    device, dtype, t, d, group_size, *, residual, ue8m0=False, layout="row", row_stride=None, col_offset=0, x=None, finite_poison=False
):
    if x is None:
        x = random_rows(t, d, dtype, device=device, row_stride=row_stride, col_offset=col_offset)
    w = random_weight(d, dtype, device=device)
    res0 = random_rows(t, d, dtype, device=device).contiguous()
    group = _group(d, group_size)
    what = f"{'add_' if residual else ''}rms_norm_fp8 {dtype} T={t} D={d} group={group_size} ue8m0={ue8m0} {layout}"
    opts = dict(group_size=group_size, ue8m0=ue8m0, scale_layout=layout)
    if residual:
        s_ref, _, _, y_ref = ref.add_rms_norm_fp8_ref(x, res0, w, 1e-6, group, ue8m0)
    else:
        _, _, y_ref = ref.rms_norm_fp8_ref(x, w, 1e-6, group, ue8m0)
    results = []
    for return_y in (True, False):
        q = _output((t, d), torch.float8_e4m3fn, device, finite_poison)
        scale = _poisoned_scale(t, d // group, layout, device)
        y = _output((t, d), dtype, device, finite_poison) if return_y else None
        res = res0.clone()
        call = dict(return_y=return_y, out=q, scale_out=scale, y_out=y, **opts)
        got = api.add_rms_norm_fp8(x, res, w, **call) if residual else api.rms_norm_fp8(x, w, **call)
        assert got[0] is q and got[1] is scale and len(got) == (3 if return_y else 2)
        if residual:
            assert_bitwise_equal(res, s_ref, what=f"{what} residual")
        results.append((q, scale, y))
    (q, scale, y), (q_no_y, scale_no_y, _) = results
    assert_norm_close(y, y_ref, _ulp_bound(dtype, FP32_KERNEL_ULP), what=f"{what} y")
    q_own, scale_own = ref.quantize_fp8_ref(y.cpu(), group, ue8m0)
    assert_bitwise_equal(scale, scale_own, what=f"{what} scale")  # the (T, groups) view: no padding
    for s in (scale, scale_no_y):
        assert_scale_padding_untouched(s, layout, what)
    assert_fp8_equal(q, q_own, what=f"{what} q")
    assert_bitwise_equal(scale_no_y, scale, what=f"{what} scale without y")
    assert_fp8_equal(q_no_y, q, what=f"{what} q without y")


DEVICE_FP8_D = [128, 576, 1536, 4096, 7168, 16384]


@pytest.mark.device
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize(
    "d,group_size", [(d, g) for d in DEVICE_FP8_D for g in (128, 64, None) if g is None or d % g == 0], ids=str
)
def test_device_fp8_widths(device, residual, d, group_size):
    for t in (1, 7, 300):  # one kernel (t is dynamic): one row, a partial block, many blocks
        _check_device_fp8(device, torch.bfloat16, t, d, group_size, residual=residual)


@pytest.mark.device
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("layout", ["row", "tma_col"])
@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32", "ue8m0"])
@pytest.mark.parametrize("group_size", FP8_GROUP_SIZES, ids=str)
def test_device_fp8_options(device, residual, layout, ue8m0, group_size):
    for t in (1, 6, 65):  # T_pad pads 1 -> 4, 6 -> 8, 65 -> 68
        _check_device_fp8(device, torch.bfloat16, t, 7168, group_size, residual=residual, ue8m0=ue8m0, layout=layout)


@pytest.mark.device
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("d,group_size", [(576, 64), (576, None), (7168, 128), (256, 16)])
def test_device_fp8_other_dtypes(device, residual, dtype, d, group_size):
    _check_device_fp8(device, dtype, 65, d, group_size, residual=residual, ue8m0=True)


@pytest.mark.device
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize(
    "dtype,d,row_stride,col_offset,group_size",
    [
        (torch.bfloat16, 4096, 7168, 0, 128),  # strided rows, aligned
        (torch.bfloat16, 7168, 7169, 0, 64),  # odd stride: 1-element vectors, 64-lane groups over 2 warps
        (torch.bfloat16, 7168, 7168, 1, 128),  # misaligned base: 128-lane groups over 4 warps
        (torch.bfloat16, 4096, 4098, 0, 128),  # 2-element vectors: 64-lane groups
        (torch.bfloat16, 576, 577, 1, None),  # per token over 3 warps
        (torch.float32, 16384, 16384, 1, 128),  # 1024 threads x 16 steps
        (torch.float32, 576, 577, 0, 16),
    ],
)
def test_device_fp8_strided_and_misaligned_rows(device, residual, dtype, d, row_stride, col_offset, group_size):
    _check_device_fp8(
        device, dtype, 37, d, group_size, residual=residual, layout="tma_col", row_stride=row_stride, col_offset=col_offset
    )


@pytest.mark.device
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("group_size", [16, 128, None], ids=str)
def test_device_fp8_special_rows(device, residual, group_size):
    # Zero, huge, tiny, NaN and Inf rows (ref.py's defined FP8 behaviour) next to normal ones.
    x, _ = _special_rows(7168, torch.bfloat16)
    for finite_poison in (False, True):
        _check_device_fp8(device, torch.bfloat16, x.shape[0], 7168, group_size, residual=residual, x=x.to(device), finite_poison=finite_poison)


@pytest.mark.device
def test_device_fp8_empty_batch_launches_nothing(device, no_kernel_launches):
    x = random_rows(0, 7168, torch.bfloat16, device=device)
    w = random_weight(7168, torch.bfloat16, device=device)
    q, scale = api.rms_norm_fp8(x, w, scale_layout="tma_col")
    assert q.shape == (0, 7168) and scale.shape == (0, 56)
    q, scale, y = api.add_rms_norm_fp8(x, x.clone(), w, group_size=None, return_y=True)
    assert q.shape == (0, 7168) and scale.shape == (0, 1) and y.shape == (0, 7168)


@pytest.mark.device
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_device_fp8_cuda_graph_replay(device, backend, residual):
    if backend != "cuda":
        pytest.skip("CUDA graphs are a CUDA feature")
    t, d, group = 64, 7168, 128
    x = random_rows(t, d, torch.bfloat16, device=device)
    w = random_weight(d, torch.bfloat16, device=device)
    res = random_rows(t, d, torch.bfloat16, device=device).contiguous()
    q = poisoned((t, d), torch.float8_e4m3fn, device)
    scale = _poisoned_scale(t, d // group, "tma_col", device)
    y = poisoned((t, d), torch.bfloat16, device)
    opts = dict(group_size=group, ue8m0=True, scale_layout="tma_col", return_y=True, out=q, scale_out=scale, y_out=y)

    def call():
        return api.add_rms_norm_fp8(x, res, w, **opts) if residual else api.rms_norm_fp8(x, w, **opts)

    call()  # compile and load outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    for _ in range(3):
        x.copy_(random_rows(t, d, torch.bfloat16, device=device))
        res.copy_(random_rows(t, d, torch.bfloat16, device=device))
        q.copy_(poisoned((t, d), torch.float8_e4m3fn, device))
        scale.copy_(torch.full((t, d // group), float("nan"), device=device))
        y.copy_(poisoned((t, d), torch.bfloat16, device))
        if residual:
            s_ref, y_ref = ref.add_rms_norm_ref(x, res, w)
        else:
            y_ref = ref.rms_norm_ref(x, w)
        graph.replay()
        if residual:
            assert_bitwise_equal(res, s_ref, what="residual")
        assert_norm_close(y, y_ref, 1)
        q_own, scale_own = ref.quantize_fp8_ref(y.cpu(), group, True)
        assert_bitwise_equal(scale, scale_own, what="scale")
        assert_fp8_equal(q, q_own)


# ----------------------------------------------------------------------------------------------------
# Codegen (Ascend): the FP8 factories lower for every shipped configuration and fit the UB.


def _asc_fp8_cases():
    """Every shipped configuration with both factories; the (ue8m0, layout, with_y) variants cycle
    over the configurations so each variant lowers with several group paths."""
    from kernels.norm import asc

    cases = []
    for i, config in enumerate(asc.fp8_shipped_configs()):
        for j, factory in enumerate(FP8_FACTORIES):
            cases.append((factory, config, FP8_VARIANTS[(i + 3 * j) % len(FP8_VARIANTS)]))
    return cases


@pytest.mark.codegen_ascend
@pytest.mark.parametrize("case", _asc_fp8_cases(), ids=lambda c: "-".join(map(str, (c[0], *c[1], *c[2]))))
def test_ascend_fp8_config_lowers_and_fits_ub(case):
    from kernels.norm import asc
    from testing import codegen_ascend

    factory, (d, dtype, stride, align, group), variant = case
    fn = getattr(asc, factory)
    kwargs = _fp8_kwargs(align, variant)
    source = codegen_ascend.ascend_source(fn, d, dtype, 1e-6, stride, group, **kwargs)
    assert "__global__" in source or "__aicore__" in source
    assert "fp8_e4_t" in source and ("8388607" in source) == variant[0]
    codegen_ascend.assert_ub_fits(fn, d, dtype, 1e-6, stride, group, **kwargs)
    _, fp8 = asc.fp8_config(d, dtype, stride, group, variant[1], residual=factory == "add_rmsnorm_fp8_tl")
    assert codegen_ascend.ub_footprint_bytes(fn, d, dtype, 1e-6, stride, group, **kwargs) <= fp8.ub_bytes


@pytest.mark.codegen_ascend
def test_ascend_fp8_tiles_fit_for_every_width():
    from kernels.norm import asc
    from testing import codegen_ascend

    for dtype in asc.DTYPES:
        for residual in (False, True):
            for layout in formats.SCALE_LAYOUTS:
                for d in range(1, asc.MAX_D + 1):
                    for group in [d] + [g for g in ref.FP8_GROUPS if d % g == 0]:
                        _, fp8 = asc.fp8_config(d, dtype, d, group, layout, residual=residual)
                        assert fp8.ub_bytes <= codegen_ascend.UB_CAPACITY_BYTES, (d, dtype, group, layout, residual)


@pytest.mark.codegen_ascend
def test_ascend_fp8_shipped_configs_cover_the_tiling():
    from kernels.norm import asc

    configs = asc.fp8_shipped_configs()
    assert {c[1] for c in configs} == set(asc.DTYPES)
    assert {g for d, *_, g in configs if g != d} == set(ref.FP8_GROUPS)
    tilings = [(asc.fp8_config(d, dt, s, g, residual=True), d, g) for d, dt, s, _, g in configs]
    assert {cfg.stages for (cfg, _), _, _ in tilings} == {1, 2}
    per_token = [cfg for (cfg, fp8), _, _ in tilings if fp8.groups == 1]
    assert any(c.tail and c.full_vregs for c in per_token) and any(c.tail and not c.full_vregs for c in per_token)
    assert any(not c.tail for c in per_token)
    # Groups of 16/32 in a partial last register, and a tile of one row and of 64.
    assert any(fp8.groups_per_vreg and cfg.tail for (cfg, fp8), _, _ in tilings)
    assert {1, 64} <= {cfg.rows for (cfg, _), _, _ in tilings}
    with pytest.raises(ValueError, match="group must be D"):
        asc.fp8_config(576, "bfloat16", 576, 128)
    with pytest.raises(ValueError, match="scale_layout"):
        asc.fp8_config(512, "bfloat16", 512, 128, "col")
