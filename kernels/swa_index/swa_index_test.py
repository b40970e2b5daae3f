"""Tests of `swa_index`: reference vs a Python-loop oracle, interface validation, codegen, and the
device kernel.

Suites (markers, selected by `--tl-suite`; see testing/plugin.py): ref, codegen_cuda, codegen_ascend,
device. Inputs are drawn fresh per test from the plugin's per-test seed; outputs are poisoned first
(the int32/int64 minimum, which no output holds: every output is >= -1). Every output is an
integer, so every comparison is exact.
"""

from __future__ import annotations

import pytest
import torch

from kernels.swa_index import api, ref
from testing.numeric import assert_bitwise_equal, assert_rejected_without_writes, case_named, case_names, near_int32_limit, poisoned

IDX = [torch.int32, torch.int64]


# ----------------------------------------------------------------------------------------------------
# Random steps: ragged lengths (0, 1, on and one past block boundaries), 1 + MTP query tokens per
# request at the end of its length, shuffled physical blocks with a few holes, block tables that are
# views of wider tables, and garbage padding tokens after the last request.


def random_block_table(n_req: int, max_blocks: int, holes: float = 0.05, wider: int = 3) -> torch.Tensor:
    """(n_req, max_blocks) int32 of distinct shuffled block ids, about `holes` of them -1, a view of a
    wider table (row stride max_blocks + wider)."""
    ids = torch.randperm(n_req * max_blocks * 2)[: n_req * max_blocks].to(torch.int32).reshape(n_req, max_blocks)
    ids[torch.rand(n_req, max_blocks) < holes] = -1
    table = torch.full((n_req, max_blocks + wider), -7, dtype=torch.int32)
    table[:, :max_blocks] = ids
    return table[:, :max_blocks]


def step_batch(n_req, block_size, max_blocks, q_max, idx_dtype, pos_dtype, len_dtype, extra=3):
    """(query_start_loc, positions, block_table, seq_lens): request b has L_b tokens after the step,
    its q_b <= q_max query tokens the last ones; `extra` padding tokens of garbage positions."""
    max_len = max_blocks * block_size
    kinds = torch.randint(0, 5, (n_req,))
    blocks = torch.randint(0, max_blocks + 1, (n_req,)) * block_size
    choices = torch.stack([torch.zeros(n_req, dtype=torch.int64), torch.ones(n_req, dtype=torch.int64), blocks, blocks + 1, torch.randint(0, max_len + 1, (n_req,))])
    lens = choices.gather(0, kinds[None]).flatten().clamp(0, max_len)
    q = torch.minimum(torch.randint(0, q_max + 1, (n_req,)), lens)
    qsl = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(q, 0)]).to(idx_dtype)
    pos = [p for length, k in zip(lens.tolist(), q.tolist()) for p in range(length - k, length)]
    pos = torch.tensor(pos + torch.randint(-3, max_len + 3, (extra,)).tolist(), dtype=pos_dtype)
    return qsl, pos, random_block_table(n_req, max_blocks), lens.to(len_dtype)


# ----------------------------------------------------------------------------------------------------
# Independent oracle: Python loops over the lists.


def oracle(qsl, positions, table, seq_lens, window, block_size, pad):
    qsl, positions, table, lens = qsl.tolist(), positions.tolist(), table.tolist(), seq_lens.tolist()
    max_blocks = len(table[0]) if table else 0

    def slot(b, p):
        if p < 0 or p // block_size >= max_blocks or table[b][p // block_size] < 0:
            return None
        s = table[b][p // block_size] * block_size + p % block_size
        return s if s < 2**31 else None

    owner = [None] * len(positions)
    for b in range(len(lens)):
        for i in range(max(qsl[b], 0), min(qsl[b + 1], len(positions))):
            owner[i] = b
    slots, valid_len = [], []
    for i, b in enumerate(owner):
        pos = positions[i]
        window_pos = [] if b is None or pos < 0 else [p for p in range(pos - window + 1, pos + 1) if p >= 0]
        own = slot(b, pos) if window_pos else None
        fill = -1 if pad == "minus_one" else (own if own is not None else 0)
        row = [slot(b, p) for p in window_pos]
        row = [fill if s is None else s for s in row] + [fill] * (window - len(row))
        slots.append(row)
        valid_len.append(len(window_pos))
    first_block, starts, ends = [], [], []
    for length in lens:
        length = max(length, 0)
        start = max(0, length - window)
        first_block.append(min(start // block_size, max_blocks))
        starts.append(start)
        ends.append(length)
    return slots, valid_len, first_block, starts, ends


def slots_past_int32(qsl, positions, table, window, block_size, pad) -> list[tuple[int, int, int]]:
    """(token, column, pad) of every window entry whose block is allocated but whose slot passes
    2**31 - 1, with the pad the contract puts there: -1, or (repeat) the token's own slot when it
    is legal, else 0."""
    qsl, positions, table = qsl.tolist(), positions.tolist(), table.tolist()

    def slot(b, p):
        blk = table[b][p // block_size] if p // block_size < len(table[b]) else -1
        return blk * block_size + p % block_size if blk >= 0 else None

    past = []
    for b in range(len(table)):
        for i in range(max(qsl[b], 0), min(qsl[b + 1], len(positions))):
            pos = positions[i]
            if pos < 0:
                continue
            own = slot(b, pos)
            fill = -1 if pad == "minus_one" else (own if own is not None and own < 2**31 else 0)
            n = min(pos + 1, window)
            past += [(i, j, fill) for j in range(n) if (slot(b, pos - n + 1 + j) or 0) >= 2**31]
    return past


DTYPES = (torch.int32, torch.int32, torch.int32, torch.int64, torch.int64)


def assert_matches_oracle(got, expected, what=""):
    for name, g, e, dtype in zip(api.OUTPUTS, got, expected, DTYPES):
        e = torch.tensor(e, dtype=dtype).reshape(g.shape)
        assert_bitwise_equal(g.cpu(), e, what=f"{name} {what}")


# ----------------------------------------------------------------------------------------------------
# Reference suite.


@pytest.mark.ref
@pytest.mark.parametrize("pad", ref.PADS)
@pytest.mark.parametrize("idx_dtype,pos_dtype,len_dtype", [(torch.int32, torch.int64, torch.int32), (torch.int64, torch.int32, torch.int64)], ids=str)
@pytest.mark.parametrize(
    "n_req,block_size,max_blocks,q_max,window",
    [(1, 16, 4, 1, 1), (7, 16, 5, 4, 8), (33, 64, 3, 2, 128), (5, 48, 4, 3, 1000), (64, 1, 9, 4, 5), (9, 4, 30, 4, 37)],
)
def test_ref_matches_oracle(pad, idx_dtype, pos_dtype, len_dtype, n_req, block_size, max_blocks, q_max, window):
    qsl, pos, table, lens = step_batch(n_req, block_size, max_blocks, q_max, idx_dtype, pos_dtype, len_dtype)
    got = ref.swa_index_ref(qsl, pos, table, lens, window, block_size, pad)
    assert_matches_oracle(got, oracle(qsl, pos, table, lens, window, block_size, pad))


@pytest.mark.ref
def test_ref_worked_example():
    table = torch.tensor([[3, 1, 9], [4, -1, 2], [7, 8, 6]], dtype=torch.int32)
    qsl = torch.tensor([1, 3, 5, 5])  # token 0 is padding before the first request; request 2 has no tokens
    pos = torch.tensor([0, 5, 6, 4, 12, 2])  # request 1's tokens at 4 (hole block) and 12 (past the table)
    lens = torch.tensor([7, 13, -2])

    def swa(window, pad):
        """The reference's outputs, which the oracle (written apart from ref.py) must also give."""
        got = ref.swa_index_ref(qsl, pos, table, lens, window, 4, pad)
        assert_matches_oracle(got, oracle(qsl, pos, table, lens, window, 4, pad), what=f"W {window} {pad}")
        return got

    slots, vlen, first, start, end = swa(3, "minus_one")
    assert vlen.tolist() == [0, 3, 3, 3, 3, 0]
    assert slots.tolist() == [[-1] * 3, [15, 4, 5], [4, 5, 6], [18, 19, -1], [10, 11, -1], [-1] * 3]
    assert first.tolist() == [1, 2, 0] and start.tolist() == [4, 10, 0] and end.tolist() == [7, 13, 0]
    slots, *_ = swa(3, "repeat")
    # The own slot of position 4 is in a hole, 12 past the table: those rows fill with 0.
    assert slots.tolist() == [[0] * 3, [15, 4, 5], [4, 5, 6], [18, 19, 0], [10, 11, 0], [0] * 3]
    # W = 1: only the token's own slot; a window wider than the sequence: valid_len = pos + 1.
    slots, vlen, first, *_ = swa(1, "minus_one")
    assert slots.flatten().tolist() == [-1, 5, 6, -1, -1, -1] and vlen.tolist() == [0, 1, 1, 1, 1, 0]
    assert first.tolist() == [1, 3, 0]  # clamped to max_blocks
    _, vlen, first, start, _ = swa(100, "minus_one")
    assert vlen.tolist() == [0, 6, 7, 5, 13, 0] and first.tolist() == [0, 0, 0] and start.tolist() == [0, 0, 0]


@pytest.mark.ref
def test_ref_slot_past_int32_is_invalid():
    table = torch.tensor([[2**30, 1]], dtype=torch.int32)
    slots, vlen, *_ = ref.swa_index_ref(torch.tensor([0, 2]), torch.tensor([0, 5]), table, torch.tensor([6]), 3, 4, "repeat")
    # Block 2**30 * 4 overflows int32: positions 0..3 are invalid, 4 and 5 live in block 1.
    assert vlen.tolist() == [1, 3] and slots.tolist() == [[0, 0, 0], [5, 4, 5]]


@pytest.mark.ref
@pytest.mark.parametrize("pad", ref.PADS)
def test_cpu_interface_writes_every_output(pad):
    qsl, pos, table, lens = step_batch(12, 16, 6, 4, torch.int32, torch.int64, torch.int32)
    n, window = pos.shape[0], 40
    outs = tuple(poisoned(s, d, "cpu") for s, d in zip([(n, window), (n,), (12,), (12,), (12,)], DTYPES))
    got = api.swa_index(qsl, pos, table, lens, window=window, block_size=16, pad=pad, out=outs)
    assert all(g is o for g, o in zip(got, outs))
    assert_matches_oracle(got, oracle(qsl, pos, table, lens, window, 16, pad))


@pytest.mark.ref
@pytest.mark.parametrize("pad", ref.PADS)
def test_empty_batch_outputs(pad):
    fill = -1 if pad == "minus_one" else 0
    qsl = torch.zeros(1, dtype=torch.int32)
    outs = poisoned_outputs(3, 5, 0, "cpu")
    got = api.swa_index(qsl, torch.zeros(3, dtype=torch.int64), torch.zeros((0, 4), dtype=torch.int32), torch.zeros(0, dtype=torch.int32), window=5, block_size=16, pad=pad, out=outs)
    assert all(g is o for g, o in zip(got, outs))
    assert got[0].tolist() == [[fill] * 5] * 3 and got[1].tolist() == [0] * 3 and all(t.shape == (0,) for t in got[2:])
    lens = torch.tensor([70, 3])
    outs = poisoned_outputs(0, 64, 2, "cpu")
    got = api.swa_index(torch.tensor([0, 0, 0]), torch.zeros(0, dtype=torch.int64), torch.zeros((2, 8), dtype=torch.int32), lens, window=64, block_size=4, pad=pad, out=outs)
    assert got[0].shape == (0, 64) and got[2].tolist() == [1, 0] and got[3].tolist() == [6, 0] and got[4].tolist() == [70, 3]


def poisoned_outputs(n_tok: int, window: int, n_req: int, device) -> tuple[torch.Tensor, ...]:
    """swa_index's five outputs for T = n_tok, W = window, B = n_req, poisoned."""
    shapes = [(n_tok, window), (n_tok,), (n_req,), (n_req,), (n_req,)]
    return tuple(poisoned(s, d, device) for s, d in zip(shapes, DTYPES))


@pytest.mark.ref
@pytest.mark.parametrize("n_req,most", [(1, 524272), (256, 524272), (257, 524264), (513, 524256)])
def test_cuda_grid_limit_on_tokens(n_req, most):
    # ceil(T / 8) + ceil(B / 256) <= 65535: exactly at the limit passes, one token more is rejected.
    api.check_cuda_grid("swa_index", most, n_req)
    with pytest.raises(ValueError, match=f"positions has T = {most + 1} tokens; the CUDA kernel takes at most {most} at B = {n_req}"):
        api.check_cuda_grid("swa_index", most + 1, n_req)


def _on(device, *tensors):
    return tuple(t.to(device) for t in tensors)


def check_non_monotone_query_start_loc(device, pad) -> None:
    """A decreasing query_start_loc (not checked: it needs the host): every token's row is the
    padding row or the row of *some* request whose range holds it, per ref.py, and the per-request
    outputs (which never read query_start_loc) are exact."""
    starts = [0, 6, 3, 9, 9, 14, 12]
    n_req, n, bs, mb, window = len(starts) - 1, 16, 4, 5, 6
    qsl, table = torch.tensor(starts, dtype=torch.int32), random_block_table(n_req, mb)
    pos, lens = torch.randint(-2, bs * mb + 3, (n,)), torch.randint(-2, bs * mb + 3, (n_req,))
    got = api.swa_index(*_on(device, qsl, pos, table, lens), window=window, block_size=bs, pad=pad, out=poisoned_outputs(n, window, n_req, device))
    got = [g.cpu() for g in got]
    expected = oracle(qsl, pos, table, lens, window, bs, pad)
    for name, g, e, dtype in list(zip(api.OUTPUTS, got, expected, DTYPES))[2:]:
        assert_bitwise_equal(g, torch.tensor(e, dtype=dtype), what=name)
    for i in range(n):
        holders = [b for b in range(n_req) if starts[b] <= i < starts[b + 1]]
        # The token alone as a one-request batch of each holder's table row, or of no request.
        alone = [([i, i + 1], table[b : b + 1], lens[b : b + 1]) for b in holders] + [([0, 0], table[:1], lens[:1])]
        rows = []
        for q, t, ln in alone:
            slots, valid_len, *_ = oracle(torch.tensor(q), pos, t, ln, window, bs, pad)
            rows.append((slots[i], valid_len[i]))
        assert (got[0][i].tolist(), int(got[1][i])) in rows, f"token {i}: {got[0][i].tolist()}, valid_len {int(got[1][i])}, holders {holders}"


@pytest.mark.ref
@pytest.mark.parametrize("pad", ref.PADS)
def test_ref_non_monotone_query_start_loc(pad):
    check_non_monotone_query_start_loc("cpu", pad)


@pytest.mark.ref
def test_cuda_grid_limit_on_requests():
    # Requests alone may fill grid y but for one row (8 tokens); one request more names the batch.
    api.check_cuda_grid("swa_index", 8, 65534 * 256)
    with pytest.raises(ValueError, match=f"query_start_loc has B = {65534 * 256 + 1} requests; the CUDA kernel takes at most {65534 * 256}"):
        api.check_cuda_grid("swa_index", 1, 65534 * 256 + 1)


@pytest.mark.ref
def test_cpu_interface_has_no_cuda_grid_limit():
    # One token past the CUDA kernel's grid: the reference serves CPU tensors at any T.
    n = 524273
    got = api.swa_index(torch.tensor([0, n]), torch.arange(n), torch.zeros((1, 1), dtype=torch.int32), torch.tensor([n]), window=1, block_size=n)
    assert got[1].shape == (n,) and bool((got[1] == 1).all()) and bool((got[0][:, 0] == torch.arange(n, dtype=torch.int32)).all())


def _bad_inputs():
    i32, i64 = torch.int32, torch.int64
    qsl = torch.tensor([0, 2, 3], dtype=i32)
    pos = torch.arange(4, dtype=i64)
    table = torch.zeros((2, 3), dtype=i32)
    lens = torch.tensor([5, 9], dtype=i32)
    wide = torch.zeros((2, 6), dtype=i32)

    def outs(window=8):
        return tuple(poisoned(s, d, "cpu") for s, d in zip([(4, window), (4,), (2,), (2,), (2,)], DTYPES))

    def case(name, error, message, **kw):
        args = dict(query_start_loc=qsl, positions=pos, block_table=table, seq_lens=lens, window=8, block_size=16, out=outs())
        args.update(kw)
        return (name, args, error, message)

    shared = torch.zeros(64, dtype=i32)
    return [
        case("qsl-float", TypeError, "query_start_loc has dtype torch.float32", query_start_loc=qsl.float()),
        case("qsl-2d", ValueError, "query_start_loc must be 1-D", query_start_loc=qsl[None]),
        case("qsl-empty", ValueError, "query_start_loc must have B + 1 >= 1", query_start_loc=qsl[:0]),
        case("qsl-strided", ValueError, "query_start_loc must be contiguous", query_start_loc=torch.zeros(6, dtype=i32)[::2]),
        case("qsl-list", TypeError, "query_start_loc must be a torch.Tensor", query_start_loc=[0, 2, 3]),
        case("pos-int16", TypeError, "positions has dtype torch.int16", positions=pos.to(torch.int16)),
        case("pos-meta", ValueError, "positions is on meta", positions=pos.to("meta")),
        case("table-int64", TypeError, "block_table has dtype torch.int64", block_table=table.long()),
        case("table-rows", ValueError, "block_table has 3 rows; expected B = 2", block_table=torch.zeros((3, 3), dtype=i32)),
        case("table-no-columns", ValueError, "max_blocks must be >= 1", block_table=table[:, :0]),
        case("table-col-strided", ValueError, "block_table's last dimension must be contiguous", block_table=wide[:, ::2]),
        case("table-overlap", ValueError, "block_table's row stride 2 is smaller", block_table=wide.as_strided((2, 3), (2, 1))),
        case("lens-float", TypeError, "seq_lens has dtype torch.float32", seq_lens=lens.float()),
        case("lens-short", ValueError, "seq_lens must have shape (2,)", seq_lens=lens[:1]),
        case("window-0", ValueError, "window must be in [1,", window=0),
        case("window-neg", ValueError, "window must be in [1,", window=-4),
        case("window-float", TypeError, "window must be an int", window=8.0),
        case("block-size-0", ValueError, "block_size must be in [1,", block_size=0),
        case("pad-other", ValueError, "pad must be one of 'minus_one', 'repeat'", pad="zero"),
        case("out-width", ValueError, "out.slots must be (4, 8) torch.int32", out=outs(7)[:1] + outs()[1:]),
        case("out-int32-replay", ValueError, "out.replay_start must be (2,) torch.int64", out=outs()[:3] + (poisoned((2,), i32, "cpu"),) + outs()[4:]),
        case("out-four", TypeError, "out must be a tuple", out=outs()[:4]),
        case("out-on-table", ValueError, "out.first_block overlaps block_table", block_table=shared[:6].view(2, 3), out=outs()[:2] + (shared[4:6],) + outs()[3:]),
    ]


@pytest.mark.ref
@pytest.mark.parametrize("name", case_names(_bad_inputs))
def test_bad_input_raises_and_writes_nothing(name):
    _, kwargs, error, message = case_named(_bad_inputs, name)
    assert_rejected_without_writes(api.swa_index, kwargs, error, message, kwargs["out"])


# ----------------------------------------------------------------------------------------------------
# Codegen (CPU): every shipped configuration lowers, compiles and fits on chip.


def _config_id(config) -> str:
    return "-".join(map(str, config))


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("config", ref.swa_index_shipped_configs(), ids=_config_id)
def test_cuda_config_compiles_without_spills(arch, config):
    from kernels.swa_index import cuda
    from testing import codegen_cuda

    # Built as the interface builds it for these archs: a programmatic dependent launch.
    source = codegen_cuda.cuda_source(cuda.swa_index_tl, *config, arch=arch, pdl=True)
    # One launch, no atomics: requests are found by range tests, every output has one writer.
    assert "atomic" not in source.lower() and source.count("__global__ void") <= 2
    report = codegen_cuda.check_cuda_resources(cuda.swa_index_tl, *config, arch=arch, pdl=True)
    assert report.spill_store_bytes == report.spill_load_bytes == report.stack_frame_bytes == 0


@pytest.mark.codegen_cuda
def test_cuda_dependent_launch_waits_before_memory():
    # pdl=True: nvcc keeps every global access after the wait for the grids before; pdl=False
    # emits neither call.
    from kernels.swa_index import cuda
    from testing import codegen_cuda

    config = ref.swa_index_shipped_configs()[0]
    codegen_cuda.check_dependent_launch(cuda.swa_index_tl, *config)


@pytest.mark.codegen_cuda
def test_interface_grid_constants_match_kernel():
    # The interface's grid-y check (api.check_cuda_grid) must count the kernel's rows.
    from kernels.swa_index import cuda

    assert (api.CUDA_TOKENS_PER_ROW, api.CUDA_REQUESTS_PER_ROW) == (cuda._TOK, cuda._THREADS)


@pytest.mark.codegen_cuda
def test_shipped_configs_cover_every_path():
    configs = ref.swa_index_shipped_configs()
    assert {c[1] for c in configs} == set(ref.PADS)
    for k in (2, 3, 4):
        assert {c[k] for c in configs} == set(ref.BACKEND_INDEX_DTYPES)
    assert any(c[0] & (c[0] - 1) for c in configs) and any(not c[0] & (c[0] - 1) for c in configs)


@pytest.mark.codegen_ascend
@pytest.mark.parametrize("config", ref.swa_index_shipped_configs(), ids=_config_id)
def test_ascend_config_lowers_and_fits_ub(config):
    from kernels.swa_index import asc
    from testing import codegen_ascend

    source = codegen_ascend.ascend_source(asc.swa_index_tl, *config)
    assert "__global__" in source or "__aicore__" in source
    codegen_ascend.assert_ub_fits(asc.swa_index_tl, *config)


# ----------------------------------------------------------------------------------------------------
# Device: the backend's kernel against the reference, on the accelerator.

# (B, block_size, max_blocks, q_max, window): decode with 1 + MTP tokens at batch 1..1024, windows
# 1, 128, 512, 4096 and one that is not a multiple of the 512-column tile, batches past one
# 1024-request scan round, odd block sizes, prefill-like chunks; windows spanning several column
# tiles with a partial last one on both sides of the block size where one block-table load per
# lane starts to serve a warp (32: a load per column, 512-column tiles; 33: shuffled, 1024).
DEVICE_STEPS = [
    (16, 64, 40, 4, 1500),
    (6, 32, 80, 2, 1100),
    (4, 33, 80, 3, 2100),
    (1, 64, 1, 1, 1),
    (1, 64, 80, 4, 4096),
    (8, 16, 40, 2, 128),
    (64, 64, 20, 4, 513),
    (256, 48, 12, 3, 512),
    (1024, 64, 70, 2, 128),
    (1025, 1, 300, 1, 37),
    (3000, 64, 4, 2, 100),
    (5, 64, 40, 600, 700),
]


@pytest.mark.device
@pytest.mark.parametrize("pad", ref.PADS)
@pytest.mark.parametrize("idx_dtype,pos_dtype,len_dtype", [(torch.int32, torch.int64, torch.int32), (torch.int64, torch.int32, torch.int64)], ids=str)
@pytest.mark.parametrize("step", DEVICE_STEPS, ids=lambda s: "B{}-bs{}-mb{}-q{}-w{}".format(*s))
def test_device_matches_ref(device, pad, idx_dtype, pos_dtype, len_dtype, step):
    n_req, block_size, max_blocks, q_max, window = step
    qsl, pos, table, lens = _on(device, *step_batch(n_req, block_size, max_blocks, q_max, idx_dtype, pos_dtype, len_dtype, extra=37))
    n = pos.shape[0]
    outs = tuple(poisoned(s, d, device) for s, d in zip([(n, window), (n,), (n_req,), (n_req,), (n_req,)], DTYPES))
    got = api.swa_index(qsl, pos, table, lens, window=window, block_size=block_size, pad=pad, out=outs)
    assert all(g is o for g, o in zip(got, outs))
    for name, g, e in zip(api.OUTPUTS, got, ref.swa_index_ref(qsl, pos, table, lens, window, block_size, pad)):
        assert_bitwise_equal(g, e, what=name)
    # Negative positions and lengths, positions past the table, a query_start_loc not starting at 0,
    # and a reshuffled table (same requests, other physical blocks).
    pos_bad, lens_bad = pos.clone(), lens.clone()
    pos_bad[::5] = -1
    pos_bad[1::7] = max_blocks * block_size + 3
    lens_bad[::3] = -4
    shuffled = table[torch.randperm(n_req, device=device)] if n_req > 1 else table
    for q, p, t, ln in ((qsl, pos_bad, table, lens_bad), (qsl + 2, pos, shuffled, lens)):
        outs = tuple(poisoned(s, d, device) for s, d in zip([(n, window), (n,), (n_req,), (n_req,), (n_req,)], DTYPES))
        got = api.swa_index(q, p, t, ln, window=window, block_size=block_size, pad=pad, out=outs)
        for name, g, e in zip(api.OUTPUTS, got, ref.swa_index_ref(q, p, t, ln, window, block_size, pad)):
            assert_bitwise_equal(g, e, what=f"{name}, invalid entries")


@pytest.mark.device
@pytest.mark.parametrize("config", ref.swa_index_shipped_configs(), ids=_config_id)
def test_device_slots_past_int32(device, config):
    # Block ids near 2**31 / block_size: at 64 and 16 the limit falls between blocks, at 48 inside
    # one; the window reaches from the near-limit blocks into ordinary ones.
    block_size, pad, *names = config
    idx_dtype, pos_dtype, len_dtype = (getattr(torch, name) for name in names)
    n_req, max_blocks, window = 64, 4, 2 * block_size + 5
    qsl, pos, table, lens = step_batch(n_req, block_size, max_blocks, 4, idx_dtype, pos_dtype, len_dtype, extra=37)
    near_int32_limit(table, block_size)
    past = slots_past_int32(qsl, pos, table, window, block_size, pad)
    assert past, "the batch must reach slots past int32"
    expected = oracle(qsl, pos, table, lens, window, block_size, pad)
    qsl, pos, table, lens = _on(device, qsl, pos, table, lens)
    n = pos.shape[0]
    outs = tuple(poisoned(s, d, device) for s, d in zip([(n, window), (n,), (n_req,), (n_req,), (n_req,)], DTYPES))
    got = api.swa_index(qsl, pos, table, lens, window=window, block_size=block_size, pad=pad, out=outs)
    rows, cols, fills = (list(x) for x in zip(*past))
    assert_bitwise_equal(got[0].cpu()[rows, cols], torch.tensor(fills, dtype=torch.int32), what="pads past int32")
    assert_matches_oracle(got, expected, "past int32")
    for name, g, e in zip(api.OUTPUTS, got, ref.swa_index_ref(qsl, pos, table, lens, window, block_size, pad)):
        assert_bitwise_equal(g, e, what=f"{name} past int32")


@pytest.mark.device
@pytest.mark.parametrize("pad", ref.PADS)
def test_device_non_monotone_query_start_loc(device, pad):
    check_non_monotone_query_start_loc(device, pad)


@pytest.mark.device
def test_device_empty_batch_launches_nothing(device, no_kernel_launches):
    qsl = torch.zeros(1, dtype=torch.int32, device=device)
    outs = poisoned_outputs(3, 5, 0, device)
    got = api.swa_index(qsl, torch.zeros(3, dtype=torch.int64, device=device), torch.zeros((0, 4), dtype=torch.int32, device=device), torch.zeros(0, dtype=torch.int32, device=device), window=5, block_size=16, out=outs)
    assert got[0].tolist() == [[-1] * 5] * 3 and got[1].tolist() == [0] * 3
    # Requests but no query token (T = 0): the per-request outputs come from torch, no launch.
    outs = poisoned_outputs(0, 64, 2, device)
    lens = torch.tensor([70, 3], device=device)
    got = api.swa_index(torch.tensor([0, 0, 0], device=device), torch.zeros(0, dtype=torch.int64, device=device), torch.zeros((2, 8), dtype=torch.int32, device=device), lens, window=64, block_size=4, out=outs)
    assert got[2].tolist() == [1, 0] and got[3].tolist() == [6, 0] and got[4].tolist() == [70, 3]


@pytest.mark.device
def test_device_cuda_grid_limit_on_tokens(device, backend):
    # B = 1: T = 524272 fills grid y (65534 token rows + 1 request row) and runs; one more token is
    # rejected before any output is written.
    if backend != "cuda":
        pytest.skip("the grid-y limit is CUDA's")
    table = torch.arange(8193, dtype=torch.int32, device=device)[None]
    for n, fits in ((524272, True), (524273, False)):
        qsl = torch.tensor([0, n], dtype=torch.int32, device=device)
        pos, lens = torch.arange(n, device=device), torch.tensor([n], device=device)
        outs = tuple(poisoned(s, d, device) for s, d in zip([(n, 1), (n,), (1,), (1,), (1,)], DTYPES))
        call = dict(window=1, block_size=64, out=outs)
        if fits:
            api.swa_index(qsl, pos, table, lens, **call)
            for name, g, e in zip(api.OUTPUTS, outs, ref.swa_index_ref(qsl, pos, table, lens, 1, 64, "minus_one")):
                assert_bitwise_equal(g, e, what=f"{name} at the grid limit")
            continue
        with pytest.raises(ValueError, match="positions has T = 524273 tokens"):
            api.swa_index(qsl, pos, table, lens, **call)
        for name, t in zip(api.OUTPUTS, outs):
            assert_bitwise_equal(t, poisoned(t.shape, t.dtype, device), what=f"{name} after the rejection")


@pytest.mark.device
@pytest.mark.parametrize("pad", ref.PADS)
def test_device_cuda_graph_replay(device, backend, pad):
    # Captured once at fixed sizes, replayed with new contents: every call of a decode step.
    if backend != "cuda":
        pytest.skip("CUDA graphs are a CUDA feature")
    n_req, block_size, max_blocks, n, window = 64, 64, 16, 200, 300
    qsl = torch.zeros(n_req + 1, dtype=torch.int32, device=device)
    pos = torch.zeros(n, dtype=torch.int64, device=device)
    table = torch.zeros((n_req, max_blocks), dtype=torch.int32, device=device)
    lens = torch.zeros(n_req, dtype=torch.int32, device=device)
    outs = tuple(poisoned(s, d, device) for s, d in zip([(n, window), (n,), (n_req,), (n_req,), (n_req,)], DTYPES))

    def call():
        api.swa_index(qsl, pos, table, lens, window=window, block_size=block_size, pad=pad, out=outs)

    call()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    for q_max in (1, 3):
        q_cpu, p_cpu, t_cpu, l_cpu = step_batch(n_req, block_size, max_blocks, q_max, torch.int32, torch.int64, torch.int32, extra=0)
        qsl.copy_(q_cpu)
        pos.fill_(-5)
        pos[: p_cpu.shape[0]].copy_(p_cpu)
        table.copy_(t_cpu)
        lens.copy_(l_cpu)
        for t in outs:
            t.fill_(torch.iinfo(t.dtype).min)
        graph.replay()
        for name, g, e in zip(api.OUTPUTS, outs, ref.swa_index_ref(qsl, pos, table, lens, window, block_size, pad)):
            assert_bitwise_equal(g, e, what=f"graph {name} q={q_max}")
