"""Tests of `candidate_blocks`: reference vs a Python-loop oracle, interface validation, codegen, and
the device kernels.

Suites (markers, selected by `--tl-suite`; see testing/plugin.py): ref, codegen_cuda, codegen_ascend,
device. Inputs are drawn fresh per test from the plugin's per-test seed; outputs are poisoned first
(the int32 minimum, which no output holds: every output is >= -1). Scores are drawn from a few
values so that ties are common, with -inf, +inf, NaN and both zeros mixed in. Every comparison is
exact.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from kernels.candidate_blocks import api, ref
from testing.numeric import assert_bitwise_equal, assert_rejected_without_writes, case_named, case_names, poisoned
from testing.plugin import skip_unless_backend_has

IDX = [torch.int32, torch.int64]


def random_scores(n_q: int, nb: int, special: float = 0.1, levels: int = 7) -> torch.Tensor:
    """(n_q, nb) float32 of a few distinct values (ties), about `special` of them -inf, +inf, NaN,
    -0.0 or 0.0."""
    s = torch.randint(-levels, levels + 1, (n_q, nb)).float() / 4
    pick = torch.rand(n_q, nb) < special
    specials = torch.tensor([-math.inf, math.inf, math.nan, -0.0, 0.0])
    s[pick] = specials[torch.randint(0, 5, (int(pick.sum()),))]
    return s


def random_counts(n_q: int, nb: int, dtype) -> torch.Tensor:
    """Causal counts in [-3, nb + 3]: out-of-range ones exercise the clamp; 0, 1 and nb are common.
    int64 counts also take values past int32 (2**31, 2**32 + 1, -2**32), which a kernel narrowing
    before it clamps would wrap."""
    kinds = torch.randint(0, 4, (n_q,))
    uniform = torch.randint(-3, nb + 4, (n_q,))
    fixed = torch.tensor([0, 1, nb])[torch.randint(0, 3, (n_q,))]
    return with_wide_values(torch.where(kinds == 0, fixed, uniform), dtype, [2**31, 2**32 + 1, -(2**32)])


def random_req_index(n_q: int, n_req: int, dtype) -> torch.Tensor:
    """Rows of the block table per query, about one in five invalid: -1, n_req and (int64) values
    past int32 (2**32, which narrows to row 0, and -2**32 + 1, which narrows to 1)."""
    return with_wide_values(torch.randint(-1, n_req + 1, (n_q,)), dtype, [2**32, -(2**32) + 1])


def with_wide_values(x: torch.Tensor, dtype, wide: list[int]) -> torch.Tensor:
    """x as dtype; for int64, about one entry in ten replaced by one of `wide` (values past int32)."""
    if dtype == torch.int64:
        x = torch.where(torch.rand(x.shape) < 0.1, torch.tensor(wide)[torch.randint(0, len(wide), x.shape)], x)
    return x.to(dtype)


def random_table(n_req: int, max_blocks: int, holes: float = 0.05, wider: int = 3) -> torch.Tensor:
    """(n_req, max_blocks) int32 of distinct shuffled pages, a few holes (-1, -2 or -7: any negative
    entry is one), as a view of a wider table."""
    ids = torch.randperm(n_req * max_blocks * 2)[: n_req * max_blocks].to(torch.int32).reshape(n_req, max_blocks)
    hole = torch.rand(n_req, max_blocks) < holes
    ids[hole] = torch.tensor([-1, -2, -7], dtype=torch.int32)[torch.randint(0, 3, (int(hole.sum()),))]
    table = torch.full((n_req, max_blocks + wider), -7, dtype=torch.int32)
    table[:, :max_blocks] = ids
    return table[:, :max_blocks]


# ----------------------------------------------------------------------------------------------------
# Independent oracle: a priority list per query, in plain Python.


def oracle(scores, n_t, k, num_sink, num_local, table=None, req=None) -> list[list[int]]:
    rows = []
    nb = scores.shape[1]
    for srow, n in zip(scores.tolist(), n_t.tolist()):
        n = min(max(n, 0), nb)
        sinks = list(range(min(num_sink, n)))
        local = [j for j in range(n - 1, max(n - num_local, 0) - 1, -1) if j >= num_sink]
        forced = set(sinks) | set(local)
        # NaN last; otherwise descending score (Python compares -0.0 == 0.0), then ascending id.
        rest = sorted((j for j in range(n) if j not in forced), key=lambda j: (math.isnan(srow[j]), 0.0 if math.isnan(srow[j]) else -srow[j], j))
        chosen = sorted((sinks + local + rest)[:k])
        rows.append(chosen + [-1] * (k - len(chosen)))
    if table is not None:
        tl, rl = table.tolist(), req.tolist()
        for t, row in enumerate(rows):
            r = rl[t]
            for i, j in enumerate(row):
                ok = j >= 0 and 0 <= r < len(tl) and j < len(tl[r]) and tl[r][j] >= 0
                row[i] = tl[r][j] if ok else -1
    return rows


def assert_matches(got: torch.Tensor, expected: list[list[int]], what: str) -> None:
    exp = torch.tensor(expected, dtype=torch.int32).reshape(got.shape)
    assert_bitwise_equal(got.cpu(), exp, what=what)


# ----------------------------------------------------------------------------------------------------
# Reference suite.

REF_CASES = [
    # (T, NB, k, num_sink, num_local)
    (1, 1, 1, 0, 0),
    (9, 16, 4, 0, 0),
    (9, 16, 4, 1, 2),
    (17, 33, 5, 3, 4),  # sink + local > k
    (5, 40, 64, 2, 2),  # k > NB: every candidate
    (12, 100, 16, 8, 12),
    (7, 257, 31, 0, 300),  # local covers everything
    (3, 2048, 64, 1, 2),
]


@pytest.mark.ref
@pytest.mark.parametrize("n_dtype", IDX, ids=str)
@pytest.mark.parametrize("case", REF_CASES, ids=lambda c: "T{}-NB{}-k{}-s{}-l{}".format(*c))
def test_ref_matches_oracle(n_dtype, case):
    n_q, nb, k, sink, local = case
    scores = random_scores(n_q, nb)
    n_t = random_counts(n_q, nb, n_dtype)
    got = ref.candidate_blocks_ref(scores, n_t, k, sink, local)
    assert got.dtype == torch.int32 and got.shape == (n_q, k)
    assert_matches(got, oracle(scores, n_t, k, sink, local), "ids")


@pytest.mark.ref
@pytest.mark.parametrize("req_dtype", IDX, ids=str)
def test_ref_block_table_matches_oracle(req_dtype):
    n_q, nb, k, n_req, max_blocks = 20, 50, 8, 4, 40  # ids past max_blocks map to -1
    scores, n_t = random_scores(n_q, nb), random_counts(n_q, nb, torch.int32)
    table = random_table(n_req, max_blocks)
    req = random_req_index(n_q, n_req, req_dtype)
    got = ref.candidate_blocks_ref(scores, n_t, k, 1, 2, table, req)
    assert_matches(got, oracle(scores, n_t, k, 1, 2, table, req), "pages")


@pytest.mark.ref
def test_ref_edge_rules():
    nan, inf = math.nan, math.inf
    scores = torch.tensor([[nan, -inf, 0.0, -0.0, 5.0, nan, inf, 1.0]])

    def picked(n, k, num_sink=0, num_local=0):
        """The reference's ids as lists, which the oracle (written apart from ref.py) must also give."""
        got = ref.candidate_blocks_ref(scores, torch.tensor([n]), k, num_sink=num_sink, num_local=num_local)
        assert_matches(got, oracle(scores, torch.tensor([n]), k, num_sink, num_local), f"n {n} k {k} sink {num_sink} local {num_local}")
        return got.tolist()

    # No forced blocks: +inf, 5, 1, then the zeros tie (lower id), then -inf, NaN last.
    assert picked(8, 3) == [[4, 6, 7]]
    assert picked(8, 4) == [[2, 4, 6, 7]]
    assert picked(8, 6) == [[1, 2, 3, 4, 6, 7]]
    assert picked(8, 7) == [[0, 1, 2, 3, 4, 6, 7]]
    # Forced blocks first: sinks, then local blocks newest first, then scores.
    assert picked(8, 3, num_sink=1, num_local=3) == [[0, 6, 7]]
    assert picked(8, 2, num_sink=2, num_local=3) == [[0, 1]]
    assert picked(8, 4, num_sink=1, num_local=1) == [[0, 4, 6, 7]]
    # The causal range: local blocks end at n - 1; clamped counts; n <= k keeps every candidate.
    assert picked(5, 2, num_local=1) == [[2, 4]]
    assert picked(-4, 2) == [[-1, -1]]
    assert picked(99, 9) == [[0, 1, 2, 3, 4, 5, 6, 7, -1]]
    assert picked(3, 5) == [[0, 1, 2, -1, -1]]


@pytest.mark.ref
def test_ref_ranking_keys_order():
    s = torch.tensor([[-math.inf, -1.0, -0.0, 0.0, 1e-45, 2.0, math.inf, math.nan]])
    keys = ref.ranking_keys(s, torch.tensor([8]), 0, 0)[0].tolist()
    assert keys[0] == 0x007FFFFF and keys[6] == 0xFF800000 and keys[7] == 1
    assert keys[2] == keys[3] == 0x80000000
    assert keys[:2] + keys[3:7] == sorted(keys[:2] + keys[3:7]) and len(set(keys[3:7])) == 4
    forced = ref.ranking_keys(s, torch.tensor([6]), 1, 2)[0].tolist()
    assert forced == [ref.SINK_KEY, keys[1], keys[2], keys[3], ref.SINK_KEY - 2, ref.SINK_KEY - 1, 0, 0]


@pytest.mark.ref
@pytest.mark.parametrize("paged", [False, True], ids=["ids", "pages"])
def test_cpu_interface_writes_every_output(paged):
    n_q, nb, k = 11, 70, 12
    scores, n_t = random_scores(n_q, nb), random_counts(n_q, nb, torch.int64)
    table = random_table(3, 70) if paged else None
    req = torch.randint(0, 3, (n_q,), dtype=torch.int32) if paged else None
    out = poisoned((n_q, k), torch.int32, "cpu")
    got = api.select_candidate_blocks(scores, n_t, k, num_sink=2, num_local=99, block_table=table, req_index=req, out=out)
    assert got is out
    assert_matches(out, oracle(scores, n_t, k, 2, 99, table, req), "ids")


@pytest.mark.ref
def test_empty_batch_output_shape_and_dtype():
    ids = api.select_candidate_blocks(torch.zeros((0, 16)), torch.zeros(0, dtype=torch.int32), 4)
    assert ids.shape == (0, 4) and ids.dtype == torch.int32


def _bad_inputs():
    i32 = torch.int32
    scores = torch.zeros((3, 8))
    n_t = torch.tensor([1, 5, 8], dtype=i32)
    table = torch.zeros((2, 8), dtype=i32)
    req = torch.zeros(3, dtype=i32)

    def case(label, error, message, **kw):
        args = dict(scores=scores, n_t=n_t, k=4, out=poisoned((3, 4), i32, "cpu"))
        args.update(kw)
        return (label, args, error, message)

    shared = torch.zeros(64, dtype=i32)
    floats = torch.zeros(64)
    return [
        case("scores-bf16", TypeError, "scores has dtype torch.bfloat16", scores=scores.bfloat16()),
        case("scores-1d", ValueError, "scores must be 2-D", scores=scores[0]),
        case("scores-strided", ValueError, "scores must be contiguous", scores=torch.zeros((3, 16))[:, ::2]),
        case("scores-wide", ValueError, "scores has 2049 blocks per query; NB must be in [1, 2048]", scores=torch.zeros((3, 2049)), out=poisoned((3, 4), i32, "cpu")),
        case("scores-empty-row", ValueError, "scores has 0 blocks per query; NB must be in [1, 2048]", scores=torch.zeros((3, 0))),
        case("scores-list", TypeError, "scores must be a torch.Tensor", scores=[[0.0] * 8] * 3),
        case("n-float", TypeError, "n_t has dtype torch.float32", n_t=n_t.float()),
        case("n-short", ValueError, "n_t must have shape (3,)", n_t=n_t[:2]),
        case("n-meta", ValueError, "n_t is on meta", n_t=n_t.to("meta")),
        case("k-0", ValueError, "k must be in [1, 2048]", k=0),
        case("k-big", ValueError, "k must be in [1, 2048]", k=2049),
        case("k-float", TypeError, "k must be an int", k=4.0),
        case("sink-neg", ValueError, "num_sink must be in [0,", num_sink=-1),
        case("local-neg", ValueError, "num_local must be in [0,", num_local=-2),
        case("local-bool", TypeError, "num_local must be an int", num_local=True),
        case("table-alone", ValueError, "block_table and req_index must be given together", block_table=table),
        case("req-alone", ValueError, "block_table and req_index must be given together", req_index=req),
        case("table-int64", TypeError, "block_table has dtype torch.int64", block_table=table.long(), req_index=req),
        case("table-empty", ValueError, "block_table must have at least one row", block_table=table[:0], req_index=req),
        case("table-col-strided", ValueError, "block_table's last dimension must be contiguous", block_table=torch.zeros((2, 16), dtype=i32)[:, ::2], req_index=req),
        case("req-int16", TypeError, "req_index has dtype torch.int16", block_table=table, req_index=req.to(torch.int16)),
        case("req-short", ValueError, "req_index must have shape (3,)", block_table=table, req_index=req[:1]),
        case("out-int64", ValueError, "out must be (3, 4) torch.int32", out=poisoned((3, 4), torch.int64, "cpu")),
        case("out-shape", ValueError, "out must be (3, 4)", out=poisoned((3, 5), i32, "cpu")),
        case("out-on-n", ValueError, "out overlaps n_t", n_t=shared[:3], out=shared[:12].view(3, 4)),
        case("n-strided", ValueError, "n_t must be contiguous", n_t=torch.zeros(6, dtype=i32)[::2]),
        case("req-strided", ValueError, "req_index must be contiguous", block_table=table, req_index=torch.zeros(6, dtype=i32)[::2]),
        case("req-meta", ValueError, "req_index is on meta", block_table=table, req_index=req.to("meta")),
        case("out-on-req", ValueError, "out overlaps req_index", block_table=table, req_index=shared[:3], out=shared[:12].view(3, 4)),
        case("out-on-scores", ValueError, "out overlaps scores", scores=floats[:24].view(3, 8), out=floats[12:24].view(i32).view(3, 4)),
        case("out-on-table", ValueError, "out overlaps block_table", block_table=shared[:16].view(2, 8), req_index=req, out=shared[:12].view(3, 4)),
    ]


@pytest.mark.ref
@pytest.mark.parametrize("name", case_names(_bad_inputs))
def test_bad_input_raises_and_writes_nothing(name):
    _, kwargs, error, message = case_named(_bad_inputs, name)
    assert_rejected_without_writes(api.select_candidate_blocks, kwargs, error, message, [kwargs.get("out")])


# ----------------------------------------------------------------------------------------------------
# Codegen (CPU): every shipped configuration lowers, compiles and fits on chip.


def _configs(backend: str):
    import importlib

    return importlib.import_module(f"kernels.candidate_blocks.{backend}").candidate_blocks_shipped_configs()


def _config_id(config) -> str:
    return "-".join(map(str, config))


# The CUDA factories: a block per query, two warps per query (api.PAIR_KERNEL_MIN_QUERIES picks).
CUDA_FACTORIES = ["candidate_blocks_tl", "candidate_blocks_pair_tl"]


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("config", _configs("cuda"), ids=_config_id)
@pytest.mark.parametrize("factory", CUDA_FACTORIES)
def test_cuda_config_compiles_without_spills(factory, arch, config):
    from kernels.candidate_blocks import cuda
    from testing import codegen_cuda

    make = getattr(cuda, factory)
    # Built as the interface builds it for these archs: a programmatic dependent launch.
    source = codegen_cuda.cuda_source(make, *config, arch=arch, pdl=True)
    # One kernel (declared, then defined): one launch per call.
    assert len(set(re.findall(r"__global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(", source))) == 1
    report = codegen_cuda.check_cuda_resources(make, *config, arch=arch, pdl=True)
    assert report.spill_store_bytes == report.spill_load_bytes == report.stack_frame_bytes == 0


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("factory", CUDA_FACTORIES)
def test_cuda_dependent_launch_waits_before_memory(factory):
    # pdl=True: nvcc keeps every global access after the wait for the grids before; pdl=False
    # emits neither call. The first shipped configuration.
    from kernels.candidate_blocks import cuda
    from testing import codegen_cuda

    codegen_cuda.check_dependent_launch(getattr(cuda, factory), *_configs("cuda")[0])


@pytest.mark.codegen_cuda
def test_cuda_shipped_configs_cover_every_path():
    configs = _configs("cuda")
    assert {c[5] is None for c in configs} == {True, False}  # ids and pages
    assert {c[4] for c in configs} == set(ref.BACKEND_INDEX_DTYPES)
    assert any(c[0] == ref.MAX_NB and c[1] == ref.MAX_K for c in configs)  # the widest row and output
    assert any(c[0] % 256 for c in configs)  # a partial thread tile
    assert any(c[2] + c[3] > c[1] for c in configs)  # forced blocks beyond k


@pytest.mark.codegen_ascend
@pytest.mark.parametrize("config", _configs("asc"), ids=_config_id)
def test_ascend_config_lowers_and_fits_ub(config):
    from kernels.candidate_blocks import asc
    from testing import codegen_ascend

    source = codegen_ascend.ascend_source(asc.candidate_blocks_tl, *config)
    assert "__global__" in source or "__aicore__" in source
    codegen_ascend.assert_ub_fits(asc.candidate_blocks_tl, *config)


# ----------------------------------------------------------------------------------------------------
# Device: the backend's kernel against the reference, on the accelerator.

DEVICE_CASES = [
    # (T, NB, k, num_sink, num_local)
    (1, 2048, 64, 1, 2),  # decode
    (64, 2048, 64, 1, 2),
    (300, 2048, 64, 0, 0),
    (257, 2048, 2048, 1, 2),  # k = NB: every candidate
    (100, 1000, 100, 4, 4),
    (33, 100, 16, 8, 12),  # forced blocks beyond k
    (9, 1, 1, 0, 0),
    (37, 300, 1, 0, 0),  # k = 1 with a selection to make
    (40, 257, 300, 0, 1),  # k > NB
    (5000, 64, 8, 1, 1),
]


@pytest.fixture(params=["block", "pair"])
def kernel_choice(request, monkeypatch):
    """Runs the test through the interface with each CUDA kernel: the batch-size rule moved so that
    every batch takes the block-per-query or the two-warps-per-query kernel. Other backends have the
    block-per-query kernel only: their "pair" cases skip, since the interface would serve them with
    that kernel."""
    if request.param == "pair":
        skip_unless_backend_has("candidate_blocks_pair_tl")
    monkeypatch.setattr(api, "PAIR_KERNEL_MIN_QUERIES", 1 << 62 if request.param == "block" else 0)
    return request.param


def _device_inputs(n_q, nb, n_dtype, device, special=0.1, levels=7):
    return random_scores(n_q, nb, special, levels).to(device), random_counts(n_q, nb, n_dtype).to(device)


@pytest.mark.device
@pytest.mark.parametrize("n_dtype", IDX, ids=str)
@pytest.mark.parametrize("case", DEVICE_CASES, ids=lambda c: "T{}-NB{}-k{}-s{}-l{}".format(*c))
def test_device_matches_ref(device, kernel_choice, n_dtype, case):
    n_q, nb, k, sink, local = case
    # Many ties (7 levels), then almost none (random floats): both threshold paths.
    for levels in (7, 1 << 20):
        scores, n_t = _device_inputs(n_q, nb, n_dtype, device, levels=levels)
        out = poisoned((n_q, k), torch.int32, device)
        got = api.select_candidate_blocks(scores, n_t, k, num_sink=sink, num_local=local, out=out)
        assert_bitwise_equal(got, ref.candidate_blocks_ref(scores, n_t, k, min(sink, nb), min(local, nb)), what=f"ids levels={levels}")


@pytest.mark.device
@pytest.mark.parametrize("req_dtype", IDX, ids=str)
def test_device_block_table(device, kernel_choice, req_dtype):
    n_q, nb, k, n_req, max_blocks = 200, 600, 32, 7, 500  # ids past max_blocks map to -1
    scores, n_t = _device_inputs(n_q, nb, torch.int32, device)
    table = random_table(n_req, max_blocks).to(device)
    req = random_req_index(n_q, n_req, req_dtype).to(device)
    out = poisoned((n_q, k), torch.int32, device)
    api.select_candidate_blocks(scores, n_t, k, num_sink=1, num_local=2, block_table=table, req_index=req, out=out)
    assert_bitwise_equal(out, ref.candidate_blocks_ref(scores, n_t, k, 1, 2, table, req), what="pages")
    # A one-row table (every valid query on request 0).
    table, req = random_table(1, max_blocks).to(device), random_req_index(n_q, 1, req_dtype).to(device)
    out = poisoned((n_q, k), torch.int32, device)
    api.select_candidate_blocks(scores, n_t, k, num_sink=1, num_local=2, block_table=table, req_index=req, out=out)
    assert_bitwise_equal(out, ref.candidate_blocks_ref(scores, n_t, k, 1, 2, table, req), what="pages, one row")


@pytest.mark.device
def test_device_all_equal_and_all_nan(device, kernel_choice):
    n_q, nb, k = 8, 2048, 64
    n_t = torch.full((n_q,), nb, dtype=torch.int32, device=device)
    for fill in (1.0, -math.inf, math.nan, -0.0):
        scores = torch.full((n_q, nb), fill, device=device)
        # -0.0 and 0.0 tie: the 0.0 sits at a high id, so ranking -0.0 below it would change ids.
        scores[1::2, nb - 10] = 0.0
        # Fresh poison per fill: several fills select the same ids, so a stale output would pass.
        out = poisoned((n_q, k), torch.int32, device)
        assert api.select_candidate_blocks(scores, n_t, k, num_local=3, out=out) is out
        assert_bitwise_equal(out, ref.candidate_blocks_ref(scores, n_t, k, 0, 3), what=f"fill={fill}")


@pytest.mark.device
def test_device_empty_batch_launches_nothing(device, no_kernel_launches):
    ids = api.select_candidate_blocks(torch.zeros((0, 64), device=device), torch.zeros(0, dtype=torch.int32, device=device), 8)
    assert ids.shape == (0, 8)


@pytest.mark.device
def test_device_cuda_graph_replay(device, kernel_choice, backend):
    # Captured once at a fixed size, replayed with new contents: every call of a decode step.
    if backend != "cuda":
        pytest.skip("CUDA graphs are a CUDA feature")
    n_q, nb, k = 64, 2048, 64
    scores = torch.zeros((n_q, nb), device=device)
    n_t = torch.zeros(n_q, dtype=torch.int32, device=device)
    out = poisoned((n_q, k), torch.int32, device)
    api.select_candidate_blocks(scores, n_t, k, num_sink=1, num_local=2, out=out)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        api.select_candidate_blocks(scores, n_t, k, num_sink=1, num_local=2, out=out)
    for levels in (3, 1 << 20):
        s_cpu, n_cpu = random_scores(n_q, nb, levels=levels), random_counts(n_q, nb, torch.int32)
        scores.copy_(s_cpu)
        n_t.copy_(n_cpu)
        out.fill_(torch.iinfo(torch.int32).min)
        graph.replay()
        assert_bitwise_equal(out, ref.candidate_blocks_ref(scores, n_t, k, 1, 2), what=f"graph levels={levels}")
