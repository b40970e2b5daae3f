"""Tests of `store_kv_cache`: reference vs a Python-loop oracle, the record layout read by hand,
interface validation, codegen, and the device kernels against the reference.

Suites (markers, selected by `--tl-suite`; see testing/plugin.py): ref, codegen_cuda, codegen_ascend,
device. Inputs are drawn fresh per test from the plugin's per-test seed; caches are poisoned first
and compared whole, so a byte written outside the given slots fails. Every comparison is exact
(FP8 codes: a NaN matches a NaN of either sign, as in quant's tests: torch's CPU NaN has the sign
bit set where the GPU's has not).
"""

from __future__ import annotations

import math
import re
import struct

import numpy as np
import pytest
import torch

from kernels.store_kv_cache import api, layout, ref
from testing.numeric import assert_bitwise_equal, assert_rejected_without_writes, case_named, case_names, poisoned

F32 = np.float32
NAN, INF = math.nan, math.inf
POISON_BYTE = 0xA5
KINDS = ("bf16", "fp4", "fp8")
CACHE_DTYPE = {"bf16": torch.bfloat16, "fp4": torch.float4_e2m1fn_x2, "fp8": torch.float8_e4m3fn}


# ----------------------------------------------------------------------------------------------------
# Inputs.


def random_rows(t: int, d: int, dtype=torch.bfloat16, device="cpu", row_stride: int | None = None, col_offset: int = 0):
    """(t, d) normal rows with a random per-row scale (10^-3..10^3); with row_stride/col_offset a
    view into a wider tensor."""
    width = (row_stride or d) + col_offset
    base = torch.randn((t, width), device=device) * torch.pow(10.0, torch.empty((t, 1), device=device).uniform_(-3, 3))
    return base.to(dtype)[:, col_offset : col_offset + d]


def special_rows(device="cpu") -> torch.Tensor:
    """576-wide bf16 rows with edge groups: zeros, huge, tiny, NaN, +-Inf, Inf with NaN, all NaN."""
    d = layout.WIDTH
    huge, tiny = float(torch.finfo(torch.bfloat16).max), 1e-39
    # Large but finite: |randn| is clamped so that no value of the huge row overflows to Inf.
    rows = [torch.randn(d), torch.zeros(d), torch.randn(d).clamp(-3.9, 3.9) * (huge / 4), torch.full((d,), huge), torch.randn(d) * tiny]
    for places, values in [([1], [NAN]), ([40], [INF]), ([0, 300], [-INF, NAN]), (list(range(128)), [NAN] * 128)]:
        row = torch.randn(d)
        row[places] = torch.tensor(values)
        rows.append(row)
    rope = torch.randn(d)
    rope[layout.LATENT :] = torch.tensor([NAN, INF, -INF, -0.0] * 16)
    rows.append(rope)
    return torch.stack(rows).to(torch.bfloat16).to(device)


def slot_mapping(t: int, num_slots: int, index_dtype=torch.int64, device="cpu", padding=0.1, beyond=0) -> torch.Tensor:
    """t distinct random slots in [0, num_slots), about `padding` of them negative and
    min(beyond, t - 1) of them replaced by slots >= num_slots (never written). Token 0 always keeps
    its slot, so every call stores at least one row (a kernel that stores nothing must fail)."""
    assert t <= num_slots
    info = torch.iinfo(index_dtype)
    slots = torch.randperm(num_slots)[:t]
    pad = torch.rand(t) < padding
    pad[:1] = False
    # Any negative slot is padding, not just -1: the kernels must test the sign.
    slots[pad] = torch.tensor([-1, -2, info.min])[torch.randint(0, 3, (int(pad.sum()),))]
    beyond = min(beyond, t - 1)
    if beyond > 0:
        where = 1 + torch.randperm(t - 1)[:beyond]
        far = num_slots + torch.randint(0, 3 * num_slots + 1, (beyond,))
        far[0] = info.max  # a bound test written as slot + 1 <= num_slots wraps here
        slots[where] = far
    return slots.to(index_dtype).to(device)


def poisoned_cache(shape, dtype: torch.dtype, device="cpu") -> torch.Tensor:
    if layout.record_layout(dtype) is not None:
        cache = torch.empty(shape, dtype=dtype, device=device)
        cache.view(torch.uint8).fill_(POISON_BYTE)
        return cache
    return poisoned(shape, dtype, device)


def cache_shape(kind: str, num_blocks: int, block_size: int, d: int = layout.WIDTH) -> tuple[int, int, int]:
    rec = layout.record_layout(CACHE_DTYPE[kind])
    return (num_blocks, block_size, d if rec is None else rec.record_bytes)


# ----------------------------------------------------------------------------------------------------
# The independent oracle: Python loops, float32 arithmetic in numpy, exhaustive nearest-code search.


def _e4m3_table() -> np.ndarray:
    vals = []
    for code in range(127):
        e, m = code >> 3, code & 7
        vals.append(m * 2.0**-9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return np.array(vals)


E4M3_TABLE = _e4m3_table()
E2M1_TABLE = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def _nearest(a: float, table: np.ndarray) -> int:
    """Index of the table value nearest a (float64: exact here), a tie to the even index."""
    dist = np.abs(table - a)
    best = np.flatnonzero(dist == dist.min())
    even = [i for i in best if i % 2 == 0]
    return int(even[0] if even else best[0])


def _e2m1(v: np.float32) -> int:
    if np.isnan(v):
        return 0
    return _nearest(min(abs(float(v)), 6.0), E2M1_TABLE) | (8 if v < 0 else 0)


def _e4m3(v: np.float32) -> int:
    if np.isnan(v):
        return 0x7F
    return _nearest(min(abs(float(v)), 448.0), E4M3_TABLE) | (0x80 if math.copysign(1.0, float(v)) < 0 else 0)


def _pow2_up(s: np.float32) -> np.float32:
    if np.isinf(s):
        return s
    m, e = math.frexp(float(s))
    return s if m == 0.5 else F32(math.ldexp(1.0, e))


def oracle_record(row: torch.Tensor, rec: layout.RecordLayout) -> list[int]:
    """One 576-wide bf16 row -> its record bytes, value by value."""
    values = row.float().numpy().astype(F32)
    out = [0] * rec.record_bytes
    fmt_max = 6.0 if rec is layout.FP4 else 448.0
    with np.errstate(all="ignore"):
        for g in range(rec.groups):
            group = values[g * rec.group : (g + 1) * rec.group]
            finite = np.abs(group[~np.isnan(group)])
            amax = F32(finite.max()) if finite.size else F32(0)
            scale = _pow2_up(F32(max(amax, F32(fmt_max * 2.0**-126))) / F32(fmt_max))
            inv = F32(1) / scale
            if rec is layout.FP4:
                out[rec.scale_offset + g] = (struct.unpack("<I", struct.pack("<f", scale))[0] >> 23) & 0xFF
                for e in range(0, rec.group, 2):
                    lo, hi = _e2m1(group[e] * inv), _e2m1(group[e + 1] * inv)
                    out[(g * rec.group + e) // 2] = lo | (hi << 4)
            else:
                out[rec.scale_offset + 4 * g : rec.scale_offset + 4 * g + 4] = struct.pack("<f", scale)
                for e in range(rec.group):
                    out[g * rec.group + e] = _e4m3(group[e] * inv)
    bits = row[layout.LATENT :].contiguous().view(torch.int16).tolist()
    for j, b in enumerate(bits):
        out[rec.rope_offset + 2 * j : rec.rope_offset + 2 * j + 2] = struct.pack("<h", b)
    return out


def oracle_store(kv, cache, slots, v=None, v_cache=None, layout_name="NHD") -> tuple[torch.Tensor, ...]:
    """Copies of the caches after the store, token by token; plus the out-of-range count."""
    rec = layout.record_layout(cache.dtype)
    outs = [cache.clone() if rec is None else cache.view(torch.uint8).clone()]
    sources = [kv]
    if v is not None:
        outs.append(v_cache.clone())
        sources.append(v)
    hnd = layout_name == "HND"
    block_size = cache.shape[2 if hnd else 1]
    num_slots = cache.shape[0] * block_size
    beyond = 0
    for i, s in enumerate(slots.tolist()):
        if s >= num_slots:
            beyond += 1
        if not 0 <= s < num_slots:
            continue
        b, o = divmod(s, block_size)
        for src, out in zip(sources, outs):
            if rec is not None:
                out[b, o] = torch.tensor(oracle_record(src[i], rec), dtype=torch.uint8)
            elif hnd:
                for h in range(src.shape[1]):
                    out[b, h, o] = src[i, h]
            else:
                out[b, o] = src[i]
    return (*outs, beyond)


def assert_cache_equal(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """Bit for bit; in FP8 records a NaN code (0x7F / 0xFF) matches a NaN code of either sign."""
    rec = layout.record_layout(actual.dtype)
    if rec is not layout.FP8:
        a = actual.view(torch.uint8) if rec is not None else actual
        e = expected.view(torch.uint8) if expected.dtype != torch.uint8 and rec is not None else expected
        assert_bitwise_equal(a, e, what=what)
        return
    a = actual.view(torch.uint8).cpu().clone()
    e = expected.view(torch.uint8).cpu().clone()
    codes = (slice(None), slice(None), slice(0, rec.latent_bytes))
    for t in (a, e):
        t[codes] = torch.where((t[codes] & 0x7F) == 0x7F, 0x7F, t[codes])
    assert_bitwise_equal(a, e, what=what)


# ----------------------------------------------------------------------------------------------------
# Reference suite: ref.py (through the interface's CPU path) against the oracle.


@pytest.mark.ref
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("t", [0, 1, 7, 33])
def test_ref_mla_matches_oracle(kind, t, index_dtype):
    num_blocks, block_size = 5, 16
    kv = random_rows(t, layout.WIDTH, row_stride=layout.WIDTH + 64, col_offset=3)
    if t > 2:
        kv[1] = special_rows()[3]
        kv[2] = special_rows()[8]
    cache = poisoned_cache(cache_shape(kind, num_blocks, block_size), CACHE_DTYPE[kind])
    slots = slot_mapping(t, num_blocks * block_size, index_dtype, beyond=min(t, 2))
    expected, beyond = oracle_store(kv, cache, slots)
    counter = torch.full((1,), 5, dtype=torch.int32)
    assert api.store_kv_cache(kv, cache, slots, out_of_range=counter) is None
    assert_cache_equal(cache, expected, f"{kind} T={t}")
    assert counter.item() == 5 + beyond


@pytest.mark.ref
@pytest.mark.parametrize("kind", ["fp4", "fp8"])
def test_ref_special_rows_match_oracle(kind):
    kv = special_rows()
    cache = poisoned_cache(cache_shape(kind, 2, 8), CACHE_DTYPE[kind])
    slots = torch.arange(kv.shape[0]).flip(0)
    expected, _ = oracle_store(kv, cache, slots)
    api.store_kv_cache(kv, cache, slots)
    assert_cache_equal(cache, expected, f"{kind} special rows")


@pytest.mark.ref
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("d", [1, 7, 576, 1000])
def test_ref_plain_rows_any_width(dtype, d):
    kv = random_rows(9, d, dtype, row_stride=d + 5)
    cache = poisoned((3, 4, d), dtype, "cpu")
    slots = slot_mapping(9, 12, torch.int32)
    expected, _ = oracle_store(kv, cache, slots)
    api.store_kv_cache(kv, cache, slots)
    assert_bitwise_equal(cache, expected, what=f"plain D={d}")


@pytest.mark.ref
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("with_v", [False, True])
@pytest.mark.parametrize("layout_name", ["NHD", "HND"])
@pytest.mark.parametrize("t", [0, 1, 13])
def test_ref_heads_match_oracle(layout_name, with_v, t, index_dtype):
    h, dh, num_blocks, block_size = 3, 8, 4, 5
    qkv = torch.randn(t, 3 * h * dh).to(torch.float16)
    k, v = qkv[:, h * dh : 2 * h * dh].view(t, h, dh), qkv[:, 2 * h * dh :].view(t, h, dh)
    shape = (num_blocks, block_size, h, dh) if layout_name == "NHD" else (num_blocks, h, block_size, dh)
    pool = poisoned((shape[0], 2, *shape[1:]), torch.float16, "cpu")  # K and V interleaved per block
    k_cache, v_cache = pool[:, 0], pool[:, 1]
    slots = slot_mapping(t, num_blocks * block_size, index_dtype, beyond=min(t, 1))
    kwargs = dict(v=v, v_cache=v_cache) if with_v else {}
    expected = oracle_store(k, k_cache, slots, layout_name=layout_name, **kwargs)
    counter = torch.zeros(1, dtype=torch.int32)
    api.store_kv_cache(k, k_cache, slots, layout=layout_name, out_of_range=counter, **kwargs)
    assert_bitwise_equal(k_cache, expected[0], what="k_cache")
    if with_v:
        assert_bitwise_equal(v_cache, expected[1], what="v_cache")
    else:
        assert bool(torch.isnan(v_cache).all()), "v_cache written without v"
    assert counter.item() == expected[-1]


@pytest.mark.ref
def test_record_layout_read_by_hand():
    # Pins the documented byte layout: nibble order, scale bytes / floats, rope bits, offsets. Every
    # value not set below is 0, so every other byte of a record is 0 (codes, rope) or the floor scale.
    row = torch.zeros(layout.WIDTH)
    row[0:4] = torch.tensor([1.0, -0.5, 6.0, 3.0])  # group 0: amax 6 -> scale 1
    row[32:34] = torch.tensor([12.0, -2.0])  # FP4 group 1: amax 12 -> scale 2
    row[128] = 896.0  # FP8 group 1: amax 896 -> scale 2
    row[layout.LATENT] = 1.5  # bf16 0x3FC0
    row[layout.WIDTH - 1] = -2.0  # bf16 0xC000
    kv = row.to(torch.bfloat16)[None]

    fp4 = poisoned_cache((1, 1, 400), torch.float4_e2m1fn_x2)
    api.store_kv_cache(kv, fp4, torch.tensor([0]))
    b = fp4.view(torch.uint8)[0, 0].tolist()
    assert b[0] == 0x92  # element 0 = 1.0 (code 2) low nibble, element 1 = -0.5 (code 9) high
    assert b[1] == 0x57  # 6.0 (code 7), 3.0 (code 5)
    assert b[16] == 0xA7  # 12 / 2 = 6 (code 7), -2 / 2 = -1 (code 0xA)
    assert b[256] == 127 and b[257] == 128  # UE8M0: 2 ** (byte - 127)
    assert b[258] == 1  # an all-zero group: the floor 6 * 2**-126 / 6 -> 2**-126
    assert b[272:274] == [0xC0, 0x3F] and b[398:400] == [0x00, 0xC0]
    # Element 128 = 896 is FP4 group 4's amax: scale 2**8 (byte 135), 896 / 256 = 3.5 -> 4 (code 6).
    assert b[64] == 0x06 and b[260] == 135
    assert b[2:16] + b[17:64] + b[65:256] + b[274:398] == [0] * 376 and b[259:260] + b[261:272] == [1] * 12

    fp8 = poisoned_cache((1, 1, 656), torch.float8_e4m3fn)
    api.store_kv_cache(kv, fp8, torch.tensor([0]))
    b = fp8.view(torch.uint8)[0, 0].tolist()
    # Group 0 (values 0..127, amax 12): scale 12 / 448 rounded up to 2**-5; x * 32 = 32, -16,
    # 192, 96 in e4m3 (bias 7: exponent << 3 | mantissa, sign 0x80).
    assert b[0:4] == [0x60, 0xD8, 0x74, 0x6C]
    assert struct.unpack("<4f", bytes(b[512:528])) == (2.0**-5, 2.0, 448 * 2.0**-126 / 448, 448 * 2.0**-126 / 448)
    assert b[128] == 0x7E  # 896 / 2 = 448
    assert b[528:530] == [0xC0, 0x3F] and b[654:656] == [0x00, 0xC0]
    # Elements 32, 33 (12, -2) are in group 0 too: 384 = 1.5 * 2**8, -64 = -2**6.
    assert b[32:34] == [0x7C, 0xE8]
    assert b[4:32] + b[34:128] + b[129:512] + b[530:654] == [0] * 629


@pytest.mark.ref
@pytest.mark.parametrize("kind", ["fp4", "fp8"])
def test_ref_records_decode_close_to_the_rows(kind):
    rec = layout.record_layout(CACHE_DTYPE[kind])
    kv = random_rows(16, layout.WIDTH)
    cache = poisoned_cache(cache_shape(kind, 2, 8), CACHE_DTYPE[kind])
    api.store_kv_cache(kv, cache, torch.arange(16))
    back = layout.decode_records(cache.view(torch.uint8).reshape(16, rec.record_bytes), rec).float()
    latent, rope = kv[:, : layout.LATENT].float(), kv[:, layout.LATENT :]
    # Per group: |error| <= half a code step at the top of the range, relative to the group's scale.
    amax = latent.abs().reshape(16, rec.groups, rec.group).amax(-1, keepdim=True)
    step = (2.0 if kind == "fp4" else 32.0) / (6.0 if kind == "fp4" else 448.0) * 2
    err = (back[:, : layout.LATENT] - latent).abs().reshape(16, rec.groups, rec.group)
    assert bool((err <= amax * step / 2 + 1e-30).all())
    assert_bitwise_equal(back[:, layout.LATENT :].to(torch.bfloat16), rope, what="rope")


@pytest.mark.ref
def test_empty_batch_writes_nothing(no_kernel_launches):
    cache = poisoned_cache((2, 4, 400), torch.float4_e2m1fn_x2)
    before = cache.view(torch.uint8).clone()
    counter = torch.zeros(1, dtype=torch.int32)
    api.store_kv_cache(random_rows(0, 576), cache, torch.zeros(0, dtype=torch.int64), out_of_range=counter)
    assert torch.equal(cache.view(torch.uint8), before) and counter.item() == 0


def _bad_inputs():
    bf = torch.bfloat16
    kv = lambda t=4, d=576, dtype=bf: torch.zeros(t, d, dtype=dtype)  # noqa: E731
    fp4 = lambda shape=(2, 4, 400): poisoned_cache(shape, torch.float4_e2m1fn_x2)  # noqa: E731
    plain = lambda shape=(2, 4, 576), dtype=bf: poisoned(shape, dtype, "cpu")  # noqa: E731
    slots = lambda t=4, dtype=torch.int64: torch.arange(t, dtype=dtype)  # noqa: E731
    heads = lambda t=4, dtype=torch.float16: torch.zeros(t, 2, 8, dtype=dtype)  # noqa: E731
    hcache = lambda shape=(2, 4, 2, 8), dtype=torch.float16: poisoned(shape, dtype, "cpu")  # noqa: E731
    shared = plain((1, 8, 576))
    cases = []

    def case(cid, error, message, **kw):
        kw.setdefault("kv", kv())
        kw.setdefault("cache", fp4())
        kw.setdefault("slot_mapping", slots(kw["kv"].shape[0] if isinstance(kw["kv"], torch.Tensor) and kw["kv"].dim() else 4))
        cases.append((cid, kw, error, message))

    case("kv-not-tensor", TypeError, "kv must be a torch.Tensor", kv=[[0.0] * 576])
    case("kv-fp32-fp4", TypeError, "kv has dtype torch.float32", kv=kv(dtype=torch.float32))
    case("kv-fp16-fp4", TypeError, "kv has dtype torch.float16", kv=kv(dtype=torch.float16))
    case("kv-1d", ValueError, "kv must be (T, D) latent rows", kv=torch.zeros(576, dtype=bf), slot_mapping=slots())
    case("d-not-576", ValueError, "kv must be (T, 576)", kv=kv(d=512))
    case("fp8-d-not-576", ValueError, "kv must be (T, 576)", kv=kv(d=640), cache=poisoned_cache((2, 4, 656), torch.float8_e4m3fn))
    case("record-bytes", ValueError, "cache must be (num_blocks, block_size, 400)", cache=fp4((2, 4, 288)))
    case("cache-int8", TypeError, "cache has dtype torch.int8", cache=torch.zeros(2, 4, 576, dtype=torch.int8))
    case("cache-2d", ValueError, "cache must be 3-D", cache=fp4((8, 400)))
    case("plain-width", ValueError, "cache must be (num_blocks, block_size, 576)", cache=plain((2, 4, 512)))
    case("plain-dtype", TypeError, "kv has dtype torch.bfloat16; expected torch.float16", cache=plain(dtype=torch.float16))
    case("plain-too-wide", ValueError, "kv has width 16385", kv=kv(d=16385), cache=plain((1, 4, 16385)))
    case("plain-width-0", ValueError, "kv has width 0", kv=kv(d=0), cache=plain((2, 4, 0)))
    case("plain-block-size-0", ValueError, "cache has block_size 0", kv=kv(d=8), cache=plain((2, 0, 8)))
    case("fp4-block-size-0", ValueError, "cache has block_size 0", cache=fp4((2, 0, 400)))
    case("kv-last-strided", ValueError, "kv's last dimension must be contiguous", kv=torch.zeros(4, 1152, dtype=bf)[:, ::2])
    case("slots-fp32", TypeError, "slot_mapping has dtype torch.float32", slot_mapping=slots().float())
    case("slots-int16", TypeError, "slot_mapping has dtype torch.int16", slot_mapping=slots(dtype=torch.int16))
    case("slots-short", ValueError, "slot_mapping must have shape (4,)", slot_mapping=slots(3))
    case("slots-2d", ValueError, "slot_mapping must have shape (4,)", slot_mapping=slots().view(4, 1))
    case("slots-strided", ValueError, "slot_mapping must be contiguous", slot_mapping=torch.arange(8)[::2])
    case("slots-not-tensor", TypeError, "slot_mapping must be a torch.Tensor", slot_mapping=[0, 1, 2, 3])
    case("v-with-mla", ValueError, "v and v_cache are for per-head caches", v=kv(), cache=plain(), v_cache=plain())
    case("hnd-with-mla", ValueError, "layout 'HND' applies to per-head caches", cache=plain(), layout="HND")
    case("bad-layout", ValueError, "layout must be one of 'NHD', 'HND'", layout="NDH")
    case("oor-int64", TypeError, "out_of_range has dtype torch.int64", out_of_range=torch.zeros(1, dtype=torch.int64))
    case("oor-shape", ValueError, "out_of_range must have shape (1,)", out_of_range=torch.zeros(2, dtype=torch.int32))
    case("cache-strided-rows", ValueError, "cache must be contiguous within each block", cache=plain((2, 8, 576))[:, ::2])
    case("cache-last-strided", ValueError, "cache's last dimension must be contiguous", cache=plain((2, 4, 1152))[:, :, ::2])
    case("kv-in-cache", ValueError, "cache overlaps kv", kv=shared[0, :4], cache=shared)
    case("slots-in-cache", ValueError, "cache overlaps slot_mapping", cache=fp4((1, 8, 400)), slot_mapping=None)
    # Per head.
    h4 = heads()
    case("heads-fp32", TypeError, "kv has dtype torch.float32", kv=torch.zeros(4, 2, 8, dtype=torch.float32), cache=hcache())
    case("heads-cache-dtype", TypeError, "cache has dtype torch.bfloat16; expected torch.float16", kv=h4, cache=hcache(dtype=bf))
    case("heads-cache-3d", ValueError, "cache must be 4-D", kv=h4, cache=plain((2, 4, 16), torch.float16))
    case("heads-shape", ValueError, "cache must be (num_blocks, block_size, H, Dh)", kv=h4, cache=hcache((2, 4, 3, 8)))
    case("heads-hnd-shape", ValueError, "cache must be (num_blocks, H, block_size, Dh)", kv=h4, cache=hcache((2, 4, 2, 8)), layout="HND")
    case("heads-block-size-0", ValueError, "cache has block_size 0", kv=h4, cache=hcache((2, 0, 2, 8)))
    case("heads-hnd-block-size-0", ValueError, "cache has block_size 0", kv=h4, cache=hcache((2, 2, 0, 8)), layout="HND")
    case("heads-too-wide", ValueError, "H * Dh = 16400", kv=torch.zeros(4, 2, 8200, dtype=torch.float16), cache=hcache((1, 1, 2, 8200)))
    case("v-alone", ValueError, "v and v_cache go together (got v alone)", kv=h4, cache=hcache(), v=heads())
    case("v-cache-alone", ValueError, "v and v_cache go together (got v_cache alone)", kv=h4, cache=hcache(), v_cache=hcache())
    case("v-shape", ValueError, "v must have shape (4, 2, 8)", kv=h4, cache=hcache(), v=heads(3), v_cache=hcache())
    case("v-strides", ValueError, "v must have kv's strides", kv=h4, cache=hcache(), v=torch.zeros(4, 2, 16, dtype=torch.float16)[:, :, :8], v_cache=hcache())
    case("v-cache-dtype", TypeError, "v_cache has dtype torch.bfloat16", kv=h4, cache=hcache(), v=heads(), v_cache=hcache(dtype=bf))
    case("v-cache-is-cache", ValueError, "v_cache overlaps cache", kv=h4, cache=(c := hcache()), v=heads(), v_cache=c)
    pool = poisoned((2, 2, 4, 2, 8), torch.float16, "cpu")  # K and V interleaved per block
    shifted = torch.as_strided(pool, (2, 4, 2, 8), pool[:, 0].stride(), storage_offset=8)
    case("v-cache-shifted", ValueError, "v_cache overlaps cache", kv=h4, cache=pool[:, 0], v=heads(), v_cache=shifted)
    case("heads-broadcast", ValueError, "kv's token and head strides must be positive", kv=torch.zeros(1, 2, 8, dtype=torch.float16).expand(4, 2, 8), cache=hcache())
    case("kv-dim-4", ValueError, "kv must be (T, D) latent rows or (T, H, Dh)", kv=torch.zeros(4, 1, 2, 8, dtype=torch.float16), cache=hcache())
    return cases


@pytest.mark.ref
@pytest.mark.parametrize("name", case_names(_bad_inputs))
def test_bad_input_raises_and_writes_nothing(name):
    _, kwargs, error, message = case_named(_bad_inputs, name)
    if kwargs.get("slot_mapping") is None:
        kwargs = dict(kwargs, slot_mapping=kwargs["cache"].view(torch.uint8).view(-1)[:32].view(torch.int64))
    written = [t for t in (kwargs.get("cache"), kwargs.get("v_cache"), kwargs.get("out_of_range")) if isinstance(t, torch.Tensor)]
    written = [t.view(torch.uint8) if layout.record_layout(t.dtype) is not None else t for t in written]
    assert_rejected_without_writes(api.store_kv_cache, kwargs, error, message, written)


# ----------------------------------------------------------------------------------------------------
# Codegen (CPU): every configuration the dispatcher can pick lowers, compiles and fits on chip.


def _configs(backend: str):
    import importlib

    module = importlib.import_module(f"kernels.store_kv_cache.{backend}")
    return [(name, args) for name, configs in module.store_kv_shipped_configs().items() for args in configs]


def _config_id(case) -> str:
    name, args = case
    return name.removeprefix("store_kv").removesuffix("_tl").strip("_") + "-" + "-".join(str(a).replace(" ", "") for a in args)


# 64-bit offsets in the lowered source (t * row stride and block * block stride pass 2**31): the
# token row (from blockIdx.x) is widened before it meets the row stride, and the slot, or its block,
# is an int64 (its own type or a widening cast) when it meets the cache's strides. 32-bit offset
# arithmetic prints `((int)blockIdx.x) * 4096` and `slot[0] * 1024` instead.
_ROW_OFFSET_64 = re.compile(r"\b(k|kv)(\[| \+ )\(+\(int64_t\)\(\(int\)blockIdx\.x\)\) \* \(int64_t\)")
_SLOT_OFFSET_64 = re.compile(
    r"\b(k_cache|cache)(\[| \+ )\(+(slot\[0\]|\(int64_t\)slot\[\(int64_t\)0\]\))( (>>|/) \(int64_t\)\d+\))? \* \(int64_t\)"
)


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("case", _configs("cuda"), ids=_config_id)
def test_cuda_config_compiles_without_spills(arch, case):
    from kernels.store_kv_cache import cuda
    from testing import codegen_cuda

    name, (*args, align) = case
    fn = getattr(cuda, name)
    # Built as the interface builds it for these archs: a programmatic dependent launch.
    lowered = codegen_cuda.lower_cuda(fn, *args, x_align=align, arch=arch, pdl=True)
    assert _ROW_OFFSET_64.search(lowered.source) and _SLOT_OFFSET_64.search(lowered.source), "offsets must be 64-bit"
    assert "__fdividef" not in lowered.source and "--use_fast_math" not in lowered.nvcc_flags
    assert ("AtomicAdd" in lowered.source) == ("checked" in name)
    report = codegen_cuda.check_cuda_resources(fn, *args, x_align=align, arch=arch, pdl=True)
    assert report.spill_store_bytes == report.spill_load_bytes == report.stack_frame_bytes == 0


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("name", ["store_kv_pair_checked_tl", "store_kv_fp4_checked_tl"])
def test_cuda_dependent_launch_waits_before_memory(name):
    # pdl=True: nvcc keeps every global access (the slot and row loads, the count's atomic) after
    # the wait for the grids before; pdl=False emits neither call. One body of each kind.
    from kernels.store_kv_cache import cuda
    from testing import codegen_cuda

    *args, align = cuda.store_kv_shipped_configs()[name][0]
    fn = getattr(cuda, name)
    codegen_cuda.check_dependent_launch(fn, *args, x_align=align)


@pytest.mark.codegen_cuda
def test_cuda_shipped_configs_cover_the_launch_shapes():
    from kernels.store_kv_cache import cuda

    shipped = cuda.store_kv_shipped_configs()
    copies = [cuda.copy_config(h, dh, dt, ks, cs, a) for h, dh, dt, _, _, ks, cs, a in shipped["store_kv_tl"]]
    # The heaviest lane any reachable copy configuration has (most vectors of the narrowest width)
    # is shipped; every lane holds at most 16 vectors per operand in one block of <= 1024 threads.
    assert max(c.steps for c in copies) == 16 and {c.vector_elems for c in copies} >= {1, 2, 8}
    for h, dh in [(1, 576), (1, cuda.MAX_ROW), (8, 128), (128, 128), (1, 1), (3, 6), (1, 16383)]:
        for a in (2, 4, 8, 16):
            c = cuda.copy_config(h, dh, "bfloat16", (h * dh, dh), (h * dh, h * dh, dh), a)
            assert c.threads <= 1024 and c.steps <= 16 and c.threads_per_row * c.steps >= c.row_vectors
    assert any(c.row_vectors % c.threads_per_row for c in copies) and any(c.rows_per_block > 1 for c in copies)
    assert {args[3] for args in shipped["store_kv_tl"]} == set(cuda.INDEX_DTYPES)
    for name in ("store_kv_fp4_tl", "store_kv_fp8_tl"):
        rec = layout.FP4 if "fp4" in name else layout.FP8
        vectors = {cuda.record_vector_bytes(s, bs, rec, a) for _, _, s, bs, a in shipped[name]}
        assert (16, 16) in vectors and any(v[0] < 16 or v[1] < 16 for v in vectors)


@pytest.mark.codegen_ascend
@pytest.mark.parametrize("case", _configs("asc"), ids=_config_id)
def test_ascend_config_lowers_and_fits_ub(case):
    from kernels.store_kv_cache import asc
    from testing import codegen_ascend

    name, (*args, align) = case
    fn = getattr(asc, name)
    source = codegen_ascend.ascend_source(fn, *args, x_align=align)
    assert "__global__" in source or "__aicore__" in source
    codegen_ascend.assert_ub_fits(fn, *args, x_align=align)


@pytest.mark.codegen_ascend
def test_ascend_refuses_staging_past_its_budget():
    # Heads are staged at a 32-byte pitch: 16384 heads of 1 value would need 512 KiB of UB.
    from kernels.store_kv_cache import asc

    with pytest.raises(ValueError, match="16384 heads of 1 values"):
        asc.store_kv_tl(16384, 1, "bfloat16", "int32", 1, (16384, 1), (16384, 16384, 1))
    with pytest.raises(ValueError, match="4096 heads of 4 values"):
        asc.store_kv_pair_tl(4096, 4, "bfloat16", "int32", 1, (16384, 4), (16384, 16384, 4))


@pytest.mark.codegen_ascend
def test_ascend_factories_match_cuda_names():
    from kernels.store_kv_cache import asc, cuda

    tl_names = lambda m: {n for n in m.__all__ if n.endswith("_tl")}  # noqa: E731
    assert tl_names(asc) == tl_names(cuda)
    assert set(asc.store_kv_shipped_configs()) == tl_names(asc)


# ----------------------------------------------------------------------------------------------------
# Device: the backend's kernels against the reference on the accelerator, bit for bit.

DEVICE_T = [1, 2, 7, 33, 256, 4096, 65537]


def _check(device, kv, cache, slots, what, v=None, v_cache=None, layout_name="NHD", counted=False):
    """Runs the interface and the reference on clones of the same poisoned caches; whole caches equal."""
    expected = [cache.clone()] + ([v_cache.clone()] if v is not None else [])
    counter = torch.full((1,), 3, dtype=torch.int32, device=device) if counted else None
    expected_counter = counter.clone() if counted else None
    ref.store_kv_cache_ref(
        kv, expected[0], slots, v=v, v_cache=expected[1] if v is not None else None, layout=layout_name, out_of_range=expected_counter
    )
    api.store_kv_cache(kv, cache, slots, v=v, v_cache=v_cache, layout=layout_name, out_of_range=counter)
    assert_cache_equal(cache, expected[0], f"{what} cache")
    if v is not None:
        assert_cache_equal(v_cache, expected[1], f"{what} v_cache")
    if counted:
        assert counter.item() == expected_counter.item(), f"{what}: out_of_range"


@pytest.mark.device
@pytest.mark.parametrize("counted", [False, True])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("t", DEVICE_T)
def test_device_mla(device, kind, t, index_dtype, counted):
    block_size = 64
    num_blocks = -(-2 * t // block_size) + 1
    kv = random_rows(t, layout.WIDTH, device=device)
    cache = poisoned_cache(cache_shape(kind, num_blocks, block_size), CACHE_DTYPE[kind], device)
    # Slots past the cache reach the uncounted kernels too: they report nothing but must still skip.
    # At most half the tokens, so a single token is still stored.
    slots = slot_mapping(t, num_blocks * block_size, index_dtype, device, beyond=min(t // 2, 3))
    _check(device, kv, cache, slots, f"{kind} T={t}", counted=counted)


@pytest.mark.device
@pytest.mark.parametrize("counted", [False, True])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("row_stride,col_offset", [(576, 0), (640, 0), (577, 1), (1152, 8)])
@pytest.mark.parametrize("block_size", [1, 16, 64])
def test_device_mla_strided_rows_and_blocks(device, kind, row_stride, col_offset, block_size, counted):
    # Strided and misaligned rows narrow the loads; a cache that is one layer of a two-layer pool
    # (block stride twice the block) and a special-row batch exercise the rest.
    t = 333
    kv = random_rows(t, layout.WIDTH, device=device, row_stride=row_stride, col_offset=col_offset)
    kv[: special_rows().shape[0]] = special_rows(device)
    num_blocks = -(-t // block_size) + 2
    pool = poisoned_cache((num_blocks, 2, *cache_shape(kind, 1, block_size)[1:]), CACHE_DTYPE[kind], device)
    slots = slot_mapping(t, num_blocks * block_size, torch.int64, device, padding=0.3, beyond=3)
    _check(device, kv, pool[:, 1], slots, f"{kind} stride {row_stride}+{col_offset} bs {block_size}", counted=counted)
    assert_cache_equal(pool[:, 0], poisoned_cache(pool[:, 0].shape, CACHE_DTYPE[kind], device), "the other layer")


@pytest.mark.device
@pytest.mark.parametrize("d", [1, 7, 64, 1000, 16384])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_device_plain_rows_any_width(device, d, dtype):
    t = 77
    kv = random_rows(t, d, dtype, device, row_stride=d + 3, col_offset=1)
    cache = poisoned((40, 4, d), dtype, device)
    _check(device, kv, cache, slot_mapping(t, 160, torch.int32, device, beyond=3), f"plain D={d}")


@pytest.mark.device
@pytest.mark.parametrize("counted", [False, True])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("with_v", [False, True])
@pytest.mark.parametrize("layout_name", ["NHD", "HND"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("t,h,dh,block_size", [(1, 8, 128, 16), (33, 8, 128, 64), (4096, 8, 128, 16), (257, 128, 128, 64), (65, 3, 6, 5), (9, 1, 64, 1)])
def test_device_heads(device, dtype, layout_name, with_v, index_dtype, counted, t, h, dh, block_size):
    # k and v are views of a fused QKV projection (token stride 3 * H * Dh); the caches interleave
    # K and V per block in one pool, as paged-attention engines allocate them.
    qkv = torch.randn(t, 3 * h * dh, device=device).to(dtype)
    k, v = qkv[:, h * dh : 2 * h * dh].view(t, h, dh), qkv[:, 2 * h * dh :].view(t, h, dh)
    num_blocks = -(-2 * t // block_size) + 1
    inner = (block_size, h, dh) if layout_name == "NHD" else (h, block_size, dh)
    pool = poisoned((num_blocks, 2, *inner), dtype, device)
    slots = slot_mapping(t, num_blocks * block_size, index_dtype, device, beyond=min(t // 2, 2))
    kwargs = dict(v=v, v_cache=pool[:, 1]) if with_v else {}
    _check(device, k, pool[:, 0], slots, f"heads {layout_name} T={t} H={h} Dh={dh}", layout_name=layout_name, counted=counted, **kwargs)
    if not with_v:
        assert bool(torch.isnan(pool[:, 1]).all()), "v_cache written without v"


@pytest.mark.device
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64], ids=str)
def test_device_64bit_offsets(device, index_dtype):
    # Slots whose byte (FP4: slot * 400) and element (bf16: slot * 576) offsets pass 2**31; int32
    # slots fit, but their product with the row size overflows unless widened first.
    t, block_size = 64, 64
    for kind in ("fp4", "bf16"):
        per_slot = 400 if kind == "fp4" else 576
        num_blocks = (2**31 // per_slot) // block_size + 8
        cache = torch.empty(cache_shape(kind, num_blocks, block_size), dtype=CACHE_DTYPE[kind], device=device)
        num_slots = num_blocks * block_size
        slots = torch.arange(num_slots - t, num_slots, dtype=index_dtype, device=device).flip(0)
        slots[::7] = -1
        tail = cache[num_blocks - 2 :]
        view = tail.view(torch.uint8) if kind == "fp4" else tail
        view.fill_(0x5A if kind == "fp4" else 1.0)
        kv = random_rows(t, layout.WIDTH, device=device)
        expected = tail.clone()
        ref.store_kv_cache_ref(kv, expected, slots - (num_blocks - 2) * block_size)
        api.store_kv_cache(kv, cache, slots)
        assert_cache_equal(tail, expected, f"{kind} near 2**31")
        del cache, tail, view


@pytest.mark.device
def test_device_empty_batch_launches_nothing(device, no_kernel_launches):
    counter = torch.zeros(1, dtype=torch.int32, device=device)
    for kind in KINDS:
        cache = poisoned_cache(cache_shape(kind, 2, 4), CACHE_DTYPE[kind], device)
        before = cache.view(torch.uint8).clone()
        api.store_kv_cache(random_rows(0, 576, device=device), cache, torch.zeros(0, dtype=torch.int32, device=device), out_of_range=counter)
        assert torch.equal(cache.view(torch.uint8), before)
    assert counter.item() == 0


@pytest.mark.device
@pytest.mark.parametrize("counted", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_device_cuda_graph_replay(device, backend, kind, counted):
    # A decode step's store is captured once and replayed with new rows and slots (device tensors).
    if backend != "cuda":
        pytest.skip("CUDA graphs are a CUDA feature")
    t, block_size, num_blocks = 64, 64, 8
    kv = random_rows(t, layout.WIDTH, device=device)
    slots = slot_mapping(t, num_blocks * block_size, torch.int64, device)
    cache = poisoned_cache(cache_shape(kind, num_blocks, block_size), CACHE_DTYPE[kind], device)
    counter = torch.zeros(1, dtype=torch.int32, device=device) if counted else None
    api.store_kv_cache(kv, cache, slots, out_of_range=counter)  # compile and load outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        api.store_kv_cache(kv, cache, slots, out_of_range=counter)
    for _ in range(3):
        kv.copy_(random_rows(t, layout.WIDTH, device=device))
        slots.copy_(slot_mapping(t, num_blocks * block_size, torch.int64, device, beyond=2))
        fresh = poisoned_cache(cache.shape, cache.dtype, device)
        cache.view(torch.uint8).copy_(fresh.view(torch.uint8))
        if counted:
            counter.zero_()
        expected_counter = torch.zeros(1, dtype=torch.int32, device=device)
        ref.store_kv_cache_ref(kv, fresh, slots, out_of_range=expected_counter)
        graph.replay()
        assert_cache_equal(cache, fresh, f"graph {kind}")
        assert expected_counter.item() == 2
        if counted:
            assert counter.item() == 2
