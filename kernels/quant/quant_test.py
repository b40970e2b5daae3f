"""Tests of `quant`: formats and reference vs independent oracles, interface validation, codegen, and
the device kernels bit for bit against the reference.

Suites (markers, selected by `--tl-suite`; see testing/plugin.py): ref, codegen_cuda, codegen_ascend,
device. Inputs are drawn fresh per test from the plugin's per-test seed; outputs are poisoned first.

The oracles are written without formats.py: e4m3 and e2m1 encodings by a nearest-value search over
every representable value (ties to the even code), UE8M0 rounding by math.frexp, and the quantisers
as numpy float32 loops over groups (numpy float32 arithmetic is IEEE single precision). A NaN code
compares as NaN (its sign bit is not part of the contract on the CPU).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from kernels.quant import api, formats, ref
from testing.numeric import BYTE_POISONS, as_bits, assert_bitwise_equal, assert_rejected_without_writes, byte_poisoned, case_named, case_names, poisoned

F32 = np.float32
DTYPES = [torch.bfloat16, torch.float16, torch.float32]

# ----------------------------------------------------------------------------------------------------
# Oracles.


def _e4m3_table() -> np.ndarray:
    """Magnitudes of the e4m3fn codes 0..126 (0x7F is NaN), indexed by code."""
    vals = []
    for code in range(127):
        e, m = code >> 3, code & 7
        vals.append(m * 2.0**-9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return np.array(vals)


E4M3_TABLE = _e4m3_table()
E2M1_TABLE = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def _nearest_code(a: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Index of the table value nearest each magnitude (float64: exact here), ties to the even index."""
    dist = np.abs(a[:, None] - table[None, :])
    best = dist.min(axis=1, keepdims=True)
    ties = dist == best
    idx = np.where(ties, np.arange(table.size)[None, :], table.size)
    even = np.where(ties & (np.arange(table.size)[None, :] % 2 == 0), np.arange(table.size)[None, :], table.size)
    return np.where(even.min(axis=1) < table.size, even.min(axis=1), idx.min(axis=1))


def oracle_e4m3(v: np.ndarray) -> np.ndarray:
    """uint8 e4m3fn codes of float32 values: |v| clamped to 448, nearest, ties even; NaN -> 0x7F."""
    v = np.asarray(v, dtype=F32).astype(np.float64).ravel()
    nan = np.isnan(v)
    a = np.minimum(np.abs(np.where(nan, 0, v)), 448.0)
    code = _nearest_code(a, E4M3_TABLE).astype(np.uint8) | np.where(np.signbit(v), 0x80, 0).astype(np.uint8)
    return np.where(nan, 0x7F, code).astype(np.uint8)


def oracle_e2m1(v: np.ndarray) -> np.ndarray:
    """uint8 e2m1 codes: |v| saturated to 6, nearest, ties even; sign when v < 0; NaN -> 0."""
    v = np.asarray(v, dtype=F32).astype(np.float64).ravel()
    nan = np.isnan(v)
    a = np.minimum(np.abs(np.where(nan, 0, v)), 6.0)
    code = _nearest_code(a, E2M1_TABLE).astype(np.uint8) | np.where(v < 0, 8, 0).astype(np.uint8)
    return np.where(nan, 0, code).astype(np.uint8)


def oracle_ue8m0(s: float) -> float:
    """The smallest power of two >= a positive normal float32 s (inf stays inf)."""
    if math.isinf(s):
        return s
    m, e = math.frexp(s)  # s = m * 2**e, 0.5 <= m < 1
    return s if m == 0.5 else math.ldexp(1.0, e)


def _amax(group: np.ndarray) -> np.float32:
    a = np.abs(group[~np.isnan(group)])
    return F32(a.max()) if a.size else F32(0)


def _scale(amax: np.float32, fmt_max: float, ue8m0: bool) -> np.float32:
    s = F32(max(amax, F32(fmt_max * 2.0**-126))) / F32(fmt_max)
    return F32(oracle_ue8m0(float(s))) if ue8m0 else s


def oracle_quant_fp8(x: torch.Tensor, g: int, ue8m0: bool) -> tuple[np.ndarray, np.ndarray]:
    xs = x.float().numpy()
    t, d = xs.shape
    q = np.zeros((t, d), np.uint8)
    s = np.zeros((t, d // g), F32)
    with np.errstate(all="ignore"):
        for i in range(t):
            for j in range(d // g):
                grp = xs[i, j * g : (j + 1) * g]
                s[i, j] = _scale(_amax(grp), 448.0, ue8m0)
                q[i, j * g : (j + 1) * g] = oracle_e4m3(grp * (F32(1) / s[i, j]))
    return q, s


def oracle_quant_fp4(x: torch.Tensor, gs: float | None) -> tuple[np.ndarray, np.ndarray]:
    """(codes (T, D) unpacked, scale codes/bytes) for NVFP4 (gs given) or MX (gs None)."""
    xs = x.float().numpy()
    t, d = xs.shape
    g = 16 if gs is not None else 32
    codes = np.zeros((t, d), np.uint8)
    scales = np.zeros((t, d // g), np.uint8)
    with np.errstate(all="ignore"):
        for i in range(t):
            for j in range(d // g):
                grp = xs[i, j * g : (j + 1) * g]
                if gs is not None:
                    s32 = F32(max(_amax(grp), F32(6 * 2.0**-126))) / (F32(6) * F32(gs))
                    s32 = s32 if np.isnan(s32) else max(s32, F32(2.0**-9))
                    code = oracle_e4m3(np.array([s32]))[0]
                    scales[i, j] = code
                    s8 = F32(np.nan) if code & 0x7F == 0x7F else F32(E4M3_TABLE[code & 0x7F])
                    inv = F32(1) / (s8 * F32(gs))
                else:
                    sc = _scale(_amax(grp), 6.0, True)
                    scales[i, j] = (np.array([sc], F32).view(np.uint32)[0] >> 23) & 0xFF
                    inv = F32(1) / sc
                codes[i, j * g : (j + 1) * g] = oracle_e2m1(grp * inv)
    return codes, scales


def _assert_fp8_codes(actual: torch.Tensor, expected: np.ndarray, what: str) -> None:
    """e4m3 bits equal, except that a NaN matches a NaN of either sign."""
    a = as_bits(actual.contiguous()).numpy().astype(np.uint8).reshape(expected.shape)
    nan_a, nan_e = (a & 0x7F) == 0x7F, (expected & 0x7F) == 0x7F
    assert np.array_equal(nan_a, nan_e), f"{what}: NaN positions differ"
    bad = (a != expected) & ~nan_e
    assert not bad.any(), f"{what}: {bad.sum()} codes differ; first at {np.argwhere(bad)[0]}: {a[bad][0]:#x} != {expected[bad][0]:#x}"


def random_rows(t, d, dtype, device="cpu", row_stride=None, col_offset=0):
    """(t, d) normal rows with a random per-row scale (10^-3..10^3), optionally a strided view."""
    width = (row_stride or d) + col_offset
    base = torch.randn((t, width), device=device) * torch.pow(10.0, torch.empty((t, 1), device=device).uniform_(-3, 3))
    return base.to(dtype)[:, col_offset : col_offset + d]


def special_rows(d: int, dtype: torch.dtype, group: int) -> torch.Tensor:
    """Rows of edge groups between normal rows: zeros, huge, tiny, NaN, +-Inf, Inf and NaN together."""
    huge = {torch.float16: 6e4, torch.bfloat16: float(torch.finfo(torch.bfloat16).max), torch.float32: 1e30}[dtype]
    tiny = {torch.float16: 6e-8, torch.bfloat16: 1e-39, torch.float32: 1e-30}[dtype]
    # Large but finite: |randn| is clamped so that no value of the huge row overflows to Inf.
    rows = [torch.randn(d), torch.zeros(d), torch.randn(d).clamp(-3.9, 3.9) * (huge / 4), torch.full((d,), huge), torch.randn(d) * tiny]
    nan = torch.randn(d)
    nan[1] = math.nan
    inf = torch.randn(d)
    inf[group // 2] = math.inf
    ninf = torch.randn(d)
    ninf[0] = -math.inf
    both = torch.randn(d)
    both[0], both[1] = math.inf, math.nan
    allnan = torch.randn(d)
    allnan[:group] = math.nan
    rows += [nan, inf, ninf, both, allnan, torch.randn(d)]
    return torch.stack(rows).to(dtype)


# ----------------------------------------------------------------------------------------------------
# Reference suite: formats.py against the oracles.


def _boundary_values(seed: int) -> np.ndarray:
    """Every e2m1 / e4m3 value and midpoint, their float32 neighbours, plus random values (drawn from
    `seed`, the test's) and extreme values."""
    mids = np.concatenate([(E2M1_TABLE[1:] + E2M1_TABLE[:-1]) / 2, (E4M3_TABLE[1:] + E4M3_TABLE[:-1]) / 2])
    base = np.concatenate([E2M1_TABLE, E4M3_TABLE, mids, [7.0, 100.0, 448.0, 464.0, 480.0, 1e4, 3.4e38, 1e-40, 1e-45]]).astype(F32)
    near = np.concatenate([base, np.nextafter(base, F32(np.inf)), np.nextafter(base, F32(0))])
    rng = np.random.default_rng(seed)
    rand = (rng.standard_normal(20000) * 10.0 ** rng.uniform(-4, 3, 20000)).astype(F32)
    vals = np.concatenate([near, -near, rand, [np.inf, -np.inf, 0.0, -0.0]]).astype(F32)
    return vals


@pytest.mark.ref
def test_encode_e2m1_matches_exhaustive_search(seed):
    v = _boundary_values(seed)
    got = formats.encode_e2m1(torch.from_numpy(v)).numpy()
    assert np.array_equal(got, oracle_e2m1(v))
    nan = formats.encode_e2m1(torch.tensor([math.nan, -math.nan]))
    assert nan.tolist() == [0, 0], "NaN encodes as +0"


@pytest.mark.ref
def test_encode_e4m3_matches_exhaustive_search_and_torch(seed):
    v = _boundary_values(seed)
    got = as_bits(formats.encode_e4m3(torch.from_numpy(v))).numpy().astype(np.uint8)
    _assert_fp8_codes(formats.encode_e4m3(torch.from_numpy(v)), oracle_e4m3(v), "encode_e4m3")
    # Within range it is exactly torch's cast; beyond, +-448 (0x7E / 0xFE), never NaN.
    inside = np.abs(v) <= 448
    assert np.array_equal(got[inside], as_bits(torch.from_numpy(v[inside]).to(torch.float8_e4m3fn)).numpy())
    big = as_bits(formats.encode_e4m3(torch.tensor([1e6, -1e6, math.inf, -math.inf, 449.0]))).tolist()
    assert big == [0x7E, 0xFE, 0x7E, 0xFE, 0x7E]
    assert torch.isnan(formats.encode_e4m3(torch.tensor([math.nan])).float()).all()


@pytest.mark.ref
def test_e2m1_decode_pack_round_trip():
    codes = torch.arange(16, dtype=torch.uint8)
    values = formats.decode_e2m1(codes)
    assert values.tolist() == [*E2M1_TABLE, *(-E2M1_TABLE)]
    assert torch.equal(formats.encode_e2m1(values[:8]), codes[:8])
    packed = formats.pack_e2m1(codes.reshape(2, 8))
    assert packed[0, 0].item() == 0x10 and packed[0, 1].item() == 0x32  # low nibble first
    assert torch.equal(formats.unpack_e2m1(packed), codes.reshape(2, 8))


@pytest.mark.ref
def test_ue8m0_round_up_matches_frexp(seed):
    rng = np.random.default_rng(seed)
    s = np.concatenate(
        [
            (rng.random(20000) * 10.0 ** rng.uniform(-37, 37, 20000)).astype(F32),
            np.ldexp(1.0, np.arange(-126, 127)).astype(F32),
            np.nextafter(np.ldexp(1.0, np.arange(-126, 127)).astype(F32), F32(np.inf)),
            [np.finfo(F32).tiny, np.inf],
        ]
    )
    s = s[(s >= np.finfo(F32).tiny) & (s <= F32(2.0**127))]
    got = formats.ue8m0_round_up(torch.from_numpy(np.append(s, np.inf).astype(F32))).numpy()
    want = np.array([oracle_ue8m0(float(v)) for v in np.append(s, np.inf)], dtype=F32)
    assert np.array_equal(got, want)
    byte = formats.ue8m0_exponent(torch.from_numpy(want[:-1]))
    assert torch.equal(formats.ue8m0_from_exponent(byte), torch.from_numpy(want[:-1]))


@pytest.mark.ref
@pytest.mark.parametrize("fmt_max", [formats.E2M1_MAX, formats.E4M3_MAX])
def test_ue8m0_scale_from_exponent_bits_matches_the_division(fmt_max):
    # The kernels take a UE8M0 scale from the exponent bits of max(amax, floor) (tl_formats.group_scale,
    # by formats.ue8m0_split) and its reciprocal by subtracting bits (tl_formats.scale_reciprocal):
    # the same integer steps here, against the reference's division and rounding up. Every mantissa
    # of four binades (the floor's, fmt_max's, 1's, the largest) and the mantissas around the split
    # point of every binade, plus Inf (kernels/quant/PERF.md: every non-negative fp32, once).
    p, m = formats.ue8m0_split(fmt_max)
    mantissas = torch.arange(2**23, dtype=torch.int64)
    floor_exp = int(np.frombuffer(np.float32(formats.amax_floor(fmt_max)).tobytes(), np.uint32)[0]) >> 23
    dense = torch.cat([(e << 23) + mantissas for e in (floor_exp, p + 127, 127, 254)])
    near = torch.tensor([m - 1, m, m + 1, 0, 1, 2**23 - 1], dtype=torch.int64).clamp(0, 2**23 - 1)
    sparse = ((torch.arange(0, 255, dtype=torch.int64)[:, None] << 23) + near).flatten()
    bits = torch.cat([dense, sparse, torch.tensor([0x7F800000])]).to(torch.int32)
    amax = bits.view(torch.float32)
    want = formats.group_scale(amax, fmt_max, True).view(torch.int32)
    a = amax.clamp_min(formats.amax_floor(fmt_max)).view(torch.int32).to(torch.int64)
    exponent = a >> 23
    byte = torch.where(exponent == 255, 255, exponent - p + ((a & 0x7FFFFF) > m).to(torch.int64))
    assert torch.equal((byte << 23).to(torch.int32), want)
    # 0x7F000000 less the scale's bits, as uint32 (Inf's wraps to -Inf's bits), then fmaxf with 0.
    difference = ((0x7F000000 - want.to(torch.int64)) & 0xFFFFFFFF).to(torch.int64)
    recip = torch.where(difference >= 2**31, difference - 2**32, difference).to(torch.int32).view(torch.float32).clamp_min(0.0)
    assert torch.equal(recip.view(torch.int32), (1.0 / want.view(torch.float32)).view(torch.int32))


def _fp32_quotient_steps(a: torch.Tensor, c: float) -> torch.Tensor:
    """tl_formats.markstein_quotient's steps on fp32 a for the fp32 divisor c and r = RN(1 / c)
    (an fp32 division), each rounding to fp32 once: float64 holds every product and the remainder
    exactly, and its rounding of the last sum q0 + p (p = remainder * r) can only land on an fp32
    midpoint, where the TwoSum error's sign says which way the single fp32 rounding goes."""
    f32, f64 = torch.float32, torch.float64
    c = float(torch.tensor(c, dtype=f32))
    r = (torch.ones((), dtype=f32) / torch.tensor(c, dtype=f32)).to(f64)
    q0 = (a.to(f64) * r).to(f32).to(f64)
    remainder = (a.to(f64) - q0 * c).to(f32).to(f64).clamp_min(-torch.finfo(f32).max)
    p = remainder * r
    s = q0 + p
    bb = s - q0
    err = (q0 - (s - bb)) + (p - bb)
    q = s.to(f32)
    up, down = torch.nextafter(q, torch.tensor(math.inf)), torch.nextafter(q, torch.tensor(-math.inf))
    q = torch.where((s == (q.to(f64) + up.to(f64)) / 2) & (err > 0), up, q)
    return torch.where((s == (q.to(f64) + down.to(f64)) / 2) & (err < 0), down, q)


@pytest.mark.ref
@pytest.mark.parametrize("fmt_max", [formats.E2M1_MAX, formats.E4M3_MAX])
def test_fp32_quotient_matches_the_division(fmt_max):
    # CUDA kernels divide the group amax by fmt_max with tl_formats.fp32_quotient (three roundings,
    # no slow path): its steps against the IEEE quotient for every mantissa of the floor's binade,
    # fmt_max's, 1's and the largest, random fp32 of the whole range, and FLT_MAX. The quotient by
    # 6 or 448 (odd times a power of two) is never within 2**-53 of an fp32 midpoint, so float64's
    # quotient rounded to fp32 is the IEEE one. kernels/quant/PERF.md: every fp32 of the range, once.
    floor_bits = int(np.frombuffer(np.float32(formats.amax_floor(fmt_max)).tobytes(), np.uint32)[0])
    mantissas = torch.arange(2**23, dtype=torch.int64)
    dense = torch.cat([(e << 23) + mantissas for e in (floor_bits >> 23, int(math.log2(fmt_max)) + 127, 127, 254)])
    g = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    spread = torch.randint(floor_bits, 0x7F7FFFFF, (2**22,), generator=g, dtype=torch.int64)
    bits = torch.cat([dense, spread, torch.tensor([0x7F7FFFFF])])
    for chunk in bits[bits >= floor_bits].split(2**22):  # 4M values: about 1 GB of float64 temporaries
        a = chunk.to(torch.int32).view(torch.float32)
        want = (a.to(torch.float64) / fmt_max).to(torch.float32)
        got = _fp32_quotient_steps(a, fmt_max)
        bad = got.view(torch.int32) != want.view(torch.int32)
        assert not bad.any(), f"{int(bad.sum())} quotients differ, first a={a[bad][0].item()!r}: {got[bad][0].item()!r} != {want[bad][0].item()!r}"


def _ieee_quotient(a: torch.Tensor, c: float) -> torch.Tensor:
    """RN32(a / c) for fp32 a and c, exactly: float64's quotient rounded to fp32, corrected where the
    exact quotient lies past (or on) an fp32 midpoint, by the sign of a - midpoint * c (exact in
    float64: a 25-bit midpoint times a 24-bit c, then a difference of two close values)."""
    f32, f64 = torch.float32, torch.float64
    q = (a.to(f64) / c).to(f32)
    up, down = torch.nextafter(q, torch.tensor(math.inf)), torch.nextafter(q, torch.tensor(-math.inf))
    above = a.to(f64) - (q.to(f64) + up.to(f64)) / 2 * c
    below = a.to(f64) - (q.to(f64) + down.to(f64)) / 2 * c
    even = (q.view(torch.int32) & 1) == 0
    q = torch.where((above > 0) | ((above == 0) & ~even), up, q)
    return torch.where((below < 0) | ((below == 0) & ~even), down, q)


@pytest.mark.ref
def test_markstein_quotient_matches_the_division_for_nvfp4_divisors():
    # quant_fp4_e4m3's first division, a / (6 * gs), by tl_formats.markstein_quotient when 6 * gs is
    # in cuda._NVFP4_FAST_DIVISOR: its steps against the IEEE quotient for random divisors of that
    # range (its ends and mantissas of all ones among them) and a across the quotients that decide
    # the e4m3 scale, [2**-11, 2**11]. kernels/quant/PERF.md: every such a for 26 divisors, once.
    from kernels.quant import cuda

    lo, hi = cuda._NVFP4_FAST_DIVISOR
    g = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    exps = torch.randint(int(math.log2(lo)), int(math.log2(hi)), (24,), generator=g).tolist()
    divisors = [lo, hi, 6.0, math.ldexp(2 - 2**-23, -1), math.ldexp(2 - 2**-23, 89)]
    divisors += [math.ldexp(1 + float(torch.rand((), generator=g)), e) for e in exps]
    for c in divisors:
        c = float(torch.tensor(c, dtype=torch.float32))
        quotients = torch.exp2(torch.empty(2**20).uniform_(-11, 11, generator=g))
        a = (quotients.to(torch.float64) * c).to(torch.float32)
        got, want = _fp32_quotient_steps(a, c), _ieee_quotient(a, c)
        bad = got.view(torch.int32) != want.view(torch.int32)
        assert not bad.any(), f"c={c!r}: {int(bad.sum())} differ, first a={a[bad][0].item()!r}: {got[bad][0].item()!r} != {want[bad][0].item()!r}"


def _e2m1_code_denormal(x: torch.Tensor, k: int | None) -> torch.Tensor:
    """tl_formats.e2m1_code_denormal's steps in torch (fp32, denormals kept on the CPU) for inv = 2**k
    (None: inv 0, an Inf scale), including the caller's fallback when the multiplier underflows."""
    f32 = torch.float32
    inv = torch.tensor(0.0 if k is None else 2.0**k, dtype=f32)
    scale = torch.tensor(math.inf if k is None else 2.0**-k, dtype=f32)
    m = inv * torch.tensor(2.0**-126, dtype=f32)
    below = -((scale * torch.tensor(2.0**-100, dtype=f32)) * torch.tensor(2.0**-50, dtype=f32))
    if m == 0 and inv != 0:
        x, m, below = x * inv, torch.tensor(2.0**-126, dtype=f32), torch.tensor(-0.0, dtype=f32)
    w = (x * m).abs()
    bits = torch.where(torch.isnan(w), torch.zeros((), dtype=f32), w).view(torch.int32)
    bias = torch.where(x < below, torch.tensor(2.0**-106 + 8 * 2.0**-129, dtype=f32), torch.tensor(2.0**-106, dtype=f32))
    rounded = ((bits >> 2).view(f32) + bias).view(torch.int32)
    return (rounded - torch.tensor(2.0**-106, dtype=f32).view(torch.int32)).to(torch.uint8)


@pytest.mark.ref
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_e2m1_code_denormal_matches_encode_e2m1(dtype):
    # The MX FP4 kernels encode bf16 / fp16 x with a UE8M0 inv = 2**k through fp32 denormals
    # (tl_formats.e2m1_code_denormal); here its steps against formats.encode_e2m1(x * inv) for every
    # x of the dtype, at the edge exponents (the floor's and the largest scale, the multiplier's
    # underflow point -23 / -24, the sign threshold's -1 / 0 / 1, inv 0) and random others, under
    # the encoder's precondition |x * inv| <= 6 (x's group amax bounds it). kernels/quant/PERF.md:
    # every k, once.
    g = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    ks = [-126, -125, -24, -23, -22, -1, 0, 1, 125, 126, None] + torch.randint(-126, 127, (8,), generator=g).tolist()
    x = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype).float()
    for k in ks:
        inv = 0.0 if k is None else 2.0**k
        v = x * inv
        keep = (v.abs() <= 6) | (inv == 0) | x.isnan()
        got, want = _e2m1_code_denormal(x[keep], k), formats.encode_e2m1(v[keep])
        bad = got != want
        assert not bad.any(), f"k={k}: {int(bad.sum())} codes differ, first x={x[keep][bad][0].item()!r}: {got[bad][0].item()} != {want[bad][0].item()}"


def _e2m1_word_nibbles(v: torch.Tensor) -> torch.Tensor:
    """tl_formats.e2m1_word's steps for each fp32 value alone (its nibble), in torch fp32."""
    f32, i64 = torch.float32, torch.int64
    a = torch.clamp(torch.where(torch.isnan(v), torch.zeros((), dtype=f32), v.abs()), max=6.0)
    c = torch.clamp((a.view(torch.int32).to(i64) & 0x7F800000) + (22 << 23), min=0x4A800000)
    s = (a + c.to(torch.int32).view(f32)).view(torch.int32).to(i64)
    magnitude = s - c + (c >> 22) - 298
    return (magnitude | ((v.view(torch.int32).to(i64) >> 28) & 8)).to(torch.uint8)


@pytest.mark.ref
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_e2m1_word_matches_encode_e2m1(dtype, seed):
    # NVFP4's fast path encodes v = __fmaf_rn(x, inv, +0.0) with tl_formats.e2m1_word: here its
    # steps against formats.encode_e2m1(v) for every x of the dtype times random inv (and the
    # smallest inv the fast path allows, where the tiniest x still gives a nonzero product), and for
    # every e2m1 value and midpoint with their fp32 neighbours. v + 0.0 is the fma's +0.0 (the CPU
    # has no fma; the bound keeps every product away from rounding to zero). NaN products are the
    # device's canonical NaN, 0x7FFFFFFF. kernels/quant/PERF.md: every fp32 v, once.
    from kernels.quant import cuda

    g = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    x = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype).float()
    inv_min = 1 / (448 * cuda._NVFP4_WORD_DIVISOR_MAX[str(dtype).split(".")[1]] / formats.E2M1_MAX)
    invs = [inv_min, 1.0, 6 / 448] + torch.exp2(torch.empty(6).uniform_(-16, 100, generator=g)).tolist()
    for inv in invs:
        inv = torch.tensor(inv, dtype=torch.float32)
        v = x * inv + 0.0
        v = torch.where(torch.isnan(v), torch.tensor(0x7FFFFFFF, dtype=torch.int32).view(torch.float32), v)
        assert not ((v == 0) & (x != 0)).any(), f"inv={inv.item()!r}: a nonzero product rounds to zero"
        bad = _e2m1_word_nibbles(v) != formats.encode_e2m1(v)
        assert not bad.any(), f"inv={inv.item()!r}: {int(bad.sum())} differ, first x={x[bad][0].item()!r}"
    v = torch.from_numpy(_boundary_values(seed))
    v = v[(v != 0) | ~torch.signbit(v)]
    bad = _e2m1_word_nibbles(v) != formats.encode_e2m1(v)
    assert not bad.any(), f"{int(bad.sum())} differ, first v={v[bad][0].item()!r}"


# Widths of one per-token scale only too (1, 7: no group divides them).
REF_SHAPES = [(1, 16), (3, 128), (5, 576), (2, 1024), (4, 1), (3, 7)]


@pytest.mark.ref
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("t,d,group", [(t, d, g) for t, d in REF_SHAPES for g in (16, 32, 64, 128, None) if g is None or d % g == 0])
@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32", "ue8m0"])
def test_ref_quant_fp8_matches_loop_oracle(dtype, t, d, group, ue8m0):
    g = d if group is None else group
    x = random_rows(t, d, dtype, row_stride=d + 3, col_offset=1)
    q, s = ref.quant_fp8_ref(x, g, ue8m0)
    q_o, s_o = oracle_quant_fp8(x, g, ue8m0)
    assert q.dtype == torch.float8_e4m3fn and s.dtype == torch.float32 and s.shape == (t, d // g)
    assert np.array_equal(s.numpy(), s_o)
    _assert_fp8_codes(q, q_o, "q")


@pytest.mark.ref
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("group", [16, 128, None])
def test_ref_quant_fp8_special_groups(dtype, group):
    d = 256
    g = d if group is None else group
    x = special_rows(d, dtype, g)
    q, s = ref.quant_fp8_ref(x, g, False)
    q_o, s_o = oracle_quant_fp8(x, g, False)
    assert np.array_equal(s.numpy(), s_o)
    _assert_fp8_codes(q, q_o, "q")
    # formats.py's semantics, spelled out: zero group -> floored scale and zero codes; Inf group ->
    # Inf scale, finite values +-0, Inf NaN; NaN ignored by the amax and kept as NaN.
    assert s[1].eq(formats.amax_floor(448.0) / 448.0).all() and as_bits(q[1]).eq(0).all()
    assert torch.isinf(s[6, (g // 2) // g])
    inf_group = q[6, (g // 2) // g * g : ((g // 2) // g + 1) * g].float()
    assert torch.isnan(inf_group[(g // 2) % g]) and inf_group.nan_to_num(0).eq(0).all()
    assert torch.isnan(q[5, 1].float()) and torch.isfinite(s[5]).all()
    assert torch.isfinite(s[3]).all() and torch.isfinite(s[4]).all() and (s[4] > 0).all()


@pytest.mark.ref
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("t,d", [(1, 32), (3, 64), (5, 576), (2, 1024)])
def test_ref_quant_fp4_matches_loop_oracle(dtype, t, d):
    x = random_rows(t, d, dtype, row_stride=d + 2)
    gs = ref.fp4_global_scale_ref(x)
    packed, s8 = ref.quant_fp4_e4m3_ref(x, gs)
    codes, scales = oracle_quant_fp4(x, float(gs))
    assert packed.shape == (t, d // 2) and s8.shape == (t, d // 16)
    assert np.array_equal(formats.unpack_e2m1(packed).numpy(), codes)
    _assert_fp8_codes(s8, scales, "nvfp4 scale")
    packed, sb = ref.quant_fp4_ue8m0_ref(x)
    codes, scales = oracle_quant_fp4(x, None)
    assert np.array_equal(formats.unpack_e2m1(packed).numpy(), codes)
    assert np.array_equal(sb.numpy(), scales) and sb.dtype == torch.uint8


@pytest.mark.ref
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_ref_quant_fp4_special_groups(dtype):
    d = 64
    x = special_rows(d, dtype, 32)
    for gs in (ref.fp4_global_scale_ref(x[:6]), torch.tensor([1.0])):
        packed, s8 = ref.quant_fp4_e4m3_ref(x, gs)
        codes, scales = oracle_quant_fp4(x, float(gs))
        assert np.array_equal(formats.unpack_e2m1(packed).numpy(), codes)
        _assert_fp8_codes(s8, scales, "nvfp4 scale")
    packed, sb = ref.quant_fp4_ue8m0_ref(x)
    codes, scales = oracle_quant_fp4(x, None)
    assert np.array_equal(formats.unpack_e2m1(packed).numpy(), codes) and np.array_equal(sb.numpy(), scales)
    assert sb[6, 0] == 255 and sb[1].eq(1).all(), "Inf group: byte 255; zero group: the floor 2**-126"


@pytest.mark.ref
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n,k", [(1, 1), (130, 200), (128, 384), (257, 129)])
@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32", "ue8m0"])
def test_ref_quant_fp8_block_matches_loop_oracle(dtype, n, k, ue8m0):
    w = random_rows(n, k, dtype)
    q, s = ref.quant_fp8_block_ref(w, 128, ue8m0)
    wf = w.float().numpy()
    nb, kb = -(-n // 128), -(-k // 128)
    assert s.shape == (nb, kb)
    q_o = np.zeros((n, k), np.uint8)
    for i in range(nb):
        for j in range(kb):
            blk = wf[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128]
            sc = _scale(_amax(blk.ravel()), 448.0, ue8m0)
            assert s[i, j].item() == sc
            q_o[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128] = oracle_e4m3(blk * (F32(1) / sc)).reshape(blk.shape)
    _assert_fp8_codes(q, q_o, "q")


@pytest.mark.ref
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_ref_round_trip_error_bounds(dtype):
    x = random_rows(7, 1024, dtype)
    xf = x.float()
    for g in (16, 128):
        for ue8m0 in (False, True):
            q, s = ref.quant_fp8_ref(x, g, ue8m0)
            y = ref.dequant_fp8_ref(q, s, g).float()
            sg = s.repeat_interleave(g, 1)
            # e4m3: 3 mantissa bits (relative 2**-4), subnormal step 2**-9 * scale; bf16 output 2**-8.
            bound = torch.maximum(xf.abs() * 2.0**-4, sg * 2.0**-10) + y.abs() * 2.0**-8
            assert ((y - xf).abs() <= bound * 1.001).all(), (g, ue8m0)
    gs = ref.fp4_global_scale_ref(x)
    packed, s8 = ref.quant_fp4_e4m3_ref(x, gs)
    y = ref.dequant_fp4_e4m3_ref(packed, s8, gs).float()
    eff = (s8.float() * gs).repeat_interleave(16, 1)
    # e2m1 steps are at most 2 (between 4 and 6): half a step is eff; beyond 6 * eff (the e4m3
    # scale rounded down) values saturate. Plus the bf16 rounding.
    assert ((y - xf).abs() <= torch.maximum(eff, xf.abs() - 6 * eff) * 1.001 + y.abs() * 2.0**-8).all()
    packed, sb = ref.quant_fp4_ue8m0_ref(x)
    y = ref.dequant_fp4_ue8m0_ref(packed, sb).float()
    sc = formats.ue8m0_from_exponent(sb).repeat_interleave(32, 1)
    assert ((y - xf).abs() <= sc + y.abs() * 2.0**-8).all()
    w = random_rows(200, 300, dtype)
    q, s = ref.quant_fp8_block_ref(w, 128)
    y = ref.dequant_fp8_block_ref(q, s, 128).float()
    sb = s.repeat_interleave(128, 0).repeat_interleave(128, 1)[:200, :300]
    bound = torch.maximum(w.float().abs() * 2.0**-4, sb * 2.0**-10) + y.abs() * 2.0**-8
    assert ((y - w.float()).abs() <= bound * 1.001).all()


@pytest.mark.ref
def test_fp4_global_scale_is_amax_over_2688():
    x = torch.tensor([[1.0, -2688.0 * 3, math.nan], [0.5, 2.0, 7.0]])
    assert ref.fp4_global_scale_ref(x).tolist() == [3.0]
    assert api.fp4_global_scale(torch.zeros(4, 16)).item() == np.float32(2688 * 2.0**-126) / np.float32(2688)
    # No elements: amax 0, the same floor as all zeros.
    empty = api.fp4_global_scale(torch.zeros(0, 16))
    assert empty.shape == (1,) and empty.item() == np.float32(2688 * 2.0**-126) / np.float32(2688)


# ----------------------------------------------------------------------------------------------------
# Interface on the CPU (the reference path): layouts, caller buffers, empty input, bad input.


@pytest.mark.ref
@pytest.mark.parametrize("t", [1, 5, 6])
@pytest.mark.parametrize("decode_shape", [True, False], ids=["cuda", "no-decode-shape"])
def test_fp8_group_dispatch(monkeypatch, t, decode_shape):
    """Per-token-group batches up to DECODE_MAX_ROWS take the decode launch shape where the backend
    has it, with the same static arguments; per-token scales never do."""
    import types

    calls = []

    class Ops:
        def __getattr__(self, factory):
            if factory == "quant_fp8_group_decode_tl" and not decode_shape:
                raise LookupError(factory)
            return lambda *static, **options: lambda *args: calls.append((factory, static, options))

    monkeypatch.setattr(api, "is_host", lambda x: False)
    monkeypatch.setattr(api, "backend_ops", lambda name, x: types.SimpleNamespace(ops=Ops()))
    monkeypatch.setattr(api, "DECODE_MAX_ROWS", 5)
    x = random_rows(t, 256, torch.bfloat16, row_stride=264)
    api.quant_fp8(x, 128)
    api.quant_fp8(x, None)
    (group_call, token_call) = calls
    assert group_call[0] == ("quant_fp8_group_decode_tl" if decode_shape and t <= 5 else "quant_fp8_group_tl")
    assert group_call[1] == (256, 128, "bfloat16", False, "row", 264 if t > 1 else 256)
    assert token_call[0] == "quant_fp8_token_tl"


@pytest.mark.ref
def test_per_token_width_limit_on_an_accelerator(monkeypatch):
    # One scale per token holds a whole row on chip: at most MAX_TOKEN_D columns off the host, any
    # width on the CPU reference; rejected before a kernel is built or anything is written.
    x = random_rows(2, api.MAX_TOKEN_D + 16, torch.bfloat16)
    assert api.quant_fp8(x, None)[0].shape == x.shape
    monkeypatch.setattr(api, "is_host", lambda x: False)
    monkeypatch.setattr(api, "backend_ops", lambda name, x: pytest.fail("a kernel was looked up"))
    out = poisoned(tuple(x.shape), torch.float8_e4m3fn, "cpu")
    assert_rejected_without_writes(api.quant_fp8, dict(x=x, group_size=None, out=out), ValueError, f"x has width {api.MAX_TOKEN_D + 16}; per-token scales support at most {api.MAX_TOKEN_D}", [out])


@pytest.mark.ref
@pytest.mark.parametrize("t", [1, 5, 8])
@pytest.mark.parametrize("group", [32, None])
def test_cpu_quant_fp8_layouts_and_buffers(t, group):
    d = 256
    x = random_rows(t, d, torch.bfloat16, row_stride=300)
    g = d if group is None else group
    q_ref, s_ref = ref.quant_fp8_ref(x, g, True)
    q, s = api.quant_fp8(x, group, ue8m0=True)
    assert_bitwise_equal(q, q_ref)
    assert_bitwise_equal(s, s_ref)
    tp = ref.tma_aligned_rows(t)
    storage = poisoned((d // g, tp), torch.float32, "cpu")
    s_col = storage.t()[:t]
    out = poisoned((t, d), torch.float8_e4m3fn, "cpu")
    q2, s2 = api.quant_fp8(x, group, ue8m0=True, scale_layout="tma_col", out=out, scale_out=s_col)
    assert q2 is out and s2 is s_col and s2.stride() in ((1, tp), (tp, 1) if d // g == 1 else (1, tp))
    assert_bitwise_equal(out, q_ref)
    assert torch.equal(s_col, s_ref)
    assert torch.isnan(storage[:, t:]).all(), "the padding rows are never written"
    s_new = api.quant_fp8(x, group, scale_layout="tma_col")[1]
    assert s_new.shape == (t, d // g) and (d // g == 1 or s_new.stride() == (1, tp))
    # Dequant reads either layout.
    y = api.dequant_fp8(q2, s_col, group)
    assert_bitwise_equal(y, ref.dequant_fp8_ref(q_ref, s_ref, g))
    assert_bitwise_equal(api.dequant_fp8(q2, s_ref, group), y)


@pytest.mark.ref
def test_cpu_fp4_and_block_interfaces():
    x = random_rows(9, 96, torch.float16, row_stride=100)
    gs = api.fp4_global_scale(x)
    p, s = api.quant_fp4(x, global_scale=gs)
    p_ref, s_ref = ref.quant_fp4_e4m3_ref(x, gs)
    assert_bitwise_equal(p, p_ref)
    assert_bitwise_equal(s, s_ref)
    assert_bitwise_equal(api.dequant_fp4(p, s, global_scale=gs), ref.dequant_fp4_e4m3_ref(p_ref, s_ref, gs))
    p, s = api.quant_fp4(x, scale_format="ue8m0")
    p_ref, s_ref = ref.quant_fp4_ue8m0_ref(x)
    assert_bitwise_equal(p, p_ref)
    assert_bitwise_equal(s, s_ref)
    assert_bitwise_equal(api.dequant_fp4(p, s), ref.dequant_fp4_ue8m0_ref(p_ref, s_ref))
    w = random_rows(130, 260, torch.bfloat16)
    q, s = api.quant_fp8_block(w)
    q_ref, s_ref = ref.quant_fp8_block_ref(w)
    assert_bitwise_equal(q, q_ref)
    assert_bitwise_equal(s, s_ref)
    assert_bitwise_equal(api.dequant_fp8_block(q, s), ref.dequant_fp8_block_ref(q_ref, s_ref))


@pytest.mark.ref
def test_empty_input_calls_nothing(monkeypatch):
    def fail(*_, **__):
        raise AssertionError("an empty input must not reach the reference or a kernel")

    for fn in [n for n in ref.__all__ if n.endswith("_ref") and n != "fp4_global_scale_ref"]:
        monkeypatch.setattr(ref, fn, fail)
    x = torch.zeros((0, 256), dtype=torch.bfloat16)
    q, s = api.quant_fp8(x, 128)
    assert q.shape == (0, 256) and s.shape == (0, 2)
    assert api.quant_fp8(x, 128, scale_layout="tma_col")[1].shape == (0, 2)
    assert api.dequant_fp8(q, s, 128).shape == (0, 256)
    assert api.quant_fp8_block(x)[1].shape == (0, 2)
    p, s4 = api.quant_fp4(x, scale_format="ue8m0")
    assert p.shape == (0, 128) and s4.shape == (0, 8)
    assert api.dequant_fp4(p, s4).shape == (0, 256)


def _bad_inputs():
    bf = torch.bfloat16
    x = random_rows(4, 256, bf)
    q, s = ref.quant_fp8_ref(x, 128)
    gs = ref.fp4_global_scale_ref(x)
    p, s8 = ref.quant_fp4_e4m3_ref(x, gs)
    out = lambda shape, dtype: poisoned(shape, dtype, "cpu")  # noqa: E731
    fp8 = torch.float8_e4m3fn
    wide = random_rows(4, 512, bf)
    col = torch.empty((2, 4), dtype=torch.float32).t()
    return [
        ("quant_fp8-x-not-tensor", api.quant_fp8, dict(x=x.tolist()), TypeError, "x must be a torch.Tensor"),
        ("quant_fp8-x-float64", api.quant_fp8, dict(x=x.double()), TypeError, "x has dtype torch.float64"),
        ("quant_fp8-x-1d", api.quant_fp8, dict(x=x[0]), ValueError, "x must be 2-D"),
        ("quant_fp8-x-last-dim-strided", api.quant_fp8, dict(x=wide[:, ::2]), ValueError, "x's last dimension must be contiguous"),
        ("quant_fp8-x-meta", api.quant_fp8, dict(x=x.to("meta")), ValueError, "x is on meta; tensors on meta are not supported"),
        ("quant_fp8-x-no-columns", api.quant_fp8, dict(x=x[:, :0]), ValueError, "x must have at least one column"),
        ("quant_fp8-group-not-dividing", api.quant_fp8, dict(x=x[:, :200]), ValueError, "group_size 128 does not divide D 200"),
        ("quant_fp8-group-unsupported", api.quant_fp8, dict(x=x, group_size=256), ValueError, "group_size must be one of"),
        ("quant_fp8-group-float", api.quant_fp8, dict(x=x, group_size=128.0), TypeError, "group_size must be an int"),
        ("quant_fp8-ue8m0-not-bool", api.quant_fp8, dict(x=x, ue8m0=1), TypeError, "ue8m0 must be a bool"),
        ("quant_fp8-bad-layout", api.quant_fp8, dict(x=x, scale_layout="col"), ValueError, "scale_layout must be one of"),
        ("quant_fp8-out-dtype", api.quant_fp8, dict(x=x, out=out((4, 256), torch.uint8)), ValueError, "out must be (4, 256)"),
        ("quant_fp8-out-strided", api.quant_fp8, dict(x=x, out=out((4, 512), fp8)[:, ::2]), ValueError, "out must be contiguous"),
        ("quant_fp8-scale-too-small", api.quant_fp8, dict(x=x, scale_out=out((4, 1), torch.float32)), ValueError, "scale_out is too small"),
        ("quant_fp8-scale-wrong-shape", api.quant_fp8, dict(x=x, scale_out=out((4, 3), torch.float32)), ValueError, "scale_out has the wrong shape"),
        ("quant_fp8-scale-dtype", api.quant_fp8, dict(x=x, scale_out=out((4, 2), torch.float16)), TypeError, "scale_out has dtype torch.float16"),
        ("quant_fp8-scale-not-col", api.quant_fp8, dict(x=x, scale_layout="tma_col", scale_out=out((4, 2), torch.float32)), ValueError, "scale_out must have strides (1, 4)"),
        ("quant_fp8-scale-not-row", api.quant_fp8, dict(x=x, scale_out=col), ValueError, "scale_out must be contiguous"),
        ("dequant_fp8-q-dtype", api.dequant_fp8, dict(q=x, scale=s), TypeError, "q has dtype torch.bfloat16"),
        ("dequant_fp8-q-strided", api.dequant_fp8, dict(q=ref.quant_fp8_ref(wide, 128)[0][:, :256], scale=s), ValueError, "q must be contiguous"),
        ("dequant_fp8-scale-shape", api.dequant_fp8, dict(q=q, scale=s[:, :1]), ValueError, "scale must have shape (4, 2)"),
        ("dequant_fp8-scale-layout", api.dequant_fp8, dict(q=q, scale=torch.zeros(2, 8).t()[:4]), ValueError, "scale must be row-major or have strides (1, 4)"),
        ("dequant_fp8-scale-dtype", api.dequant_fp8, dict(q=q, scale=s.double()), TypeError, "scale has dtype torch.float64"),
        ("dequant_fp8-out-dtype", api.dequant_fp8, dict(q=q, scale=s, out=out((4, 256), torch.float16)), ValueError, "out must be (4, 256)"),
        ("quant_fp8_block-block", api.quant_fp8_block, dict(w=x, block=64), ValueError, "block must be 128"),
        ("quant_fp8_block-scale-too-small", api.quant_fp8_block, dict(w=x, scale_out=out((1, 1), torch.float32)), ValueError, "scale_out is too small"),
        ("dequant_fp8_block-scale-shape", api.dequant_fp8_block, dict(q=q, scale=s), ValueError, "scale must have shape (1, 2)"),
        ("quant_fp4-format", api.quant_fp4, dict(x=x, scale_format="e8m0"), ValueError, "scale_format must be one of"),
        ("quant_fp4-no-global-scale", api.quant_fp4, dict(x=x), ValueError, "global_scale is required"),
        ("quant_fp4-global-scale-shape", api.quant_fp4, dict(x=x, global_scale=gs.reshape(1, 1)), ValueError, "global_scale must have shape (1,)"),
        ("quant_fp4-global-scale-dtype", api.quant_fp4, dict(x=x, global_scale=gs.half()), TypeError, "global_scale has dtype torch.float16"),
        ("quant_fp4-global-scale-device", api.quant_fp4, dict(x=x, global_scale=gs.to("meta")), ValueError, "global_scale is on meta"),
        ("quant_fp4-global-scale-with-ue8m0", api.quant_fp4, dict(x=x, scale_format="ue8m0", global_scale=gs), ValueError, "global_scale must be None"),
        ("quant_fp4-D-not-group", api.quant_fp4, dict(x=x[:, :40], scale_format="ue8m0"), ValueError, "x has width 40, not a multiple of the group size 32"),
        ("quant_fp4-out-shape", api.quant_fp4, dict(x=x, global_scale=gs, out=out((4, 256), torch.uint8)), ValueError, "out must be (4, 128)"),
        ("quant_fp4-scale-too-small", api.quant_fp4, dict(x=x, global_scale=gs, scale_out=out((4, 8), fp8)), ValueError, "scale_out is too small"),
        ("dequant_fp4-packed-dtype", api.dequant_fp4, dict(packed=p.view(torch.int8), scale=s8, global_scale=gs), TypeError, "packed has dtype torch.int8"),
        ("dequant_fp4-scale-dtype", api.dequant_fp4, dict(packed=p, scale=s8.float(), global_scale=gs), TypeError, "scale has dtype torch.float32"),
        ("dequant_fp4-scale-shape", api.dequant_fp4, dict(packed=p, scale=s8[:, :8].contiguous(), global_scale=gs), ValueError, "scale must have shape (4, 16)"),
        ("dequant_fp4-no-global-scale", api.dequant_fp4, dict(packed=p, scale=s8), ValueError, "global_scale is required"),
    ]


@pytest.mark.ref
@pytest.mark.parametrize("name", case_names(_bad_inputs))
def test_bad_input_raises_and_writes_nothing(name):
    _, fn, kwargs, error, message = case_named(_bad_inputs, name)
    assert_rejected_without_writes(fn, kwargs, error, message, [kwargs.get(k) for k in ("out", "scale_out")])


@pytest.mark.ref
def test_outputs_overlapping_inputs_are_rejected():
    buf = torch.randint(0, 256, (4, 512), dtype=torch.uint8)
    x = buf.view(torch.bfloat16)  # (4, 256), the same bytes
    flat = buf.view(-1)
    out = flat[:1024].view(torch.float8_e4m3fn).view(4, 256)
    assert_rejected_without_writes(api.quant_fp8, {"x": x, "group_size": 128, "out": out}, ValueError, "out overlaps x", [buf])
    assert_rejected_without_writes(
        api.quant_fp4, {"x": x, "scale_format": "ue8m0", "scale_out": flat[:32].view(4, 8)}, ValueError, "scale_out overlaps x", [buf]
    )


# ----------------------------------------------------------------------------------------------------
# Codegen (CPU): every configuration the dispatcher can pick lowers, compiles and fits on chip.


def _cuda_cases():
    from kernels.quant import cuda

    return [(name, args) for name, configs in cuda.quant_shipped_configs().items() for args in configs]


def _case_id(case):
    name, args = case
    return name.removesuffix("_tl") + "-" + "-".join(map(str, args))


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("case", _cuda_cases(), ids=_case_id)
def test_cuda_config_compiles_without_spills(arch, case):
    from kernels.quant import cuda
    from testing import codegen_cuda

    name, (*args, align) = case
    fn = getattr(cuda, name)
    # Built as the interface builds it for these archs: a programmatic dependent launch.
    lowered = codegen_cuda.lower_cuda(fn, *args, x_align=align, arch=arch, pdl=True)
    assert "int64_t" in lowered.source, "offsets must be 64-bit"
    assert "__fdividef" not in lowered.source and "--use_fast_math" not in lowered.nvcc_flags
    # check_cuda_resources asserts 0 spill bytes, no stack frame and shared memory within the limit.
    codegen_cuda.check_cuda_resources(fn, *args, x_align=align, arch=arch, pdl=True)


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("name", sorted({name for name, _ in _cuda_cases()}))
def test_cuda_dependent_launch_waits_before_memory(name):
    # pdl=True: nvcc keeps every global access after the wait for the grids before; pdl=False
    # emits neither call. One shipped configuration per factory (the first).
    from kernels.quant import cuda
    from testing import codegen_cuda

    *args, align = next(args for n, args in _cuda_cases() if n == name)
    codegen_cuda.check_dependent_launch(getattr(cuda, name), *args, x_align=align)


_ALIGNS = (1, 2, 4, 8, 16)


def _thread_elems(cfg) -> int:
    return cfg.steps * cfg.chunk


@pytest.mark.codegen_cuda
def test_cuda_shipped_configs_hold_the_heaviest_threads():
    # Registers grow with the elements a thread holds: over every D (multiple of 16 up to 16384),
    # every alignment and input dtype, no row configuration holds more than the shipped worst case
    # of its kernel family, which the spill test compiles.
    from kernels.quant import cuda

    elem = {"bfloat16": 2, "float16": 2, "float32": 4}
    shipped = cuda.quant_shipped_configs()

    def worst(configs, token):
        best = 0
        for args in configs:
            d, dt, stride, align = (args[0], args[1], args[4], args[5]) if token else (args[0], args[2], args[5], args[6])
            g = d if token else args[1]
            cfg = cuda.row_config(d, g, elem[dt], stride, align, token=token)
            assert cfg.threads <= 1024
            best = max(best, _thread_elems(cfg) * elem[dt])
        return best

    group_worst = worst(shipped["quant_fp8_group_tl"], False)
    token_worst = worst(shipped["quant_fp8_token_tl"], True)
    for d in range(16, cuda.MAX_TOKEN_D + 1, 16):
        for a in _ALIGNS:
            for dt, e in elem.items():
                cfg = cuda.row_config(d, d, e, d, a, token=True)
                assert cfg.threads <= 1024 and _thread_elems(cfg) * e <= token_worst, (d, dt, a, cfg)
                for g in cuda.FP8_GROUPS:
                    if d % g == 0:
                        cfg = cuda.row_config(d, g, e, d, a)
                        assert _thread_elems(cfg) * e <= group_worst, (d, g, dt, a, cfg)
                        assert cfg.threads_per_row % cfg.group_lanes == 0 and cfg.group_lanes <= 32


def _asc_cases():
    from kernels.quant import asc

    return [(name, args) for name, configs in asc.quant_shipped_configs().items() for args in configs]


@pytest.mark.codegen_ascend
@pytest.mark.parametrize("case", _asc_cases(), ids=_case_id)
def test_ascend_config_lowers_and_fits_ub(case):
    from kernels.quant import asc
    from testing import codegen_ascend

    name, (*args, align) = case
    fn = getattr(asc, name)
    source = codegen_ascend.ascend_source(fn, *args, x_align=align)
    assert "__global__" in source or "__aicore__" in source
    codegen_ascend.assert_ub_fits(fn, *args, x_align=align)


@pytest.mark.codegen_ascend
@pytest.mark.parametrize("case", [c for c in _asc_cases() if c[0] == "dequant_fp8_tl"], ids=_case_id)
def test_ascend_dequant_tiles_cover_every_group(case):
    # A partial last group (K no multiple of 128) is a group: the SIMT loop must reach it in every
    # row of a tile, or the tile's later rows are never written.
    from kernels.quant import asc

    D, group = case[1][:2]
    cfg = asc._dequant_tile(D, group)
    assert (cfg.groups - 1) * group < D <= cfg.groups * group
    assert cfg.threads * cfg.rounds >= cfg.rows * cfg.groups


@pytest.mark.codegen_ascend
def test_ascend_shipped_configs_loop_threads():
    # Some shipped tile of each SIMT row kernel holds more groups than threads (the rounds loop).
    from kernels.quant import asc
    from kernels.static_args import element_bytes

    configs = asc.quant_shipped_configs()
    assert any(asc._dequant_tile(*c[:2]).rounds > 1 for c in configs["dequant_fp8_tl"])
    assert any(asc.tile_config(c[0], c[1], element_bytes(c[2])).rounds > 1 for c in configs["quant_fp8_group_tl"])


@pytest.mark.codegen_ascend
def test_ascend_factories_match_cuda_names():
    from kernels.quant import asc, cuda

    tl_names = lambda m: {n for n in m.__all__ if n.endswith("_tl")}  # noqa: E731
    # The decode launch shape is CUDA's alone: the api falls back to quant_fp8_group_tl on LookupError.
    assert tl_names(asc) == tl_names(cuda) - {"quant_fp8_group_decode_tl"}


# ----------------------------------------------------------------------------------------------------
# Device: the backend's kernels against the reference on the accelerator, bit for bit.

DEVICE_T = [0, 1, 33, 4096]
DEVICE_D = [128, 576, 1536, 7168, 16384]


def _assert_same(actual, expected, what):
    """Bits equal; a bf16 NaN matches a NaN (the payload of a NaN is not part of the contract)."""
    if actual.dtype == torch.bfloat16:
        nan = torch.isnan(expected.float())
        assert torch.equal(torch.isnan(actual.float()), nan), f"{what}: NaN positions differ"
        actual, expected = actual.masked_fill(nan, 0), expected.masked_fill(nan, 0)
    assert_bitwise_equal(actual, expected, what=what)


def _check_fp8(device, x, group, ue8m0, layout):
    """quant_fp8 against the reference, run once with its outputs' bytes all 0x7F and once all 0x80
    (BYTE_POISONS): a NaN input rightly gives e4m3's NaN code 0x7F, so with one poison an element
    the kernel skipped could pass. Then dequant_fp8 of the result."""
    t, d = x.shape
    g = d if group is None else group
    q_ref, s_ref = ref.quant_fp8_ref(x, g, ue8m0)
    tp = ref.tma_aligned_rows(t)
    for byte in BYTE_POISONS:
        out = byte_poisoned((t, d), torch.float8_e4m3fn, device, byte)
        storage = byte_poisoned((d // g, tp) if layout == "tma_col" else (t, d // g), torch.float32, device, byte)
        scale_out = storage.t()[:t] if layout == "tma_col" else storage
        q, s = api.quant_fp8(x, group, ue8m0=ue8m0, scale_layout=layout, out=out, scale_out=scale_out)
        what = f"quant_fp8 T={t} D={d} g={group} ue8m0={ue8m0} {layout} {x.dtype} poison {byte:#x}"
        assert q is out and s is scale_out
        _assert_same(q, q_ref, what + " q")
        _assert_same(s, s_ref, what + " scale")
        if layout == "tma_col" and t:
            assert (storage[:, t:].view(torch.uint8) == byte).all(), "padding written"
    y_out = poisoned((t, d), torch.bfloat16, device)
    y = api.dequant_fp8(q, s, group, out=y_out)
    _assert_same(y, ref.dequant_fp8_ref(q_ref, s_ref, g), what + " dequant")


@pytest.mark.device
@pytest.mark.parametrize("d,group", [(d, g) for d in DEVICE_D for g in (16, 32, 64, 128, None) if g is None or d % g == 0])
@pytest.mark.parametrize("t", DEVICE_T)
def test_device_quant_fp8(device, t, d, group):
    x = random_rows(t, d, torch.bfloat16, device=device)
    _check_fp8(device, x, group, False, "row")


@pytest.mark.device
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32", "ue8m0"])
@pytest.mark.parametrize("layout", ["row", "tma_col"])
@pytest.mark.parametrize(
    "t,d,row_stride,col_offset,group",
    [
        (t, d, stride, offset, g)
        for t, d, stride, offset in [(33, 7168, 7168, 0), (4095, 1536, 4096, 0), (7, 576, 577, 1), (1, 128, 128, 0)]
        for g in (32, 64, 128, None)
        if g is None or d % g == 0
    ],
)
def test_device_quant_fp8_options(device, dtype, group, ue8m0, layout, t, d, row_stride, col_offset):
    x = random_rows(t, d, dtype, device=device, row_stride=row_stride, col_offset=col_offset)
    _check_fp8(device, x, group, ue8m0, layout)


@pytest.mark.device
@pytest.mark.parametrize("d", [1, 7, 1000, api.MAX_TOKEN_D])
@pytest.mark.parametrize("t", [1, 65])
def test_device_quant_fp8_per_token_any_width(device, t, d):
    # One scale per token at widths no group divides (1, 7, 1000) and at the widest supported.
    for dtype in DTYPES:
        _check_fp8(device, random_rows(t, d, dtype, device=device), None, False, "row")


@pytest.mark.device
@pytest.mark.parametrize("t", [api.DECODE_MAX_ROWS, api.DECODE_MAX_ROWS + 1])
@pytest.mark.parametrize("layout", ["row", "tma_col"])
def test_device_quant_fp8_both_sides_of_the_decode_shape(device, t, layout):
    # The last batch of the decode launch shape and the first of the shipped one, special groups
    # among random rows (zero, huge, tiny, NaN, Inf).
    x = random_rows(t, 7168, torch.bfloat16, device=device)
    special = special_rows(1024, torch.bfloat16, 128)
    x[t - special.shape[0] :, 3072:4096] = special.to(device)
    _check_fp8(device, x, 128, True, layout)


@pytest.mark.device
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("group", [16, 128, None])
@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32", "ue8m0"])
def test_device_quant_fp8_special_groups(device, dtype, group, ue8m0):
    # Zero, huge, tiny (subnormal), NaN, +-Inf groups next to normal ones.
    x = special_rows(1024, dtype, 1024 if group is None else group).to(device)
    for layout in ("row", "tma_col"):
        _check_fp8(device, x, group, ue8m0, layout)


def _check_fp4(device, x, scale_format):
    t, d = x.shape
    what = f"quant_fp4 {scale_format} T={t} D={d} {x.dtype}"
    group = 16 if scale_format == "e4m3" else 32
    gs = api.fp4_global_scale(x) if scale_format == "e4m3" else None
    if gs is not None:
        assert_bitwise_equal(gs, ref.fp4_global_scale_ref(x).reshape(1), what=what + " global scale")
        p_ref, s_ref = ref.quant_fp4_e4m3_ref(x, gs)
    else:
        p_ref, s_ref = ref.quant_fp4_ue8m0_ref(x)
    for byte in BYTE_POISONS:
        out = byte_poisoned((t, d // 2), torch.uint8, device, byte)
        scale_out = byte_poisoned((t, d // group), s_ref.dtype, device, byte)
        api.quant_fp4(x, scale_format=scale_format, global_scale=gs, out=out, scale_out=scale_out)
        _assert_same(out, p_ref, f"{what} packed (poison {byte:#x})")
        _assert_same(scale_out, s_ref, f"{what} scale (poison {byte:#x})")
    y = api.dequant_fp4(out, scale_out, global_scale=gs, out=poisoned((t, d), torch.bfloat16, device))
    expected = ref.dequant_fp4_e4m3_ref(p_ref, s_ref, gs) if gs is not None else ref.dequant_fp4_ue8m0_ref(p_ref, s_ref)
    _assert_same(y, expected, what + " dequant")


@pytest.mark.device
@pytest.mark.parametrize("scale_format", ["e4m3", "ue8m0"])
@pytest.mark.parametrize("d", DEVICE_D)
@pytest.mark.parametrize("t", DEVICE_T)
def test_device_quant_fp4(device, t, d, scale_format):
    _check_fp4(device, random_rows(t, d, torch.bfloat16, device=device), scale_format)


@pytest.mark.device
@pytest.mark.parametrize("scale_format", ["e4m3", "ue8m0"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_device_quant_fp4_strided_and_special(device, scale_format, dtype):
    _check_fp4(device, random_rows(65, 576, dtype, device=device, row_stride=577, col_offset=1), scale_format)
    _check_fp4(device, special_rows(256, dtype, 32).to(device), scale_format)


def _nvfp4_path_edges(dtype) -> list[float]:
    """Global scales at and just past both ends of NVFP4's fast path for the dtype (cuda.
    _NVFP4_FAST_DIVISOR, and _NVFP4_WORD_DIVISOR_MAX's upper end for bf16 / fp16), typical ones,
    zero and Inf."""
    from kernels.quant import cuda

    hi = cuda._NVFP4_WORD_DIVISOR_MAX.get(str(dtype).split(".")[1], cuda._NVFP4_FAST_DIVISOR[1])
    lo, hi = cuda._NVFP4_FAST_DIVISOR[0] / formats.E2M1_MAX, hi / formats.E2M1_MAX
    f32 = np.float32
    return [lo, float(np.nextafter(f32(lo), f32(0))), hi, float(np.nextafter(f32(hi), f32(math.inf))), 1 / 2688, 0.37, 1e-30, 1e30, 0.0, math.inf]


def _check_nvfp4(device, x, gs):
    """NVFP4 of x with the (1,) global scale gs through the interface, into poisoned outputs: codes
    and scales equal to the reference's bit for bit."""
    t, d = x.shape
    p_ref, s_ref = ref.quant_fp4_e4m3_ref(x, gs)
    what = f"gs={gs.item()!r} {x.dtype}"
    for byte in BYTE_POISONS:
        out, scale_out = byte_poisoned((t, d // 2), torch.uint8, device, byte), byte_poisoned((t, d // 16), s_ref.dtype, device, byte)
        api.quant_fp4(x, scale_format="e4m3", global_scale=gs, out=out, scale_out=scale_out)
        _assert_same(out, p_ref, f"packed, {what} (poison {byte:#x})")
        _assert_same(scale_out, s_ref, f"scale, {what} (poison {byte:#x})")


@pytest.mark.device
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_device_quant_fp4_e4m3_global_scales(device, dtype):
    # The kernel divides by 6 * gs with Markstein's correction (and encodes bf16 / fp16 by words)
    # inside its fast path and with the IEEE division outside it: global scales at and just past
    # both ends, typical ones, zero and Inf, each with groups whose quotient amax / (6 gs) spans
    # the e4m3 scales' range.
    scales = _nvfp4_path_edges(dtype)
    t, d = 64, 512
    for gs_value in scales:
        gs = torch.tensor([gs_value], dtype=torch.float32, device=device)
        quotient = torch.exp2(torch.empty((t, d // 16, 1), device=device).uniform_(-12, 12))
        x = (torch.randn((t, d // 16, 16), device=device) * quotient * (formats.E2M1_MAX * gs_value if 0 < gs_value < math.inf else 1.0)).reshape(t, d).to(dtype)
        _check_nvfp4(device, x, gs)


@pytest.mark.device
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_device_quant_fp4_e4m3_word_encoder_edges(device, dtype):
    # bf16 / fp16 NVFP4 encodes by tl_formats.e2m1_word, whose signs are the products' sign bits:
    # NaNs with the sign bit set (the device's NaN results must be the positive canonical NaN),
    # -0.0 (the fma's +0.0 must make it +0.0), the dtype's smallest magnitudes (at the fast path's
    # largest global scale, the products nearest to rounding to zero), +-Inf, and random bit
    # patterns, in rows of random normal groups, at every global scale of _nvfp4_path_edges.
    info = torch.finfo(dtype)
    bits = torch.iinfo(torch.int16)
    nan = [0x7FC1, 0xFFC0, 0xFF81, 0xFFFF] if dtype == torch.bfloat16 else [0x7E01, 0xFE00, 0xFC01, 0xFFFF]
    special = torch.tensor(nan + [0x8000, 0x0000, 0x0001, 0x8001, 0x0002, 0x8003], dtype=torch.int32).to(torch.int16).view(dtype)
    special = torch.cat((special, torch.tensor([math.inf, -math.inf, info.tiny, -info.tiny], dtype=dtype)))
    t, d = 96, 1024
    for gs_value in _nvfp4_path_edges(dtype):
        gs = torch.tensor([gs_value], dtype=torch.float32, device=device)
        magnitude = torch.exp2(torch.empty((t, d // 16, 1), device=device).uniform_(-20, 20))
        x = (torch.randn((t, d // 16, 16), device=device) * magnitude).reshape(t, d).to(dtype)
        x[t // 2 :] = torch.randint(bits.min, bits.max + 1, (t - t // 2, d), dtype=torch.int16, device=device).view(dtype)
        where = torch.randint(0, t * d, (t * d // 8,), device=device)
        x.view(-1)[where] = special.to(device)[torch.randint(0, special.numel(), where.shape, device=device)]
        _check_nvfp4(device, x, gs)


@pytest.mark.device
def test_device_quant_fp4_encodes_every_boundary(device, seed):
    # Groups of 32 fp32 values led by 6.0 have the UE8M0 scale 1 (and inv 1), so every other value
    # reaches the e2m1 encoder as it is: every grid value and midpoint, their fp32 neighbours, both
    # signs, zeros, NaN and random magnitudes up to 6 (larger ones would raise the scale), shuffled.
    v = torch.from_numpy(_boundary_values(seed))
    v = torch.cat((v, torch.tensor([math.nan, -math.nan])))
    v = v[(v.abs() <= 6) | v.isnan()]
    v = v[torch.randperm(v.numel())]
    groups = -(-v.numel() // 124) * 4  # whole rows of 4 groups
    body = torch.zeros(groups * 31)
    body[: v.numel()] = v
    x = torch.cat((torch.full((groups, 1), 6.0), body.reshape(groups, 31)), dim=1).reshape(-1, 128)
    _check_fp4(device, x.to(device), "ue8m0")


@pytest.mark.device
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_device_quant_fp4_ue8m0_denormal_encoder_edges(device, dtype):
    # bf16 / fp16 MX FP4 goes through tl_formats.e2m1_code_denormal. Each group of 32 is led by
    # +-6 * 2**j (scale 2**j, every exponent the dtype allows, so both the one-multiply path and
    # the two-multiply one of scales above 2**23), then: the products' underflow edge for the sign
    # (-2**(j - 150), -2**(j - 149) and their doubles, where the dtype holds them), -0.0, NaN, the
    # grid values and midpoints times 2**j with their dtype neighbours, and random bit patterns no
    # larger than the leader (tiny and denormal ones included).
    info = torch.finfo(dtype)
    lo, hi = math.ceil(math.log2(info.smallest_normal)) - 2, math.floor(math.log2(info.max / 6))
    grid = torch.tensor([0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0])
    rows = []
    for j in range(lo, hi + 1):
        lead = 6.0 * 2.0**j
        edges = torch.tensor([2.0 ** (j - 150), 2.0 ** (j - 149), 2.0 ** (j - 148), 3 * 2.0 ** (j - 150)]).to(dtype).float()
        mids = (grid * 2.0**j).to(dtype)
        near = torch.cat([mids, torch.nextafter(mids, torch.full_like(mids, math.inf)), torch.nextafter(mids, torch.zeros_like(mids))]).float()
        bits = torch.randint(-(2**15), 2**15, (4096,), dtype=torch.int16).view(dtype).float()
        rand = bits[bits.abs() <= lead]
        fill = torch.cat([-edges, edges, torch.tensor([-0.0, math.nan]), near, -near, rand])
        fill = fill[torch.randperm(fill.numel())]
        fill = torch.cat([fill, torch.zeros((-fill.numel()) % 31)]).reshape(-1, 31).clamp(-lead, lead)
        leaders = torch.full((fill.shape[0], 1), lead) * torch.where(torch.rand(fill.shape[0], 1) < 0.5, -1.0, 1.0)
        rows.append(torch.cat([leaders, fill], dim=1))
    x = torch.cat(rows)
    x = torch.cat([x, torch.zeros((-x.shape[0]) % 4, 32)]).reshape(-1, 128)
    _check_fp4(device, x.to(dtype).to(device), "ue8m0")


@pytest.mark.device
@pytest.mark.parametrize("scale_format", ["e4m3", "ue8m0"])
def test_device_dequant_fp4_every_code_and_scale(device, scale_format):
    # Random bytes hold every code in both nibbles; the scales are random finite ones of the whole
    # range: UE8M0 exponents 2**-127 .. 2**127 (denormal products, products that overflow to Inf),
    # every finite e4m3 (denormal ones included) times a random global scale.
    t, d = 512, 256
    packed = torch.randint(0, 256, (t, d // 2), dtype=torch.uint8, device=device)
    if scale_format == "ue8m0":
        scale, gs = torch.randint(0, 255, (t, d // 32), dtype=torch.uint8, device=device), None
        expected = ref.dequant_fp4_ue8m0_ref(packed, scale)
    else:
        bits = torch.randint(0, 256, (t, d // 16), dtype=torch.uint8, device=device)
        scale = torch.where((bits & 0x7F) == 0x7F, bits - 1, bits).view(torch.float8_e4m3fn)  # no NaN
        gs = torch.rand(1, device=device) * 2.0 ** torch.randint(-20, 20, (1,), device=device)
        expected = ref.dequant_fp4_e4m3_ref(packed, scale, gs)
    y = api.dequant_fp4(packed, scale, global_scale=gs, out=poisoned((t, d), torch.bfloat16, device))
    _assert_same(y, expected, f"dequant_fp4 {scale_format} of every code")


@pytest.mark.device
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32", "ue8m0"])
@pytest.mark.parametrize("n,k,row_stride", [(1, 128, 128), (130, 200, 201), (7168, 7168, 7168), (257, 1536, 2048), (129, 576, 576)])
def test_device_quant_fp8_block(device, dtype, ue8m0, n, k, row_stride):
    w = random_rows(n, k, dtype, device=device, row_stride=row_stride)
    q_ref, s_ref = ref.quant_fp8_block_ref(w, 128, ue8m0)
    out = poisoned((n, k), torch.float8_e4m3fn, device)
    scale_out = poisoned(tuple(s_ref.shape), torch.float32, device)
    api.quant_fp8_block(w, ue8m0=ue8m0, out=out, scale_out=scale_out)
    _assert_same(out, q_ref, "block q")
    _assert_same(scale_out, s_ref, "block scale")
    y = api.dequant_fp8_block(out, scale_out, out=poisoned((n, k), torch.bfloat16, device))
    _assert_same(y, ref.dequant_fp8_block_ref(q_ref, s_ref, 128), "block dequant")


@pytest.mark.device
def test_device_quant_fp8_block_special(device):
    w = special_rows(384, torch.bfloat16, 128).repeat(20, 1).to(device)
    q_ref, s_ref = ref.quant_fp8_block_ref(w, 128)
    q, s = api.quant_fp8_block(
        w, out=poisoned(tuple(q_ref.shape), q_ref.dtype, device), scale_out=poisoned(tuple(s_ref.shape), s_ref.dtype, device)
    )
    _assert_same(q, q_ref, "block q")
    _assert_same(s, s_ref, "block scale")


@pytest.mark.device
def test_device_64bit_offsets(device):
    # t * D passes 2**31 elements: rows near the end sit past any 32-bit offset.
    d = 16384
    t = (2**31) // d + 64
    x = torch.randn((t, d), device=device, dtype=torch.bfloat16)
    check = torch.cat([torch.arange(0, 8), torch.arange(t - 72, t)]).to(device)
    q, s = api.quant_fp8(
        x, 128, out=poisoned((t, d), torch.float8_e4m3fn, device), scale_out=poisoned((t, d // 128), torch.float32, device)
    )
    q_ref, s_ref = ref.quant_fp8_ref(x[check], 128)
    _assert_same(q[check], q_ref, "q")
    _assert_same(s[check], s_ref, "scale")


def _scale_helpers_factory():
    """The jit factory of kernel(amax, scale, inv) for a fmt_max: tl_formats.group_scale through
    fp32_quotient and scale_reciprocal through reciprocal_rn, as the CUDA kernels call them, one
    element per thread."""
    import tilelang
    import tilelang.language as T

    from kernels.quant import tl_formats as F

    @tilelang.jit
    def scale_helpers_tl(fmt_max: float):
        n = T.dynamic("n")

        @T.prim_func
        def scale_helpers(amax: T.Tensor((n,), "float32"), scale: T.Tensor((n,), "float32"), inv: T.Tensor((n,), "float32")):
            with T.Kernel(T.ceildiv(n, 256), threads=256, prelude=F.CUDA_PRELUDE) as bx:
                i = bx * 256 + T.get_thread_binding(0)
                if i < n:
                    scale[i] = F.group_scale(amax[i], fmt_max, False, F.fp32_quotient)
                    inv[i] = F.scale_reciprocal(scale[i], False, F.reciprocal_rn)

        return scale_helpers

    return scale_helpers_tl


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_cuda_fast_scale_helpers_compile(arch):
    # The device test's kernel: the helpers lower to fused multiply-adds and the prelude's
    # reciprocal approximation, with no division left (nvcc would add its slow-path branch).
    from testing import codegen_cuda

    factory = _scale_helpers_factory()
    source = codegen_cuda.lower_cuda(factory, formats.E4M3_MAX, arch=arch).source
    body = source[source.index("__global__") :]
    assert "__fmaf_rn" in body and "tl_ops_rcp_approx" in body and " / " not in body
    codegen_cuda.check_cuda_resources(factory, formats.E4M3_MAX, arch=arch)


@pytest.mark.device
@pytest.mark.parametrize("fmt_max", [formats.E2M1_MAX, formats.E4M3_MAX])
def test_device_fast_scale_division_every_fp32(device, backend, fmt_max):
    # fp32_quotient and reciprocal_rn (no slow path: valid only on the range group scales take)
    # against the reference's IEEE division and the IEEE reciprocal, for every non-negative fp32
    # amax and +Inf: below the floor, the whole range, the largest scales.
    if backend != "cuda":
        pytest.skip("fp32_quotient and reciprocal_rn are CUDA expressions")
    kernel = _scale_helpers_factory()(fmt_max)
    chunk = 2**28
    for start in range(0, 0x7F800001, chunk):
        bits = torch.arange(start, min(start + chunk, 0x7F800001), dtype=torch.int32, device=device)
        amax = bits.view(torch.float32)
        scale, inv = poisoned(amax.shape, torch.float32, device), poisoned(amax.shape, torch.float32, device)
        kernel(amax, scale, inv)
        want = formats.group_scale(amax, fmt_max, False)
        for got, expected, what in ((scale, want, "scale"), (inv, torch.ones_like(want) / want, "1 / scale")):
            # Compared on the device; only the differing elements (if any) go to the host.
            bad = got.view(torch.int32) != expected.view(torch.int32)
            if bool(bad.any()):
                assert_bitwise_equal(got[bad], expected[bad], what=f"{what} of amax bits {start:#x}..")


@pytest.mark.device
def test_device_empty_batch_launches_nothing(device, no_kernel_launches):
    x = random_rows(0, 7168, torch.bfloat16, device=device)
    q, s = api.quant_fp8(x, 128)
    assert q.shape == (0, 7168) and api.dequant_fp8(q, s, 128).shape == (0, 7168)
    p, s4 = api.quant_fp4(x, scale_format="ue8m0")
    assert api.dequant_fp4(p, s4).shape == (0, 7168)
    assert api.quant_fp8_block(x)[0].shape == (0, 7168)


@pytest.mark.device
@pytest.mark.parametrize("kind", ["fp8", "fp8_tma_col", "fp4_e4m3", "fp4_ue8m0"])
def test_device_cuda_graph_replay(device, backend, kind):
    if backend != "cuda":
        pytest.skip("CUDA graphs are a CUDA feature")
    t, d = 64, 7168
    x = random_rows(t, d, torch.bfloat16, device=device)
    gs = torch.empty(1, device=device)
    if kind.startswith("fp8"):
        layout = "tma_col" if kind.endswith("tma_col") else "row"
        q, s = api.quant_fp8(x, 128, scale_layout=layout)
        call = lambda: api.quant_fp8(x, 128, scale_layout=layout, out=q, scale_out=s)  # noqa: E731
        expected = lambda: ref.quant_fp8_ref(x, 128)  # noqa: E731
    else:
        fmt = kind.split("_")[1]
        glob = gs if fmt == "e4m3" else None
        gs.copy_(ref.fp4_global_scale_ref(x).reshape(1))
        q, s = api.quant_fp4(x, scale_format=fmt, global_scale=glob)

        def call():
            if glob is not None:
                glob.copy_(api.fp4_global_scale(x))  # the global scale stays on the device
            api.quant_fp4(x, scale_format=fmt, global_scale=glob, out=q, scale_out=s)

        expected = lambda: ref.quant_fp4_e4m3_ref(x, gs) if glob is not None else ref.quant_fp4_ue8m0_ref(x)  # noqa: E731
    call()  # compile and load outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    for _ in range(2):
        x.copy_(random_rows(t, d, torch.bfloat16, device=device))
        # Every byte of a packed FP4 q is a legal pair of codes, so one poison could match what the
        # kernel should have written; no expected byte equals both of two different poisons.
        for byte in BYTE_POISONS:
            as_bits(q).fill_(byte)
            s.copy_(poisoned(tuple(s.shape), s.dtype, device))
            graph.replay()
            q_ref, s_ref = expected()
            _assert_same(q, q_ref, f"{kind} q (poison {byte:#x})")
            _assert_same(s, s_ref, f"{kind} scale (poison {byte:#x})")
