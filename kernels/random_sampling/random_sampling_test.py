"""Tests of `random_sampling`: the noise against pure-Python integer arithmetic, the sampling
reference against a float64 oracle and against the distribution it must draw from, interface
validation, codegen, and the device kernel against the reference.

Suites (markers, selected by `--tl-suite`; see testing/plugin.py): ref, codegen_cuda, codegen_ascend,
device. Inputs are drawn fresh per test from the plugin's per-test seed; token outputs are poisoned
first (the int64 minimum, which no token is: tokens are in [-1, V)) and compared exactly.
"""

# No `from __future__ import annotations`: the noise-macro kernel below is a T.prim_func, whose
# tensor annotations TileLang evaluates.
import functools
import math
import re

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from kernels.random_sampling import api, ref
from testing.graphs import counters_left_zero
from testing.numeric import assert_bitwise_equal, assert_rejected_without_writes, assert_ulp_close, case_named, case_names, chi2_critical, poisoned

MASK = 0xFFFFFFFF
I64 = torch.int64
EDGE_COUNTERS = [0, 1, -1, 2**63 - 1, -(2**63), 2**32, -(2**32) - 5, 0x1234_5678_9ABC_DEF0, -0x0FED_CBA9_8765_4321]


# ----------------------------------------------------------------------------------------------------
# Independent oracles: the noise in Python ints, the sampling keys in float64.


def py_mix32(x: int) -> int:
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & MASK
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & MASK
    return x ^ (x >> 16)


def py_bits(seed: int, offset: int, v: int) -> int:
    s, o = seed & (2**64 - 1), offset & (2**64 - 1)
    k0 = py_mix32((s & MASK) ^ py_mix32((s >> 32) ^ 0x9E3779B9))
    k1 = py_mix32((o & MASK) ^ py_mix32((o >> 32) ^ k0 ^ 0x7F4A7C15))
    return py_mix32((py_mix32(v ^ k1) + k0) & MASK)


def counters(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(seed, offset) (n,) int64 drawn over the whole int64 range."""
    lo, hi = -(2**63), 2**63 - 1
    return torch.randint(lo, hi, (n,), dtype=I64), torch.randint(lo, hi, (n,), dtype=I64)


def oracle_keys(x: torch.Tensor, seed, offset, source: str, temperature=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(keys, included, scale) in float64 from the same noise bits: p / E, or l / t - log(E)
    (greedy rows: l); entries that cannot be drawn are excluded. scale bounds the magnitudes the
    float32 key is computed through: its error is a few float32 ulps of it."""
    bits = ref.noise_bits(seed, offset, x.shape[1])
    e = -torch.log(((bits >> 9).double() + 0.5) * 2.0**-23)
    x64 = x.double()
    if source == "probs":
        keys = x64 / e
        return keys, x64 > 0, keys.abs()
    x64 = torch.nan_to_num(x64, nan=-math.inf, posinf=math.inf, neginf=-math.inf)
    t = torch.ones(x.shape[0], dtype=torch.float64) if temperature is None else temperature.double()
    scaled = ((t > 0) & (t < math.inf))[:, None]
    keys = torch.where(scaled, x64 / t[:, None] - torch.log(e), x64)
    # log(E) carries E's own rounding (one ulp of E: about 2**-23 absolute in log E), hence the 1.
    scale = torch.where(scaled, (x64 / t[:, None]).abs() + torch.log(e).abs() + 1, x64.abs())
    return keys, x64 > -math.inf, scale


# float32 ulps (2**-23 of the scale) a key may be off: probs, 1 for E's logf and 1/2 for the
# division; logits, 1/2 for l / t, 1 for each log and 1/2 for the subtraction. 4 leaves margin.
KEY_ULPS = 4


def assert_matches_oracle(tokens: torch.Tensor, keys: torch.Tensor, included: torch.Tensor, scale: torch.Tensor) -> None:
    """Every token is the oracle's argmax (lowest id on ties), or a near-tie: its oracle key is
    within both keys' float32 error (KEY_ULPS of their scale) of the best, so float32 rounding may
    decide either way."""
    masked = torch.where(included, keys, -math.inf)
    best = masked.amax(dim=1)
    for b, tok in enumerate(tokens.tolist()):
        if not bool(included[b].any()):
            assert tok == -1, f"row {b}: nothing to draw, got {tok}"
            continue
        expected = int((included[b] & (masked[b] == best[b])).nonzero()[0])
        if tok != expected:
            assert 0 <= tok < keys.shape[1] and bool(included[b, tok]), f"row {b}: token {tok} cannot be drawn"
            k, kb = float(keys[b, tok]), float(best[b])
            # 2**-149: a subnormal key's absolute rounding.
            bound = KEY_ULPS * 2.0**-23 * (float(scale[b, tok]) + float(scale[b, expected])) + 2.0**-149
            assert abs(k - kb) <= bound, f"row {b}: token {tok} (key {k}) != {expected} (key {kb}), beyond {bound}"


# ----------------------------------------------------------------------------------------------------
# Reference suite: the noise.


@pytest.mark.ref
def test_noise_bits_match_python_ints():
    seeds = torch.tensor(EDGE_COUNTERS, dtype=I64)
    offsets = torch.tensor(EDGE_COUNTERS[::-1], dtype=I64)
    got = ref.noise_bits(seeds, offsets, 70)
    for b, (s, o) in enumerate(zip(seeds.tolist(), offsets.tolist())):
        assert got[b].tolist() == [py_bits(s, o, v) for v in range(70)], f"seed {s}, offset {o}"
    ids = torch.tensor([0, 129279, 151935, 2**24 + 3, 2**31 - 1, 2**32 - 1], dtype=I64)
    got = ref.noise_bits_of(seeds, offsets, ids)
    for b, (s, o) in enumerate(zip(seeds.tolist(), offsets.tolist())):
        assert got[b].tolist() == [py_bits(s, o, v) for v in ids.tolist()]


@pytest.mark.ref
def test_noise_keys_match_python_ints():
    seed, offset = counters(16)
    k0, k1 = ref.row_keys(seed, offset)
    for s, o, a, b in zip(seed.tolist(), offset.tolist(), k0.tolist(), k1.tolist()):
        assert py_bits(s, o, 0) == py_mix32((py_mix32(b) + a) & MASK)
    assert_bitwise_equal(ref.noise_bits(seed, offset, 5)[:, 3], torch.tensor([py_bits(s, o, 3) for s, o in zip(seed.tolist(), offset.tolist())]))


@pytest.mark.ref
def test_noise_is_uniform_and_exponential():
    seed, offset = counters(100)
    # 10**5 draws. On CI's machine they once differed between two calls, and once from the float64
    # oracle by 1566 ulp, each time from entry 50000 on, where torch hands the second half of the op
    # to its second thread: the CPU suites now run torch on one thread (testing/plugin.py).
    bits = ref.noise_bits(seed, offset, 1000)
    u = ref.uniform_noise(bits)
    e = ref.exponential_noise(seed, offset, 1000)
    oracle = (-torch.log(u.double())).float()
    assert int(bits.min()) >= 0 and int(bits.max()) <= MASK
    # Each bit position is set with probability 1/2: std 0.0016 over 10**5 draws, bound 6 sigma.
    freq = torch.stack([((bits >> k) & 1).double().mean() for k in range(32)])
    assert float((freq - 0.5).abs().max()) < 0.01, freq
    assert u.dtype == torch.float32 and float(u.min()) > 0 and float(u.max()) < 1
    assert e.dtype == torch.float32 and float(e.min()) > 0
    # E is -log(u) within an ulp of a float64 oracle rounded once: float32 logf is within an ulp of
    # the true value. The device suites compare E bit for bit with the kernels.
    assert_ulp_close(e, oracle, 1)
    # Exp(1): mean 1 and P(E > 1) = 1/e, std about 0.003 and 0.0015 here.
    assert abs(float(e.double().mean()) - 1) < 0.02 and abs(float((e > 1).double().mean()) - math.exp(-1)) < 0.01
    # The extreme cells too: u never rounds to 0 or 1, so E is positive and finite for every bits.
    edge = ref.uniform_noise(torch.tensor([0, 511, 512, MASK - 512, MASK - 511, MASK], dtype=torch.int64))
    assert float(edge.min()) > 0 and float(edge.max()) < 1
    assert bool(torch.isfinite(-torch.log(edge)).all()) and float((-torch.log(edge)).min()) > 0


@pytest.mark.ref
def test_noise_is_a_bijection_of_the_id():
    seed, offset = counters(3)
    bits = ref.noise_bits(seed, offset, 1 << 16)
    for row in bits:
        assert torch.unique(row).numel() == row.numel()


@pytest.mark.ref
def test_noise_depends_on_seed_and_offset_only():
    seed, offset = counters(6)
    bits = ref.noise_bits(seed, offset, 300)
    # A row's noise is a function of its own counters: alone, in another batch, with a longer vocab.
    assert_bitwise_equal(ref.noise_bits(seed[2:3], offset[2:3], 300), bits[2:3])
    assert_bitwise_equal(ref.noise_bits(seed.flip(0), offset.flip(0), 500)[:, :300], bits.flip(0))
    # Another offset (the next step) or seed gives other noise almost everywhere.
    for s, o in ((seed, offset + 1), (seed ^ 1, offset)):
        assert float((ref.noise_bits(s, o, 300) == bits).double().mean()) < 0.01


# ----------------------------------------------------------------------------------------------------
# Reference suite: sampling.


@pytest.mark.ref
@pytest.mark.parametrize("B,V", [(1, 1), (9, 7), (16, 1000), (3, 4099)])
def test_probs_ref_matches_float64_oracle(B, V):
    probs = torch.rand(B, V)
    probs[torch.rand(B, V) < 0.3] = 0
    probs[torch.rand(B, V) < 0.05] = -1.0
    probs[torch.rand(B, V) < 0.05] = math.nan
    seed, offset = counters(B)
    tokens = ref.random_sample_probs_ref(probs, seed, offset)
    assert tokens.dtype == I64 and tokens.shape == (B,)
    assert_matches_oracle(tokens, *oracle_keys(probs, seed, offset, "probs"))


@pytest.mark.ref
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("B,V", [(1, 1), (9, 7), (16, 1000), (8, 4099)])
def test_logits_ref_matches_float64_oracle(dtype, B, V):
    logits = (torch.randn(B, V) * 3).to(dtype)
    logits[torch.rand(B, V) < 0.05] = math.nan
    logits[torch.rand(B, V) < 0.05] = -math.inf
    temperature = torch.tensor([0.0, 0.7, 1.0, -1.0, 2.5, math.nan, math.inf, 1e-3] * 2)[:B]
    seed, offset = counters(B)
    tokens = ref.random_sample_logits_ref(logits, seed, offset, temperature)
    assert_matches_oracle(tokens, *oracle_keys(logits, seed, offset, "logits", temperature))
    default = ref.random_sample_logits_ref(logits, seed, offset)
    assert_matches_oracle(default, *oracle_keys(logits, seed, offset, "logits"))


@pytest.mark.ref
def test_probs_exact_ties_go_to_the_lowest_id():
    seed, offset = counters(4)
    V = 50
    e = ref.exponential_noise(seed, offset, V)
    # p = E(v) makes every key p / E exactly 1: a tie between all of these ids.
    probs = torch.zeros(4, V)
    tied = [[3, 17, 40], [0, 49], [7], [48, 49]]
    for b, ids in enumerate(tied):
        probs[b, ids] = e[b, ids]
    assert ref.random_sample_probs_ref(probs, seed, offset).tolist() == [ids[0] for ids in tied]
    # +inf probabilities: keys +inf, the lowest such id wins over any finite weight.
    probs = torch.rand(2, V)
    probs[0, [9, 30]] = math.inf
    probs[1, 44] = math.inf
    assert ref.random_sample_probs_ref(probs, seed[:2], offset[:2]).tolist() == [9, 44]


@pytest.mark.ref
def test_logits_greedy_and_inf_ties_go_to_the_lowest_id():
    V = 40
    logits = torch.randn(4, V)
    logits[:, [5, 22, 31]] = 10.0
    logits[3, [2, 38]] = math.inf
    seed, offset = counters(4)
    temperature = torch.tensor([0.0, -2.0, math.nan, 1.0])
    assert ref.random_sample_logits_ref(logits, seed, offset, temperature).tolist() == [5, 5, 5, 2]
    # bfloat16 ties: many equal values after rounding.
    flat = torch.full((2, V), 1.5, dtype=torch.bfloat16)
    assert ref.random_sample_logits_ref(flat, seed[:2], offset[:2], torch.zeros(2)).tolist() == [0, 0]


@pytest.mark.ref
def test_rows_with_nothing_to_draw_give_minus_one():
    V = 9
    probs = torch.tensor([[0.0] * V, [-1.0] * V, [math.nan] * V, [-0.0, math.nan, -3.0, 0, 0, 0, 0, 0, 2.0]])
    seed, offset = counters(4)
    assert ref.random_sample_probs_ref(probs, seed, offset).tolist() == [-1, -1, -1, 8]
    logits = torch.tensor([[-math.inf] * V, [math.nan] * V, [math.nan, -math.inf] * 4 + [-1e30], [math.nan] * (V - 1) + [math.inf]])
    for t in (None, torch.zeros(4), torch.full((4,), 0.5)):
        assert ref.random_sample_logits_ref(logits, seed, offset, t).tolist() == [-1, -1, 8, 8]


@pytest.mark.ref
def test_batch_invariance_and_reproducibility():
    B, V = 12, 300
    probs = torch.rand(B, V)
    logits = torch.randn(B, V)
    temperature = torch.rand(B) + 0.2
    seed, offset = counters(B)
    tp = ref.random_sample_probs_ref(probs, seed, offset)
    tl = ref.random_sample_logits_ref(logits, seed, offset, temperature)
    perm = torch.randperm(B)
    assert_bitwise_equal(ref.random_sample_probs_ref(probs[perm], seed[perm], offset[perm]), tp[perm])
    assert_bitwise_equal(ref.random_sample_logits_ref(logits[perm], seed[perm], offset[perm], temperature[perm]), tl[perm])
    # Other rows replaced by garbage: rows 0..5 keep their tokens.
    probs2, logits2 = probs.clone(), logits.clone()
    probs2[6:] = torch.rand(B - 6, V)
    logits2[6:] = math.nan
    assert_bitwise_equal(ref.random_sample_probs_ref(probs2, seed, offset)[:6], tp[:6])
    assert_bitwise_equal(ref.random_sample_logits_ref(logits2, seed, offset, temperature)[:6], tl[:6])
    # New offsets (the next decode step): new draws, not all the same tokens again.
    assert not torch.equal(ref.random_sample_probs_ref(probs, seed, offset + 1), tp)


def _chi2(tokens: torch.Tensor, p: torch.Tensor) -> float:
    counts = torch.bincount(tokens, minlength=p.numel()).double()
    expected = p.double() / p.double().sum() * tokens.numel()
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.ref
@pytest.mark.parametrize("source", ["probs", "logits"])
def test_draws_follow_the_distribution(source):
    """20000 draws of one V = 8 row with distinct seeds: Pearson's chi-square against p (probs) or
    softmax(l / 0.7) (logits) below the 1 - 1e-4 quantile of chi2(7). The draws are a function of
    the per-test seed, so a correct sampler fails for about 1 in 10**4 base seeds."""
    n, V = 20000, 8
    seed = torch.randint(-(2**63), 2**63 - 1, (1,), dtype=I64) + torch.arange(n, dtype=I64)
    offset = torch.full((n,), 7, dtype=I64)
    if source == "probs":
        p = torch.rand(V) + 0.05
        tokens = ref.random_sample_probs_ref(p.expand(n, V), seed, offset)
    else:
        l = torch.randn(V)
        p = torch.softmax(l.double() / 0.7, dim=0)
        tokens = ref.random_sample_logits_ref(l.expand(n, V), seed, offset, torch.full((n,), 0.7))
    assert int(tokens.min()) >= 0
    assert _chi2(tokens, p) < chi2_critical(V - 1, 1e-4)


# ----------------------------------------------------------------------------------------------------
# Reference suite: the interface on CPU.


@pytest.mark.ref
def test_cpu_interface_writes_out():
    B, V = 10, 77
    probs = torch.rand(B, V + 3)[:, :V]  # strided rows
    logits = torch.randn(B, V, dtype=torch.bfloat16)
    seed, offset = counters(B)
    temperature = torch.rand(B)
    out = poisoned((B,), I64, "cpu")
    assert api.random_sample_probs(probs, seed, offset, out=out) is out
    assert_bitwise_equal(out, ref.random_sample_probs_ref(probs, seed, offset))
    out = poisoned((B,), I64, "cpu")
    assert api.random_sample_logits(logits, seed, offset, temperature=temperature, out=out) is out
    assert_bitwise_equal(out, ref.random_sample_logits_ref(logits, seed, offset, temperature))
    assert_bitwise_equal(api.random_sample_logits(logits, seed, offset), ref.random_sample_logits_ref(logits, seed, offset))
    assert_bitwise_equal(api.exponential_noise(seed, offset, V), ref.exponential_noise(seed, offset, V))


@pytest.mark.ref
def test_empty_batch_launches_nothing(monkeypatch, no_kernel_launches):
    # As if on a device: CPU tensors never reach a kernel, so only then can a launch be caught.
    monkeypatch.setattr(api, "is_host", lambda t: False)
    seed = torch.zeros(0, dtype=I64)
    assert api.random_sample_probs(torch.zeros(0, 5), seed, seed).shape == (0,)
    out = torch.zeros(0, dtype=I64)
    assert api.random_sample_logits(torch.zeros(0, 5, dtype=torch.bfloat16), seed, seed, temperature=torch.zeros(0), out=out) is out
    assert api.exponential_noise(seed, seed, 5).shape == (0, 5)


def _bad_inputs():
    B, V = 3, 16
    f32 = torch.float32

    def case(fn, name, error, message, **kw):
        args = dict(seed=torch.zeros(B, dtype=I64), offset=torch.ones(B, dtype=I64), out=poisoned((B,), I64, "cpu"))
        args["probs" if fn is api.random_sample_probs else "logits"] = torch.rand(B, V)
        args.update(kw)
        return (name, fn, args, error, message)

    probs, logits = api.random_sample_probs, api.random_sample_logits
    return [
        case(probs, "probs-bf16", TypeError, "probs has dtype torch.bfloat16", probs=torch.rand(B, V).bfloat16()),
        case(probs, "probs-1d", ValueError, "probs must be 2-D", probs=torch.rand(V)),
        case(probs, "probs-v0", ValueError, "probs has V = 0 columns", probs=torch.rand(B, 0)),
        case(probs, "probs-col-strided", ValueError, "probs's last dimension must be contiguous", probs=torch.rand(B, 2 * V)[:, ::2]),
        case(probs, "probs-rows-overlap", ValueError, "probs's row stride 15 is smaller than its width 16", probs=torch.rand(B * V).as_strided((B, V), (V - 1, 1))),
        case(probs, "probs-list", TypeError, "probs must be a torch.Tensor", probs=[[0.5]]),
        case(probs, "seed-int32", TypeError, "seed has dtype torch.int32", seed=torch.zeros(B, dtype=torch.int32)),
        case(probs, "seed-short", ValueError, "seed must have shape (3,)", seed=torch.zeros(B - 1, dtype=I64)),
        case(probs, "seed-meta", ValueError, "seed is on meta", seed=torch.zeros(B, dtype=I64, device="meta")),
        case(probs, "offset-float", TypeError, "offset has dtype torch.float32", offset=torch.zeros(B)),
        case(probs, "offset-2d", ValueError, "offset must have shape (3,)", offset=torch.zeros(B, 1, dtype=I64)),
        case(probs, "offset-strided", ValueError, "offset must be contiguous", offset=torch.zeros(2 * B, dtype=I64)[::2]),
        case(probs, "out-int32", ValueError, "out must be (3,) torch.int64", out=poisoned((B,), torch.int32, "cpu")),
        case(probs, "out-long", ValueError, "out must be (3,) torch.int64", out=poisoned((B + 1,), I64, "cpu")),
        case(probs, "out-meta", ValueError, "out must be (3,) torch.int64 on cpu", out=torch.empty(B, dtype=I64, device="meta")),
        case(logits, "logits-fp16", TypeError, "logits has dtype torch.float16", logits=torch.rand(B, V).half()),
        case(logits, "logits-3d", ValueError, "logits must be 2-D", logits=torch.rand(1, B, V)),
        case(logits, "logits-v0", ValueError, "logits has V = 0 columns", logits=torch.rand(B, 0)),
        case(logits, "temperature-f64", TypeError, "temperature has dtype torch.float64", temperature=torch.ones(B, dtype=torch.float64)),
        case(logits, "temperature-short", ValueError, "temperature must have shape (3,)", temperature=torch.ones(B - 1, dtype=f32)),
        case(logits, "temperature-meta", ValueError, "temperature is on meta", temperature=torch.ones(B, device="meta")),
        case(logits, "temperature-scalar", TypeError, "temperature must be a torch.Tensor", temperature=0.7),
        case(logits, "seed-long", ValueError, "seed must have shape (3,)", seed=torch.zeros(B + 1, dtype=I64)),
    ]


@pytest.mark.ref
@pytest.mark.parametrize("name", case_names(_bad_inputs))
def test_bad_input_raises_and_writes_nothing(name):
    _, fn, kwargs, error, message = case_named(_bad_inputs, name)
    assert_rejected_without_writes(fn, kwargs, error, message, [kwargs["out"]])


@pytest.mark.ref
@pytest.mark.parametrize("source", ["probs", "logits"])
def test_more_than_int32_columns_rejected(source):
    # Fake tensors carry shape and device but no storage: 2**31 columns cost nothing, and the fake
    # output lets a missing check fail here instead of allocating gigabytes.
    V = 2**31
    with FakeTensorMode():
        x = torch.empty((2, V), dtype=torch.float32)
        seed, out = torch.zeros(2, dtype=I64), torch.empty(2, dtype=I64)
    fn = api.random_sample_probs if source == "probs" else api.random_sample_logits
    with pytest.raises(ValueError, match=re.escape(f"{source} has V = {V} columns; at most {V - 1} are supported")):
        fn(x, seed, seed, out=out)


@pytest.mark.ref
def test_out_overlapping_an_input_is_rejected():
    seed = torch.zeros(4, dtype=I64)
    with pytest.raises(ValueError, match="out overlaps seed"):
        api.random_sample_probs(torch.rand(4, 8), seed, torch.ones(4, dtype=I64), out=seed)
    # An out in the padding of row 0 of strided rows: inside the byte range the rows span.
    wide = torch.rand(4, 16)
    out = wide[0, 8:16].view(I64)
    before = out.clone()
    with pytest.raises(ValueError, match="out overlaps probs"):
        api.random_sample_probs(wide[:, :8], seed, torch.ones(4, dtype=I64), out=out)
    assert torch.equal(out, before)


@pytest.mark.ref
@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        (dict(seed=torch.zeros(2, dtype=torch.int32)), TypeError, "seed has dtype torch.int32"),
        (dict(seed=torch.zeros(2, 1, dtype=I64)), ValueError, "seed must be 1-D"),
        (dict(offset=torch.zeros(3, dtype=I64)), ValueError, "offset must have shape (2,)"),
        (dict(vocab_size=-1), ValueError, "vocab_size must be in [0,"),
        (dict(vocab_size=4.0), TypeError, "vocab_size must be an int"),
        (dict(vocab_size=2**31), ValueError, "vocab_size must be in [0, 2147483647]"),
    ],
    ids=["seed-int32", "seed-2d", "offset-len", "vocab-negative", "vocab-float", "vocab-past-int32"],
)
def test_exponential_noise_rejects_bad_input(kwargs, error, message):
    args = dict(seed=torch.zeros(2, dtype=I64), offset=torch.zeros(2, dtype=I64), vocab_size=8)
    args.update(kwargs)
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        api.exponential_noise(**args)


@pytest.mark.ref
def test_exponential_noise_takes_strided_counters():
    seed, offset = counters(6)
    both = torch.stack((seed, offset), dim=1)  # interleaved: each a stride-2 view
    got = api.exponential_noise(both[:, 0], both[:, 1], 33)
    assert_bitwise_equal(got, ref.exponential_noise(seed, offset, 33))


@pytest.mark.ref
def test_vector_width_follows_alignment():
    assert ref.vector_elements("float32", 129280, 16) == 4
    assert ref.vector_elements("bfloat16", 151936, 16) == 8
    assert ref.vector_elements("float32", 1001, 16) == 1  # odd row stride: rows start misaligned
    assert ref.vector_elements("bfloat16", 1002, 16) == 2
    assert ref.vector_elements("float32", 1024, 8) == 2  # base pointer 8-byte aligned
    for config in ref.random_sampling_shipped_configs():
        ref.check_config("test", *config)


@pytest.mark.ref
def test_row_kernel_takes_batches_that_fill_its_last_wave():
    # 132 SMs (an H200): the row kernel from 80% of a wave of one row an SM, per wave.
    assert api.ROW_KERNEL_WAVE_FILL == 0.8
    V = 129280
    row = [b for b in range(1, 600) if api.use_row_kernel(b, V, 132)]
    spans = [(106, 132), (212, 264), (317, 396), (423, 599)]  # from 423 on, every batch
    assert row == [b for lo, hi in spans for b in range(lo, hi + 1)]
    assert api.use_row_kernel(1, V, 1) and not api.use_row_kernel(3, V, 4) and api.use_row_kernel(4, V, 4)
    # Rows with more chunks than the grid's y dimension holds take the row kernel at any batch.
    longest = api.MAX_CHUNKS * ref.CHUNK
    assert not api.use_row_kernel(1, longest, 132) and api.use_row_kernel(1, longest + 1, 132)


# ----------------------------------------------------------------------------------------------------
# Codegen (CPU): every shipped configuration lowers, compiles and fits on chip.


def _config_id(config) -> str:
    return "-".join(map(str, config))


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("factory", ["random_sample_chunked_tl", "random_sample_tl"])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("config", ref.random_sampling_shipped_configs(), ids=_config_id)
def test_cuda_config_compiles_without_spills(arch, config, factory):
    from kernels.random_sampling import cuda
    from testing import codegen_cuda

    # Built as the interface builds it for these archs: a programmatic dependent launch.
    lowered = codegen_cuda.lower_cuda(getattr(cuda, factory), *config, arch=arch, pdl=True)
    source = lowered.source
    # The keys must be torch's float32 logf bit for bit: the accurate log, never fast math.
    assert "logf(" in source and "__logf" not in source and "__fdividef" not in source
    assert "--use_fast_math" not in lowered.nvcc_flags
    assert source.count("__global__ void") <= 2
    body = source[source.index("__launch_bounds__") :]
    if factory == "random_sample_chunked_tl":
        # Its only atomic is the row's arrival count; the records come back through L2.
        assert body.lower().count("atomic") == 1 and "AtomicAddRet((&(arrivals[" in body and "__ldcg" in body
    else:
        assert "atomic" not in body.lower()
    vec = config[2]
    if vec * (4 if config[1] == "float32" else 2) == 16:
        assert "float4" in source or "uint4" in source, "16-byte rows must use 16-byte loads"
    report = codegen_cuda.check_cuda_resources(getattr(cuda, factory), *config, arch=arch, pdl=True)
    assert report.spill_store_bytes == report.spill_load_bytes == report.stack_frame_bytes == 0


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("factory", ["random_sample_chunked_tl", "random_sample_tl"])
def test_cuda_dependent_launch_waits_before_memory(factory):
    # pdl=True: nvcc keeps every global access (the arrival counter's atomic included) after the
    # wait for the grids before; pdl=False emits neither call. The first shipped configuration.
    from kernels.random_sampling import cuda
    from testing import codegen_cuda

    codegen_cuda.check_dependent_launch(getattr(cuda, factory), *ref.random_sampling_shipped_configs()[0])


@pytest.mark.codegen_cuda
def test_shipped_configs_cover_every_path():
    configs = ref.random_sampling_shipped_configs()
    assert {(c[0], c[1]) for c in configs} == {(s, d) for s in ref.SOURCES for d in ref.DTYPES[s]}
    assert {c[2] for c in configs if c[1] == "float32"} >= {1, 4} and {c[2] for c in configs if c[1] == "bfloat16"} >= {1, 8}


@pytest.mark.codegen_ascend
@pytest.mark.parametrize("config", ref.random_sampling_shipped_configs(), ids=_config_id)
def test_ascend_config_lowers_and_fits_ub(config):
    from kernels.random_sampling import asc
    from testing import codegen_ascend

    source = codegen_ascend.ascend_source(asc.random_sample_tl, *config)
    assert "__global__" in source or "__aicore__" in source
    codegen_ascend.assert_ub_fits(asc.random_sample_tl, *config)


@functools.cache
def noise_macro_kernel():
    """A @tilelang.jit factory of a kernel(seed, offset, bits, e) built from nothing but the noise
    macros cuda.py exports for other sampling kernels: bits (B, V) int64 and E (B, V) float32."""
    import tilelang
    import tilelang.language as T

    from kernels.random_sampling import cuda

    threads = 256

    @tilelang.jit(pass_configs=cuda.PASS_CONFIGS)
    def noise_tl():
        B, V = T.dynamic("B"), T.dynamic("V")

        @T.prim_func
        def noise(
            seed: T.Tensor((B,), "int64"),
            offset: T.Tensor((B,), "int64"),
            bits: T.Tensor((B, V), "int64"),
            e: T.Tensor((B, V), "float32"),
        ):
            with T.Kernel(T.ceildiv(V, threads), B, threads=threads) as (bx, by):
                tx = T.get_thread_binding(0)
                keys = T.alloc_local((2,), "uint32")
                h = T.alloc_local((1,), "uint32")
                cuda.noise_row_keys(seed[by], offset[by], keys)
                if bx * threads + tx < V:
                    cuda.noise_bits(bx * threads + tx, keys, h)
                    bits[by, bx * threads + tx] = T.cast(h[0], "int64")
                    e[by, bx * threads + tx] = cuda.exponential_noise(h)

        return noise

    return noise_tl


@pytest.mark.codegen_cuda
def test_noise_macros_build_a_kernel():
    from testing import codegen_cuda

    lowered = codegen_cuda.lower_cuda(noise_macro_kernel(), arch="sm_90a")
    assert "logf(" in lowered.source and "__logf" not in lowered.source
    assert "--use_fast_math" not in lowered.nvcc_flags


# ----------------------------------------------------------------------------------------------------
# Device: the backend's kernel against the reference run on the same device tensors.

# (B, V): one row, odd and tiny vocabularies, one vector short of a round, the models' vocabularies
# at decode batch sizes, and more rows than SMs.
DEVICE_SHAPES = [(1, 1), (1, 3), (7, 1000), (5, 4097), (33, 8191), (1, 129280), (64, 129280), (8, 151936), (130, 151936), (300, 2049)]


def _device_inputs(B, V, device, source, dtype, layout):
    """(x, seed, offset): x of the source's shape with zeros / NaN / +-inf sprinkled in, rows with
    nothing to draw (1: zeros or -inf; 3: all NaN); layout "dense", "strided" (row stride V + 8
    rounded up to a multiple of 8: 16-byte rows, so an odd V ends in a partial vector) or
    "misaligned" (base pointer one element off, odd row stride: element-wide loads)."""
    pad = {"dense": 0, "strided": 8 + (-V) % 8, "misaligned": 1}[layout]
    start = 1 if layout == "misaligned" else 0
    base = torch.empty(B, V + pad + start, dtype=torch.float32)
    if source == "probs":
        base.uniform_(0, 1)
        base[torch.rand_like(base) < 0.2] = 0
        base[torch.rand_like(base) < 0.01] = math.nan
        base[torch.rand_like(base) < 0.01] = -0.5
    else:
        base.normal_(0, 4)
        base[torch.rand_like(base) < 0.01] = math.nan
        base[torch.rand_like(base) < 0.01] = -math.inf
    if B > 2:
        base[1] = 0 if source == "probs" else -math.inf
    if B > 3:
        base[3] = math.nan
    x = base.to(dtype).to(device)[:, start : start + V]
    seed, offset = counters(B)
    return x, seed.to(device), offset.to(device)


@pytest.mark.device
@pytest.mark.parametrize("layout", ["dense", "strided", "misaligned"])
@pytest.mark.parametrize("shape", DEVICE_SHAPES, ids=lambda s: "B{}-V{}".format(*s))
def test_device_probs_matches_ref(device, shape, layout):
    B, V = shape
    probs, seed, offset = _device_inputs(B, V, device, "probs", torch.float32, layout)
    out = poisoned((B,), I64, device)
    assert api.random_sample_probs(probs, seed, offset, out=out) is out
    assert_bitwise_equal(out, ref.random_sample_probs_ref(probs, seed, offset), what="probs tokens")


@pytest.mark.device
@pytest.mark.parametrize("layout", ["dense", "strided", "misaligned"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", DEVICE_SHAPES, ids=lambda s: "B{}-V{}".format(*s))
def test_device_logits_matches_ref(device, shape, dtype, layout):
    B, V = shape
    logits, seed, offset = _device_inputs(B, V, device, "logits", dtype, layout)
    choices = torch.tensor([0.0, 0.3, 0.7, 1.0, 1.5, -1.0, math.nan, math.inf, 1e-4])
    temperature = choices[torch.randint(0, choices.numel(), (B,))].to(device)
    out = poisoned((B,), I64, device)
    assert api.random_sample_logits(logits, seed, offset, temperature=temperature, out=out) is out
    assert_bitwise_equal(out, ref.random_sample_logits_ref(logits, seed, offset, temperature), what="logits tokens")
    got = api.random_sample_logits(logits, seed, offset, out=poisoned((B,), I64, device))
    assert_bitwise_equal(got, ref.random_sample_logits_ref(logits, seed, offset), what="logits tokens, t = 1")


@pytest.mark.device
def test_device_noise_macros_match_ref(device, backend):
    # What `sampler` and `fused_sample` build on: the macros give the reference's bits and noise.
    if backend != "cuda":
        pytest.skip("the noise macros are the CUDA backend's")
    B, V = 9, 151936
    seed, offset = (t.to(device) for t in counters(B))
    seed[:4] = torch.tensor([0, -1, 2**63 - 1, -(2**63)], device=device)
    bits = poisoned((B, V), I64, device)
    e = poisoned((B, V), torch.float32, device)
    noise_macro_kernel()()(seed, offset, bits, e)
    assert_bitwise_equal(bits, ref.noise_bits(seed, offset, V), what="noise bits")
    assert_bitwise_equal(e, ref.exponential_noise(seed, offset, V), what="exponential noise")


@pytest.mark.device
def test_device_ties_and_batch_invariance(device):
    B, V = 16, 129280
    logits = torch.randn(B, V, device=device)
    logits[:, [7, 4000, 129279]] = 50.0
    logits[3, [100, 90000]] = math.inf
    seed, offset = (t.to(device) for t in counters(B))

    def out(n=B):
        return poisoned((n,), I64, device)

    greedy = api.random_sample_logits(logits, seed, offset, temperature=torch.zeros(B, device=device), out=out())
    assert greedy.tolist() == [7, 7, 7, 100] + [7] * (B - 4)
    e = ref.exponential_noise(seed, offset, V)
    probs = torch.zeros(B, V, device=device)
    probs[:, [5, 77777, 129000]] = e[:, [5, 77777, 129000]]  # keys exactly 1: a three-way tie
    assert api.random_sample_probs(probs, seed, offset, out=out()).tolist() == [5] * B
    temperature = torch.rand(B, device=device) + 0.5
    tokens = api.random_sample_logits(logits, seed, offset, temperature=temperature, out=out())
    # Anchored to the contract: two outputs left with the same poison would compare equal.
    assert_bitwise_equal(tokens, ref.random_sample_logits_ref(logits, seed, offset, temperature))
    perm = torch.randperm(B, device=device)
    assert_bitwise_equal(api.random_sample_logits(logits[perm], seed[perm], offset[perm], temperature=temperature[perm], out=out()), tokens[perm])
    assert_bitwise_equal(api.random_sample_logits(logits[2:3], seed[2:3], offset[2:3], temperature=temperature[2:3], out=out(1)), tokens[2:3])


def _far_below_the_peak(e: torch.Tensor, V: int, adjacent: bool) -> tuple[int, int]:
    """(weak, strong): two ids of row noise e whose noise differs the most, the weak one's E large
    and the strong one's small; adjacent: strong = weak + 1 with weak the first of an aligned
    group of 8 (one thread's vector), else both in the first chunk of ids (ref.CHUNK)."""
    log_e = e.double().log()
    if adjacent:
        starts = torch.arange(0, V - 1, 8)
        gain = log_e[starts] - log_e[starts + 1]
        weak = int(starts[int(gain.argmax())])
        return weak, weak + 1
    head = log_e[: min(V, ref.CHUNK)]
    return int(head.argmax()), int(head.argmin())


@pytest.mark.device
@pytest.mark.parametrize("layout", ["dense", "misaligned"])
@pytest.mark.parametrize("source", ["probs", "logits"])
def test_device_winner_far_below_the_peak(device, source, layout):
    # Entries skip the noise when their key cannot reach the bound set by their block's largest
    # value: here the largest value sits on an id with large noise E and a smaller one on an id
    # with tiny E, so the smaller one's key wins by a hair (or loses by one, every other row). A
    # bound that is too tight would drop the winner. The rest of the row lies far below both.
    V, start = 129280, 1 if layout == "misaligned" else 0
    variants = [(adjacent, margin) for adjacent in (True, False) for margin in (0.05, -0.05)]
    B = 2 * len(variants)
    seed, offset = (t.to(device) for t in counters(B))
    e = ref.exponential_noise(seed, offset, V).cpu()
    base = torch.empty(B, V + start, dtype=torch.float32)
    temperature = torch.rand(B) + 0.5
    intended = []
    for b in range(B):
        adjacent, margin = variants[b % len(variants)]
        weak, strong = _far_below_the_peak(e[b], V, adjacent)
        row = base[b, start:]
        if source == "probs":
            peak = float(torch.rand(()) * 1e3 + 1)
            row.copy_(torch.rand(V) * peak * 1e-12)
            row[weak] = peak
            row[strong] = peak * float(e[b, strong] / e[b, weak]) * (1 + margin)
        else:
            peak = float(torch.randn(()) * 10)
            t = float(temperature[b])
            gap = float(e[b, weak].double().log() - e[b, strong].double().log())
            row.copy_(peak - t * (40 + torch.rand(V) * 10))
            row[weak] = peak
            row[strong] = peak - t * (gap - margin)
        intended.append(strong if margin > 0 else weak)
    x = base.to(device)[:, start:]
    temperature = temperature.to(device)
    if source == "probs":
        expected = ref.random_sample_probs_ref(x, seed, offset)
        got = api.random_sample_probs(x, seed, offset, out=poisoned((B,), I64, device))
    else:
        expected = ref.random_sample_logits_ref(x, seed, offset, temperature)
        got = api.random_sample_logits(x, seed, offset, temperature=temperature, out=poisoned((B,), I64, device))
    assert expected.tolist() == intended, "the construction must decide the reference's token"
    assert_bitwise_equal(got, expected, what=f"{source} tokens")


@pytest.mark.device
def test_device_extreme_magnitudes_match_ref(device):
    # Keys that overflow to +inf (tiny temperatures, huge values), subnormal probabilities and
    # infinite ones: the bound must keep every entry that can win or tie.
    B, V = 12, 9001
    seed, offset = (t.to(device) for t in counters(B))
    logits = torch.randn(B, V) * 4
    logits[:, torch.randint(0, V, (40,))] = 3e38
    logits[:, torch.randint(0, V, (40,))] = -3e38
    logits[0::3, torch.randint(0, V, (5,))] = math.inf
    temperature = torch.tensor([1e-30, 1e-4, 0.5, 1.0, 1e30, 3e-39] * 2)
    logits, temperature = logits.to(device), temperature.to(device)
    got = api.random_sample_logits(logits, seed, offset, temperature=temperature, out=poisoned((B,), I64, device))
    assert_bitwise_equal(got, ref.random_sample_logits_ref(logits, seed, offset, temperature), what="logits tokens")
    probs = torch.rand(B, V) * 1e-40
    probs[:, torch.randint(0, V, (40,))] = 3e38
    probs[0::3, torch.randint(0, V, (5,))] = math.inf
    probs[1::3] = torch.rand(V) * 1e-30
    probs = probs.to(device)
    got = api.random_sample_probs(probs, seed, offset, out=poisoned((B,), I64, device))
    assert_bitwise_equal(got, ref.random_sample_probs_ref(probs, seed, offset), what="probs tokens")


@pytest.mark.device
def test_device_counters_left_zero(device, backend):
    # Every launch's last block resets its row's arrival counter: the next call (or graph replay)
    # starts from zero. Rows of one chunk, of many, and more rows than the previous call.
    if backend != "cuda":
        pytest.skip("the counters are the CUDA kernel's")
    for B, V in ((3, 100), (17, 129280), (40, 4097)):
        logits = torch.randn(B, V, device=device)
        seed, offset = (t.to(device) for t in counters(B))
        for _ in range(2):
            got = api.random_sample_logits(logits, seed, offset, out=poisoned((B,), I64, device))
            assert_bitwise_equal(got, ref.random_sample_logits_ref(logits, seed, offset), what=f"B {B} V {V}")
    assert counters_left_zero(api.NAME, device)


@pytest.mark.device
def test_device_empty_batch_launches_nothing(device, no_kernel_launches):
    seed = torch.zeros(0, dtype=I64, device=device)
    assert api.random_sample_probs(torch.zeros(0, 9, device=device), seed, seed).shape == (0,)
    assert api.random_sample_logits(torch.zeros(0, 9, device=device, dtype=torch.bfloat16), seed, seed).shape == (0,)


@pytest.mark.device
def test_device_cuda_graph_replay(device, backend):
    # Captured once, replayed with new counters and logits: every call of a decode step.
    if backend != "cuda":
        pytest.skip("CUDA graphs are a CUDA feature")
    B, V = 32, 129280
    logits = torch.zeros(B, V, dtype=torch.bfloat16, device=device)
    seed = torch.zeros(B, dtype=I64, device=device)
    offset = torch.zeros(B, dtype=I64, device=device)
    temperature = torch.ones(B, device=device)
    out = poisoned((B,), I64, device)

    def call():
        api.random_sample_logits(logits, seed, offset, temperature=temperature, out=out)

    call()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    for step in range(3):
        logits.copy_(torch.randn(B, V, device=device))
        s, o = counters(B)
        seed.copy_(s)
        offset.copy_(o + step)
        temperature.copy_(torch.rand(B) + 0.3)
        out.fill_(torch.iinfo(I64).min)
        graph.replay()
        assert_bitwise_equal(out, ref.random_sample_logits_ref(logits, seed, offset, temperature), what=f"graph step {step}")
