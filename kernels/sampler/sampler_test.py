"""Tests of `sampler`: the reference against an independent per-row oracle (Python loops, float64
where it cannot change a decision, the reference's float32 w and the library's noise bits where it
can), against the distributions it must draw from, edge rows, interface validation, codegen, and
the device kernel against the reference.

Suites (markers, selected by `--tl-suite`; see testing/plugin.py): ref, codegen_cuda, codegen_ascend,
device. Inputs are drawn fresh per test from the plugin's per-test seed; outputs are poisoned first
(sampler_testlib.poisoned_out: values no correct call leaves, empty rows included) and integer
outputs compared exactly.
"""

from __future__ import annotations

import math
import struct

import pytest
import torch

from kernels.random_sampling import ref as noise_ref
from kernels.sampler import api, ref
from kernels.sampler.sampler_testlib import (
    I64,
    INF,
    assert_device_matches_ref,
    assert_graph_replays,
    bad_inputs,
    counters,
    device_logits,
    mixed_params,
    poisoned_out,
)
from testing.numeric import assert_bitwise_equal, assert_rejected_without_writes, chi2_critical, poisoned


# ----------------------------------------------------------------------------------------------------
# Independent oracle: one row at a time, in Python.


def f32(x: float) -> float:
    """x rounded to float32 (a float64 result of +, -, * or / on float32 values rounds correctly)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def oracle_row(l_row: torch.Tensor, t: float, k: int, p: float, mp: float, seed: int, offset: int):
    """(token or None for "decided by the race", kept ids, race keys in float64, logprob in float64,
    empty) of one row, following ref.py's steps with loops."""
    V = l_row.numel()
    l = [(-INF if math.isnan(x) else x) for x in l_row.float().tolist()]
    finite = [v for v in range(V) if l[v] > -INF]
    if not finite:
        return -1, [], {}, math.nan, True
    sampled = 0 < t < INF
    s = [f32(x / t) if sampled else x for x in l]
    m = max(s[v] for v in finite)
    best = min(v for v in finite if s[v] == m)
    if m == INF:
        return best, [best], {}, 0.0, False
    d = [(-INF if v not in finite else 0.0 if s[v] == m else f32(s[v] - m)) for v in range(V)]
    # The same float32 expf as the reference (the one value the oracle cannot recompute itself).
    w = torch.exp(torch.tensor(d, dtype=torch.float32)).tolist()
    if not sampled:
        return best, [best], {}, d[best] - math.log(sum(math.exp(x) for x in d)), False
    kept = set(finite)
    if 0 < k < V:
        ranked = sorted((s[v] for v in finite), reverse=True)
        if k <= len(ranked):
            kept = {v for v in kept if s[v] >= ranked[k - 1]}
    q = {v: math.floor(w[v] * 2**20) for v in kept}
    if p < 1:
        p20 = round(min(max(p, 0.0), 1.0) * 2**20)
        total = sum(q.values())
        for tau in sorted({w[v] for v in kept}, reverse=True):
            if sum(q[v] for v in kept if w[v] >= tau) * 2**20 >= p20 * total:
                break
        kept = {v for v in kept if w[v] >= tau}
    if mp > 0:
        kept = {v for v in kept if w[v] >= min(mp, 1.0)}
    bits = noise_ref.noise_bits(torch.tensor([seed]), torch.tensor([offset]), V)[0].tolist()
    keys = {v: w[v] / -math.log(((b >> 9) + 0.5) * 2.0**-23) for v, b in enumerate(bits) if v in kept}
    return None, sorted(kept), keys, d, False


def assert_matches_oracle(logits, temperature, top_k, top_p, min_p, seed, offset, tokens, logprobs, empty, rel=1e-5):
    """Every row's token is the oracle's (greedy / +inf / empty rows exactly; sampled rows: the
    argmax of the race, or a kept id whose key is within `rel` of the best, a near-tie that float32
    rounding of E may decide either way), its empty flag exact and its logprob within 1e-4."""
    for b in range(logits.shape[0]):
        tok, kept, keys, d, is_empty = oracle_row(
            logits[b], float(temperature[b]), int(top_k[b]), float(top_p[b]), float(min_p[b]), int(seed[b]), int(offset[b])
        )
        got = int(tokens[b])
        assert bool(empty[b]) == is_empty, f"row {b}: empty flag"
        if is_empty:
            assert got == -1 and (logprobs is None or math.isnan(float(logprobs[b]))), f"row {b}: empty row gave {got}"
            continue
        if tok is not None:
            assert got == tok, f"row {b}: token {got} != {tok}"
            expected_lp = d
        else:
            best = max(keys.values())
            expected = min(v for v, key in keys.items() if key == best)
            if got != expected:
                assert got in keys, f"row {b}: token {got} was filtered out (kept {kept[:20]}...)"
                assert abs(keys[got] - best) <= rel * best, f"row {b}: token {got} (key {keys[got]}) != {expected} (key {best})"
            expected_lp = d[got] - math.log(sum(math.exp(x) for x in d))
        if logprobs is not None:
            lp = float(logprobs[b])
            assert abs(lp - expected_lp) <= 1e-4 * max(1.0, abs(expected_lp)), f"row {b}: logprob {lp} != {expected_lp}"


def run_ref(logits, temperature, top_k, top_p, min_p, seed, offset):
    return ref.sampler_ref(logits, temperature, top_k, top_p, min_p, seed, offset, return_logprobs=True)


# ----------------------------------------------------------------------------------------------------
# Reference suite: against the oracle.


@pytest.mark.ref
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("B,V", [(1, 1), (9, 7), (40, 100), (12, 1000)])
def test_ref_matches_oracle(dtype, B, V):
    logits = (torch.randn(B, V) * 3).to(dtype)
    logits[torch.rand(B, V) < 0.05] = math.nan
    logits[torch.rand(B, V) < 0.05] = -INF
    if B > 3:
        logits[3] = -INF
    params = mixed_params(B, V)
    tokens, logprobs, empty = run_ref(logits, *params)
    assert tokens.dtype == I64 and logprobs.dtype == torch.float32 and empty.dtype == torch.bool
    assert_matches_oracle(logits, *params, tokens, logprobs, empty)
    no_lp = ref.sampler_ref(logits, *params)
    assert no_lp[1] is None
    assert_bitwise_equal(no_lp[0], tokens)


@pytest.mark.ref
def test_ref_matches_oracle_on_heavy_ties():
    # bfloat16 logits from a few values: top-k and top-p thresholds fall inside runs of ties.
    B, V = 30, 64
    logits = torch.randint(-3, 3, (B, V)).to(torch.bfloat16) * 0.5
    temperature = torch.rand(B) + 0.5
    top_k = torch.randint(1, V, (B,))
    top_p = torch.rand(B)
    min_p = torch.rand(B) * 0.3
    seed, offset = counters(B)
    out = run_ref(logits, temperature, top_k, top_p, min_p, seed, offset)
    assert_matches_oracle(logits, temperature, top_k, top_p, min_p, seed, offset, *out)


@pytest.mark.ref
def test_greedy_ties_go_to_the_lowest_id():
    V = 40
    logits = torch.randn(5, V)
    logits[:, [6, 21, 33]] = 9.0
    temperature = torch.tensor([0.0, -1.0, math.nan, INF, 0.0])
    k, p, mp = torch.full((5,), 3), torch.full((5,), 0.5), torch.full((5,), 0.2)
    seed, offset = counters(5)
    tokens, logprobs, empty = run_ref(logits, temperature, k, p, mp, seed, offset)
    assert tokens.tolist() == [6] * 5 and not bool(empty.any())
    expected = torch.log_softmax(logits.double(), dim=-1)[:, 6]
    assert torch.allclose(logprobs.double(), expected, atol=1e-5)


@pytest.mark.ref
def test_top_k_one_equals_greedy_on_s():
    B, V = 64, 300
    logits = torch.randn(B, V)
    temperature = torch.rand(B) + 0.1
    seed, offset = counters(B)
    ones = torch.ones(B)
    tokens, _, _ = run_ref(logits, temperature, torch.ones(B, dtype=I64), ones, torch.zeros(B), seed, offset)
    s = logits / temperature[:, None]
    assert_bitwise_equal(tokens, s.argmax(dim=-1))


@pytest.mark.ref
@pytest.mark.parametrize("top_p", [0.0, 1e-9, -2.0, 2.0**-22])
def test_tiny_top_p_keeps_the_max_only(top_p):
    B, V = 64, 500
    logits = torch.randn(B, V) * 2
    seed, offset = counters(B)
    t = torch.rand(B) + 0.5
    tokens, _, _ = run_ref(logits, t, torch.zeros(B, dtype=I64), torch.full((B,), top_p), torch.zeros(B), seed, offset)
    assert_bitwise_equal(tokens, (logits / t[:, None]).argmax(dim=-1))


@pytest.mark.ref
def test_disabled_filters_are_no_ops():
    B, V = 16, 200
    logits = torch.randn(B, V)
    t = torch.rand(B) + 0.5
    seed, offset = counters(B)
    base = run_ref(logits, t, torch.zeros(B, dtype=I64), torch.ones(B), torch.zeros(B), seed, offset)
    # The baseline is a disabled setting too: it must itself be the plain race over every id
    # (argmax returns the first maximal index: ties to the lowest id).
    s = logits / t[:, None]
    w = torch.exp(s - s.amax(dim=-1, keepdim=True))
    assert_bitwise_equal(base[0], (w / noise_ref.exponential_noise(seed, offset, V)).argmax(dim=-1))
    for k in (-1, V, V + 1, 2**40):
        for p in (1.0, 1.5, math.nan, INF):
            for mp in (0.0, -0.5, math.nan, -INF):
                got = run_ref(logits, t, torch.full((B,), k), torch.full((B,), p), torch.full((B,), mp), seed, offset)
                assert_bitwise_equal(got[0], base[0])
                assert_bitwise_equal(got[1], base[1])


@pytest.mark.ref
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_all_equal_logits_sample_uniformly_over_the_kept(dtype):
    """20000 draws of one all-equal row with distinct seeds: every id kept (ties at the top-k and
    top-p thresholds are kept), Pearson's chi-square against uniform below the 1 - 1e-4 quantile of
    chi2(V - 1): a correct sampler fails for about 1 in 10**4 base seeds."""
    n, V = 20000, 6
    seed = torch.randint(-(2**62), 2**62, (1,), dtype=I64) + torch.arange(n, dtype=I64)
    logits = torch.full((n, V), 1.25, dtype=dtype)
    tokens, logprobs, _ = run_ref(logits, torch.full((n,), 0.8), torch.full((n,), 2), torch.full((n,), 0.3), torch.full((n,), 0.9), seed, torch.zeros(n, dtype=I64))
    counts = torch.bincount(tokens, minlength=V).double()
    assert float(((counts - n / V) ** 2 / (n / V)).sum()) < chi2_critical(V - 1, 1e-4)
    assert torch.allclose(logprobs, torch.full((n,), -math.log(V)))


@pytest.mark.ref
def test_one_column_rows():
    logits = torch.tensor([[0.5], [-INF], [math.nan], [INF], [-3.0]])
    t = torch.tensor([0.7, 0.7, 1.0, 0.5, 0.0])
    seed, offset = counters(5)
    tokens, logprobs, empty = run_ref(logits, t, torch.ones(5, dtype=I64), torch.full((5,), 0.5), torch.full((5,), 0.5), seed, offset)
    assert tokens.tolist() == [0, -1, -1, 0, 0]
    assert empty.tolist() == [False, True, True, False, False]
    assert logprobs[[0, 3, 4]].tolist() == [0.0, 0.0, 0.0] and bool(torch.isnan(logprobs[[1, 2]]).all())


@pytest.mark.ref
def test_rows_without_finite_logits_are_flagged():
    V = 9
    logits = torch.tensor([[-INF] * V, [math.nan] * V, [math.nan, -INF] * 4 + [-1e30], [math.nan] * (V - 1) + [2.0]])
    seed, offset = counters(4)
    for t in (torch.zeros(4), torch.full((4,), 0.5)):
        tokens, logprobs, empty = run_ref(logits, t, torch.full((4,), 3), torch.full((4,), 0.9), torch.full((4,), 0.1), seed, offset)
        assert tokens.tolist() == [-1, -1, 8, 8] and empty.tolist() == [True, True, False, False]
        assert bool(torch.isnan(logprobs[:2]).all()) and logprobs[2:].tolist() == [0.0, 0.0]


@pytest.mark.ref
def test_infinite_rows_take_the_lowest_inf():
    V = 30
    logits = torch.randn(4, V)
    logits[0, [4, 17]] = INF
    logits[1, 29] = INF
    logits[1, 3] = math.nan
    logits[2, [8, 9]] = 3e38  # finite, but l / 1e-3 overflows to +inf
    logits[3, 11] = INF
    t = torch.tensor([0.7, 0.0, 1e-3, math.nan])
    seed, offset = counters(4)
    tokens, logprobs, empty = run_ref(logits, t, torch.full((4,), 5), torch.full((4,), 0.5), torch.zeros(4), seed, offset)
    assert tokens.tolist() == [4, 29, 8, 11] and logprobs.tolist() == [0.0] * 4 and not bool(empty.any())


@pytest.mark.ref
def test_underflowing_scale_is_uniform_over_finite():
    # Every finite l / t underflows to -inf: m = -inf, d = 0 at every finite entry.
    logits = torch.tensor([[-3e38, -INF, -2e38, math.nan, -1e38]])
    seed, offset = counters(1)
    tokens, logprobs, empty = run_ref(logits, torch.tensor([1e-3]), torch.zeros(1, dtype=I64), torch.ones(1), torch.zeros(1), seed, offset)
    assert int(tokens[0]) in (0, 2, 4) and not bool(empty[0])
    assert abs(float(logprobs[0]) + math.log(3)) < 1e-6


@pytest.mark.ref
def test_batch_invariance_and_reproducibility():
    B, V = 24, 500
    logits = torch.randn(B, V) * 2
    params = mixed_params(B, V)
    tokens, logprobs, empty = run_ref(logits, *params)
    perm = torch.randperm(B)
    got = run_ref(logits[perm], *(p[perm] for p in params))
    assert_bitwise_equal(got[0], tokens[perm])
    assert_bitwise_equal(got[2], empty[perm])
    assert torch.allclose(got[1], logprobs[perm], equal_nan=True)
    # Other rows replaced by garbage: rows 0..9 keep their tokens.
    other = logits.clone()
    other[10:] = math.nan
    assert_bitwise_equal(run_ref(other, *params)[0][:10], tokens[:10])
    # The next decode step (offset + 1) draws anew.
    seed, offset = params[4], params[5]
    warm = torch.ones(B)
    step = [run_ref(logits, warm, torch.zeros(B, dtype=I64), warm, torch.zeros(B), seed, offset + i)[0] for i in range(2)]
    assert not torch.equal(step[0], step[1])


def _kept_distribution(l: torch.Tensor, t: float, k: int, p: float, mp: float) -> dict[int, float]:
    """{id: probability} of one row's renormalised kept distribution, from the oracle's kept set
    (p proportional to the float32 w the race uses)."""
    _, kept, keys, d, _ = oracle_row(l, t, k, p, mp, 0, 0)
    w = torch.exp(torch.tensor(d, dtype=torch.float32)).double()
    total = float(w[kept].sum())
    return {v: float(w[v]) / total for v in kept}


@pytest.mark.ref
@pytest.mark.parametrize(
    "k,p,mp",
    [(4, 1.0, 0.0), (0, 0.7, 0.0), (0, 1.0, 0.2), (6, 0.8, 0.05)],
    ids=["top_k", "top_p", "min_p", "combined"],
)
def test_draws_follow_the_kept_distribution(k, p, mp):
    """20000 draws of one V = 12 row with distinct seeds: Pearson's chi-square against the kept
    distribution renormalised, below the 1 - 1e-4 quantile of chi2(kept - 1); no draw outside the
    kept set. The draws are a function of the per-test seed: a correct sampler fails for about 1 in
    10**4 base seeds."""
    n, V, t = 20000, 12, 0.9
    l = torch.randn(V)
    expected = _kept_distribution(l, t, k, p, mp)
    while len(expected) < 3:  # a filter that keeps fewer than 3 ids tests little: draw again
        l = torch.randn(V)
        expected = _kept_distribution(l, t, k, p, mp)
    seed = torch.randint(-(2**62), 2**62, (1,), dtype=I64) + torch.arange(n, dtype=I64)
    offset = torch.full((n,), 3, dtype=I64)
    full = lambda x: torch.full((n,), x)  # noqa: E731
    tokens, _, _ = run_ref(l.expand(n, V), full(t), full(k), full(p), full(mp), seed, offset)
    counts = torch.bincount(tokens, minlength=V).double()
    ids = sorted(expected)
    assert float(counts.sum() - counts[ids].sum()) == 0, "a filtered-out id was drawn"
    exp = torch.tensor([expected[v] for v in ids], dtype=torch.float64) * n
    assert float(((counts[ids] - exp) ** 2 / exp).sum()) < chi2_critical(len(ids) - 1, 1e-4)


# ----------------------------------------------------------------------------------------------------
# Reference suite: the kernels' threshold searches, modelled in Python, give the contract's.


def ordered_keys(s: torch.Tensor) -> list[int]:
    """The uint32 images of float32 values that order like them (cuda.py's and asc.py's _ordered)."""
    out = []
    for bits in s.view(torch.int32).tolist():
        bits &= 0xFFFFFFFF
        out.append(bits ^ 0xFFFFFFFF if bits >> 31 else bits | 0x80000000)
    return out


def radix_kth_largest(keys: list[int], k: int) -> int:
    """cuda.py's top-k: 4 passes of 8-bit count histograms, bins scanned from the top."""
    prefix = mask = 0
    for shift in (24, 16, 8, 0):
        hist = [0] * 256
        for key in keys:
            if key & mask == prefix:
                hist[(key >> shift) & 255] += 1
        above = 0
        for b in range(255, -1, -1):
            if above + hist[b] >= k:
                prefix |= b << shift
                mask |= 255 << shift
                k -= above
                break
            above += hist[b]
    return prefix


def radix_top_p(wbits: list[int], q: list[int], target: int) -> int:
    """cuda.py's top-p: 4 passes of 8-bit q-mass histograms over w's bits, bins from the top."""
    prefix = mask = above = 0
    for shift in (24, 16, 8, 0):
        hist = [0] * 256
        for bits, mass in zip(wbits, q):
            if mass > 0 and bits & mask == prefix:
                hist[(bits >> shift) & 255] += mass
        for b in range(255, -1, -1):
            if (above + hist[b]) * 2**20 >= target:
                prefix |= b << shift
                mask |= 255 << shift
                break
            above += hist[b]
    return prefix


def bitwise_search(count, bits: int) -> int:
    """asc.py's searches: the largest value of `bits` bits with count(value) true, bit by bit."""
    found = 0
    for bit in range(bits - 1, -1, -1):
        if count(found | (1 << bit)):
            found |= 1 << bit
    return found


def as_f32(bits: int) -> float:
    return struct.unpack("f", struct.pack("I", bits))[0]


@pytest.mark.ref
@pytest.mark.parametrize("V", [1, 7, 300])
def test_kernel_threshold_searches_equal_the_contract(V):
    for _ in range(20):
        # Few distinct values (ties at every threshold), negative zeros and underflowed entries.
        s = (torch.randint(-6, 6, (V,)).float() * 0.75).to(torch.float32)
        s[torch.rand(V) < 0.1] = -0.0
        s[torch.rand(V) < 0.05] = -INF
        keys = ordered_keys(s)
        for k in {1, max(1, V // 3), V}:
            expected = float(ref._top_k_threshold(s[None], torch.tensor([k]))[0, 0]) if k < V else float(s.sort(descending=True).values[k - 1])
            tau = radix_kth_largest(keys, k)
            assert tau == bitwise_search(lambda c: sum(key >= c for key in keys) >= k, 32)
            got = as_f32(tau ^ (0x80000000 if tau >> 31 else 0xFFFFFFFF))  # the kernels' _unordered
            assert got == expected, f"k = {k}: {got} != {expected}"
        d = torch.where(s == s.max(), 0.0, s - s.max())
        w = torch.exp(d)
        q = torch.floor(w * 2.0**20).to(I64)
        kept = torch.ones(V, dtype=torch.bool)
        for p in (1e-3, 0.3, 0.9, 0.999999):
            expected = float(ref._top_p_threshold(w[None], q[None], kept[None], torch.tensor([p]))[0, 0])
            target = round(p * 2**20) * int(q.sum())
            wbits = [b & 0xFFFFFFFF for b in w.view(torch.int32).tolist()]
            qs = q.tolist()
            tau = radix_top_p(wbits, qs, target)
            assert tau == bitwise_search(lambda c: sum(m for b, m in zip(wbits, qs) if b >= c) * 2**20 >= target, 31)
            assert as_f32(tau) == expected, f"top_p = {p}: {as_f32(tau)} != {expected}"


# ----------------------------------------------------------------------------------------------------
# Reference suite: the interface on CPU.


@pytest.mark.ref
def test_cpu_interface_writes_out():
    B, V = 10, 77
    logits = torch.randn(B, V + 3)[:, :V]  # strided rows
    logits[2] = -INF
    params = mixed_params(B, V)
    params[1][0] = 3
    expected = run_ref(logits, *params)
    out = poisoned_out(B, "cpu")
    got = api.sampler(logits, *params, return_logprobs=True, out=out)
    assert isinstance(got, api.SamplerOutput) and got.tokens is out[0] and got.logprobs is out[1] and got.empty is out[2]
    assert_bitwise_equal(got.tokens, expected[0])
    assert_bitwise_equal(got.logprobs, expected[1])
    assert_bitwise_equal(got.empty, expected[2])
    k32 = api.sampler(logits.bfloat16(), params[0], params[1].to(torch.int32), *params[2:])
    assert k32.logprobs is None
    assert_bitwise_equal(k32.tokens, ref.sampler_ref(logits.bfloat16(), *params)[0])


@pytest.mark.ref
def test_empty_batch_launches_nothing(monkeypatch, no_kernel_launches):
    # As if on a device: CPU tensors never reach a kernel, so only then can a launch be caught.
    monkeypatch.setattr(api, "is_host", lambda t: False)
    z = torch.zeros(0)
    zi = torch.zeros(0, dtype=I64)
    got = api.sampler(torch.zeros(0, 5), z, zi, z, z, zi, zi, return_logprobs=True)
    assert got.tokens.shape == got.logprobs.shape == got.empty.shape == (0,)
    out = poisoned_out(0, "cpu", logprobs=False)
    assert api.sampler(torch.zeros(0, 5, dtype=torch.bfloat16), z, zi, z, z, zi, zi, out=out).tokens is out[0]


@pytest.mark.ref
@pytest.mark.parametrize("case", bad_inputs(), ids=lambda c: c[0])
def test_bad_input_raises_and_writes_nothing(case):
    _, kwargs, error, message = case
    out = kwargs["out"]
    written = list(out) if isinstance(out, (tuple, list)) else [out]
    assert_rejected_without_writes(api.sampler, kwargs, error, message, written)


@pytest.mark.ref
def test_out_overlapping_an_input_is_rejected():
    B = 4
    seed = torch.zeros(B, dtype=I64)
    out = (seed, poisoned((B,), torch.float32, "cpu"), torch.ones(B, dtype=torch.bool))
    z = torch.zeros(B)
    with pytest.raises(ValueError, match="out tokens overlaps seed"):
        api.sampler(torch.randn(B, 8), z, torch.zeros(B, dtype=I64), z, z, seed, torch.ones(B, dtype=I64), return_logprobs=True, out=out)


@pytest.mark.ref
def test_vector_width_follows_alignment():
    assert ref.vector_elements("float32", 129280, 16) == 4
    assert ref.vector_elements("bfloat16", 151936, 16) == 8
    assert ref.vector_elements("float32", 1001, 16) == 1
    assert ref.vector_elements("bfloat16", 1002, 16) == 2
    for config in ref.sampler_shipped_configs():
        ref.check_config("test", *config)
    with pytest.raises(ValueError, match="dtype 'float16'"):
        ref.check_config("test", "float16", 1)
    with pytest.raises(ValueError, match="vec must be a power of two"):
        ref.check_config("test", "float32", 8)


# ----------------------------------------------------------------------------------------------------
# Codegen (CPU): every shipped configuration lowers, compiles and fits on chip.


def _config_id(config) -> str:
    return "-".join(map(str, config))


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("factory", ["sampler_tl", "sampler_flagged_tl"])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("config", ref.sampler_shipped_configs(), ids=_config_id)
def test_cuda_config_compiles_without_spills(factory, arch, config):
    from kernels.sampler import cuda
    from testing import codegen_cuda

    make = getattr(cuda, factory)
    lowered = codegen_cuda.lower_cuda(make, *config, arch=arch)
    source = lowered.source
    # w and the race keys must be torch's float32 expf / logf / division bit for bit.
    assert "expf(" in source and "logf(" in source
    assert "__expf" not in source and "__logf" not in source and "__fdividef" not in source
    assert "--use_fast_math" not in lowered.nvcc_flags
    assert source.count("__global__ void") <= 2
    # fused_sample's flagging kernel lets the flagged kernel start during its tail (programmatic
    # dependent launch), so the flagged kernel must wait for it before reading anything.
    assert ("cudaGridDependencySynchronize();" in source) == (factory == "sampler_flagged_tl")
    dtype, vec, _ = config
    if vec * (4 if dtype == "float32" else 2) == 16:
        assert "float4" in source or "uint4" in source, "16-byte rows must use 16-byte loads"
    report = codegen_cuda.check_cuda_resources(make, *config, arch=arch)
    assert report.spill_store_bytes == report.spill_load_bytes == report.stack_frame_bytes == 0


@pytest.mark.codegen_cuda
def test_shipped_configs_cover_every_path():
    configs = ref.sampler_shipped_configs()
    assert {c[0] for c in configs} == set(ref.DTYPES)
    assert {c[1] for c in configs if c[0] == "float32"} >= {1, 4} and {c[1] for c in configs if c[0] == "bfloat16"} >= {1, 8}
    # Each top_k dtype with vector and element-wide loads.
    for top_k_dtype in ref.TOP_K_DTYPES:
        assert {c[1] > 1 for c in configs if c[2] == top_k_dtype} == {True, False}, top_k_dtype


@pytest.mark.codegen_ascend
@pytest.mark.parametrize("config", ref.sampler_shipped_configs(), ids=_config_id)
def test_ascend_config_lowers_and_fits_ub(config):
    from kernels.sampler import asc
    from testing import codegen_ascend

    source = codegen_ascend.ascend_source(asc.sampler_tl, *config)
    assert "__global__" in source or "__aicore__" in source
    codegen_ascend.assert_ub_fits(asc.sampler_tl, *config)


# ----------------------------------------------------------------------------------------------------
# Device: the backend's kernel against the reference run on the same device tensors.

# (B, V): one column, tiny and odd vocabularies, the models' vocabularies, a large odd (prime)
# vocabulary (many full vectors, then a tail), more rows than SMs.
DEVICE_SHAPES = [(1, 1), (3, 7), (33, 1000), (1, 129280), (64, 129280), (8, 151936), (9, 100003), (130, 151936), (130, 1000)]


@pytest.mark.device
@pytest.mark.parametrize("layout", ["dense", "strided", "misaligned"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", DEVICE_SHAPES, ids=lambda s: "B{}-V{}".format(*s))
def test_device_matches_ref(device, shape, dtype, layout):
    B, V = shape
    logits = device_logits(B, V, device, dtype, layout)
    params = mixed_params(B, V, device)
    out = poisoned_out(B, device)
    got = api.sampler(logits, *params, return_logprobs=True, out=out)
    assert got.tokens is out[0]
    assert_device_matches_ref(got, logits, params)
    k32 = (params[0], params[1].to(torch.int32), *params[2:])
    assert_device_matches_ref(api.sampler(logits, *k32, out=poisoned_out(B, device, logprobs=False)), logits, params)


@pytest.mark.device
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_device_decode_settings_match_ref(device, dtype):
    # The benchmark's settings (top-k 50, top-p 0.9, t 0.7) and heavy ties at the thresholds.
    B, V = 128, 129280
    logits = (torch.randn(B, V, device=device) * 3).to(dtype)
    logits[: B // 2] = torch.round(logits[: B // 2])
    seed, offset = (t.to(device) for t in counters(B))
    full = lambda x: torch.full((B,), x, device=device)  # noqa: E731
    params = (full(0.7), full(50).to(I64), full(0.9), full(0.0), seed, offset)
    assert_device_matches_ref(api.sampler(logits, *params, return_logprobs=True, out=poisoned_out(B, device)), logits, params)
    params = (full(1.0), torch.randint(1, V, (B,), device=device), torch.rand(B, device=device), torch.rand(B, device=device) * 0.2, seed, offset)
    assert_device_matches_ref(api.sampler(logits, *params, return_logprobs=True, out=poisoned_out(B, device)), logits, params)


@pytest.mark.device
def test_device_batch_invariance(device):
    B, V = 16, 129280
    logits = torch.randn(B, V, device=device) * 3
    params = mixed_params(B, V, device)

    def tokens(x, *p):
        return api.sampler(x, *p, out=poisoned_out(x.shape[0], device, logprobs=False)).tokens

    got = tokens(logits, *params)
    # Anchored to the contract: two outputs left with the same poison would compare equal.
    assert_bitwise_equal(got, ref.sampler_ref(logits, *params)[0])
    perm = torch.randperm(B, device=device)
    assert_bitwise_equal(tokens(logits[perm], *(p[perm] for p in params)), got[perm])
    assert_bitwise_equal(tokens(logits[2:3], *(p[2:3] for p in params)), got[2:3])
    assert_bitwise_equal(tokens(logits, *params), got)


@pytest.mark.device
def test_device_empty_batch_launches_nothing(device, no_kernel_launches):
    z = torch.zeros(0, device=device)
    zi = torch.zeros(0, dtype=I64, device=device)
    assert api.sampler(torch.zeros(0, 9, device=device), z, zi, z, z, zi, zi, return_logprobs=True).tokens.shape == (0,)


@pytest.mark.device
def test_device_cuda_graph_replay(device, backend):
    # Captured once, replayed with new logits, parameters and counters: every call of a decode step.
    if backend != "cuda":
        pytest.skip("CUDA graphs are a CUDA feature")
    assert_graph_replays(api.sampler, 32, device, lambda out, logits, params: assert_device_matches_ref(api.SamplerOutput(*out), logits, params))
