"""Tests of `fused_sample`: its contract is the sampler's (kernels/sampler/ref.py, tested against an
independent oracle in kernels/sampler/sampler_test.py), so these tests hold the interface and the
kernels to it: the CPU interface against the reference, interface validation, the dispatch (the
chunked kernel up to ref.MAX_ROWS rows, the sampler's kernel above) and its workspace, codegen, and
on the device fused_sample == sampler == reference token for token, with the counters left zero.

Suites (markers, selected by `--tl-suite`; see testing/plugin.py): ref, codegen_cuda, codegen_ascend,
device. Inputs and checks are the sampler's (kernels/sampler/sampler_testlib.py), drawn fresh per
test from the plugin's per-test seed; outputs are poisoned first (sampler_testlib.poisoned_out:
values no correct call leaves, empty rows included) and tokens and empty flags compared exactly.
"""

from __future__ import annotations

import inspect
import math
import types

import pytest
import torch

from kernels.fused_sample import api, ref
from kernels.sampler import api as sampler_api
from kernels.sampler import ref as sampler_ref
from kernels.sampler.sampler_testlib import (
    I64,
    INF,
    assert_device_matches_ref,
    assert_graph_replays,
    assert_graphs_replay_in_any_order,
    bad_inputs,
    counters,
    device_logits,
    mixed_params,
    poisoned_out,
)
from testing.graphs import counters_left_zero, dirty_graph_pool
from testing.numeric import assert_bitwise_equal, assert_rejected_without_writes

# ----------------------------------------------------------------------------------------------------
# Reference suite: the contract, the interface on CPU, the dispatch.


@pytest.mark.ref
def test_contract_is_the_samplers():
    assert ref.fused_sample_ref is sampler_ref.sampler_ref
    assert ref.fused_sample_shipped_configs() == sampler_ref.sampler_shipped_configs()
    for config in ref.fused_sample_shipped_configs():
        ref.check_config("test", *config)
    # Rows are the grid's second dimension, capped at 65535 blocks by CUDA.
    assert ref.MAX_ROWS == 65535
    assert inspect.signature(api.fused_sample) == inspect.signature(sampler_api.sampler)


@pytest.mark.ref
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("B,V", [(1, 1), (10, 77), (3, 2 * ref.CHUNK + 5)], ids=lambda x: str(x))
def test_cpu_interface_equals_ref(dtype, B, V):
    logits = (torch.randn(B, V + 3) * 3)[:, :V].to(dtype)  # strided rows
    logits[torch.rand(B, V) < 0.05] = math.nan
    if B > 2:
        logits[2] = -INF
    params = mixed_params(B, V)
    expected = ref.fused_sample_ref(logits, *params, return_logprobs=True)
    out = poisoned_out(B, "cpu")
    got = api.fused_sample(logits, *params, return_logprobs=True, out=out)
    assert isinstance(got, sampler_api.SamplerOutput)
    assert got.tokens is out[0] and got.logprobs is out[1] and got.empty is out[2]
    assert_bitwise_equal(got.tokens, expected[0], what="tokens")
    assert_bitwise_equal(got.logprobs, expected[1], what="logprobs")
    assert_bitwise_equal(got.empty, expected[2], what="empty")
    k32 = api.fused_sample(logits, params[0], params[1].to(torch.int32), *params[2:])
    assert k32.logprobs is None
    assert_bitwise_equal(k32.tokens, expected[0], what="tokens (int32 top_k)")


@pytest.mark.ref
def test_empty_batch_launches_nothing(monkeypatch, no_kernel_launches):
    # As if on a device: CPU tensors never reach a kernel, so only then can a launch be caught.
    monkeypatch.setattr(api, "is_host", lambda t: False)
    z = torch.zeros(0)
    zi = torch.zeros(0, dtype=I64)
    got = api.fused_sample(torch.zeros(0, 5), z, zi, z, z, zi, zi, return_logprobs=True)
    assert got.tokens.shape == got.logprobs.shape == got.empty.shape == (0,)
    out = poisoned_out(0, "cpu", logprobs=False)
    assert api.fused_sample(torch.zeros(0, 5, dtype=torch.bfloat16), z, zi, z, z, zi, zi, out=out).tokens is out[0]


@pytest.mark.ref
@pytest.mark.parametrize("case", bad_inputs(), ids=lambda c: c[0])
def test_bad_input_raises_and_writes_nothing(case):
    _, kwargs, error, message = case
    out = kwargs["out"]
    written = list(out) if isinstance(out, (tuple, list)) else [out]
    assert_rejected_without_writes(api.fused_sample, kwargs, error, message, written)
    with pytest.raises(error, match="^fused_sample: "):
        api.fused_sample(**kwargs)


@pytest.mark.ref
def test_out_overlapping_an_input_is_rejected():
    B = 4
    seed = torch.zeros(B, dtype=I64)
    out = (seed, poisoned_out(B, "cpu")[1], torch.ones(B, dtype=torch.bool))
    z = torch.zeros(B)
    with pytest.raises(ValueError, match="fused_sample: out tokens overlaps seed"):
        api.fused_sample(torch.randn(B, 8), z, torch.zeros(B, dtype=I64), z, z, seed, torch.ones(B, dtype=I64), return_logprobs=True, out=out)


class _RecordingOps:
    """Stands in for tilelang_ops.ops: records which factory the interface asks for, with which static
    arguments, and what its kernel is launched with."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, factory):
        def build(*static):
            def kernel(*args):
                self.calls.append((factory, static, args))

            return kernel

        return build


@pytest.mark.ref
@pytest.mark.parametrize(
    "dtype,V,top_k_dtype,vec",
    [
        (torch.float32, 129280, torch.int64, 4),
        (torch.bfloat16, 151936, torch.int32, 8),
        (torch.bfloat16, 151937, torch.int64, 1),
        (torch.float32, 300004, torch.int64, 4),
    ],
)
def test_dispatch(monkeypatch, dtype, V, top_k_dtype, vec):
    """Device dispatch, on CPU tensors treated as device ones (not CUDA: no workspace, as on Ascend):
    fused_sample_tl at every vocabulary, with the sampler's static arguments (vec from the row
    stride: odd bfloat16 rows load one element at a time) and the same launch arguments."""
    ops = _RecordingOps()
    monkeypatch.setattr(api, "is_host", lambda t: False)
    monkeypatch.setattr(api, "backend_ops", lambda name, t: types.SimpleNamespace(ops=ops))
    B = 2
    logits = torch.zeros(B, V, dtype=dtype)
    params = list(mixed_params(B, V))
    params[1] = params[1].to(top_k_dtype)
    out = poisoned_out(B, "cpu")
    api.fused_sample(logits, *params, return_logprobs=True, out=out)
    ((name, static, args),) = ops.calls
    dname = str(dtype).removeprefix("torch.")
    assert name == "fused_sample_tl"
    assert static == (dname, vec, str(top_k_dtype).removeprefix("torch."))
    assert len(args) == 10 and args[0] is logits and all(a is p for a, p in zip(args[1:7], params))
    assert args[7] is out[0] and args[8] is out[1] and args[9].dtype == torch.uint8


@pytest.mark.ref
@pytest.mark.parametrize("B,factory", [(1, "fused_sample_tl"), (5, "fused_sample_tl"), (6, "sampler_tl")])
def test_dispatch_by_batch(monkeypatch, B, factory):
    """Batches up to ref.MAX_ROWS take the chunked kernel, larger ones the sampler's."""
    ops = _RecordingOps()
    monkeypatch.setattr(api, "is_host", lambda t: False)
    monkeypatch.setattr(api, "backend_ops", lambda name, t: types.SimpleNamespace(ops=ops))
    monkeypatch.setattr(ref, "MAX_ROWS", 5)
    V = 129280
    api.fused_sample(torch.zeros(B, V), *mixed_params(B, V), return_logprobs=True, out=poisoned_out(B, "cpu"))
    ((name, _, _),) = ops.calls
    assert name == factory


_FROM = api.FLAGGING_MIN_ROWS


@pytest.mark.ref
@pytest.mark.parametrize(
    "B,capability,flagging",
    [(1, (9, 0), False), (_FROM - 1, (9, 0), False), (_FROM, (9, 0), True), (512, (10, 0), True), (512, (8, 9), False), (_FROM, (8, 0), False)],
    ids=str,
)
def test_flagging_form_by_batch_and_device(B, capability, flagging):
    """The two-launch form from FLAGGING_MIN_ROWS rows, on GPUs with programmatic dependent launch
    (sm_90 on) only: older ones take the one-launch kernel at every batch."""
    assert api.takes_flagging(B, capability) is flagging


@pytest.mark.ref
@pytest.mark.parametrize("B,V", [(1, 1), (3, ref.CHUNK), (2, ref.CHUNK + 1), (5, 129280)], ids=str)
def test_workspace_layout(monkeypatch, B, V):
    """The CUDA workspace: one record and one list per (row, chunk), disjoint views of one
    allocation with the kernel's shapes and dtypes, and the stream's counters."""
    counters = torch.zeros(7, dtype=torch.int32)
    monkeypatch.setattr(api, "stream_counters", lambda owner, device, rows: counters)
    chunk_f, chunk_i, list_s, list_id, arrivals = api._workspace(B, V, torch.device("cpu"))
    slots = B * math.ceil(V / ref.CHUNK)
    assert chunk_f.shape == (slots, 2) and chunk_f.dtype == torch.float32
    assert chunk_i.shape == (slots, 3) and chunk_i.dtype == torch.int32
    assert list_s.shape == list_id.shape == (slots, ref.LIST_CAP)
    assert list_s.dtype == torch.float32 and list_id.dtype == torch.int32
    assert arrivals is counters
    views = [chunk_f, chunk_i, list_s, list_id]
    assert all(v.is_contiguous() for v in views)
    spans = sorted((v.data_ptr(), v.data_ptr() + v.numel() * v.element_size()) for v in views)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), "workspace views overlap"
    assert spans[-1][1] - spans[0][0] == slots * (2 * ref.LIST_CAP + 5) * 4


# ----------------------------------------------------------------------------------------------------
# Codegen (CPU): every shipped configuration lowers, compiles and fits on chip.


def _config_id(config) -> str:
    return "-".join(map(str, config))


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("factory,layout", [("fused_sample_tl", "_ONE_LAUNCH"), ("fused_sample_flagging_tl", "_FLAGGING")])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("config", ref.fused_sample_shipped_configs(), ids=_config_id)
def test_cuda_config_compiles_without_spills(factory, layout, arch, config):
    # Imported here: the other suites collect without the CUDA backend.
    from kernels.fused_sample import cuda
    from testing import codegen_cuda

    assert cuda.fused_sample_shipped_configs() == ref.fused_sample_shipped_configs()
    make, blocks_per_sm = getattr(cuda, factory), getattr(cuda, layout).blocks_per_sm
    lowered = codegen_cuda.lower_cuda(make, *config, arch=arch)
    source = lowered.source
    # w and the race keys must be torch's float32 expf / logf / division bit for bit.
    assert "expf(" in source and "logf(" in source
    assert "__expf" not in source and "__logf" not in source and "__fdividef" not in source
    assert "--use_fast_math" not in lowered.nvcc_flags
    assert source.count("__global__ void") <= 2
    # The flagging form lets its second launch start during its tail (a programmatic dependent
    # launch, about 1 us at B 128: kernels/fused_sample/PERF.md).
    assert ("cudaTriggerProgrammaticLaunchCompletion();" in source) == (factory == "fused_sample_flagging_tl")
    dtype, vec, _ = config
    if vec * (4 if dtype == "float32" else 2) == 16:
        assert "float4" in source or "uint4" in source, "16-byte rows must use 16-byte loads"
    # Also checks the shared memory (the row slice) fits the per-block limit.
    report = codegen_cuda.check_cuda_resources(make, *config, arch=arch)
    assert report.spill_store_bytes == report.spill_load_bytes == report.stack_frame_bytes == 0
    # The blocks an SM the kernel is laid out for (its launch bounds cap the registers) fit the
    # SM's 228 KB of shared memory, of which 1 KB a block is reserved.
    assert blocks_per_sm * (report.smem_bytes + 1024) <= 228 * 1024


@pytest.mark.codegen_ascend
def test_ascend_kernel_is_the_samplers():
    # The sampler's codegen_ascend suite lowers this very factory for every shipped configuration
    # (about 7 minutes on CI's 2 cores); lowering it again here would check nothing new.
    from kernels.fused_sample import asc
    from kernels.sampler import asc as sampler_asc
    from kernels.sampler import ref as sampler_ref

    assert asc.fused_sample_tl is sampler_asc.sampler_tl
    assert asc.fused_sample_shipped_configs() == sampler_ref.sampler_shipped_configs()


# ----------------------------------------------------------------------------------------------------
# Device: fused_sample against the sampler's kernel and the reference, on the same device tensors.

# Batches from one row (the vocabulary split's case) to more rows than SMs; vocabularies from one
# column (one chunk) to the models' (16 and 19 chunks) and one whose lists can pass the finishing
# block's capacity (37 chunks).
DEVICE_BATCHES = [1, 3, 64, 200]
DEVICE_VOCABS = [1, 7, 1000, 129280, 151936, 300007]


def _assert_equals_sampler(got, logits, params):
    """got == the sampler's kernel on the same inputs: tokens and empty flags bit for bit, logprobs
    within float32 rounding of the normaliser (each kernel sums in its own order)."""
    B = logits.shape[0]
    theirs = sampler_api.sampler(logits, *params, return_logprobs=got.logprobs is not None, out=poisoned_out(B, logits.device, got.logprobs is not None))
    assert_bitwise_equal(got.tokens, theirs.tokens, what="tokens vs sampler")
    assert_bitwise_equal(got.empty, theirs.empty, what="empty vs sampler")
    if got.logprobs is not None:
        assert torch.allclose(got.logprobs, theirs.logprobs, rtol=1e-5, atol=1e-4, equal_nan=True), "logprobs vs sampler"


def _assert_matches(got, logits, params):
    assert_device_matches_ref(got, logits, params)
    _assert_equals_sampler(got, logits, params)


def _row_params(device, temperature, top_k, top_p, min_p):
    """(temperature, top_k, top_p, min_p, seed, offset) from per-row lists, with fresh counters."""
    seed, offset = (t.to(device) for t in counters(len(temperature)))
    return (*(torch.tensor(x, device=device) for x in (temperature, top_k, top_p, min_p)), seed, offset)


@pytest.fixture(params=["one_launch", "flagging"])
def kernel_form(request, monkeypatch, backend):
    """Runs a device test through fused_sample_tl, then through fused_sample_flagging_tl and its
    second launch, whatever the batch (api.FLAGGING_MIN_ROWS picks by batch otherwise). The
    flagging form skips where the interface never takes it (api.takes_flagging: CUDA sm_90+), which
    would otherwise run the one-launch kernel under its name."""
    if request.param == "flagging" and (backend != "cuda" or not api.takes_flagging(api.FLAGGING_MIN_ROWS, torch.cuda.get_device_capability())):
        pytest.skip("the flagging form runs on CUDA sm_90+ only (PDL)")
    monkeypatch.setattr(api, "FLAGGING_MIN_ROWS", 1 << 62 if request.param == "one_launch" else 0)
    return request.param


def _sample_and_check(logits, params):
    """fused_sample with logprobs into poisoned outputs, checked against the reference and the
    sampler's kernel; returns its output."""
    got = api.fused_sample(logits, *params, return_logprobs=True, out=poisoned_out(logits.shape[0], logits.device))
    _assert_matches(got, logits, params)
    return got


@pytest.mark.device
@pytest.mark.parametrize("layout", ["dense", "strided", "misaligned"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("V", DEVICE_VOCABS, ids=lambda v: f"V{v}")
@pytest.mark.parametrize("B", DEVICE_BATCHES, ids=lambda b: f"B{b}")
def test_device_matches_sampler_and_ref(device, B, V, dtype, layout):
    logits = device_logits(B, V, device, dtype, layout)
    if B > 4:
        logits[4] = math.nan  # no finite entry, by NaN rather than -inf (row 1)
    params = mixed_params(B, V, device)
    out = poisoned_out(B, device)
    got = api.fused_sample(logits, *params, return_logprobs=True, out=out)
    assert got.tokens is out[0] and got.logprobs is out[1] and got.empty is out[2]
    _assert_matches(got, logits, params)
    k32 = (params[0], params[1].to(torch.int32), *params[2:])
    _assert_matches(api.fused_sample(logits, *k32, out=poisoned_out(B, device, logprobs=False)), logits, params)


@pytest.mark.device
@pytest.mark.parametrize("dtype,V", [(torch.float32, 129280), (torch.bfloat16, 151936)], ids=str)
@pytest.mark.parametrize("B", [1, 8, 128])
def test_device_decode_settings_match_sampler_and_ref(device, kernel_form, B, V, dtype):
    # The benchmark's settings (top-k 50, top-p 0.9, t 0.7), then random filters; heavy ties at the
    # thresholds in half the rows (rounded logits).
    logits = (torch.randn(B, V, device=device) * 3).to(dtype)
    logits[: (B + 1) // 2] = torch.round(logits[: (B + 1) // 2])
    seed, offset = (t.to(device) for t in counters(B))
    full = lambda x: torch.full((B,), x, device=device)  # noqa: E731
    params = (full(0.7), full(50).to(I64), full(0.9), full(0.0), seed, offset)
    _sample_and_check(logits, params)
    params = (full(1.0), torch.randint(1, V, (B,), device=device), torch.rand(B, device=device), torch.rand(B, device=device) * 0.2, seed, offset)
    _sample_and_check(logits, params)


@pytest.mark.device
@pytest.mark.parametrize("V", [129280, 300007], ids=lambda v: f"V{v}")
def test_device_batch_invariance(device, V):
    """A row's token depends on its own logits, parameters and counters only: permuting the batch,
    sampling the row alone, or replacing every other row (logits and parameters) leaves it."""
    B = 16
    logits = torch.randn(B, V, device=device) * 3
    params = mixed_params(B, V, device)

    def tokens(x, *p):
        return api.fused_sample(x, *p, out=poisoned_out(x.shape[0], device, logprobs=False)).tokens

    got = tokens(logits, *params)
    # Anchored to the contract: two outputs left with the same poison would compare equal.
    assert_bitwise_equal(got, ref.fused_sample_ref(logits, *params)[0])
    perm = torch.randperm(B, device=device)
    assert_bitwise_equal(tokens(logits[perm], *(p[perm] for p in params)), got[perm])
    assert_bitwise_equal(tokens(logits[2:3], *(p[2:3] for p in params)), got[2:3])
    other = logits.clone()
    other[8:] = torch.randn(B - 8, V, device=device)
    other[12:] = math.nan
    other_params = tuple(torch.cat([p[:8], q[8:]]) for p, q in zip(params, mixed_params(B, V, device)))
    assert_bitwise_equal(tokens(other, *other_params)[:8], got[:8])
    assert_bitwise_equal(tokens(logits, *params), got)


@pytest.mark.device
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_device_rows_by_each_path(device, kernel_form, dtype):
    """One row down each path of the CUDA kernel, against the reference and the sampler: lists of
    top-k's T0 (row 0), all-equal logits (every list overflows: the row is read again), top-k above
    the T0 filter, no filter at all, min-p alone (its bound), every s underflowing to -inf (m = -inf:
    the row is read again)."""
    B, V = 6, 129280
    logits = torch.randn(B, V, device=device) * 3
    logits[1] = 1.5
    logits[5] = -3e38
    logits = logits.to(dtype)
    params = _row_params(
        device,
        [0.7, 0.7, 0.9, 1.0, 1.0, 1e-3],
        [50, 50, 300, 0, 0, 0],
        [0.9, 0.9, 1.0, 1.0, 1.0, 0.9],
        [0.0, 0.0, 0.0, 0.0, 0.2, 0.0],
    )
    _sample_and_check(logits, params)


@pytest.mark.device
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_device_rows_off_the_fast_path(device, kernel_form, dtype):
    """Rows whose chunks leave the kernel's fast path (|m| above 128, or t below 2**-60: the bound is
    not read in x and the normaliser takes expf), rows where s = x / t overflows (m = +inf:
    the token is the lowest id of the +inf entries), +inf logits in a sampled row, the max of s
    tied by rounding (x / t of two different x; float32 only), and top-p over top-k's survivors
    both ways (at most 256 survivors: by ranks; more, ties at top-k's threshold: by radix select)."""
    B, V = 8, 129280
    logits = torch.randn(B, V, device=device) * 3
    logits[0] *= 1e30
    logits[1] *= 1e30
    logits[2, [77, 5000, 100000]] = INF
    # 16777213 / 3 and 16777214 / 3 both round to 5592404.5 (float32): the max of s at two ids.
    # bfloat16 holds neither (both round to 2**24), and two different bfloat16 values are further
    # apart than float32 rounding of x / t can close unless it overflows or underflows: in bfloat16
    # the row is a plain tie at the max.
    logits[3] -= 10
    tied = [16777214.0, 16777213.0] if dtype == torch.float32 else [2.0**24, 2.0**24]
    logits[3, [900, 300]] = torch.tensor(tied, device=device)
    logits[6] = torch.round(logits[6])
    logits = logits.to(dtype)
    params = _row_params(
        device,
        [0.7, 1e-10, 0.7, 3.0, 2.0**-61, 0.7, 0.7, 1.0],
        [50, 0, 50, 50, 50, 200, 256, 3],
        [0.9, 0.9, 0.9, 0.9, 0.9, 0.5, 0.9, 1.0],
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.3],
    )
    got = _sample_and_check(logits, params)
    assert got.tokens[2].item() == 77
    # Row 1: x / t overflows to +inf for most positive entries; the lowest such id is the token.
    assert got.tokens[1].item() == int(torch.nonzero(logits[1].float() / params[0][1] == INF)[0])


@pytest.mark.device
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_device_top_k_threshold_shapes(device, kernel_form, dtype):
    """Candidate sets that steer the finish's top-k threshold (radix passes over the images less the
    smallest, from the highest bit of their span) to each of its ends: every logit negative; the k-th
    largest inside a run of 60 equal maxima (span 0: one pass, ties all kept); 300 finite logits of
    both signs among -inf (the images cross the sign); the top 64 one ulp apart (a span of a few
    bits); top-k 1 with top-p; magnitudes from 1e-30 to 1e30 of both signs (the widest span: up to
    four passes)."""
    B, V = 6, 129280
    logits = torch.randn(B, V, device=device) * 3
    logits[0] = logits[0] - 50
    logits[1, torch.randperm(V, device=device)[:60]] = logits[1].max() + 1
    logits[2] = -INF
    logits[2, torch.randperm(V, device=device)[:300]] = torch.randn(300, device=device)
    eps = torch.finfo(dtype).eps
    logits[3] = logits[3] - 20
    logits[3, torch.randperm(V, device=device)[:64]] = 1 + torch.arange(64, device=device, dtype=torch.float32) * eps
    logits[5] = torch.sign(logits[5]) * 10 ** (torch.rand(V, device=device) * 60 - 30)
    logits = logits.to(dtype)
    params = _row_params(
        device,
        [0.7, 0.7, 1.0, 1.0, 0.7, 1.0],
        [50, 50, 100, 50, 1, 50],
        [0.9, 0.95, 0.9, 1.0, 0.5, 0.9],
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    )
    _sample_and_check(logits, params)


@pytest.mark.device
def test_device_more_chunks_than_threads(device, kernel_form):
    """258 chunks a row (more than the finishing block's threads: its records are read again for
    the normaliser and its lists' lengths from L2), with short lists (a greedy row, top-k 1) so that
    the lists, not the row, are finished, and a row with top-k 50 whose lists pass the capacity."""
    B, V = 3, 2**21 + 8195
    logits = torch.randn(B, V, device=device) * 3
    params = _row_params(
        device,
        [0.0, 0.7, 0.7],
        [0, 1, 50],
        [1.0, 1.0, 0.9],
        [0.0, 0.0, 0.0],
    )
    _sample_and_check(logits, params)


@pytest.mark.device
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("V", [13, 1001, 8195, 129283], ids=lambda v: f"V{v}")
def test_device_rows_with_a_ragged_tail(device, kernel_form, dtype, V):
    """Rows loaded in 16-byte vectors whose length is no multiple of the vector (the row stride is):
    the last V % vec entries are read one at a time, and must take part like every other entry
    (ties at the max in the tail too)."""
    B = 5
    wide = (torch.randn(B, V + 64 - V % 64, device=device) * 3).to(dtype)
    logits = wide[:, :V]
    logits[0, V - 1] = 50.0  # the tail's entry is the max
    logits[1, V - 1] = logits[1].max()  # a tie at the max, the tail's id the higher
    params = _row_params(
        device,
        [0.0, 0.0, 0.7, 1.0, 0.5],
        [0, 0, 50, 0, 3],
        [1.0, 1.0, 0.9, 0.8, 1.0],
        [0.0, 0.0, 0.0, 0.1, 0.0],
    )
    _sample_and_check(logits, params)


@pytest.mark.device
def test_device_counters_left_zero(device, kernel_form, backend):
    """Every launch leaves the arrival counters zero (the next launch on the stream relies on it)."""
    if backend != "cuda":
        pytest.skip("the counters are the CUDA kernel's")
    B, V = 9, 129280
    logits = torch.randn(B, V, device=device) * 3
    params = mixed_params(B, V, device)
    for _ in range(3):
        _sample_and_check(logits, params)
    assert counters_left_zero(api.NAME, device)


@pytest.mark.device
def test_device_empty_batch_launches_nothing(device, no_kernel_launches):
    z = torch.zeros(0, device=device)
    zi = torch.zeros(0, dtype=I64, device=device)
    assert api.fused_sample(torch.zeros(0, 9, device=device), z, zi, z, z, zi, zi, return_logprobs=True).tokens.shape == (0,)


@pytest.mark.device
@pytest.mark.parametrize("B", [1, 32])
def test_device_cuda_graph_replay(device, kernel_form, backend, B):
    # Captured once, replayed with new logits, parameters and counters: every call of a decode step.
    if backend != "cuda":
        pytest.skip("CUDA graphs are a CUDA feature")
    assert_graph_replays(api.fused_sample, B, device, _assert_out_matches)


def _assert_out_matches(out, logits, params):
    _assert_matches(sampler_api.SamplerOutput(*out), logits, params)


@pytest.mark.device
def test_device_graphs_captured_on_one_stream_replay_in_any_order(device, kernel_form, backend):
    """A graph per batch size on one stream from one memory pool, the later capture replayed first:
    each must find its rows' arrival counters zero, whatever the pool's memory held before."""
    if backend != "cuda":
        pytest.skip("CUDA graphs are a CUDA feature")
    stream, pool, _holder = dirty_graph_pool(device)
    assert_graphs_replay_in_any_order(api.fused_sample, [1, 32], device, _assert_out_matches, stream, pool)
