"""Tests of `get_kv_index`: reference vs Python-loop oracles, interface validation, codegen, and the
device kernels.

Suites (markers, selected by `--tl-suite`; see testing/plugin.py): ref, codegen_cuda, codegen_ascend,
device. Inputs are drawn fresh per test from the plugin's per-test seed; outputs are poisoned first
(the int32/int64 minimum, which no index output holds: every output is >= -1). Every output is an
integer, so every comparison is exact.
"""

from __future__ import annotations

import pytest
import torch

from kernels.get_kv_index import api, ref
from testing.numeric import assert_bitwise_equal, assert_rejected_without_writes, case_named, case_names, near_int32_limit, poisoned

IDX = [torch.int32, torch.int64]


# ----------------------------------------------------------------------------------------------------
# Random batches: lengths 0 and 1, lengths ending exactly on and one past a block boundary, shuffled
# physical blocks (with a few unallocated -1 entries), block tables that are views of wider tables.


def random_lengths(n_req: int, block_size: int, max_len: int, device="cpu") -> torch.Tensor:
    """int64 lengths in [0, max_len]: a mix of 0, 1, k * block_size, k * block_size + 1 and uniform."""
    kinds = torch.randint(0, 5, (n_req,))
    blocks = torch.randint(0, max(1, max_len // block_size) + 1, (n_req,))
    uniform = torch.randint(0, max_len + 1, (n_req,))
    lens = torch.stack([torch.zeros(n_req, dtype=torch.int64), torch.ones(n_req, dtype=torch.int64), blocks * block_size, blocks * block_size + 1, uniform])
    return lens.gather(0, kinds[None]).flatten().clamp(0, max_len).to(device)


def random_block_table(n_req: int, max_blocks: int, device="cpu", holes: float = 0.05, wider: int = 3) -> torch.Tensor:
    """(n_req, max_blocks) int32 of distinct shuffled block ids, about `holes` of them -1, as a view
    of a wider table (row stride max_blocks + wider)."""
    ids = torch.randperm(n_req * max_blocks * 2)[: n_req * max_blocks].to(torch.int32).reshape(n_req, max_blocks)
    ids[torch.rand(n_req, max_blocks) < holes] = -1
    table = torch.full((n_req, max_blocks + wider), -7, dtype=torch.int32)
    table[:, :max_blocks] = ids
    return table.to(device)[:, :max_blocks]


def indptr_of(counts: torch.Tensor, dtype: torch.dtype, start: int = 0) -> torch.Tensor:
    return torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(counts.cpu().to(torch.int64), 0)]).add(start).to(dtype)


def step_batch(n_req: int, block_size: int, max_blocks: int, q_max: int, idx_dtype, pos_dtype, device="cpu", extra=5):
    """(query_start_loc, positions, block_table, num_tokens) of a mixed step: each request appends
    0..q_max tokens ending at its length; positions holds `extra` padding slots of garbage."""
    max_len = max_blocks * block_size
    lens = random_lengths(n_req, block_size, max_len)
    q = torch.minimum(torch.randint(0, q_max + 1, (n_req,)), lens)
    qsl = indptr_of(q, idx_dtype)
    pos = [p for length, k in zip(lens.tolist(), q.tolist()) for p in range(length - k, length)]
    total = len(pos)
    pos = torch.tensor(pos + torch.randint(-3, max_len + 3, (extra,)).tolist(), dtype=pos_dtype)
    return qsl.to(device), pos.to(device), random_block_table(n_req, max_blocks, device), total + extra


# ----------------------------------------------------------------------------------------------------
# Independent oracles: Python loops over the lists.


def oracle_slots(qsl, positions, table, block_size, n):
    qsl, positions, table = qsl.tolist(), positions.tolist(), table.tolist()
    out = [-1] * n
    for b in range(len(qsl) - 1):
        for i in range(max(qsl[b], 0), min(qsl[b + 1], n)):
            p = positions[i]
            if p < 0 or p // block_size >= len(table[b]):
                continue
            blk = table[b][p // block_size]
            if blk >= 0:
                out[i] = blk * block_size + p % block_size
    return out


def oracle_paged(table, seq_lens, block_size, page_size, capacity=None):
    table, lens = table.tolist(), seq_lens.tolist()
    r = block_size // page_size
    cap = len(table) * (len(table[0]) if table else 0) * r if capacity is None else capacity
    indptr, indices, last = [0], [], []
    for row, length in zip(table, lens):
        length = min(max(length, 0), len(row) * block_size)
        pages = -(-length // page_size)
        for p in range(pages):
            blk = row[p // r]
            page = blk * r + p % r
            indices.append(page if blk >= 0 and page < 2**31 else -1)
        indptr.append(indptr[-1] + pages)
        last.append(length - (pages - 1) * page_size if pages else 0)
    indices = (indices + [-1] * cap)[:cap]
    return [min(x, cap) for x in indptr], indices, last


def oracle_append(indptr, seq_lens, n):
    indptr, lens = indptr.tolist(), seq_lens.tolist()
    batch, pos = [-1] * n, [-1] * n
    for b in range(len(lens)):
        for j in range(max(indptr[b], 0), min(indptr[b + 1], n)):
            p = lens[b] - (indptr[b + 1] - indptr[b]) + (j - indptr[b])
            if 0 <= p < 2**31:
                batch[j], pos[j] = b, p
    return batch, pos


def pages_past_int32(table, seq_lens, block_size, page_size) -> list[int]:
    """The kv_indices entries (default capacity) whose block is allocated but whose page id * r +
    p % r passes 2**31 - 1: the contract makes them -1."""
    r = block_size // page_size
    past, start = [], 0
    for row, length in zip(table.tolist(), seq_lens.tolist()):
        pages = -(-min(max(length, 0), len(row) * block_size) // page_size)
        past += [start + p for p in range(pages) if row[p // r] >= 0 and row[p // r] * r + p % r >= 2**31]
        start += pages
    return past


def as_list_equal(t: torch.Tensor, expected: list, dtype: torch.dtype, what: str):
    assert_bitwise_equal(t.cpu(), torch.tensor(expected, dtype=dtype).reshape(-1), what=what)


# ----------------------------------------------------------------------------------------------------
# Reference suite.


@pytest.mark.ref
@pytest.mark.parametrize("idx_dtype", IDX, ids=str)
@pytest.mark.parametrize("pos_dtype", IDX, ids=str)
@pytest.mark.parametrize("n_req,block_size,max_blocks,q_max", [(1, 16, 4, 1), (7, 16, 5, 3), (33, 64, 3, 70), (5, 48, 4, 200), (64, 1, 9, 4)])
def test_ref_slot_mapping_matches_oracle(idx_dtype, pos_dtype, n_req, block_size, max_blocks, q_max):
    qsl, pos, table, n = step_batch(n_req, block_size, max_blocks, q_max, idx_dtype, pos_dtype)
    for num in (n, n - 5, 0):
        got = ref.slot_mapping_ref(qsl, pos, table, block_size, num)
        as_list_equal(got, oracle_slots(qsl, pos, table, block_size, num), torch.int64, f"slots n={num}")


@pytest.mark.ref
def test_ref_slot_mapping_invalid_entries():
    table = torch.tensor([[5, -1, 7], [2, 3, 4]], dtype=torch.int32)
    qsl = torch.tensor([1, 4, 7])
    pos = torch.tensor([0, 3, 20, 47, 48, -1, 16, 99])
    # token 0 precedes qsl[0]; 20 -> block -1; 48 -> block index 3 >= max_blocks; -1 negative; token 7 past qsl[B].
    got = ref.slot_mapping_ref(qsl, pos, table, 16)
    assert got.tolist() == [-1, 83, -1, 127, -1, -1, 48, -1]
    assert got.dtype == torch.int64
    as_list_equal(got, oracle_slots(qsl, pos, table, 16, 8), torch.int64, "slots against the oracle")
    # A kernel block size k dividing block_size gives the same slots from the kernel-block table.
    k, r = 4, 4
    kernel_table = (table[:, :, None] * r + torch.arange(r, dtype=torch.int32)).reshape(2, -1)
    kernel_table[table.repeat_interleave(r, 1) < 0] = -1
    assert ref.slot_mapping_ref(qsl, pos, kernel_table, k).tolist()[:7] == got.tolist()[:7]


@pytest.mark.ref
@pytest.mark.parametrize("len_dtype", IDX, ids=str)
@pytest.mark.parametrize("n_req,block_size,page_size,max_blocks", [(1, 16, 16, 3), (9, 64, 16, 5), (40, 48, 16, 2), (17, 64, 1, 2), (3, 1, 1, 30)])
def test_ref_paged_matches_oracle(len_dtype, n_req, block_size, page_size, max_blocks):
    lens = random_lengths(n_req, page_size, max_blocks * block_size).to(len_dtype)
    table = random_block_table(n_req, max_blocks)
    for cap in (None, 0, 7, 1000):
        got = ref.paged_kv_indices_ref(table, lens, block_size, page_size, cap)
        expected = oracle_paged(table, lens, block_size, page_size, cap)
        for name, g, e in zip(api.PAGED_OUTPUTS, got, expected):
            as_list_equal(g, e, torch.int32, f"{name} cap={cap}")


@pytest.mark.ref
def test_ref_paged_edge_lengths():
    table = torch.tensor([[3, 9], [4, -1], [6, 1], [2, 8]], dtype=torch.int32)
    lens = torch.tensor([0, 81, -5, 1000])  # empty; 3 pages, the last in a hole; negative; past the table (clamped to 128)

    def paged(ls, page_size):
        """The reference's outputs, which the oracle (written apart from ref.py) must also give."""
        got = ref.paged_kv_indices_ref(table, ls, 64, page_size)
        for name, g, e in zip(api.PAGED_OUTPUTS, got, oracle_paged(table, ls, 64, page_size)):
            as_list_equal(g, e, torch.int32, f"{name}, page size {page_size}")
        return got

    indptr, indices, last = paged(lens, 32)
    assert indptr.tolist() == [0, 0, 3, 3, 7] and last.tolist() == [0, 17, 0, 32]
    assert indices.tolist()[:7] == [8, 9, -1, 4, 5, 16, 17] and set(indices.tolist()[7:]) == {-1}
    lens2 = torch.tensor([64, 65, 63, 1])  # on, one past, one before a block boundary; one token
    indptr, indices, last = paged(lens2, 64)
    assert indptr.tolist() == [0, 1, 3, 4, 5] and last.tolist() == [64, 1, 63, 1]
    assert indices.tolist()[:5] == [3, 4, -1, 6, 2]


@pytest.mark.ref
def test_ref_ids_past_int32():
    # Slots are int64: block 2**25 at block_size 64 starts at 2**31, block 2**31 - 1 needs 37 bits.
    table = torch.tensor([[2**25 - 1, 2**25, 2**31 - 1]], dtype=torch.int32)
    slots = ref.slot_mapping_ref(torch.tensor([0, 3]), torch.tensor([63, 64, 130]), table, 64)
    assert slots.tolist() == [2**31 - 1, 2**31, (2**31 - 1) * 64 + 2]
    # Pages are int32: r = 4 puts block 2**29 - 1 on pages 2**31 - 4 .. 2**31 - 1 and block 2**29
    # past int32; r = 3 crosses inside block 715827882 (pages 2**31 - 2, 2**31 - 1, 2**31).
    _, indices, _ = ref.paged_kv_indices_ref(torch.tensor([[2**29 - 1, 2**29]], dtype=torch.int32), torch.tensor([128]), 64, 16)
    assert indices.tolist() == [2**31 - 4, 2**31 - 3, 2**31 - 2, 2**31 - 1, -1, -1, -1, -1]
    _, indices, _ = ref.paged_kv_indices_ref(torch.tensor([[715827882]], dtype=torch.int32), torch.tensor([48]), 48, 16)
    assert indices.tolist() == [2**31 - 2, 2**31 - 1, -1]
    # int64 seq_lens: request 0's positions are 2**31 - 2, 2**31 - 1, 2**31; request 1's are 2**32
    # and 2**32 + 1, which an int32 truncation would turn into the valid 0 and 1.
    batch, pos = ref.batch_indices_positions_ref(torch.tensor([0, 3, 5]), torch.tensor([2**31 + 1, 2**32 + 2]), 5)
    assert batch.tolist() == [0, 0, -1, -1, -1] and pos.tolist() == [2**31 - 2, 2**31 - 1, -1, -1, -1]
    # The oracles, written apart from ref.py, agree on these hand-read cases.
    as_list_equal(slots, oracle_slots(torch.tensor([0, 3]), torch.tensor([63, 64, 130]), table, 64, 3), torch.int64, "slots")
    for blocks, length, block_size in [([2**29 - 1, 2**29], 128, 64), ([715827882], 48, 48)]:
        t = torch.tensor([blocks], dtype=torch.int32)
        _, indices, _ = ref.paged_kv_indices_ref(t, torch.tensor([length]), block_size, 16)
        as_list_equal(indices, oracle_paged(t, torch.tensor([length]), block_size, 16)[1], torch.int32, f"pages of {blocks}")
    expected_batch, expected_pos = oracle_append(torch.tensor([0, 3, 5]), torch.tensor([2**31 + 1, 2**32 + 2]), 5)
    assert batch.tolist() == expected_batch and pos.tolist() == expected_pos


@pytest.mark.ref
@pytest.mark.parametrize("idx_dtype", IDX, ids=str)
@pytest.mark.parametrize("len_dtype", IDX, ids=str)
@pytest.mark.parametrize("n_req,q_max", [(1, 1), (6, 4), (50, 30)])
def test_ref_append_matches_oracle(idx_dtype, len_dtype, n_req, q_max):
    q = torch.randint(0, q_max + 1, (n_req,))
    lens = (q + torch.randint(0, 300, (n_req,))).to(len_dtype)
    lens[0] = q[0] - 1 if q[0] > 0 else lens[0]  # inconsistent: its first token's position is -1
    indptr = indptr_of(q, idx_dtype)
    total = int(q.sum())
    for n in (total + 7, total, max(total - 3, 0), 0):
        got = ref.batch_indices_positions_ref(indptr, lens, n)
        expected = oracle_append(indptr, lens, n)
        for name, g, e in zip(api.APPEND_OUTPUTS, got, expected):
            as_list_equal(g, e, torch.int32, f"{name} n={n}")


@pytest.mark.ref
@pytest.mark.parametrize("idx_dtype", IDX, ids=str)
def test_cpu_interface_writes_every_output(idx_dtype):
    qsl, pos, table, n = step_batch(12, 16, 6, 9, idx_dtype, torch.int64)
    out = poisoned((n,), torch.int64, "cpu")
    assert api.get_slot_mapping(qsl, pos, table, block_size=16, out=out) is out
    as_list_equal(out, oracle_slots(qsl, pos, table, 16, n), torch.int64, "slots")
    lens = random_lengths(12, 16, 96).to(idx_dtype)
    outs = (poisoned((13,), torch.int32, "cpu"), poisoned((12 * 6 * 4,), torch.int32, "cpu"), poisoned((12,), torch.int32, "cpu"))
    got = api.get_paged_kv_indices(table, lens, block_size=16, page_size=4, out=outs)
    assert all(g is o for g, o in zip(got, outs))
    for name, g, e in zip(api.PAGED_OUTPUTS, got, oracle_paged(table, lens, 16, 4)):
        as_list_equal(g, e, torch.int32, name)
    outs = (poisoned((n,), torch.int32, "cpu"), poisoned((n,), torch.int32, "cpu"))
    got = api.get_batch_indices_positions(qsl, lens + 20, n, out=outs)
    for name, g, e in zip(api.APPEND_OUTPUTS, got, oracle_append(qsl, lens + 20, n)):
        as_list_equal(g, e, torch.int32, name)


def check_non_monotone_indptr(device) -> None:
    """A decreasing query_start_loc / append_indptr (not checked: it needs the host): every token is
    padding or gets the result of *some* request whose range holds it, per ref.py. A token that only
    one indptr entry lies at or below (tokens 0-2 here) leaves a search no choice: it must get that
    request's result."""
    indptr = [0, 6, 3, 9, 9, 14, 12]
    n_req, n, bs, mb = len(indptr) - 1, 16, 4, 5
    qsl = torch.tensor(indptr, dtype=torch.int32, device=device)
    table = random_block_table(n_req, mb, device)
    pos = torch.randint(-2, bs * mb + 3, (n,), device=device)
    lens = torch.randint(0, 40, (n_req,), device=device)
    slots = poisoned((n,), torch.int64, device)
    api.get_slot_mapping(qsl, pos, table, block_size=bs, num_tokens=n, out=slots)
    batch, where = poisoned((n,), torch.int32, device), poisoned((n,), torch.int32, device)
    api.get_batch_indices_positions(qsl, lens, n, out=(batch, where))
    t, p, lens_l = table.tolist(), pos.tolist(), lens.tolist()
    for i in range(n):
        holders = [b for b in range(n_req) if indptr[b] <= i < indptr[b + 1]]
        forced = sum(indptr[b] <= i for b in range(n_req)) == 1 and holders
        allowed_slots, allowed_pairs = (set(), set()) if forced else ({-1}, {(-1, -1)})
        for b in holders:
            j = p[i] // bs
            ok = p[i] >= 0 and j < mb and t[b][j] >= 0
            allowed_slots.add(t[b][j] * bs + p[i] % bs if ok else -1)
            q = lens_l[b] - (indptr[b + 1] - indptr[b]) + (i - indptr[b])
            allowed_pairs.add((b, q) if 0 <= q < 2**31 else (-1, -1))
        assert int(slots[i]) in allowed_slots, f"token {i}: slot {int(slots[i])} not in {allowed_slots}"
        assert (int(batch[i]), int(where[i])) in allowed_pairs, f"token {i}: {(int(batch[i]), int(where[i]))} not in {allowed_pairs}"


@pytest.mark.ref
def test_ref_non_monotone_indptr():
    check_non_monotone_indptr("cpu")


@pytest.mark.ref
def test_empty_batch_is_well_defined(no_kernel_launches):
    qsl = torch.zeros(1, dtype=torch.int32)
    table = torch.zeros((0, 4), dtype=torch.int32)
    out = poisoned((6,), torch.int64, "cpu")
    assert api.get_slot_mapping(qsl, torch.zeros(8, dtype=torch.int64), table, block_size=16, num_tokens=6, out=out).tolist() == [-1] * 6
    lens = torch.zeros(0, dtype=torch.int32)
    indptr, indices, last = api.get_paged_kv_indices(table, lens, block_size=16, page_size=16)
    assert indptr.tolist() == [0] and indices.shape == (0,) and last.shape == (0,)
    outs = (poisoned((1,), torch.int32, "cpu"), poisoned((5,), torch.int32, "cpu"), poisoned((0,), torch.int32, "cpu"))
    got = api.get_paged_kv_indices(table, lens, block_size=16, page_size=16, capacity=5, out=outs)
    assert got[0].tolist() == [0] and got[1].tolist() == [-1] * 5
    b, p = api.get_batch_indices_positions(qsl, lens, 4)
    assert b.tolist() == p.tolist() == [-1] * 4
    assert api.get_slot_mapping(torch.tensor([0, 3]), torch.zeros(3, dtype=torch.int64), torch.zeros((1, 2), dtype=torch.int32), block_size=4, num_tokens=0).shape == (0,)


def _bad_inputs():
    i32, i64 = torch.int32, torch.int64
    qsl = torch.tensor([0, 2, 3], dtype=i32)
    pos = torch.arange(4, dtype=i64)
    table = torch.zeros((2, 3), dtype=i32)
    lens = torch.tensor([5, 9], dtype=i32)
    wide = torch.zeros((2, 6), dtype=i32)
    slot_out = lambda: poisoned((4,), i64, "cpu")  # noqa: E731

    def slot(case, error, message, **kw):
        args = dict(query_start_loc=qsl, positions=pos, block_table=table, block_size=16, out=slot_out())
        args.update(kw)
        return (f"slots-{case}", api.get_slot_mapping, args, error, message)

    def paged_out(cap=24):
        return (poisoned((3,), i32, "cpu"), poisoned((cap,), i32, "cpu"), poisoned((2,), i32, "cpu"))

    def paged(case, error, message, **kw):
        args = dict(block_table=table, seq_lens=lens, block_size=16, page_size=4, out=paged_out())
        args.update(kw)
        return (f"paged-{case}", api.get_paged_kv_indices, args, error, message)

    def append_out():
        return (poisoned((4,), i32, "cpu"), poisoned((4,), i32, "cpu"))

    def append(case, error, message, **kw):
        args = dict(append_indptr=qsl, seq_lens=lens, num_tokens=4, out=append_out())
        args.update(kw)
        return (f"append-{case}", api.get_batch_indices_positions, args, error, message)

    shared = torch.zeros(16, dtype=i64)
    return [
        slot("qsl-float", TypeError, "query_start_loc has dtype torch.float32", query_start_loc=qsl.float()),
        slot("qsl-2d", ValueError, "query_start_loc must be 1-D", query_start_loc=qsl[None]),
        slot("qsl-empty", ValueError, "query_start_loc must have B + 1 >= 1", query_start_loc=qsl[:0]),
        slot("qsl-strided", ValueError, "query_start_loc must be contiguous", query_start_loc=torch.zeros(6, dtype=i32)[::2]),
        slot("qsl-list", TypeError, "query_start_loc must be a torch.Tensor", query_start_loc=[0, 2, 3]),
        slot("pos-int16", TypeError, "positions has dtype torch.int16", positions=pos.to(torch.int16)),
        slot("pos-meta", ValueError, "positions is on meta", positions=pos.to("meta")),
        slot("table-int64", TypeError, "block_table has dtype torch.int64", block_table=table.long()),
        slot("table-rows", ValueError, "block_table has 3 rows; expected B = 2", block_table=torch.zeros((3, 3), dtype=i32)),
        slot("table-no-columns", ValueError, "max_blocks must be >= 1", block_table=table[:, :0]),
        slot("table-col-strided", ValueError, "block_table's last dimension must be contiguous", block_table=wide[:, ::2]),
        slot("table-overlap", ValueError, "block_table's row stride 2 is smaller", block_table=wide.as_strided((2, 3), (2, 1))),
        slot("block-size-0", ValueError, "block_size must be in [1,", block_size=0),
        slot("block-size-float", TypeError, "block_size must be an int", block_size=16.0),
        slot("num-tokens-big", ValueError, "num_tokens must be in [0, 4]", num_tokens=5, out=poisoned((5,), i64, "cpu")),
        slot("num-tokens-neg", ValueError, "num_tokens must be in [0, 4]", num_tokens=-1),
        slot("out-int32", ValueError, "out must be (4,) torch.int64", out=poisoned((4,), i32, "cpu")),
        slot("out-short", ValueError, "out must be (4,)", out=poisoned((3,), i64, "cpu")),
        slot("out-on-pos", ValueError, "out overlaps positions", positions=shared[:4], out=shared[2:6]),
        paged("lens-float", TypeError, "seq_lens has dtype torch.float32", seq_lens=lens.float()),
        paged("lens-2d", ValueError, "seq_lens must be 1-D", seq_lens=lens[None]),
        paged("table-int64", TypeError, "block_table has dtype torch.int64", block_table=table.long()),
        paged("table-rows", ValueError, "block_table has 1 rows; expected B = 2", block_table=table[:1]),
        paged("page-not-dividing", ValueError, "page_size 5 does not divide block_size 16", page_size=5),
        paged("page-0", ValueError, "page_size must be in [1,", page_size=0),
        paged("pages-past-int32", ValueError, "block_table describes 6442450944 pages", block_size=2**30, page_size=1),
        paged("page-bool", TypeError, "page_size must be an int", page_size=True),
        paged("block-size-neg", ValueError, "block_size must be in [1,", block_size=-16),
        paged("capacity-neg", ValueError, "capacity must be in [0,", capacity=-1),
        paged("indptr-int64", ValueError, "out.kv_indptr must be (3,) torch.int32", out=(poisoned((3,), i64, "cpu"),) + paged_out()[1:]),
        paged("indices-cap", ValueError, "out.kv_indices must be (24,)", out=paged_out(23)),
        paged("out-pair", TypeError, "out must be a tuple", out=paged_out()[:2]),
        paged("table-on-meta", ValueError, "block_table is on meta", block_table=table.to("meta")),
        paged("lens-on-meta", ValueError, "seq_lens is on meta", seq_lens=lens.to("meta")),
        append("indptr-float", TypeError, "append_indptr has dtype torch.float64", append_indptr=qsl.double()),
        append("lens-short", ValueError, "seq_lens must have shape (2,)", seq_lens=lens[:1]),
        append("lens-int8", TypeError, "seq_lens has dtype torch.int8", seq_lens=lens.to(torch.int8)),
        append("lens-on-meta", ValueError, "seq_lens is on meta", seq_lens=lens.to("meta")),
        append("num-tokens-neg", ValueError, "num_tokens must be in [0,", num_tokens=-2),
        append("num-tokens-none", TypeError, "num_tokens must be an int", num_tokens=None),
        append("out-int64", ValueError, "out.positions must be (4,) torch.int32", out=(poisoned((4,), i32, "cpu"), poisoned((4,), i64, "cpu"))),
        append("out-same", ValueError, "out.batch_indices overlaps out.positions", out=(lambda t: (t, t))(poisoned((4,), i32, "cpu"))),
    ]


@pytest.mark.ref
@pytest.mark.parametrize("name", case_names(_bad_inputs))
def test_bad_input_raises_and_writes_nothing(name):
    _, fn, kwargs, error, message = case_named(_bad_inputs, name)
    out = kwargs.get("out")
    written = out if isinstance(out, (tuple, list)) else [out]
    assert_rejected_without_writes(fn, kwargs, error, message, written)


# ----------------------------------------------------------------------------------------------------
# Codegen (CPU): every shipped configuration lowers, compiles and fits on chip.

_FACTORIES = ("slot_mapping", "paged_kv_indices", "batch_indices_positions")


def _configs(backend: str):
    import importlib

    module = importlib.import_module(f"kernels.get_kv_index.{backend}")
    return [(f"{f}_tl", c) for f in _FACTORIES for c in getattr(module, f"{f}_shipped_configs")()]


def _config_id(case) -> str:
    factory, config = case
    return factory.removesuffix("_tl") + "-" + "-".join(map(str, config))


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("case", _configs("cuda"), ids=_config_id)
def test_cuda_config_compiles_without_spills(arch, case):
    from kernels.get_kv_index import cuda
    from testing import codegen_cuda

    factory, config = case
    fn = getattr(cuda, factory)
    # Built as the interface builds it for these archs: a programmatic dependent launch.
    source = codegen_cuda.cuda_source(fn, *config, arch=arch, pdl=True)
    # One launch, no atomics: requests are found by search, prefixes by a fixed-order block scan.
    assert "atomic" not in source.lower() and source.count("__global__ void") <= 2
    report = codegen_cuda.check_cuda_resources(fn, *config, arch=arch, pdl=True)
    assert report.spill_store_bytes == report.spill_load_bytes == report.stack_frame_bytes == 0


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("factory", [f"{f}_tl" for f in _FACTORIES])
def test_cuda_dependent_launch_waits_before_memory(factory):
    # pdl=True: nvcc keeps every global access after the wait for the grids before; pdl=False
    # emits neither call.
    from kernels.get_kv_index import cuda
    from testing import codegen_cuda

    fn, config = getattr(cuda, factory), dict(_configs("cuda"))[factory]
    codegen_cuda.check_dependent_launch(fn, *config)


@pytest.mark.codegen_cuda
def test_cuda_shipped_configs_cover_every_path():
    from kernels.get_kv_index import cuda

    slots = cuda.slot_mapping_shipped_configs()
    assert {(a, b) for _, a, b in slots} == {(a, b) for a in cuda.INDEX_DTYPES for b in cuda.INDEX_DTYPES}
    assert any(bs & (bs - 1) for bs, _, _ in slots) and 1 in {bs for bs, _, _ in slots}
    paged = cuda.paged_kv_indices_shipped_configs()
    ratios = {bs // ps for bs, ps, _ in paged}
    # One page per block, a power-of-two ratio (shifts) and another (divisions).
    assert {1, 3, 4} <= ratios
    assert {d for *_, d in paged} == set(cuda.INDEX_DTYPES)
    assert set(cuda.batch_indices_positions_shipped_configs()) == {(a, b) for a in cuda.INDEX_DTYPES for b in cuda.INDEX_DTYPES}


@pytest.mark.codegen_ascend
@pytest.mark.parametrize("case", _configs("asc"), ids=_config_id)
def test_ascend_config_lowers_and_fits_ub(case):
    from kernels.get_kv_index import asc
    from testing import codegen_ascend

    factory, config = case
    fn = getattr(asc, factory)
    source = codegen_ascend.ascend_source(fn, *config)
    assert "__global__" in source or "__aicore__" in source
    codegen_ascend.assert_ub_fits(fn, *config)


# ----------------------------------------------------------------------------------------------------
# Device: the backend's kernels against the reference, on the accelerator.

# (B, block_size, max_blocks, q_max): decode (one token), MTP-like (up to 4), prefill chunks; batches
# of one chunk and of several (B > 2047 walks the indptr in chunks), odd block sizes.
DEVICE_STEPS = [
    (1, 64, 1, 1),
    (1, 16, 40, 600),
    (7, 48, 9, 4),
    (64, 64, 33, 1),
    (256, 16, 17, 4),
    (1024, 64, 64, 1),
    (1023, 1, 300, 3),
    (2047, 64, 4, 2),
    (2048, 64, 4, 2),
    (5000, 32, 3, 7),
    (37, 64, 300, 700),
]


def _device_step(n_req, block_size, max_blocks, q_max, idx_dtype, pos_dtype, device):
    qsl, pos, table, n = step_batch(n_req, block_size, max_blocks, q_max, idx_dtype, pos_dtype, extra=37)
    return qsl.to(device), pos.to(device), table.to(device), n


@pytest.mark.device
@pytest.mark.parametrize("idx_dtype", IDX, ids=str)
@pytest.mark.parametrize("pos_dtype", IDX, ids=str)
@pytest.mark.parametrize("step", DEVICE_STEPS, ids=lambda s: "B{}-bs{}-mb{}-q{}".format(*s))
def test_device_slot_mapping(device, idx_dtype, pos_dtype, step):
    qsl, pos, table, n = _device_step(*step, idx_dtype, pos_dtype, device)
    block_size = step[1]
    for num in (n, n - 37, 1):
        out = poisoned((num,), torch.int64, device)
        assert api.get_slot_mapping(qsl, pos, table, block_size=block_size, num_tokens=num, out=out) is out
        assert_bitwise_equal(out, ref.slot_mapping_ref(qsl, pos, table, block_size, num), what=f"slots n={num}")
    # Positions past the table, negative, and a query_start_loc that does not start at 0.
    pos_bad = pos.clone()
    pos_bad[::5] = -1
    pos_bad[1::7] = table.shape[1] * block_size
    qsl_shift = qsl + 2
    for q, p in ((qsl, pos_bad), (qsl_shift, pos)):
        out = poisoned((n,), torch.int64, device)
        api.get_slot_mapping(q, p, table, block_size=block_size, out=out)
        assert_bitwise_equal(out, ref.slot_mapping_ref(q, p, table, block_size, n), what="slots, invalid entries")


@pytest.mark.device
@pytest.mark.parametrize("len_dtype", IDX, ids=str)
@pytest.mark.parametrize("page_size", [1, 16, 64], ids=lambda p: f"page{p}")
@pytest.mark.parametrize("n_req,max_blocks", [(1, 1), (1, 70), (9, 5), (255, 33), (1024, 64), (1025, 3), (3000, 2)])
def test_device_paged_kv_indices(device, len_dtype, page_size, n_req, max_blocks):
    block_size = 64
    table = random_block_table(n_req, max_blocks).to(device)
    lens = random_lengths(n_req, block_size, max_blocks * block_size + 5).to(len_dtype).to(device)
    lens[0] = -3  # a negative length is an empty request
    full = n_req * max_blocks * (block_size // page_size)
    for cap in (None, full // 3, 0):
        cap_n = full if cap is None else cap
        outs = (poisoned((n_req + 1,), torch.int32, device), poisoned((cap_n,), torch.int32, device), poisoned((n_req,), torch.int32, device))
        got = api.get_paged_kv_indices(table, lens, block_size=block_size, page_size=page_size, capacity=cap, out=outs)
        assert all(g is o for g, o in zip(got, outs))
        for name, g, e in zip(api.PAGED_OUTPUTS, got, ref.paged_kv_indices_ref(table, lens, block_size, page_size, cap_n)):
            assert_bitwise_equal(g, e, what=f"{name} cap={cap}")


@pytest.mark.device
@pytest.mark.parametrize("block_size,page_size", [(48, 16), (1, 1), (96, 32)])
def test_device_paged_odd_sizes(device, block_size, page_size):
    table = random_block_table(100, 7).to(device)
    lens = random_lengths(100, page_size, 7 * block_size).to(device)
    outs = (poisoned((101,), torch.int32, device), poisoned((700 * (block_size // page_size),), torch.int32, device), poisoned((100,), torch.int32, device))
    got = api.get_paged_kv_indices(table, lens, block_size=block_size, page_size=page_size, out=outs)
    for name, g, e in zip(api.PAGED_OUTPUTS, got, ref.paged_kv_indices_ref(table, lens, block_size, page_size)):
        assert_bitwise_equal(g, e, what=name)


@pytest.mark.device
@pytest.mark.parametrize("idx_dtype", IDX, ids=str)
@pytest.mark.parametrize("len_dtype", IDX, ids=str)
@pytest.mark.parametrize("n_req,q_max", [(1, 1), (1, 16384), (8, 3), (1024, 1), (2047, 2), (4100, 5), (64, 300)])
def test_device_batch_indices_positions(device, idx_dtype, len_dtype, n_req, q_max):
    q = torch.randint(0, q_max + 1, (n_req,))
    lens = q + torch.randint(0, 5000, (n_req,))
    lens[n_req // 2] = max(int(q[n_req // 2]) - 2, 0)  # inconsistent: its first positions are invalid
    indptr = indptr_of(q, idx_dtype).to(device)
    lens = lens.to(len_dtype).to(device)
    total = int(q.sum())
    for n in (total + 100, total, max(total // 2, 1)):
        outs = (poisoned((n,), torch.int32, device), poisoned((n,), torch.int32, device))
        got = api.get_batch_indices_positions(indptr, lens, n, out=outs)
        for name, g, e in zip(api.APPEND_OUTPUTS, got, ref.batch_indices_positions_ref(indptr, lens, n)):
            assert_bitwise_equal(g, e, what=f"{name} n={n}")


@pytest.mark.device
@pytest.mark.parametrize("config", [c for c in ref.slot_mapping_shipped_configs() if c[0] > 1], ids=lambda c: "-".join(map(str, c)))
def test_device_slot_mapping_past_int32(device, config):
    # Slots past 2**31 are legal int64 slots: an int32 product would wrap them.
    block_size, idx_name, pos_name = config
    qsl, pos, table, n = step_batch(64, block_size, 3, 2 * block_size, getattr(torch, idx_name), getattr(torch, pos_name), extra=37)
    near_int32_limit(table, block_size)
    expected = oracle_slots(qsl, pos, table, block_size, n)
    assert max(expected) > 2**32, "the batch must reach slots past 32 bits"
    qsl, pos, table = qsl.to(device), pos.to(device), table.to(device)
    out = poisoned((n,), torch.int64, device)
    api.get_slot_mapping(qsl, pos, table, block_size=block_size, out=out)
    as_list_equal(out, expected, torch.int64, "slots past int32")
    assert_bitwise_equal(out, ref.slot_mapping_ref(qsl, pos, table, block_size, n), what="slots past int32")


@pytest.mark.device
@pytest.mark.parametrize("config", [c for c in ref.paged_kv_indices_shipped_configs() if c[0] > c[1]], ids=lambda c: "-".join(map(str, c)))
def test_device_paged_pages_past_int32(device, config):
    # r = 4 crosses 2**31 between blocks, r = 3 inside one.
    block_size, page_size, len_name = config
    n_req, max_blocks = 300, 3
    table = near_int32_limit(random_block_table(n_req, max_blocks), block_size // page_size)
    lens = random_lengths(n_req, page_size, max_blocks * block_size).to(getattr(torch, len_name))
    past = pages_past_int32(table, lens, block_size, page_size)
    assert past, "the batch must reach pages past int32"
    expected = oracle_paged(table, lens, block_size, page_size)
    table, lens = table.to(device), lens.to(device)
    full = n_req * max_blocks * (block_size // page_size)
    outs = (poisoned((n_req + 1,), torch.int32, device), poisoned((full,), torch.int32, device), poisoned((n_req,), torch.int32, device))
    got = api.get_paged_kv_indices(table, lens, block_size=block_size, page_size=page_size, out=outs)
    assert got[1].cpu()[past].eq(-1).all(), "a page past int32 must be -1"
    for name, g, e, r in zip(api.PAGED_OUTPUTS, got, expected, ref.paged_kv_indices_ref(table, lens, block_size, page_size)):
        as_list_equal(g, e, torch.int32, f"{name} past int32")
        assert_bitwise_equal(g, r, what=f"{name} past int32")


@pytest.mark.device
@pytest.mark.parametrize("idx_dtype,len_dtype", [(getattr(torch, a), getattr(torch, b)) for a, b in ref.batch_indices_positions_shipped_configs()], ids=str)
def test_device_batch_positions_past_int32(device, idx_dtype, len_dtype):
    n_req = 300
    q = torch.randint(0, 6, (n_req,))
    if len_dtype == torch.int64:
        # Around 2**31 the last positions of a request pass int32; around 2**32 all do, and an
        # int32 truncation would make them small and valid.
        lens = torch.where(torch.rand(n_req) < 0.5, 2**31, 2**32) + torch.randint(-3, 4, (n_req,))
    else:
        # The largest int32 lengths: every position fits.
        lens = 2**31 - 1 - torch.randint(0, 4, (n_req,))
    indptr = indptr_of(q, idx_dtype)
    n = int(q.sum()) + 9
    # Token j of request b is at lens[b] - q[b] + j: -1 from 2**31 on, by the contract.
    starts, ends = indptr.tolist()[:-1], indptr.tolist()[1:]
    past = [t for b, length in enumerate(lens.tolist()) for t in range(starts[b], ends[b]) if length - ends[b] + t >= 2**31]
    assert bool(past) == (len_dtype == torch.int64), "int32 lengths end at 2**31 - 2; int64 ones must pass it"
    expected = oracle_append(indptr, lens, n)
    assert max(expected[1]) > 2**31 - 10
    indptr, lens = indptr.to(device), lens.to(len_dtype).to(device)
    outs = (poisoned((n,), torch.int32, device), poisoned((n,), torch.int32, device))
    got = api.get_batch_indices_positions(indptr, lens, n, out=outs)
    for name, g, e, r in zip(api.APPEND_OUTPUTS, got, expected, ref.batch_indices_positions_ref(indptr, lens, n)):
        assert g.cpu()[past].eq(-1).all(), f"{name}: a position past int32 must be -1"
        as_list_equal(g, e, torch.int32, f"{name} past int32")
        assert_bitwise_equal(g, r, what=f"{name} past int32")


@pytest.mark.device
def test_device_non_monotone_indptr(device):
    check_non_monotone_indptr(device)


@pytest.mark.device
def test_device_empty_batch_launches_nothing(device, no_kernel_launches):
    qsl = torch.zeros(1, dtype=torch.int32, device=device)
    table = torch.zeros((0, 4), dtype=torch.int32, device=device)
    out = poisoned((6,), torch.int64, device)
    api.get_slot_mapping(qsl, torch.zeros(8, dtype=torch.int64, device=device), table, block_size=16, num_tokens=6, out=out)
    assert out.tolist() == [-1] * 6
    lens = torch.zeros(0, dtype=torch.int32, device=device)
    indptr, indices, _ = api.get_paged_kv_indices(table, lens, block_size=16, page_size=16, capacity=3)
    assert indptr.tolist() == [0] and indices.tolist() == [-1] * 3
    b, p = api.get_batch_indices_positions(qsl, lens, 4)
    assert b.tolist() == p.tolist() == [-1] * 4
    # Requests but an empty output (num_tokens 0): no launch either.
    qsl2 = torch.tensor([0, 2, 5], dtype=torch.int32, device=device)
    table2 = torch.zeros((2, 4), dtype=torch.int32, device=device)
    assert api.get_slot_mapping(qsl2, torch.arange(5, device=device), table2, block_size=16, num_tokens=0).shape == (0,)
    b, p = api.get_batch_indices_positions(qsl2, torch.tensor([2, 3], device=device), 0)
    assert b.shape == p.shape == (0,)


@pytest.mark.device
def test_device_cuda_graph_replay(device, backend):
    # Captured once at fixed sizes, replayed with new contents: every call of a decode step.
    if backend != "cuda":
        pytest.skip("CUDA graphs are a CUDA feature")
    n_req, block_size, max_blocks, n = 64, 64, 16, 300
    qsl = torch.zeros(n_req + 1, dtype=torch.int32, device=device)
    pos = torch.zeros(n, dtype=torch.int64, device=device)
    table = torch.zeros((n_req, max_blocks), dtype=torch.int32, device=device)
    lens = torch.zeros(n_req, dtype=torch.int32, device=device)
    slots = poisoned((n,), torch.int64, device)
    paged = (poisoned((n_req + 1,), torch.int32, device), poisoned((n_req * max_blocks * 4,), torch.int32, device), poisoned((n_req,), torch.int32, device))
    append = (poisoned((n,), torch.int32, device), poisoned((n,), torch.int32, device))

    def call():
        api.get_slot_mapping(qsl, pos, table, block_size=block_size, out=slots)
        api.get_paged_kv_indices(table, lens, block_size=block_size, page_size=16, out=paged)
        api.get_batch_indices_positions(qsl, lens, n, out=append)

    call()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    for q_max in (1, 4):
        q_cpu, p_cpu, t_cpu, _ = step_batch(n_req, block_size, max_blocks, q_max, torch.int32, torch.int64, extra=0)
        qsl.copy_(q_cpu)
        pos.fill_(-5)
        pos[: p_cpu.shape[0]].copy_(p_cpu)
        table.copy_(t_cpu)
        lens.copy_(random_lengths(n_req, block_size, max_blocks * block_size).to(torch.int32))
        for t in (slots, *paged, *append):
            t.fill_(torch.iinfo(t.dtype).min)
        graph.replay()
        assert_bitwise_equal(slots, ref.slot_mapping_ref(qsl, pos, table, block_size, n), what=f"graph slots q={q_max}")
        for name, g, e in zip(api.PAGED_OUTPUTS, paged, ref.paged_kv_indices_ref(table, lens, block_size, 16)):
            assert_bitwise_equal(g, e, what=f"graph {name}")
        for name, g, e in zip(api.APPEND_OUTPUTS, append, ref.batch_indices_positions_ref(qsl, lens, n)):
            assert_bitwise_equal(g, e, what=f"graph {name}")
