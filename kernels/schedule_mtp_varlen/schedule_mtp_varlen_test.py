"""Tests of `schedule_mtp_varlen`: reference vs a Python-loop oracle, the work split's invariants,
interface validation, codegen, and the device kernel.

Suites (markers, selected by `--tl-suite`; see testing/plugin.py): ref, codegen_cuda, codegen_ascend,
device. Inputs are drawn fresh per test from the plugin's per-test seed; outputs are poisoned first
(the int32 minimum, which no output holds: every output is >= -1). Every output is an integer, so
every comparison is exact.
"""

from __future__ import annotations

import pytest
import torch

from kernels.schedule_mtp_varlen import api, ref
from testing.numeric import assert_bitwise_equal, assert_rejected_without_writes, case_named, case_names, poisoned
from testing.plugin import skip_unless_backend_has

IDX = [torch.int32, torch.int64]


# ----------------------------------------------------------------------------------------------------
# Random batches: contexts 0, 1, block-aligned and uniform; inactive slots (negative and too-long
# lengths); accepted counts including out-of-range values (clamped).


def random_batch(n_req: int, k: int, block_size: int, len_dtype=torch.int64, acc_dtype=torch.int64, inactive: float = 0.1):
    """(seq_lens_before, num_accepted) on the CPU."""
    kinds = torch.randint(0, 4, (n_req,))
    blocks = torch.randint(0, 40, (n_req,))
    choices = torch.stack([torch.zeros(n_req, dtype=torch.int64), torch.ones(n_req, dtype=torch.int64), blocks * block_size - 2 - k, torch.randint(0, 5000, (n_req,))])
    s = choices.gather(0, kinds[None]).flatten().clamp(min=0)
    off = torch.rand(n_req) < inactive
    s[off] = torch.where(torch.rand(int(off.sum())) < 0.5, -1, ref.max_context(block_size, k) + 1)
    a = torch.randint(-2, k + 3, (n_req,))
    return s.to(len_dtype), a.to(acc_dtype)


# ----------------------------------------------------------------------------------------------------
# Independent oracle: Python loops over the lists, the split walked block by block.


def oracle(seq_lens_before, num_accepted, k, block_size, parts, num_tokens=None):
    s_list, a_list = seq_lens_before.tolist(), num_accepted.tolist()
    q = 1 + k
    n_tok = len(s_list) * q if num_tokens is None else num_tokens
    new_lens, qsl, rows, toks = [], [0], [], []
    for b, (s, a) in enumerate(zip(s_list, a_list)):
        a = min(max(a, 0), k)
        if 0 <= s <= ref.max_context(block_size, k):
            new_lens.append(s + a + 2 + k)
            rows.append(b * q + a)
            toks += [(s + 1 + a + j, b) for j in range(q)]
        else:
            new_lens.append(0)
            rows.append(-1)
        qsl.append(len(toks))
    toks = (toks + [(-1, -1)] * n_tok)[:n_tok]
    # Every (request, block) in global order; part p takes the next per_part of them.
    pairs = [(b, j) for b, length in enumerate(new_lens) for j in range(-(-length // block_size))]
    per_part = -(-len(pairs) // parts)
    owners = {}
    meta = []
    for p in range(parts):
        mine = pairs[p * per_part : (p + 1) * per_part]
        for b, _ in mine:
            owners.setdefault(b, [])
            if p not in owners[b]:
                owners[b].append(p)
        meta.append(mine)
    splits = [len(owners.get(b, [])) for b in range(len(s_list))]
    rows_meta = []
    for p, mine in enumerate(meta):
        if not mine:
            rows_meta.append([-1, 0, -1, 0, 0, 0, 0, 0])
            continue
        (fb, fj), (lb, lj) = mine[0], mine[-1]
        rows_meta.append([fb, fj, lb, lj + 1, owners[fb].index(p), int(splits[fb] > 1), int(splits[lb] > 1), len(mine)])
    cum = [0]
    for c in splits:
        cum.append(cum[-1] + c)
    return [new_lens, qsl, [t[0] for t in toks], [t[1] for t in toks], rows, rows_meta, cum]


def assert_schedule(got, expected, what=""):
    for name, g, e in zip(ref.MtpSchedule._fields, got, expected):
        e = e if isinstance(e, torch.Tensor) else torch.tensor(e, dtype=torch.int32).reshape(g.shape)
        assert_bitwise_equal(g.cpu(), e.cpu(), what=f"{what} {name}")


def poisoned_schedule(n_req: int, n_tok: int, parts: int, device) -> api.MtpSchedule:
    """Poisoned `out` buffers for a batch of n_req requests, n_tok tokens and `parts` parts."""
    return api.MtpSchedule(*(poisoned(shape, torch.int32, device) for shape in api.output_shapes(n_req, n_tok, parts)))


def check_split(sched, block_size: int, parts: int):
    """Every (request, block) in exactly one part, parts contiguous and in order, the most loaded part
    within ceil(total / parts) + 1 blocks, num_splits consistent with the parts touching each request."""
    lens = sched.new_seq_lens.tolist()
    blocks = [-(-n // block_size) for n in lens]
    total = sum(blocks)
    seen = []
    touched = [set() for _ in lens]
    for p, row in enumerate(sched.tile_metadata.tolist()):
        fr, fb, lr, le, first_split, _, _, nb = row
        if fr < 0:
            assert row == [-1, 0, -1, 0, 0, 0, 0, 0], f"part {p}: empty part {row}"
            continue
        run = []
        b, j = fr, fb
        while (b, j) != (lr, le):
            assert b < len(lens), f"part {p}: its run passes the last request"
            if j >= blocks[b]:
                b, j = b + 1, 0
                continue
            run.append((b, j))
            touched[b].add(p)
            j += 1
        assert len(run) == nb, f"part {p}: {len(run)} blocks, metadata says {nb}"
        seen += run
    assert seen == [(b, j) for b in range(len(lens)) for j in range(blocks[b])], "parts do not tile the blocks once, in order"
    loads = sched.tile_metadata[:, 7]
    assert int(loads.max()) <= -(-total // parts) + 1
    splits = [len(t) for t in touched]
    assert sched.num_splits.tolist() == [sum(splits[:b]) for b in range(len(lens) + 1)]


# ----------------------------------------------------------------------------------------------------
# Reference suite.


@pytest.mark.ref
@pytest.mark.parametrize("len_dtype", IDX, ids=str)
@pytest.mark.parametrize("acc_dtype", IDX, ids=str)
@pytest.mark.parametrize("n_req,k,block_size,parts", [(1, 1, 64, 132), (7, 3, 16, 5), (33, 2, 48, 8), (200, 3, 64, 132), (64, 0, 1, 7), (300, 1, 64, 1)])
def test_ref_matches_oracle(len_dtype, acc_dtype, n_req, k, block_size, parts):
    s, a = random_batch(n_req, k, block_size, len_dtype, acc_dtype)
    for n_tok in (None, n_req * (1 + k) + 9, max(n_req * (1 + k) // 2, 1), 0):
        got = ref.schedule_mtp_varlen_ref(s, a, k, block_size, parts, n_tok)
        assert all(t.dtype == torch.int32 for t in got)
        assert_schedule(got, oracle(s, a, k, block_size, parts, n_tok), f"n_tok={n_tok}")


@pytest.mark.ref
@pytest.mark.parametrize("n_req,k,block_size,parts", [(1, 1, 64, 132), (5, 3, 16, 4), (100, 3, 64, 132), (37, 1, 7, 11), (1000, 2, 64, 132), (3, 0, 1, 100)])
def test_ref_split_covers_every_block_once(n_req, k, block_size, parts):
    s, a = random_batch(n_req, k, block_size)
    check_split(ref.schedule_mtp_varlen_ref(s, a, k, block_size, parts), block_size, parts)


@pytest.mark.ref
def test_ref_zero_length_and_inactive_requests():
    # Request 0 starts at length 0; 1 and 3 are inactive (negative, too long); a = 9 clamps to k.
    k, bs = 2, 4
    s = torch.tensor([0, -1, 5, ref.max_context(bs, k) + 1, 3])
    a = torch.tensor([0, 1, 9, 0, -4])
    got = ref.schedule_mtp_varlen_ref(s, a, k, bs, 3, 12)
    assert got.new_seq_lens.tolist() == [4, 0, 11, 0, 7]
    assert got.query_start_loc.tolist() == [0, 3, 3, 6, 6, 9]
    assert got.positions.tolist() == [1, 2, 3, 8, 9, 10, 4, 5, 6, -1, -1, -1]
    assert got.request_ids.tolist() == [0, 0, 0, 2, 2, 2, 4, 4, 4, -1, -1, -1]
    assert got.last_hidden_rows.tolist() == [0, -1, 8, -1, 12]
    # Blocks 1, 0, 3, 0, 2: six in all, two per part.
    assert got.tile_metadata.tolist() == [[0, 0, 2, 1, 0, 0, 1, 2], [2, 1, 2, 3, 1, 1, 1, 2], [4, 0, 4, 2, 0, 0, 0, 2]]
    assert got.num_splits.tolist() == [0, 1, 1, 3, 3, 4]
    # Every request inactive: no tokens, every part empty.
    none = ref.schedule_mtp_varlen_ref(torch.full((4,), -1), torch.zeros(4), k, bs, 3)
    assert none.query_start_loc.tolist() == [0] * 5 and none.num_splits.tolist() == [0] * 5
    assert none.tile_metadata[:, 0].tolist() == [-1] * 3 and none.positions.tolist() == [-1] * 12
    # The oracle, written apart from ref.py, agrees on both hand-read batches.
    assert_schedule(got, oracle(s, a, k, bs, 3, 12), "inactive requests")
    assert_schedule(none, oracle(torch.full((4,), -1), torch.zeros(4), k, bs, 3), "every request inactive")


@pytest.mark.ref
def test_ref_more_parts_than_blocks():
    got = ref.schedule_mtp_varlen_ref(torch.tensor([1, 100]), torch.tensor([1, 0]), 1, 64, 132)
    check_split(got, 64, 132)
    assert got.tile_metadata[:, 7].tolist() == [1, 1, 1] + [0] * 129


@pytest.mark.ref
def test_small_batch_thresholds_within_their_kernels_capacity():
    assert 1 <= api.WARP_KERNEL_MAX_BATCH <= 32 * ref.WARP_KERNEL_SLOTS[-1]
    assert api.WARP_KERNEL_MAX_BATCH < api.LANE_KERNEL_MAX_BATCH <= 32 * ref.LANE_KERNEL_WARPS[-1]


@pytest.mark.ref
@pytest.mark.parametrize("len_dtype", IDX, ids=str)
def test_cpu_interface_writes_every_output(len_dtype):
    s, a = random_batch(40, 3, 64, len_dtype, torch.int32)
    outs = poisoned_schedule(40, 170, 132, "cpu")
    got = api.schedule_mtp_varlen(s, a, num_draft=3, block_size=64, num_sm_parts=132, num_tokens=170, out=outs)
    assert all(g is o for g, o in zip(got, outs))
    assert_schedule(got, oracle(s, a, 3, 64, 132, 170), "cpu interface")
    fresh = api.schedule_mtp_varlen(s, a, num_draft=3, block_size=64, num_sm_parts=132)
    assert fresh.positions.shape == (160,) and isinstance(fresh, api.MtpSchedule)


@pytest.mark.ref
def test_empty_batch_is_well_defined():
    empty = torch.zeros(0, dtype=torch.int32)
    outs = poisoned_schedule(0, 6, 4, "cpu")
    got = api.schedule_mtp_varlen(empty, empty, num_draft=1, block_size=64, num_sm_parts=4, num_tokens=6, out=outs)
    assert_schedule(got, ref.schedule_mtp_varlen_ref(empty, empty, 1, 64, 4, 6), "empty")
    assert got.query_start_loc.tolist() == [0] and got.positions.tolist() == [-1] * 6
    assert got.tile_metadata.tolist() == [[-1, 0, -1, 0, 0, 0, 0, 0]] * 4


def _bad_inputs():
    i32, i64 = torch.int32, torch.int64
    s = torch.tensor([5, 9, 0], dtype=i32)
    a = torch.tensor([1, 0, 2], dtype=i64)

    def outs(n_tok=8, parts=4, n_req=3):
        return tuple(poisoned(shape, i32, "cpu") for shape in api.output_shapes(n_req, n_tok, parts))

    def case(name, error, message, **kw):
        args = dict(seq_lens_before=s, num_accepted=a, num_draft=1, block_size=16, num_sm_parts=4, num_tokens=8, out=outs())
        args.update(kw)
        return (name, args, error, message)

    shared = torch.zeros(64, dtype=i32)
    return [
        case("lens-float", TypeError, "seq_lens_before has dtype torch.float32", seq_lens_before=s.float()),
        case("lens-list", TypeError, "seq_lens_before must be a torch.Tensor", seq_lens_before=[5, 9, 0]),
        case("lens-2d", ValueError, "seq_lens_before must be 1-D", seq_lens_before=s[None]),
        case("lens-strided", ValueError, "seq_lens_before must be contiguous", seq_lens_before=torch.zeros(6, dtype=i32)[::2]),
        case("lens-meta", ValueError, "seq_lens_before is on meta; tensors on meta are not supported", seq_lens_before=s.to("meta")),
        case("acc-int16", TypeError, "num_accepted has dtype torch.int16", num_accepted=a.to(torch.int16)),
        case("acc-short", ValueError, "num_accepted must have shape (3,)", num_accepted=a[:2]),
        case("acc-other-device", ValueError, "num_accepted is on meta", num_accepted=a.to("meta")),
        case("draft-neg", ValueError, "num_draft must be in [0, 15]", num_draft=-1),
        case("draft-float", TypeError, "num_draft must be an int", num_draft=1.0),
        case("block-size-0", ValueError, "block_size must be in [1, 4096]", block_size=0),
        case("parts-0", ValueError, "num_sm_parts must be in [1, 1024]", num_sm_parts=0),
        case("parts-neg", ValueError, "num_sm_parts must be in [1, 1024]", num_sm_parts=-3),
        case("parts-bool", TypeError, "num_sm_parts must be an int", num_sm_parts=True),
        case("draft-16", ValueError, "num_draft must be in [0, 15]", num_draft=16),
        case("block-size-4097", ValueError, "block_size must be in [1, 4096]", block_size=4097),
        case("parts-1025", ValueError, "num_sm_parts must be in [1, 1024]", num_sm_parts=1025),
        case("tokens-past-int32", ValueError, "num_tokens must be in [0, 2147483647]", num_tokens=2**31),
        case("tokens-neg", ValueError, "num_tokens must be in [0,", num_tokens=-1),
        case("tokens-float", TypeError, "num_tokens must be an int", num_tokens=8.0),
        case("batch-too-big", ValueError, "seq_lens_before has B = 4097 requests; at most 4096 are supported", seq_lens_before=torch.zeros(4097, dtype=i32), num_accepted=torch.zeros(4097, dtype=i32), out=outs(n_req=4097)),
        case("out-pair", TypeError, "out must be an MtpSchedule or tuple", out=outs()[:2]),
        case("out-int64", ValueError, "out.positions must be (8,) torch.int32", out=outs()[:2] + (poisoned((8,), i64, "cpu"),) + outs()[3:]),
        case("out-meta-shape", ValueError, "out.tile_metadata must be (4, 8)", out=outs(parts=5)),
        case("out-tokens-short", ValueError, "out.request_ids must be (8,)", out=outs()[:3] + (poisoned((7,), i32, "cpu"),) + outs()[4:]),
        case("out-on-input", ValueError, "out.new_seq_lens overlaps seq_lens_before", seq_lens_before=shared[:3], out=(shared[1:4],) + outs()[1:]),
        case("out-same", ValueError, "out.positions overlaps out.request_ids", out=(lambda o, t: o[:2] + (t, t) + o[4:])(outs(), poisoned((8,), i32, "cpu"))),
    ]


@pytest.mark.ref
@pytest.mark.parametrize("name", case_names(_bad_inputs))
def test_bad_input_raises_and_writes_nothing(name):
    _, kwargs, error, message = case_named(_bad_inputs, name)
    assert_rejected_without_writes(api.schedule_mtp_varlen, kwargs, error, message, kwargs["out"])


# ----------------------------------------------------------------------------------------------------
# Codegen (CPU): every shipped configuration lowers, compiles and fits on chip.


def _config_id(config) -> str:
    return "k{}-bs{}-p{}-{}-{}".format(*config)


# The CUDA kernels: the block kernel, the warp kernel at every slot count (requests per lane) and the
# lane kernel at every warp count.
CUDA_KERNELS = (
    [("schedule_mtp_varlen_tl", ())]
    + [("schedule_mtp_varlen_warp_tl", (s,)) for s in ref.WARP_KERNEL_SLOTS]
    + [("schedule_mtp_varlen_lane_tl", (w,)) for w in ref.LANE_KERNEL_WARPS]
)


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("config", ref.schedule_mtp_varlen_shipped_configs(), ids=_config_id)
@pytest.mark.parametrize("kernel", CUDA_KERNELS, ids=lambda k: k[0] + "".join(f"-{s}" for s in k[1]))
def test_cuda_config_compiles_without_spills(kernel, arch, config):
    from kernels.schedule_mtp_varlen import cuda
    from testing import codegen_cuda

    factory, extra = getattr(cuda, kernel[0]), kernel[1]
    # Built as the interface builds it for these archs: a programmatic dependent launch.
    source = codegen_cuda.cuda_source(factory, *config, *extra, arch=arch, pdl=True)
    # One launch, no atomics: prefixes by fixed-order scans and ballots, parts by search.
    assert "atomic" not in source.lower() and source.count("__global__ void") <= 2
    if kernel[0] == "schedule_mtp_varlen_warp_tl":
        # The warp kernel's warps never wait for each other.
        assert "__syncthreads" not in source
    elif kernel[0] == "schedule_mtp_varlen_lane_tl":
        # The lane kernel's warps meet twice: for the warps' counts, then their aligned starts.
        assert source.count("__syncthreads") == 2
    report = codegen_cuda.check_cuda_resources(factory, *config, *extra, arch=arch, pdl=True)
    assert report.spill_store_bytes == report.spill_load_bytes == report.stack_frame_bytes == 0


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("kernel", [CUDA_KERNELS[0], CUDA_KERNELS[1], CUDA_KERNELS[-1]], ids=lambda k: k[0])
def test_cuda_dependent_launch_waits_before_memory(kernel):
    # pdl=True: nvcc keeps every global access after the wait for the grids before; pdl=False
    # emits neither call.
    from kernels.schedule_mtp_varlen import cuda
    from testing import codegen_cuda

    factory, args = getattr(cuda, kernel[0]), (*ref.schedule_mtp_varlen_shipped_configs()[0], *kernel[1])
    codegen_cuda.check_dependent_launch(factory, *args)


@pytest.mark.codegen_cuda
def test_cuda_small_batch_kernels_reject_other_sizes():
    from kernels.schedule_mtp_varlen import cuda

    with pytest.raises(ValueError, match="slots must be one of"):
        cuda.schedule_mtp_varlen_warp_tl(1, 64, 132, "int32", "int32", 3)
    with pytest.raises(ValueError, match="warps must be one of"):
        cuda.schedule_mtp_varlen_lane_tl(1, 64, 132, "int32", "int32", 2)


@pytest.mark.codegen_cuda
def test_cuda_shipped_configs_cover_every_path():
    from kernels.schedule_mtp_varlen import cuda

    configs = cuda.schedule_mtp_varlen_shipped_configs()
    assert {c[3] for c in configs} == {c[4] for c in configs} == set(cuda.INDEX_DTYPES)
    # DeepSeek-V3's draft lengths 1 and 3 on 132 SMs, a non-power-of-two block size, and more parts
    # than one pass of threads.
    assert {(1, 64, 132), (3, 64, 132)} <= {c[:3] for c in configs}
    assert any(bs & (bs - 1) for _, bs, *_ in configs) and any(p > 512 for _, _, p, *_ in configs)


@pytest.mark.codegen_ascend
@pytest.mark.parametrize("config", ref.schedule_mtp_varlen_shipped_configs(), ids=_config_id)
def test_ascend_config_lowers_and_fits_ub(config):
    from kernels.schedule_mtp_varlen import asc
    from testing import codegen_ascend

    source = codegen_ascend.ascend_source(asc.schedule_mtp_varlen_tl, *config)
    assert "__global__" in source or "__aicore__" in source
    codegen_ascend.assert_ub_fits(asc.schedule_mtp_varlen_tl, *config)


# ----------------------------------------------------------------------------------------------------
# Device: the backend's kernel against the reference, on the accelerator.

# Largest batch of the warp kernel: 32 lanes x the most slots; of the lane kernel: a thread per
# request, 32 x the most warps.
WARP_CAPACITY = 32 * ref.WARP_KERNEL_SLOTS[-1]
LANE_CAPACITY = 32 * ref.LANE_KERNEL_WARPS[-1]


# The batch each small-batch kernel holds: (interface limit, the largest batch), by kernel choice.
CAPACITY = {"warp": ("WARP_KERNEL_MAX_BATCH", WARP_CAPACITY), "lane": ("LANE_KERNEL_MAX_BATCH", LANE_CAPACITY)}


@pytest.fixture(params=["block", "warp", "lane"])
def kernel_choice(request, monkeypatch):
    """Runs the test through the interface with each CUDA kernel: the batch-size rules moved so that
    every batch takes the block kernel, or one small-batch kernel up to all it holds. Tests over
    batch sizes take it through with_kernels. Other backends have the block kernel only: their other
    cases skip, since the interface would serve them with the block kernel."""
    if request.param != "block":
        skip_unless_backend_has(f"schedule_mtp_varlen_{request.param}_tl")
    for choice, (limit, capacity) in CAPACITY.items():
        monkeypatch.setattr(api, limit, capacity if choice == request.param else 0)
    return request.param


def with_kernels(cases, batch_of, case_id):
    """(kernel_choice, case) parameters: every case through the block kernel, and through each
    small-batch kernel where its batch fits (larger batches are the block kernel's alone, so not
    generated)."""
    return [
        pytest.param(kernel, case, id=f"{kernel}-{case_id(case)}")
        for case in cases
        for kernel in ("block", *CAPACITY)
        if kernel == "block" or batch_of(case) <= CAPACITY[kernel][1]
    ]


# (B, k, block_size, num_sm_parts): decode batches 1 .. 4096. For the warp kernel every slot count
# (B 1, 2, 31, 32: one; 33, 37, 64: two; 65, 100, 128: four), its capacity and the interface
# threshold + 1 (129). For the lane kernel every warp count (B <= 256: 8; 257, 512: 16; 513, 1024:
# 32) and its capacity + 1 (1025). For the block kernel every per-thread request count
# keff = ceil(B / 512): 1, 2 (513 and 1024, a partial and a full last round), 5 (2500) and 8 (4096,
# the largest batch). DeepSeek-V3's k = 1 and 3 on 132 parts, no drafts, odd block sizes, one part,
# more parts than threads (600, and 1024: the warp kernel's and the lane kernel's most rounds).
DEVICE_CASES = [
    (1, 1, 64, 132),
    (2, 3, 64, 132),
    (8, 3, 64, 132),
    (31, 1, 7, 132),
    (32, 3, 64, 1024),
    (33, 2, 16, 5),
    (37, 0, 48, 600),
    (64, 1, 64, 132),
    (65, 3, 64, 132),
    (100, 3, 1, 1),
    (128, 3, 64, 132),
    (129, 15, 4096, 33),
    (255, 3, 64, 132),
    (256, 1, 64, 132),
    (257, 3, 64, 132),
    (512, 0, 48, 600),
    (513, 2, 16, 7),
    (1024, 3, 64, 132),
    (1025, 1, 64, 132),
    (2500, 3, 64, 132),
    (4096, 1, 64, 132),
]


def _device_batch(n_req, k, block_size, len_dtype, acc_dtype, device):
    s, a = random_batch(n_req, k, block_size, len_dtype, acc_dtype)
    return s.to(device), a.to(device)


@pytest.mark.device
@pytest.mark.parametrize("len_dtype", IDX, ids=str)
@pytest.mark.parametrize("acc_dtype", IDX, ids=str)
@pytest.mark.parametrize(
    "kernel_choice,case", with_kernels(DEVICE_CASES, lambda c: c[0], lambda c: "B{}-k{}-bs{}-p{}".format(*c)), indirect=["kernel_choice"]
)
def test_device_matches_ref(device, kernel_choice, len_dtype, acc_dtype, case):
    n_req, k, block_size, parts = case
    s, a = _device_batch(n_req, k, block_size, len_dtype, acc_dtype, device)
    for n_tok in (n_req * (1 + k), n_req * (1 + k) + 300, max(n_req // 2, 1), 0):
        outs = poisoned_schedule(n_req, n_tok, parts, device)
        got = api.schedule_mtp_varlen(s, a, num_draft=k, block_size=block_size, num_sm_parts=parts, num_tokens=n_tok, out=outs)
        assert all(g is o for g, o in zip(got, outs))
        assert_schedule(got, ref.schedule_mtp_varlen_ref(s, a, k, block_size, parts, n_tok), f"n_tok={n_tok}")
    outs = poisoned_schedule(n_req, n_req * (1 + k), parts, device)
    check_split(api.schedule_mtp_varlen(s, a, num_draft=k, block_size=block_size, num_sm_parts=parts, out=outs), block_size, parts)


@pytest.mark.device
@pytest.mark.parametrize("kernel_choice,n_req", with_kernels([WARP_CAPACITY, LANE_CAPACITY, 4096], int, "B{}".format), indirect=["kernel_choice"])
def test_device_long_contexts_and_all_inactive(device, kernel_choice, n_req):
    # Every length at the active limit (a block total just under 2**31 at B = 4096), the same with
    # every third one past it (inactive), then a batch with no active request.
    k, bs, parts = 3, 64, 132
    full = torch.full((n_req,), ref.max_context(bs, k), dtype=torch.int64)
    s = full.clone()
    s[::3] = ref.max_context(bs, k) + 1
    a = torch.full((n_req,), k, dtype=torch.int32)
    for lens in (full, s, torch.full((n_req,), -1, dtype=torch.int64)):
        outs = poisoned_schedule(n_req, n_req * (1 + k), parts, device)
        got = api.schedule_mtp_varlen(lens.to(device), a.to(device), num_draft=k, block_size=bs, num_sm_parts=parts, out=outs)
        assert_schedule(got, ref.schedule_mtp_varlen_ref(lens, a, k, bs, parts), "long")


@pytest.mark.device
@pytest.mark.parametrize("n_req,k,block_size,parts", [(1, 3, 64, 132), (32, 1, 64, 132), (33, 1, 4, 7), (128, 3, 64, 132)])
def test_device_part_boundaries_on_request_starts(device, kernel_choice, n_req, k, block_size, parts):
    # Every request 2 or 4 blocks long, so request starts fall on part boundaries (num_splits counts
    # them apart), and one request holding every block.
    s = torch.where(torch.arange(n_req) % 2 == 0, 2 * block_size, 4 * block_size) - (2 + k)
    a = torch.zeros(n_req, dtype=torch.int32)
    single = torch.full((n_req,), -1)
    single[n_req // 2] = 1000 * block_size
    for lens in (s, single):
        outs = poisoned_schedule(n_req, n_req * (1 + k), parts, device)
        got = api.schedule_mtp_varlen(lens.to(device), a.to(device), num_draft=k, block_size=block_size, num_sm_parts=parts, out=outs)
        assert_schedule(got, ref.schedule_mtp_varlen_ref(lens, a, k, block_size, parts), "boundaries")
        check_split(got, block_size, parts)


@pytest.mark.device
def test_device_empty_batch_launches_nothing(device, no_kernel_launches):
    empty = torch.zeros(0, dtype=torch.int32, device=device)
    got = api.schedule_mtp_varlen(empty, empty, num_draft=3, block_size=64, num_sm_parts=132, num_tokens=5)
    assert got.query_start_loc.tolist() == [0] and got.num_splits.tolist() == [0]
    assert got.positions.tolist() == [-1] * 5 and got.tile_metadata[:, 0].tolist() == [-1] * 132


@pytest.mark.device
def test_device_cuda_graph_replay(device, backend, kernel_choice):
    # Captured once at fixed sizes, replayed with new contents: every call of a decode step.
    if backend != "cuda":
        pytest.skip("CUDA graphs are a CUDA feature")
    n_req, k, bs, parts, n_tok = 128, 3, 64, 132, 600
    s = torch.zeros(n_req, dtype=torch.int32, device=device)
    a = torch.zeros(n_req, dtype=torch.int32, device=device)
    outs = poisoned_schedule(n_req, n_tok, parts, device)

    def call():
        api.schedule_mtp_varlen(s, a, num_draft=k, block_size=bs, num_sm_parts=parts, num_tokens=n_tok, out=outs)

    call()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    for inactive in (0.0, 0.5):
        s_cpu, a_cpu = random_batch(n_req, k, bs, torch.int32, torch.int32, inactive=inactive)
        s.copy_(s_cpu)
        a.copy_(a_cpu)
        for t in outs:
            t.fill_(torch.iinfo(torch.int32).min)
        graph.replay()
        assert_schedule(outs, ref.schedule_mtp_varlen_ref(s_cpu, a_cpu, k, bs, parts, n_tok), f"graph inactive={inactive}")
