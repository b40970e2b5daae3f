"""Tests of `load_paged_kv_cache`: reference vs a Python-loop oracle over the block table, a
store/load round trip, interface validation, codegen, and the device kernels.

Suites (markers, selected by `--tl-suite`; see testing/plugin.py): ref, codegen_cuda, codegen_ascend,
device. Inputs are drawn fresh per test from the plugin's per-test seed; outputs are poisoned first
(NaN rows, so an unwritten row fails). Rows compare bit for bit; decoded records compare bit for
bit except that every bf16 NaN counts as the same NaN (a NaN's payload is not part of the
contract: CUDA's conversion yields one canonical NaN).
"""

from __future__ import annotations

import math

import pytest
import torch

from kernels.load_paged_kv_cache import api, ref
from kernels.store_kv_cache import layout
from testing.numeric import FINITE_POISON, as_bits, assert_bitwise_equal, assert_rejected_without_writes, case_named, case_names, poisoned

KINDS = ["bf16", "fp4", "fp8"]
_BF16_NAN = 0x7FC0


# ----------------------------------------------------------------------------------------------------
# Inputs.


def random_rows(n: int, d: int, device="cpu") -> torch.Tensor:
    """(n, d) bf16 rows, normal with a random per-row scale (10^-3..10^3)."""
    scale = torch.pow(10.0, torch.empty((n, 1), device=device).uniform_(-3, 3))
    return (torch.randn((n, d), device=device) * scale).to(torch.bfloat16)


def make_cache(kind: str, num_blocks: int, block_size: int, d: int = 576, device="cpu") -> torch.Tensor:
    """A cache of random content: bf16 rows, or records encoded from random rows."""
    rows = random_rows(num_blocks * block_size, d if kind == "bf16" else layout.WIDTH, device)
    if kind == "bf16":
        return rows.reshape(num_blocks, block_size, d)
    records = layout.FP4 if kind == "fp4" else layout.FP8
    encoded = layout.encode_rows(rows, records)
    return encoded.view(records.cache_dtype).reshape(num_blocks, block_size, records.record_bytes)


def random_table(b: int, max_blocks: int, num_blocks: int, invalid: float = 0.0, device="cpu") -> torch.Tensor:
    """(b, max_blocks) int32: distinct physical blocks in shuffled order where the cache has enough,
    else random ones; a fraction `invalid` replaced by -1, num_blocks or a large id."""
    count = b * max_blocks
    if count <= num_blocks:
        ids = torch.randperm(num_blocks)[:count]
    else:
        ids = torch.randint(0, num_blocks, (count,))
    ids = ids.to(torch.int32).reshape(b, max_blocks)
    if invalid:
        bad = torch.rand(b, max_blocks) < invalid
        choice = torch.tensor([-1, num_blocks, 2**31 - 1, -(2**31)], dtype=torch.int32)
        ids = torch.where(bad, choice[torch.randint(0, 4, (b, max_blocks))], ids)
    return ids.to(device)


def index_tensor(values, dtype, device="cpu") -> torch.Tensor:
    return torch.tensor(values, dtype=dtype).to(device)


def strided_cache(shape, pad_blocks: int, device="cpu") -> torch.Tensor:
    """A bf16 cache of `shape` whose blocks are dense but strided: block b is slice 0 of a
    (num_blocks, 1 + pad_blocks, *block) allocation (as K of a K/V-interleaved pool), random
    content everywhere, so a read of a gap row would show."""
    whole = random_rows(shape[0] * (1 + pad_blocks), math.prod(shape[1:]), device)
    return whole.reshape(shape[0], 1 + pad_blocks, *shape[1:])[:, 0]


def record_pool(kind: str, num_blocks: int, block_size: int, block_stride: int, device="cpu") -> torch.Tensor:
    """A record cache whose blocks are `block_stride` bytes apart in one allocation of random
    records (as K of a K/V-interleaved pool when the stride is two blocks), so a read of a gap
    between blocks would show."""
    records = layout.FP4 if kind == "fp4" else layout.FP8
    need = (num_blocks - 1) * block_stride + block_size * records.record_bytes
    slots = -(-need // records.record_bytes)
    pool = make_cache(kind, 1, slots, device=device).view(torch.uint8).reshape(-1)
    shape = (num_blocks, block_size, records.record_bytes)
    return pool.as_strided(shape, (block_stride, records.record_bytes, 1)).view(records.cache_dtype)


def heads_cache(kv_layout: str, num_blocks: int, block_size: int, heads: int, dh: int, pad_blocks: int = 0, device="cpu") -> torch.Tensor:
    """A per-head bf16 cache: (num_blocks, block_size, H, Dh) for NHD, (num_blocks, H, block_size,
    Dh) for HND."""
    inner = (block_size, heads, dh) if kv_layout == "NHD" else (heads, block_size, dh)
    return strided_cache((num_blocks, *inner), pad_blocks, device)


def slots_first(cache: torch.Tensor, kv_layout: str) -> torch.Tensor:
    """(num_blocks, block_size, H * Dh) rows of a per-head cache, a contiguous copy."""
    nhd = cache.transpose(1, 2) if kv_layout == "HND" else cache
    return nhd.reshape(nhd.shape[0], nhd.shape[1], -1).contiguous()


# ----------------------------------------------------------------------------------------------------
# The independent oracle: Python loops over the block table.


def cache_slot_rows(cache: torch.Tensor) -> torch.Tensor:
    """(num_blocks * block_size, W) rows of the cache, as stored (records as uint8)."""
    nb, bs, w = cache.shape
    return (cache if cache.dtype == torch.bfloat16 else cache.view(torch.uint8)).reshape(nb * bs, w)


def decode_one(cache: torch.Tensor, stored: torch.Tensor) -> torch.Tensor:
    records = layout.record_layout(cache.dtype)
    return stored if records is None else layout.decode_records(stored[None], records)[0]


def oracle(cache, block_table, seq_lens, seq_starts=None):
    """(rows (total, D) bf16, cu_seqlens list) by walking every request's positions."""
    nb, bs, _ = cache.shape
    stored = cache_slot_rows(cache)
    d = stored.shape[1] if cache.dtype == torch.bfloat16 else layout.WIDTH
    table = block_table.tolist()
    rows, cu = [], [0]
    for b, length in enumerate(seq_lens.tolist()):
        length = max(length, 0)
        start = 0 if seq_starts is None else seq_starts[b].item()
        for p in range(start, start + length):
            j = p // bs
            if p < 0 or j >= len(table[b]) or not 0 <= table[b][j] < nb:
                rows.append(torch.zeros(d, dtype=torch.bfloat16))
            else:
                rows.append(decode_one(cache, stored[table[b][j] * bs + p % bs]))
        cu.append(cu[-1] + length)
    out = torch.stack(rows) if rows else torch.zeros((0, d), dtype=torch.bfloat16)
    return out, cu


def canonical_nan(t: torch.Tensor) -> torch.Tensor:
    """bf16 bits with every NaN replaced by one NaN pattern."""
    bits = as_bits(t.contiguous()).cpu()
    return torch.where(torch.isnan(t.cpu()), torch.full_like(bits, _BF16_NAN), bits).view(torch.bfloat16)


def assert_rows_equal(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    assert_bitwise_equal(canonical_nan(actual), canonical_nan(expected), what=what)


# ----------------------------------------------------------------------------------------------------
# Request sets: lengths 0 and 1, lengths ending on and one past a block boundary, unaligned starts,
# requests running past their table (zero rows), invalid block ids.


def request_set(block_size: int, max_blocks: int):
    """(seq_lens, seq_starts) lists covering the edge cases for this block size and table width."""
    bs, cap = block_size, block_size * max_blocks
    lens = [0, 1, bs, bs + 1, 2 * bs, 2 * bs - 1, 3, cap, cap + 2, 0, 5, bs * max(1, max_blocks - 1) + 1, -3]
    starts = [3, 0, 0, bs - 1, 1, bs, cap - 1, 0, 0, 7, -2, bs + 3, 2]
    return lens, [min(s, cap) for s in starts]


CASES = [
    # (kind, D, num_blocks, block_size, max_blocks)
    ("bf16", 576, 40, 16, 4),
    ("bf16", 128, 9, 64, 2),
    ("bf16", 7, 30, 4, 5),
    ("bf16", 512, 12, 1, 9),
    ("fp4", 576, 40, 16, 4),
    ("fp4", 576, 20, 3, 6),
    ("fp8", 576, 40, 16, 4),
    ("fp8", 576, 6, 64, 2),
]


def _case_id(case) -> str:
    return "-".join(map(str, case))


@pytest.mark.ref
@pytest.mark.parametrize("case", CASES, ids=_case_id)
@pytest.mark.parametrize("lens_dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("with_starts", [False, True], ids=["no_starts", "starts"])
def test_ref_matches_oracle(case, lens_dtype, with_starts):
    kind, d, nb, bs, mb = case
    cache = make_cache(kind, nb, bs, d)
    lens, starts = request_set(bs, mb)
    table = random_table(len(lens), mb, nb, invalid=0.1)
    seq_lens = index_tensor(lens, lens_dtype)
    seq_starts = index_tensor(starts, torch.int64 if lens_dtype == torch.int32 else torch.int32) if with_starts else None
    rows, cu = ref.load_paged_kv_cache_ref(cache, table, seq_lens, seq_starts)
    expected, e_cu = oracle(cache, table, seq_lens, seq_starts)
    assert cu.dtype == torch.int32 and cu.tolist() == e_cu
    assert_rows_equal(rows, expected, f"{case} rows")
    # A larger num_tokens appends zero rows; a smaller one cuts the last rows.
    more, _ = ref.load_paged_kv_cache_ref(cache, table, seq_lens, seq_starts, e_cu[-1] + 5)
    assert_rows_equal(more[: e_cu[-1]], expected, "num_tokens > total")
    assert not more[e_cu[-1] :].any()
    fewer, _ = ref.load_paged_kv_cache_ref(cache, table, seq_lens, seq_starts, e_cu[-1] // 2)
    assert_rows_equal(fewer, expected[: e_cu[-1] // 2], "num_tokens < total")


@pytest.mark.ref
def test_ref_negative_lengths_count_as_zero():
    cache = make_cache("bf16", 8, 4, 16)
    table = random_table(3, 3, 8)
    seq_lens = torch.tensor([2, -5, 3], dtype=torch.int64)
    rows, cu = ref.load_paged_kv_cache_ref(cache, table, seq_lens)
    expected, e_cu = oracle(cache, table, seq_lens)
    assert cu.tolist() == e_cu == [0, 2, 2, 5]
    assert_rows_equal(rows, expected, "rows")


def non_finite_cache(kind: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(cache, block_table, seq_lens) of one request over 4 blocks of 8 rows holding Inf, NaN and
    non-canonical NaN payloads, stored as `kind`."""
    nb, bs = 4, 8
    src = random_rows(nb * bs, layout.WIDTH)
    src[3, 5] = math.inf
    src[9, 100] = math.nan
    src[17, 530] = -math.inf  # rope
    # NaNs other than the canonical 0x7FC0 (a quiet payload, a negative one): bf16 rows keep them.
    src.view(torch.int16)[11, 7] = 0x7F81
    src.view(torch.int16)[12, 8] = -63  # 0xFFC1
    if kind == "bf16":
        cache = src.reshape(nb, bs, layout.WIDTH)
    else:
        records = layout.FP4 if kind == "fp4" else layout.FP8
        cache = layout.encode_rows(src, records).view(records.cache_dtype).reshape(nb, bs, -1)
    return cache, torch.tensor([[2, 0, 3, 1]], dtype=torch.int32), torch.tensor([nb * bs], dtype=torch.int32)


@pytest.mark.ref
@pytest.mark.parametrize("kind", KINDS)
def test_ref_non_finite_records(kind):
    # Inf and NaN in the stored rows: bf16 rows are bit copies; records decode as decode_records.
    cache, table, seq_lens = non_finite_cache(kind)
    rows, _ = ref.load_paged_kv_cache_ref(cache, table, seq_lens)
    expected, _ = oracle(cache, table, seq_lens)
    assert_rows_equal(rows, expected, kind)
    if kind == "bf16":
        assert_bitwise_equal(rows, expected, what="bf16 NaN payloads are copied")


@pytest.mark.ref
@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_through_records(kind):
    # Rows encoded into random slots and loaded back give decode_records of the same rows (the rows
    # themselves for bf16).
    nb, bs, b = 16, 8, 3
    cache = make_cache(kind, nb, bs)
    lens = [5, 0, 19]
    starts = [2, 0, 9]
    table = random_table(b, 4, nb)
    rows = random_rows(sum(lens), layout.WIDTH)
    flat = cache_slot_rows(cache)
    records = layout.record_layout(cache.dtype)
    encoded = rows if records is None else layout.encode_rows(rows, records)
    k = 0
    for r, (n, s) in enumerate(zip(lens, starts)):
        for p in range(s, s + n):
            flat[int(table[r, p // bs]) * bs + p % bs] = encoded[k]
            k += 1
    out = poisoned((sum(lens), layout.WIDTH), torch.bfloat16, "cpu")
    got, cu = api.load_paged_kv_cache(cache, table, torch.tensor(lens), torch.tensor(starts), out=out)
    assert got is out and cu.tolist() == [0, 5, 5, 24]
    expected = rows if records is None else layout.decode_records(encoded, records)
    assert_bitwise_equal(out, expected, what=f"{kind} round trip")


HEAD_CASES = [
    # (layout, num_blocks, block_size, H, Dh, pad_blocks)
    ("NHD", 12, 16, 8, 128, 0),
    ("HND", 12, 16, 8, 128, 0),
    ("NHD", 9, 5, 3, 6, 1),
    ("HND", 20, 4, 2, 64, 2),
    ("NHD", 6, 1, 1, 576, 1),
]


@pytest.mark.ref
@pytest.mark.parametrize("case", HEAD_CASES, ids=_case_id)
def test_ref_per_head_and_strided_caches(case):
    # A per-head (or block-strided) cache loads as the oracle's rows of H * Dh values.
    kv_layout, nb, bs, h, dh, pad = case
    cache = heads_cache(kv_layout, nb, bs, h, dh, pad)
    lens, starts = request_set(bs, 3)
    table = random_table(len(lens), 3, nb, invalid=0.1)
    seq_lens, seq_starts = torch.tensor(lens), torch.tensor(starts, dtype=torch.int32)
    rows, cu = ref.load_paged_kv_cache_ref(cache, table, seq_lens, seq_starts, layout=kv_layout)
    expected, e_cu = oracle(slots_first(cache, kv_layout), table, seq_lens, seq_starts)
    assert cu.tolist() == e_cu and rows.shape == (e_cu[-1], h, dh)
    assert_bitwise_equal(rows.reshape(e_cu[-1], -1), expected, what=f"{case} rows")
    # The interface on CPU tensors: the same rows into a poisoned out of the row shape.
    out = poisoned((e_cu[-1] + 3, h, dh), torch.bfloat16, "cpu")
    got, _ = api.load_paged_kv_cache(cache, table, seq_lens, seq_starts, out=out, layout=kv_layout)
    assert got is out
    assert_bitwise_equal(out[: e_cu[-1]], rows, what=f"{case} interface")
    assert torch.isnan(out[e_cu[-1] :].float()).all()


def store_then_load(cache, kv_layout: str, lens, starts, table, device="cpu"):
    """(rows stored, rows loaded): random rows stored by store_kv_cache at the requests' slots of a
    poisoned copy of `cache`'s strides, then loaded back with num_tokens = their count."""
    from kernels.store_kv_cache import api as store_api

    bs = cache.shape[1] if kv_layout == "NHD" or cache.dim() == 3 else cache.shape[2]
    slots = [int(table[r, p // bs]) * bs + p % bs for r, (n, s) in enumerate(zip(lens, starts)) for p in range(s, s + n)]
    row_shape = cache.shape[2:] if kv_layout == "NHD" or cache.dim() == 3 else (cache.shape[1], cache.shape[3])
    rows = random_rows(len(slots), math.prod(row_shape), device).reshape(len(slots), *row_shape)
    cache.copy_(poisoned(cache.shape, cache.dtype, device))
    store_api.store_kv_cache(rows, cache, torch.tensor(slots, dtype=torch.int64, device=device), layout=kv_layout)
    out = poisoned((len(slots), *row_shape), torch.bfloat16, device)
    api.load_paged_kv_cache(cache, table, index_tensor(lens, torch.int32, device), index_tensor(starts, torch.int64, device), num_tokens=len(slots), out=out, layout=kv_layout)
    return rows, out


@pytest.mark.ref
@pytest.mark.parametrize("case", HEAD_CASES, ids=_case_id)
def test_round_trip_with_store(case):
    # store_kv_cache then load_paged_kv_cache through the same per-head / strided cache: exact.
    kv_layout, nb, bs, h, dh, pad = case
    cache = heads_cache(kv_layout, nb, bs, h, dh, pad)
    if h == 1 and kv_layout == "NHD":
        cache = cache[:, :, 0]  # plain rows, block-strided
    # Two blocks per request, all distinct (nb >= 6): no two positions share a slot.
    lens, starts = [bs + 1, 0, 2 * bs - 1], [bs - 1, 0, 1]
    table = random_table(3, 2, nb)
    rows, out = store_then_load(cache, kv_layout, lens, starts, table)
    assert_bitwise_equal(out, rows, what=f"{case} round trip")


RECORD_STRIDE_CASES = [
    # (kind, num_blocks, block_size, block stride in blocks' bytes: 2 = one half of a K/V pool)
    ("fp4", 12, 8, 2),
    ("fp8", 9, 5, 3),
    ("fp4", 6, 1, 2),
]


def record_stride_cache(case, device="cpu") -> torch.Tensor:
    kind, nb, bs, apart = case
    records = layout.FP4 if kind == "fp4" else layout.FP8
    # A stride 16 bytes past `apart` blocks: blocks start at no multiple of the block size.
    return record_pool(kind, nb, bs, apart * bs * records.record_bytes + 16, device)


def round_trip_requests(bs):
    """(lens, starts, table width) of four requests that start, end and cross block edges; the width
    covers the furthest position at every block size (block size 1 included)."""
    lens, starts = [bs + 1, 0, 2 * bs - 1, 3], [bs - 1, 0, 1, 2 * bs]
    return lens, starts, max(-(-(s + n) // bs) for n, s in zip(lens, starts))


def store_records_then_load(cache, lens, starts, table, device="cpu"):
    """(rows stored as decode(encode(rows)), rows loaded) through store_kv_cache and
    load_paged_kv_cache on the same record cache, num_tokens = the stored rows' count."""
    from kernels.store_kv_cache import api as store_api

    records = layout.record_layout(cache.dtype)
    bs = cache.shape[1]
    slots = [int(table[r, p // bs]) * bs + p % bs for r, (n, s) in enumerate(zip(lens, starts)) for p in range(s, s + n)]
    rows = random_rows(len(slots), layout.WIDTH, device)
    store_api.store_kv_cache(rows, cache, torch.tensor(slots, dtype=torch.int64, device=device))
    out = poisoned((len(slots), layout.WIDTH), torch.bfloat16, device)
    api.load_paged_kv_cache(cache, table, index_tensor(lens, torch.int32, device), index_tensor(starts, torch.int64, device), num_tokens=len(slots), out=out)
    return layout.decode_records(layout.encode_rows(rows, records), records), out


@pytest.mark.ref
@pytest.mark.parametrize("case", RECORD_STRIDE_CASES, ids=_case_id)
def test_ref_block_strided_records(case):
    # A record cache whose blocks sit apart loads as the oracle's rows of its blocks, and rows
    # stored into it load back as their quantise-then-dequantise.
    cache = record_stride_cache(case)
    nb, bs = cache.shape[:2]
    lens, starts = request_set(bs, 3)
    table = random_table(len(lens), 3, nb, invalid=0.1)
    seq_lens, seq_starts = torch.tensor(lens), torch.tensor(starts, dtype=torch.int32)
    expected, e_cu = oracle(cache, table, seq_lens, seq_starts)
    rows, cu = ref.load_paged_kv_cache_ref(cache, table, seq_lens, seq_starts)
    assert cu.tolist() == e_cu
    assert_rows_equal(rows, expected, f"{case} rows")
    out = poisoned((e_cu[-1] + 3, layout.WIDTH), torch.bfloat16, "cpu")
    assert api.load_paged_kv_cache(cache, table, seq_lens, seq_starts, out=out)[0] is out
    assert_rows_equal(out[: e_cu[-1]], expected, f"{case} interface")
    assert torch.isnan(out[e_cu[-1] :].float()).all()
    # Two blocks per request, all distinct (nb >= 6): no two positions share a slot.
    expected, loaded = store_records_then_load(cache, [bs + 1, 0, 2 * bs - 1], [bs - 1, 0, 1], random_table(3, 2, nb))
    assert_rows_equal(loaded, expected, f"{case} round trip")


@pytest.mark.ref
@pytest.mark.parametrize("kind", ["fp4", "fp8"])
def test_record_block_stride_is_checked(kind):
    # Both backends' factories take the block stride: at least a block, a multiple of 16 bytes.
    records = layout.FP4 if kind == "fp4" else layout.FP8
    ref.check_block_stride(records, 8, 8 * records.record_bytes)
    ref.check_block_stride(records, 8, 3 * 8 * records.record_bytes + 16)
    for bad in (8 * records.record_bytes - 16, 8 * records.record_bytes + 8, float(8 * records.record_bytes)):
        with pytest.raises(ValueError, match="block_stride must be a multiple of 16 bytes"):
            ref.check_block_stride(records, 8, bad)


@pytest.mark.ref
@pytest.mark.parametrize("kind", KINDS)
def test_cpu_interface_capacity(kind):
    nb, bs = 20, 16
    cache = make_cache(kind, nb, bs)
    lens, starts = request_set(bs, 3)
    table = random_table(len(lens), 3, nb, invalid=0.1)
    seq_lens, seq_starts = torch.tensor(lens, dtype=torch.int32), torch.tensor(starts)
    expected, e_cu = oracle(cache, table, seq_lens, seq_starts)
    total = e_cu[-1]
    # Rows past the total stay untouched.
    out = poisoned((total + 7, layout.WIDTH), torch.bfloat16, "cpu")
    cu = poisoned((len(lens) + 1,), torch.int32, "cpu")
    got, got_cu = api.load_paged_kv_cache(cache, table, seq_lens, seq_starts, out=out, cu_seqlens=cu)
    assert got is out and got_cu is cu and cu.tolist() == e_cu
    assert_rows_equal(out[:total], expected, "rows")
    assert torch.isnan(out[total:].float()).all(), "rows past the total must stay untouched"
    # num_tokens below the total: rows from num_tokens on are never written; cu_seqlens is whole.
    out = poisoned((total, layout.WIDTH), torch.bfloat16, "cpu")
    _, cu = api.load_paged_kv_cache(cache, table, seq_lens, seq_starts, num_tokens=total - 10, out=out)
    assert cu.tolist() == e_cu
    assert_rows_equal(out[: total - 10], expected[: total - 10], "cut rows")
    assert torch.isnan(out[total - 10 :].float()).all()
    # The convenience path sizes out exactly.
    got, cu = api.load_paged_kv_cache(cache, table, seq_lens, seq_starts)
    assert got.shape == (total, layout.WIDTH) and cu.tolist() == e_cu
    assert_rows_equal(got, expected, "convenience")


@pytest.mark.ref
@pytest.mark.parametrize("b,lens", [(0, []), (3, [0, 0, 0])], ids=["no_requests", "all_empty"])
def test_empty_batch_is_well_defined(monkeypatch, no_kernel_launches, b, lens):
    def fail(*_, **__):
        raise AssertionError("an empty batch must not reach the row reference or a kernel")

    monkeypatch.setattr(ref, "load_paged_kv_cache_ref", fail)
    cache = make_cache("bf16", 4, 16, 64)
    table = random_table(b, 2, 4)
    cu = poisoned((b + 1,), torch.int32, "cpu")
    out, got = api.load_paged_kv_cache(cache, table, torch.tensor(lens, dtype=torch.int32), cu_seqlens=cu)
    assert got is cu and cu.tolist() == [0] * (b + 1) and out.shape == (0, 64)
    out, cu = api.load_paged_kv_cache(cache, table, torch.tensor(lens, dtype=torch.int64), num_tokens=0)
    assert out.shape == (0, 64) and cu.tolist() == [0] * (b + 1)
    if b:
        # num_tokens 0 with rows to load: nothing is loaded, cu_seqlens is still the whole prefix.
        cu = poisoned((4,), torch.int32, "cpu")
        api.load_paged_kv_cache(cache, random_table(3, 2, 4), torch.tensor([3, -2, 5]), num_tokens=0, cu_seqlens=cu)
        assert cu.tolist() == [0, 3, 3, 8]


def _bad_inputs():
    cache = make_cache("bf16", 4, 8, 32)
    fp4 = make_cache("fp4", 4, 8)
    heads = heads_cache("NHD", 4, 8, 2, 8)
    table = random_table(2, 3, 4)
    lens = torch.tensor([3, 4], dtype=torch.int32)
    starts = torch.tensor([0, 1], dtype=torch.int64)
    base = dict(cache=cache, block_table=table, seq_lens=lens, seq_starts=starts)

    def out(rows=7, d=32, dtype=torch.bfloat16):
        return poisoned((rows, d), dtype, "cpu")

    def cu(n=3, dtype=torch.int32):
        return poisoned((n,), dtype, "cpu")

    shared = torch.zeros(64, dtype=torch.int32)
    # A record cache whose storage starts one byte past an aligned address.
    misaligned = torch.zeros(fp4.numel() + 1, dtype=torch.uint8)[1:].view(fp4.dtype).reshape(fp4.shape)
    cases = [
        ("cache-not-tensor", dict(cache=cache.tolist()), TypeError, "cache must be a torch.Tensor"),
        ("cache-fp32", dict(cache=cache.float()), TypeError, "cache has dtype torch.float32"),
        ("cache-uint8", dict(cache=fp4.view(torch.uint8)), TypeError, "cache has dtype torch.uint8"),
        ("cache-2d", dict(cache=cache[0]), ValueError, "cache must be 3-D"),
        ("cache-strided", dict(cache=cache[:, :, ::2]), ValueError, "cache must be contiguous within each block"),
        ("cache-blocks-overlap", dict(cache=cache.as_strided(cache.shape, (64, 32, 1))), ValueError, "cache's block stride 64 is smaller than a block of 256"),
        ("record-slots-apart", dict(cache=torch.cat([fp4.view(torch.uint8)] * 2, 2)[:, :, :400].view(fp4.dtype), out=out(d=576)), ValueError, "cache must be contiguous within each block"),
        ("record-blocks-overlap", dict(cache=fp4.as_strided(fp4.shape, (400, 400, 1)), out=out(d=576)), ValueError, "block stride 400 is smaller than a block of 3200"),
        ("record-block-stride-8", dict(cache=record_pool("fp4", 4, 8, 8 * 400 + 8), out=out(d=576)), ValueError, "a fp4 cache's block stride must be a multiple of 16 bytes, got 3208"),
        ("layout-unknown", dict(layout="NDH"), ValueError, "layout must be one of"),
        ("layout-hnd-rows", dict(layout="HND"), ValueError, "layout 'HND' applies to per-head caches"),
        ("heads-not-dense", dict(cache=heads[:, :, :, ::2], out=poisoned((7, 2, 4), torch.bfloat16, "cpu")), ValueError, "cache must be contiguous within each block"),
        ("heads-too-wide", dict(cache=torch.zeros(1, 1, 3, 5462, dtype=torch.bfloat16)), ValueError, "cache has rows of H * Dh = 16386 values"),
        ("heads-out-2d", dict(cache=heads, out=out(d=16)), ValueError, "out must be 3-D"),
        ("heads-out-shape", dict(cache=heads, layout="HND", out=poisoned((7, 2, 8), torch.bfloat16, "cpu")), ValueError, "out must be (rows, 8, 8)"),
        ("heads-fp4", dict(cache=fp4.reshape(4, 8, 2, 200)), ValueError, "cache must be 3-D"),
        ("cache-no-blocks", dict(cache=cache[:0]), ValueError, "cache must have at least one block"),
        ("cache-too-wide", dict(cache=torch.zeros(1, 1, 16385, dtype=torch.bfloat16)), ValueError, "cache has row width 16385"),
        ("cache-record-width", dict(cache=fp4[:, :, :399].contiguous()), ValueError, "cache of torch.float4_e2m1fn_x2 must hold 400-byte records"),
        ("cache-on-meta", dict(cache=cache.to("meta")), ValueError, "cache is on meta; tensors on meta are not supported"),
        ("table-int64", dict(block_table=table.long()), TypeError, "block_table has dtype torch.int64"),
        ("table-1d", dict(block_table=table[0]), ValueError, "block_table must be 2-D"),
        ("table-strided", dict(block_table=random_table(2, 6, 4)[:, ::2]), ValueError, "block_table must be contiguous"),
        ("table-no-columns", dict(block_table=table[:, :0]), ValueError, "block_table must have at least one column"),
        ("table-other-device", dict(block_table=table.to("meta")), ValueError, "block_table is on meta"),
        ("lens-float", dict(seq_lens=lens.float()), TypeError, "seq_lens has dtype torch.float32"),
        ("lens-wrong-length", dict(seq_lens=lens[:1]), ValueError, "seq_lens must have shape (2,)"),
        ("lens-2d", dict(seq_lens=lens[None]), ValueError, "seq_lens must have shape (2,)"),
        ("starts-int16", dict(seq_starts=starts.short()), TypeError, "seq_starts has dtype torch.int16"),
        ("starts-wrong-length", dict(seq_starts=torch.zeros(3, dtype=torch.int64)), ValueError, "seq_starts must have shape (2,)"),
        ("num-tokens-float", dict(num_tokens=3.0), TypeError, "num_tokens must be an int"),
        ("num-tokens-bool", dict(num_tokens=True), TypeError, "num_tokens must be an int"),
        ("num-tokens-negative", dict(num_tokens=-1), ValueError, "num_tokens must be >= 0"),
        ("out-too-small", dict(num_tokens=8), ValueError, "out has 7 rows, fewer than num_tokens 8"),
        ("out-fp32", dict(out=out(dtype=torch.float32)), TypeError, "out has dtype torch.float32"),
        ("out-d-mismatch", dict(out=out(d=33)), ValueError, "out must be (rows, 32)"),
        ("out-1d", dict(out=poisoned((32,), torch.bfloat16, "cpu")), ValueError, "out must be 2-D"),
        ("out-strided", dict(out=out(d=64)[:, ::2]), ValueError, "out must be contiguous"),
        ("cache-misaligned", dict(cache=misaligned, out=out(d=576)), ValueError, "a fp4 cache and out must be 16-byte aligned"),
        ("out-misaligned", dict(cache=fp4, out=poisoned((7 * 576 + 1,), torch.bfloat16, "cpu")[1:].view(7, 576)), ValueError, "a fp4 cache and out must be 16-byte aligned"),
        ("out-fp4-d", dict(cache=fp4, out=out(d=32)), ValueError, "out must be (rows, 576)"),
        ("cu-short", dict(cu_seqlens=cu(2)), ValueError, "cu_seqlens must be (3,)"),
        ("cu-int64", dict(cu_seqlens=cu(3, torch.int64)), ValueError, "cu_seqlens must be (3,)"),
        ("cu-is-lens", dict(seq_lens=shared[:2], cu_seqlens=shared[1:4]), ValueError, "cu_seqlens overlaps seq_lens"),
        ("out-is-cache", dict(out=cache.view(-1, 32)[:7]), ValueError, "out overlaps cache"),
    ]
    result = []
    for name, kw, error, message in cases:
        kwargs = {**base, "out": out(), "cu_seqlens": cu(), **kw}
        result.append((name, kwargs, error, message))
    return result


@pytest.mark.ref
@pytest.mark.parametrize("name", case_names(_bad_inputs))
def test_bad_input_raises_and_writes_nothing(name):
    _, kwargs, error, message = case_named(_bad_inputs, name)
    written = [kwargs.get("out"), kwargs.get("cu_seqlens")]
    assert_rejected_without_writes(api.load_paged_kv_cache, kwargs, error, message, [w for w in written if w is not None and w is not kwargs["cache"]])


# ----------------------------------------------------------------------------------------------------
# Codegen (CPU): every shipped configuration lowers, compiles and fits on chip.


def _configs(backend: str) -> list[tuple[str, tuple]]:
    import importlib

    module = importlib.import_module(f"kernels.load_paged_kv_cache.{backend}")
    return [(factory, c) for factory, configs in module.load_paged_kv_shipped_configs().items() for c in configs]


def _config_id(case) -> str:
    factory, config = case
    return factory.removeprefix("load_paged_kv_").removesuffix("_tl") + "-" + "-".join(map(str, config))


def _call(factory: str, config: tuple) -> tuple[tuple, dict]:
    """(args, kwargs) of one shipped configuration (the bf16 factory's last entry is x_align)."""
    if factory == "load_paged_kv_bf16_tl":
        return config[:-1], {"x_align": config[-1]}
    return config, {}


@pytest.mark.codegen_cuda
def test_cuda_shipped_configs_cover_the_paths():
    from kernels.load_paged_kv_cache import cuda

    configs = cuda.load_paged_kv_shipped_configs()
    bf16 = [cuda.bf16_config(h, dh, strides, a) for h, dh, _, strides, _, _, a in configs["load_paged_kv_bf16_tl"]]
    assert any(c.row_vectors % c.threads_per_row for c in bf16) and any(c.row_vectors % c.threads_per_row == 0 for c in bf16)
    assert any(c.threads_per_row > 32 for c in bf16) and any(c.tile_rows > c.threads for c in bf16)
    # The worst register case: the widest row at the narrowest vectors.
    assert max(c.steps for c in bf16) == cuda.bf16_config(1, cuda.MAX_D, (cuda.MAX_D,) * 3, 2).steps
    # Several heads per row, strides narrowing the vectors, HND (slot stride below the head stride).
    heads = [c for c in configs["load_paged_kv_bf16_tl"] if c[0] > 1]
    assert any(c[3][1] < c[3][2] for c in heads) and any(cuda.bf16_config(*c[:2], c[3], c[-1]).vector_elems < 8 for c in heads)
    # Record caches dense and block-strided, in each layout.
    for name, records in (("load_paged_kv_fp4_tl", layout.FP4), ("load_paged_kv_fp8_tl", layout.FP8)):
        strides = {c[1] == c[0] * records.record_bytes for c in configs[name]}
        assert strides == {True, False}, name
    every = [(name == "load_paged_kv_bf16_tl", c) for name, cs in configs.items() for c in cs]
    assert {None, "int32", "int64"} <= {c[-2] if factory_is_bf16 else c[-1] for factory_is_bf16, c in every}


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("case", _configs("cuda"), ids=_config_id)
def test_cuda_config_compiles_without_spills(arch, case):
    from kernels.load_paged_kv_cache import cuda
    from testing import codegen_cuda

    factory, config = case
    fn = getattr(cuda, factory)
    args, kwargs = _call(factory, config)
    # Built as the interface builds it for these archs: a programmatic dependent launch.
    lowered = codegen_cuda.lower_cuda(fn, *args, arch=arch, pdl=True, **kwargs)
    # 64-bit cache offsets: the block id is widened before it meets the block stride.
    assert "(int64_t)blk" in lowered.source
    assert "atomic" not in lowered.source.lower(), "the prefix sum is in a fixed order, without atomics"
    report = codegen_cuda.check_cuda_resources(fn, *args, arch=arch, pdl=True, **kwargs)
    assert report.spill_store_bytes == report.spill_load_bytes == report.stack_frame_bytes == 0


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("factory", ["load_paged_kv_bf16_tl", "load_paged_kv_fp4_tl", "load_paged_kv_fp8_tl"])
def test_cuda_dependent_launch_waits_before_memory(factory):
    # pdl=True: nvcc keeps every global access after the wait for the grids before; pdl=False
    # emits neither call. The factory's first shipped configuration.
    from kernels.load_paged_kv_cache import cuda
    from testing import codegen_cuda

    args, kwargs = _call(factory, next(config for f, config in _configs("cuda") if f == factory))
    codegen_cuda.check_dependent_launch(getattr(cuda, factory), *args, **kwargs)


@pytest.mark.codegen_ascend
@pytest.mark.parametrize("case", _configs("asc"), ids=_config_id)
def test_ascend_config_lowers_and_fits_ub(case):
    from kernels.load_paged_kv_cache import asc
    from testing import codegen_ascend

    factory, config = case
    fn = getattr(asc, factory)
    args, kwargs = _call(factory, config)
    source = codegen_ascend.ascend_source(fn, *args, **kwargs)
    assert "__global__" in source or "__aicore__" in source
    codegen_ascend.assert_ub_fits(fn, *args, **kwargs)


@pytest.mark.codegen_ascend
def test_ascend_stages_heads_at_aligned_pitch():
    # A DMA's UB address must be 32-byte aligned, so heads are staged at a padded pitch; where that
    # staging would pass its budget the factory refuses, naming the heads.
    from kernels.load_paged_kv_cache import asc

    assert asc.tile_rows(18, 3 * 16) == asc.tile_rows(48)
    with pytest.raises(ValueError, match="16384 heads of 1 values"):
        asc.load_paged_kv_bf16_tl(16384, 1, 1, (16384, 16384, 1), "int32", None)
    assert any(c[0] > 1 and c[1] % 16 for c in asc.load_paged_kv_shipped_configs()["load_paged_kv_bf16_tl"])


# ----------------------------------------------------------------------------------------------------
# Device: the backend's kernel against the reference, on the accelerator.


def _check_device(cache, table, seq_lens, seq_starts, extra_rows: int, what: str, num_tokens=None, poison=math.nan) -> None:
    """Load into an out with `extra_rows` spare rows, filled with `poison` (NaN, or FINITE_POISON for
    rows that may rightly hold NaN: loaded rows are randn-sized, decoded records stay within their
    scales); compare with the reference; spare rows and rows past num_tokens keep the fill."""
    device = cache.device
    cu_ref = ref.cu_seqlens_ref(seq_lens)
    total = int(cu_ref[-1])
    rows_cap = total + extra_rows
    limit = rows_cap if num_tokens is None else num_tokens
    d = out_width(cache)
    out = torch.full((rows_cap, d), poison, dtype=torch.bfloat16, device=device)
    cu = poisoned((seq_lens.shape[0] + 1,), torch.int32, device)
    got, got_cu = api.load_paged_kv_cache(cache, table, seq_lens, seq_starts, num_tokens=num_tokens, out=out, cu_seqlens=cu)
    assert got is out and got_cu is cu
    assert_bitwise_equal(cu, cu_ref, what=f"{what} cu_seqlens")
    written = min(total, limit)
    expected, _ = ref.load_paged_kv_cache_ref(cache, table, seq_lens, seq_starts, written)
    if cache.dtype == torch.bfloat16:
        assert_bitwise_equal(out[:written], expected, what=f"{what} rows")  # bit copies, NaN payloads too
    else:
        assert_rows_equal(out[:written], expected, f"{what} rows")
    tail = out[written:].float()
    kept = torch.isnan(tail) if math.isnan(poison) else tail == poison
    assert kept.all(), f"{what}: rows past the total or num_tokens were written"


def out_width(cache: torch.Tensor) -> int:
    return cache.shape[2] if cache.dtype == torch.bfloat16 else layout.WIDTH


DEVICE_CASES = [
    # (kind, D, num_blocks, block_size, max_blocks)
    ("bf16", 576, 300, 64, 8),
    ("bf16", 512, 300, 16, 12),
    ("bf16", 128, 100, 1, 40),
    ("bf16", 4096, 50, 16, 4),
    ("bf16", 7, 60, 64, 3),
    ("bf16", 16384, 20, 4, 4),
    ("fp4", 576, 300, 64, 8),
    ("fp4", 576, 200, 16, 10),
    ("fp8", 576, 300, 64, 8),
    ("fp8", 576, 100, 1, 40),
]


@pytest.mark.device
@pytest.mark.parametrize("case", DEVICE_CASES, ids=_case_id)
@pytest.mark.parametrize("lens_dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("with_starts", [False, True], ids=["no_starts", "starts"])
def test_device_matches_ref(device, case, lens_dtype, with_starts):
    kind, d, nb, bs, mb = case
    cache = make_cache(kind, nb, bs, d, device)
    lens, starts = request_set(bs, mb)
    # Shuffled, mostly distinct blocks, some ids invalid; the edge-case requests plus random ones.
    lens += torch.randint(0, bs * mb, (20,)).tolist()
    starts += torch.randint(0, bs * mb, (20,)).tolist()
    table = random_table(len(lens), mb, nb, invalid=0.05, device=device)
    seq_lens = index_tensor(lens, lens_dtype, device)
    seq_starts = index_tensor(starts, torch.int32 if lens_dtype == torch.int64 else torch.int64, device) if with_starts else None
    _check_device(cache, table, seq_lens, seq_starts, 37, f"{case}")
    total = sum(max(n, 0) for n in lens)
    _check_device(cache, table, seq_lens, seq_starts, 0, f"{case} exact", num_tokens=total)
    _check_device(cache, table, seq_lens, seq_starts, 5, f"{case} cut", num_tokens=total // 3)


@pytest.mark.device
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("b", [1, 300, 3000])
def test_device_many_requests(device, kind, b):
    # More requests than a block's threads: the prefix runs over several chunks with a carry.
    nb, bs, mb = 512, 16, 4
    cache = make_cache(kind, nb, bs, 576, device)
    table = random_table(b, mb, nb, invalid=0.02, device=device)
    seq_lens = torch.randint(0, bs * mb + 3, (b,), device=device)
    seq_lens[::7] = -5  # negative lengths count as 0
    seq_lens[1::11] = -(2**40)
    seq_starts = torch.randint(0, 20, (b,), device=device, dtype=torch.int32)
    _check_device(cache, table, seq_lens, seq_starts, 11, f"{kind} B={b}")


@pytest.mark.device
@pytest.mark.parametrize("kind", KINDS)
def test_device_non_finite_records(device, kind):
    # Inf, NaN and NaN payloads in the cache: bf16 rows copied bit for bit, records decoded as the
    # reference decodes them. A second run with a finite fill: under NaN a skipped NaN would pass.
    cache, table, seq_lens = (t.to(device) for t in non_finite_cache(kind))
    for poison in (math.nan, FINITE_POISON):
        _check_device(cache, table, seq_lens, None, 3, f"non-finite {kind} poison {poison}", poison=poison)


@pytest.mark.device
@pytest.mark.parametrize("kind", KINDS)
def test_device_round_trip(device, kind):
    nb, bs, b = 64, 64, 4
    cache = make_cache(kind, nb, bs, 576, device)
    lens, starts = [64, 1, 129, 0], [0, 63, 5, 0]
    table = random_table(b, 4, nb, device=device)
    rows = random_rows(sum(lens), layout.WIDTH, device)
    records = layout.record_layout(cache.dtype)
    encoded = rows if records is None else layout.encode_rows(rows, records)
    slots = [int(table[r, p // bs]) * bs + p % bs for r, (n, s) in enumerate(zip(lens, starts)) for p in range(s, s + n)]
    cache_slot_rows(cache)[torch.tensor(slots, device=device)] = encoded
    out = poisoned((sum(lens), layout.WIDTH), torch.bfloat16, device)
    api.load_paged_kv_cache(cache, table, index_tensor(lens, torch.int32, device), index_tensor(starts, torch.int64, device), out=out)
    expected = rows if records is None else layout.decode_records(encoded, records)
    assert_bitwise_equal(out, expected, what=f"{kind} round trip")


DEVICE_HEAD_CASES = [
    # (layout, num_blocks, block_size, H, Dh, pad_blocks)
    ("NHD", 200, 16, 8, 128, 0),
    ("HND", 200, 16, 8, 128, 0),
    ("HND", 100, 64, 1, 128, 1),
    ("NHD", 100, 64, 1, 576, 1),  # block-strided MLA rows (the plain-row path, H = 1)
    ("NHD", 60, 5, 3, 6, 2),
    ("HND", 40, 16, 128, 128, 0),
]


@pytest.mark.device
@pytest.mark.parametrize("case", DEVICE_HEAD_CASES, ids=_case_id)
@pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "misaligned"])
def test_device_strided_and_per_head(device, case, misaligned):
    # Per-head and block-strided caches against the reference (a base 2 bytes off 16 narrows the
    # vectors), then a store/load round trip through the same cache.
    kv_layout, nb, bs, h, dh, pad = case
    cache = heads_cache(kv_layout, nb, bs, h, dh, pad, device)
    if misaligned:
        flat = torch.empty(cache.untyped_storage().nbytes() // 2 + 1, dtype=torch.bfloat16, device=device)
        cache = flat[1:].as_strided(cache.shape, cache.stride()).copy_(cache)
    if h == 1 and kv_layout == "NHD":
        cache = cache[:, :, 0]
    lens, starts = request_set(bs, 4)
    lens += torch.randint(0, bs * 4, (20,)).tolist()
    starts += torch.randint(0, bs * 4, (20,)).tolist()
    table = random_table(len(lens), 4, nb, invalid=0.05, device=device)
    seq_lens, seq_starts = index_tensor(lens, torch.int64, device), index_tensor(starts, torch.int32, device)
    total = sum(max(n, 0) for n in lens)
    row_shape = cache.shape[2:] if cache.dim() == 3 or kv_layout == "NHD" else (cache.shape[1], cache.shape[3])
    out = poisoned((total + 9, *row_shape), torch.bfloat16, device)
    api.load_paged_kv_cache(cache, table, seq_lens, seq_starts, num_tokens=total + 9, out=out, layout=kv_layout)
    expected, _ = ref.load_paged_kv_cache_ref(cache, table, seq_lens, seq_starts, total, layout=kv_layout)
    assert_bitwise_equal(out[:total], expected, what=f"{case} rows")
    assert torch.isnan(out[total:].float()).all(), f"{case}: rows past the total were written"
    lens, starts, width = round_trip_requests(bs)
    rows, loaded = store_then_load(cache, kv_layout, lens, starts, random_table(4, width, nb, device=device), device)
    assert_bitwise_equal(loaded, rows, what=f"{case} round trip")


@pytest.mark.device
@pytest.mark.parametrize("case", [("fp4", 200, 64, 2), ("fp8", 200, 16, 2), ("fp4", 60, 5, 3), ("fp8", 100, 1, 2)], ids=_case_id)
def test_device_block_strided_records(device, case):
    # A record cache whose blocks sit apart (a K/V-interleaved pool's K, 16 bytes further) against
    # the reference, then a store/load round trip through it.
    cache = record_stride_cache(case, device)
    nb, bs = cache.shape[:2]
    lens, starts = request_set(bs, 4)
    lens += torch.randint(0, bs * 4, (20,)).tolist()
    starts += torch.randint(0, bs * 4, (20,)).tolist()
    table = random_table(len(lens), 4, nb, invalid=0.05, device=device)
    _check_device(cache, table, index_tensor(lens, torch.int64, device), index_tensor(starts, torch.int32, device), 9, f"{case}")
    lens, starts, width = round_trip_requests(bs)
    expected, loaded = store_records_then_load(cache, lens, starts, random_table(4, width, nb, device=device), device)
    assert_rows_equal(loaded, expected, f"{case} round trip")


@pytest.mark.device
@pytest.mark.parametrize("kind", ["fp8", "bf16"])
def test_device_64bit_offsets(device, kind):
    # The last blocks of a cache past 2**31 bytes (and, for bf16, elements).
    bs = 64
    width = 656 if kind == "fp8" else 576
    nb = 2**31 // (bs * width) + 8
    cache = torch.zeros((nb, bs, width), dtype=torch.uint8 if kind == "fp8" else torch.bfloat16, device=device)
    if kind == "fp8":
        cache = cache.view(torch.float8_e4m3fn)
    last = torch.tensor([[nb - 1, nb - 3, 5]], dtype=torch.int32, device=device)
    fresh = make_cache(kind, 3, bs, 576, device)
    cache[nb - 1] = fresh[0]
    cache[nb - 3] = fresh[1]
    cache[5] = fresh[2]
    seq_lens = torch.tensor([3 * bs], dtype=torch.int32, device=device)
    _check_device(cache, last, seq_lens, torch.tensor([1], device=device), 3, f"{kind} 64-bit")


@pytest.mark.device
def test_device_empty_batch_launches_nothing(device, no_kernel_launches):
    cache = make_cache("fp4", 4, 16, 576, device)
    for b, lens in [(0, []), (2, [0, 0])]:
        table = random_table(b, 2, 4, device=device)
        cu = poisoned((b + 1,), torch.int32, device)
        out, got = api.load_paged_kv_cache(cache, table, torch.tensor(lens, dtype=torch.int32, device=device), num_tokens=0, cu_seqlens=cu)
        assert out.shape == (0, 576) and got is cu and cu.tolist() == [0] * (b + 1)


@pytest.mark.device
@pytest.mark.parametrize("kind", KINDS)
def test_device_cuda_graph_replay(device, backend, kind):
    # A decode step's load must be capturable: no host sync, lengths and tables read at run time.
    if backend != "cuda":
        pytest.skip("CUDA graphs are a CUDA feature")
    nb, bs, b, mb = 128, 64, 8, 8
    cache = make_cache(kind, nb, bs, 576, device)
    table = random_table(b, mb, nb, device=device)
    seq_lens = torch.zeros((b,), dtype=torch.int32, device=device)
    seq_starts = torch.zeros((b,), dtype=torch.int64, device=device)
    cap = b * bs * mb
    out = poisoned((cap, 576), torch.bfloat16, device)
    cu = poisoned((b + 1,), torch.int32, device)

    def call():
        api.load_paged_kv_cache(cache, table, seq_lens, seq_starts, num_tokens=cap, out=out, cu_seqlens=cu)

    call()  # compile and load outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    for _ in range(3):
        lens = torch.randint(0, bs * 3, (b,))
        seq_lens.copy_(lens.to(device))
        seq_starts.copy_(torch.randint(0, bs * 4, (b,)).to(device))
        table.copy_(random_table(b, mb, nb, invalid=0.05, device=device))
        out.copy_(poisoned((cap, 576), torch.bfloat16, device))
        cu.copy_(poisoned((b + 1,), torch.int32, device))
        graph.replay()
        total = int(lens.sum())
        expected, e_cu = ref.load_paged_kv_cache_ref(cache, table, seq_lens, seq_starts, total)
        assert_bitwise_equal(cu, e_cu, what="graph cu_seqlens")
        assert_rows_equal(out[:total], expected, "graph rows")
        assert torch.isnan(out[total:].float()).all()
