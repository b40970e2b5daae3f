"""Test inputs and checks shared by sampler_test.py and kernels/fused_sample/fused_sample_test.py
(the two kernels have one contract, kernels/sampler/ref.py, and one interface signature).

Every draw uses torch's global RNG, which the test plugin seeds per test.
"""

from __future__ import annotations

import math

import torch

from kernels.sampler import ref
from testing.graphs import capture_each_after_warm_up, later_first
from testing.numeric import assert_bitwise_equal, poisoned

I64 = torch.int64
INF = math.inf


def counters(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(seed, offset) (n,) int64 drawn over the whole int64 range."""
    lo, hi = -(2**63), 2**63 - 1
    return torch.randint(lo, hi, (n,), dtype=I64), torch.randint(lo, hi, (n,), dtype=I64)


def mixed_params(B: int, V: int, device="cpu"):
    """(temperature, top_k, top_p, min_p, seed, offset) per row, mixing greedy rows, disabled and
    extreme filters."""
    temps = torch.tensor([0.7, 1.0, 0.0, 1.3, -1.0, 0.3, math.nan, math.inf, 1e-3, 2.0])
    ks = torch.tensor([50, 0, 1, 5, -3, V, V + 7, 2, 20, V - 1])
    ps = torch.tensor([0.9, 1.0, 0.5, 0.0, math.nan, 1e-9, 0.99, 1.5, 0.75, 0.3])
    mps = torch.tensor([0.0, 0.05, 0.0, 0.5, math.nan, -1.0, 0.0, 2.0, 0.01, 0.1])
    pick = [torch.randint(0, 10, (B,)) for _ in range(4)]
    seed, offset = counters(B)
    return tuple(t.to(device) for t in (temps[pick[0]], ks[pick[1]], ps[pick[2]], mps[pick[3]], seed, offset))


def poison(out) -> None:
    """Fills (tokens, logprobs or None, empty) with values no correct call leaves, on empty rows too
    (whose expected logprob and flag are NaN and True): int64 minimum tokens (tokens are in
    [-1, V)), +inf logprobs (logprobs are <= 0 or NaN) and empty flags of byte 0xAA, neither False
    nor True (assert_bitwise_equal compares the bytes)."""
    tokens, logprobs, empty = out
    tokens.fill_(torch.iinfo(I64).min)
    if logprobs is not None:
        logprobs.fill_(INF)
    empty.view(torch.uint8).fill_(0xAA)


def poisoned_out(B: int, device, logprobs: bool = True):
    """(tokens, logprobs or None, empty) outputs, poisoned."""
    def new(dtype):
        return torch.empty(B, dtype=dtype, device=device)

    out = (new(I64), new(torch.float32) if logprobs else None, new(torch.bool))
    poison(out)
    return out


def bad_inputs():
    """(case id, keyword arguments, error type, message) of calls the interface must reject before
    writing anything; every call passes poisoned CPU outputs."""
    B, V = 3, 16

    def case(name, error, message, return_logprobs=True, **kw):
        args = dict(
            logits=torch.randn(B, V),
            temperature=torch.ones(B),
            top_k=torch.zeros(B, dtype=I64),
            top_p=torch.ones(B),
            min_p=torch.zeros(B),
            seed=torch.zeros(B, dtype=I64),
            offset=torch.ones(B, dtype=I64),
            return_logprobs=return_logprobs,
            out=poisoned_out(B, "cpu"),
        )
        args.update(kw)
        return (name, args, error, message)

    shared_f32 = torch.ones(B)
    shared_i64 = poisoned((B,), I64, "cpu")
    return [
        case("logits-fp16", TypeError, "logits has dtype torch.float16", logits=torch.randn(B, V).half()),
        case("logits-1d", ValueError, "logits must be 2-D", logits=torch.randn(V)),
        case("logits-v0", ValueError, "logits has V = 0 columns", logits=torch.randn(B, 0)),
        case("logits-v-huge", ValueError, "at most 8388607", logits=torch.empty(B, 2**23, dtype=torch.bfloat16)),
        case("logits-col-strided", ValueError, "logits's last dimension must be contiguous", logits=torch.randn(B, 2 * V)[:, ::2]),
        case("logits-list", TypeError, "logits must be a torch.Tensor", logits=[[0.5]]),
        case("logits-rows-overlap", ValueError, "logits's row stride 15 is smaller than its width 16", logits=torch.randn(B * V).as_strided((B, V), (V - 1, 1))),
        case("temperature-f64", TypeError, "temperature has dtype torch.float64", temperature=torch.ones(B, dtype=torch.float64)),
        case("temperature-short", ValueError, "temperature must have shape (3,)", temperature=torch.ones(B - 1)),
        case("temperature-scalar", TypeError, "temperature must be a torch.Tensor", temperature=0.7),
        case("top_k-float", TypeError, "top_k has dtype torch.float32", top_k=torch.zeros(B)),
        case("top_k-meta", ValueError, "top_k is on meta", top_k=torch.zeros(B, dtype=I64, device="meta")),
        case("top_p-int", TypeError, "top_p has dtype torch.int64", top_p=torch.ones(B, dtype=I64)),
        case("top_p-strided", ValueError, "top_p must be contiguous", top_p=torch.ones(2 * B)[::2]),
        case("min_p-2d", ValueError, "min_p must have shape (3,)", min_p=torch.zeros(B, 1)),
        case("seed-int32", TypeError, "seed has dtype torch.int32", seed=torch.zeros(B, dtype=torch.int32)),
        case("offset-long", ValueError, "offset must have shape (3,)", offset=torch.zeros(B + 1, dtype=I64)),
        case("flag-int", TypeError, "return_logprobs must be a bool", return_logprobs=1),
        case("out-list", TypeError, "out must be a (tokens, logprobs, empty) tuple", out=[poisoned((B,), I64, "cpu")]),
        case("out-tokens-int32", ValueError, "out tokens must be (3,) torch.int64", out=(poisoned((B,), torch.int32, "cpu"), poisoned((B,), torch.float32, "cpu"), torch.ones(B, dtype=torch.bool))),
        case("out-logprobs-short", ValueError, "out logprobs must be (3,) torch.float32", out=(poisoned((B,), I64, "cpu"), poisoned((B - 1,), torch.float32, "cpu"), torch.ones(B, dtype=torch.bool))),
        case("out-empty-meta", ValueError, "out empty must be (3,) torch.bool on cpu", out=(poisoned((B,), I64, "cpu"), poisoned((B,), torch.float32, "cpu"), torch.ones(B, dtype=torch.bool, device="meta"))),
        case("out-empty-uint8", ValueError, "out empty must be (3,) torch.bool", out=(poisoned((B,), I64, "cpu"), poisoned((B,), torch.float32, "cpu"), torch.ones(B, dtype=torch.uint8))),
        case("out-logprobs-unasked", ValueError, "out logprobs must be a tensor exactly when return_logprobs", return_logprobs=False),
        case("out-tokens-none", TypeError, "out tokens must be a torch.Tensor, got NoneType", out=(None, *poisoned_out(B, "cpu")[1:])),
        case("out-empty-none", TypeError, "out empty must be a torch.Tensor, got NoneType", out=(*poisoned_out(B, "cpu")[:2], None)),
        case("out-logprobs-is-temperature", ValueError, "out logprobs overlaps temperature", temperature=shared_f32, out=(poisoned((B,), I64, "cpu"), shared_f32, torch.ones(B, dtype=torch.bool))),
        case("out-empty-in-tokens", ValueError, "out tokens overlaps out empty", out=(shared_i64, poisoned((B,), torch.float32, "cpu"), shared_i64.view(torch.bool)[:B])),
    ]


def device_logits(B, V, device, dtype, layout):
    """(B, V) logits with NaN / -inf sprinkled in, an empty row (1), a +inf row (2), an all-NaN row
    (3: empty too) and an all-equal row (5); layout "dense", "strided" (row stride V + 8 rounded up
    to a multiple of 8: 16-byte rows, so an odd V ends in a partial vector) or "misaligned" (base
    one element off: element-wide loads)."""
    pad = {"dense": 0, "strided": 8 + (-V) % 8, "misaligned": 1}[layout]
    start = 1 if layout == "misaligned" else 0
    base = torch.randn(B, V + pad + start) * 4
    base[torch.rand_like(base) < 0.01] = math.nan
    base[torch.rand_like(base) < 0.01] = -INF
    if B > 2:
        base[1] = -INF
        base[2, start + V // 2] = INF
    if B > 3:
        base[3] = math.nan
    if B > 5:
        base[5, start : start + V] = 1.5
    return base.to(dtype).to(device)[:, start : start + V]


def assert_device_matches_ref(got, logits, params):
    """A SamplerOutput equals ref.sampler_ref run on the same tensors: tokens and empty flags bit for
    bit, logprobs (when present) within float32 rounding of the normaliser."""
    tokens, logprobs, empty = ref.sampler_ref(logits, *params, return_logprobs=True)
    assert_bitwise_equal(got.tokens, tokens, what="tokens")
    assert_bitwise_equal(got.empty, empty, what="empty (as bytes)")
    if got.logprobs is not None:
        # The normalising float32 sum is the one value whose order is the backend's.
        assert torch.allclose(got.logprobs, logprobs, rtol=1e-5, atol=1e-4, equal_nan=True), "logprobs"


_GRAPH_V = 129280


def assert_graph_replays(interface, B: int, device, check) -> None:
    """interface(logits, *params, return_logprobs=True, out=out) captured once in a CUDA graph over
    zeroed bfloat16 logits of the models' vocabulary, then replayed 3 times with new logits,
    parameters and counters written into the captured tensors and poisoned outputs; check(out,
    logits, params) after each replay: every call of a decode step."""
    call, inputs = _graph_call(interface, B, device)
    call()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    for _ in range(3):
        _replay_and_check(graph, inputs, device, check)


def assert_graphs_replay_in_any_order(interface, sizes, device, check, stream, pool) -> None:
    """As assert_graph_replays, with one graph per batch size in `sizes`, all captured on `stream`
    into `pool` after one warm-up call each outside the capture (what a serving engine does), then
    replayed in reverse order and again in order."""
    calls = {B: _graph_call(interface, B, device) for B in sizes}
    graphs = capture_each_after_warm_up({B: call for B, (call, _) in calls.items()}, stream, pool)
    for B in later_first(sizes):
        _replay_and_check(graphs[B], calls[B][1], device, check)


def _graph_call(interface, B: int, device):
    """(call, (logits, params, out)): the call a graph captures, over zeroed logits and parameters
    and poisoned outputs that each replay refills."""
    logits = torch.zeros(B, _GRAPH_V, dtype=torch.bfloat16, device=device)
    params = tuple(torch.zeros_like(p) for p in mixed_params(B, _GRAPH_V, device))
    out = poisoned_out(B, device)

    def call():
        interface(logits, *params, return_logprobs=True, out=out)

    return call, (logits, params, out)


def _replay_and_check(graph, inputs, device, check) -> None:
    logits, params, out = inputs
    B = logits.shape[0]
    logits.copy_(torch.randn(B, _GRAPH_V, device=device) * 3)
    for dst, src in zip(params, mixed_params(B, _GRAPH_V, device)):
        dst.copy_(src)
    poison(out)
    graph.replay()
    check(out, logits, params)
