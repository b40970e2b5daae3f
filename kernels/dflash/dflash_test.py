"""Tests of `dflash`: reference vs a float64 / Python-loop oracle, interface validation, codegen, and the
device kernel.

Suites (markers, selected by `--tl-suite`; see testing/plugin.py): ref, codegen_cuda, codegen_ascend,
device. Inputs are drawn fresh per test from the plugin's per-test seed; outputs are poisoned first
(NaN for floats, the integer minimum for integers: no output holds either).

Exactness: the dot products reduce in a backend-defined order, so `confidence` is compared with a
float64 oracle within a bound of the fp32 accumulation error (relative to the sum of |terms|).
proposal_len, expected_len and tokens are exact functions of the confidences: they are compared bit
for bit with a Python-loop oracle (float32 rounding emulated one operation at a time) applied to the
confidences the implementation under test produced. Device outputs are also held to the contract,
`confidence_head_fused_ref` (`assert_matches_ref`).
"""

from __future__ import annotations

import math
import re
import struct
import types

import pytest
import torch

from kernels.dflash import api, ref
from testing.numeric import assert_bitwise_equal, assert_rejected_without_writes, case_named, case_names, poisoned

IDX = (torch.int32, torch.int64)
VOCAB = 97


# ----------------------------------------------------------------------------------------------------
# Random batches: ragged draft lengths (0, 1, 16 included), a few out-of-range prev_tokens, hidden
# rows as views of a wider tensor, optional padding rows past the last request.


def make_batch(lens, H, He, *, prev_dtype=torch.int64, draft_dtype=torch.int64, cu_dtype=torch.int32,
               extra_cols=0, pad_rows=0, bad_tokens=2, vocab=VOCAB, device="cpu"):
    """dict of the confidence_head arguments (threshold excluded); weights scaled so that logits are
    O(1) and confidences spread over (0, 1)."""
    n = sum(lens) + pad_rows
    wide = torch.randn(n, H + extra_cols).to(torch.bfloat16)
    prev = torch.randint(0, vocab, (n,))
    if n and bad_tokens:
        rows = torch.randint(0, n, (bad_tokens,))
        prev[rows] = torch.where(torch.rand(bad_tokens) < 0.5, -1 - torch.randint(0, 3, (bad_tokens,)), vocab + torch.randint(0, 3, (bad_tokens,)))
    args = dict(
        hidden=wide[:, :H],
        prev_tokens=prev.to(prev_dtype),
        embedding=torch.randn(vocab, He).to(torch.bfloat16),
        w_h=torch.randn(H) * (1.5 / math.sqrt(H)),
        w_e=torch.randn(He) * (1.5 / math.sqrt(He)),
        bias=torch.randn(1),
        draft_tokens=torch.randint(0, 129280, (n,)).to(draft_dtype),
        cu_draft_lens=torch.tensor([0] + lens).cumsum(0).to(cu_dtype),
    )
    return {k: v.to(device) if device != "cpu" else v for k, v in args.items()}


def random_lens(n_req: int, max_len: int = 16) -> list[int]:
    """Draft lengths with 0, 1 and max_len over-represented."""
    kinds = torch.randint(0, 4, (n_req,)).tolist()
    return [[0, 1, max_len, int(torch.randint(0, max_len + 1, ()))][k] for k in kinds]


# ----------------------------------------------------------------------------------------------------
# Independent oracle: float64 confidences; Python loops with float32 rounding for the derivation.


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def oracle_confidence(args) -> tuple[torch.Tensor, torch.Tensor]:
    """(confidence (N,) float64, bound (N,) float64): the exact sigmoid of the float64 logit (0 for
    invalid rows) and the largest deviation fp32 accumulation may cause: 4e-6 times the sum of
    |terms| (a few dozen fp32 roundings of the running sum), through sigmoid's slope <= 1/4, plus a
    few float32 ulps of the sigmoid itself."""
    h = args["hidden"].cpu().double()
    e_tab = args["embedding"].cpu().double()
    tok = args["prev_tokens"].cpu().long()
    valid = (tok >= 0) & (tok < e_tab.shape[0])
    e = e_tab[tok.clamp(0, e_tab.shape[0] - 1)]
    th = h * args["w_h"].cpu().double()
    te = e * args["w_e"].cpu().double()
    b = args["bias"].cpu().double()
    logit = th.sum(-1) + te.sum(-1) + b
    mass = th.abs().sum(-1) + te.abs().sum(-1) + b.abs()
    nan = torch.isnan(logit)
    c = torch.where(valid & ~nan, torch.sigmoid(logit), torch.zeros_like(logit))
    # A NaN logit has a NaN mass too: its defined confidence, 0, must then be met exactly.
    return c, torch.where(nan, torch.zeros_like(mass), 0.25 * 4e-6 * mass + 1e-6)


def assert_confidence_close(got: torch.Tensor, args, what="confidence"):
    expected, bound = oracle_confidence(args)
    got = got.cpu()
    assert got.dtype == torch.float32 and got.shape == expected.shape
    err = (got.double() - expected).abs()
    bad = ~(err <= bound)
    assert not bool(bad.any()), f"{what}: {int(bad.sum())} rows off; worst {float((err - bound).max()):.3g} past the bound"


def oracle_derive(confidence, draft_tokens, cu_draft_lens, threshold):
    """(proposal_len, expected_len, tokens) lists by Python loops, float32 rounding per operation."""
    conf, draft, cu = confidence.cpu().tolist(), draft_tokens.cpu().tolist(), cu_draft_lens.cpu().tolist()
    n, thr = len(conf), _f32(threshold)
    plens, elens, tokens = [], [], [-1] * n
    for b in range(len(cu) - 1):
        lo = min(max(cu[b], 0), n)
        hi = max(min(max(cu[b + 1], 0), n), lo)
        plen, prod, acc = hi - lo, 1.0, 0.0
        for t in range(hi - lo):
            c = conf[lo + t]
            if c < thr or c == 0 or math.isnan(c):
                plen = t
                break
            prod = _f32(prod * c)
            acc = _f32(acc + prod)
        for t in range(plen):
            tokens[lo + t] = draft[lo + t]
        plens.append(plen)
        elens.append(acc)
    return plens, elens, tokens


def assert_derived_exact(got, confidence, args, threshold, what=""):
    """proposal_len, expected_len, tokens of `got` are the oracle's derivation of `confidence`."""
    plens, elens, tokens = oracle_derive(confidence, args["draft_tokens"], args["cu_draft_lens"], threshold)
    assert_bitwise_equal(got.proposal_len.cpu(), torch.tensor(plens, dtype=torch.int32), f"proposal_len {what}")
    assert_bitwise_equal(got.expected_len.cpu(), torch.tensor(elens, dtype=torch.float32), f"expected_len {what}")
    assert_bitwise_equal(got.tokens.cpu(), torch.tensor(tokens, dtype=args["draft_tokens"].dtype), f"tokens {what}")


def _ref(args, threshold, max_len=None) -> api.DflashOutput:
    return api.DflashOutput(*ref.confidence_head_fused_ref(**args, threshold=threshold, max_len=max_len))


def assert_matches_ref(got, args, threshold, what=""):
    """got against the contract: confidence within twice the oracle's bound of the reference's (each
    is within the bound of the exact value); proposal_len and tokens equal to the reference's,
    expected_len within that margin propagated through its products and sums, for every request
    none of whose positions has a reference confidence within the margin of the threshold (there
    rounding may decide the comparison either way)."""
    exp = _ref(args, threshold)
    _, exact_bound = oracle_confidence(args)
    bound = 2 * exact_bound
    exp_c = exp.confidence.cpu().double()
    err = (got.confidence.cpu().double() - exp_c).abs()
    bad = ~(err <= bound)
    assert not bool(bad.any()), f"confidence vs reference {what}: {int(bad.sum())} rows off; worst {float((err - bound).max()):.3g} past the bound"
    # The contract makes an invalid row's confidence exactly 0: it stops its request in every
    # backend, whatever the threshold (0 included).
    near = (exp_c != 0) & ((exp_c - ref.fp32_threshold(threshold)).abs() <= bound)
    decided = torch.ones_like(near)
    lo, hi = ref.request_bounds(args["cu_draft_lens"].cpu(), exp_c.shape[0])
    for b, (l, h) in enumerate(zip(lo.tolist(), hi.tolist())):
        if bool(near[l:h].any()):
            decided[l:h] = False
            continue
        plen = int(exp.proposal_len[b])
        assert int(got.proposal_len[b]) == plen, f"proposal_len[{b}] vs reference {what}: {int(got.proposal_len[b])} != {plen}"
        # |d P_t| <= sum_{s<=t} |d c_s| for confidences in [0, 1]; plus a few fp32 roundings per term.
        tol = sum((plen - t) * float(bound[l + t]) for t in range(plen)) + plen * plen * 2.0**-21
        diff = abs(float(got.expected_len[b]) - float(exp.expected_len[b]))
        assert diff <= tol, f"expected_len[{b}] vs reference {what}: off by {diff:.3g} > {tol:.3g}"
    assert_bitwise_equal(got.tokens.cpu()[decided], exp.tokens.cpu()[decided], f"tokens vs reference {what}")


def poisoned_outputs(args, device) -> api.DflashOutput:
    n, b = args["hidden"].shape[0], args["cu_draft_lens"].shape[0] - 1
    return api.DflashOutput(
        poisoned((n,), torch.float32, device), poisoned((b,), torch.int32, device), poisoned((b,), torch.float32, device), poisoned((n,), args["draft_tokens"].dtype, device)
    )


# Tables outside the canonical form (cu[0] = 0, cu[B] = N) that the clamps of ref.request_bounds define:
# padding rows before the first request, ends past N, negative entries (empty requests at row 0).
NONCANONICAL_CU = {
    "start2-past-end": lambda n: [2, 5, n + 7],
    "negative": lambda n: [-4, -1, 3, n - 2],
    "all-past-end": lambda n: [n + 1, n + 5],
}


# ----------------------------------------------------------------------------------------------------
# Reference suite.

THRESHOLDS = (0.0, 0.3, 0.5, 0.9, 1.0)


@pytest.mark.ref
@pytest.mark.parametrize("threshold", THRESHOLDS)
@pytest.mark.parametrize("prev_dtype,draft_dtype,cu_dtype", [(torch.int32, torch.int64, torch.int32), (torch.int64, torch.int32, torch.int64)], ids=str)
@pytest.mark.parametrize("n_req,H,He,extra_cols", [(1, 1, 1, 0), (5, 64, 32, 3), (13, 576, 320, 64), (40, 7, 9, 1)])
def test_ref_matches_oracle(threshold, prev_dtype, draft_dtype, cu_dtype, n_req, H, He, extra_cols):
    args = make_batch(random_lens(n_req), H, He, prev_dtype=prev_dtype, draft_dtype=draft_dtype, cu_dtype=cu_dtype, extra_cols=extra_cols)
    got = _ref(args, threshold)
    assert_confidence_close(got.confidence, args)
    assert_derived_exact(got, got.confidence, args, threshold)
    # A bound above the longest request (what a device caller passes to avoid a sync) changes nothing.
    for name, g, e in zip(api.OUTPUTS, _ref(args, threshold, max_len=40), got):
        assert_bitwise_equal(g, e, what=f"{name} with max_len")


@pytest.mark.ref
def test_ref_worked_example():
    # Logit 0 everywhere (zero hidden, embedding and bias): every valid confidence is exactly 0.5.
    args = dict(
        hidden=torch.zeros(6, 4, dtype=torch.bfloat16),
        prev_tokens=torch.tensor([0, 1, 2, 5, 1, 1]),  # 5 is out of range (V = 3)
        embedding=torch.zeros(3, 2, dtype=torch.bfloat16),
        w_h=torch.ones(4),
        w_e=torch.ones(2),
        bias=torch.zeros(1),
        draft_tokens=torch.tensor([10, 11, 12, 13, 14, 15]),
        cu_draft_lens=torch.tensor([0, 3, 3, 5]),  # requests of 3, 0 and 2 rows; row 5 is padding
    )

    def derived(threshold, cu=None):
        """The reference's outputs, which the oracles (written apart from ref.py) must also give."""
        case = args if cu is None else dict(args, cu_draft_lens=torch.tensor(cu))
        got = _ref(case, threshold)
        assert_confidence_close(got.confidence, case)
        assert_derived_exact(got, got.confidence, case, threshold, what=f"cu {cu} threshold {threshold}")
        return got

    got = derived(0.5)
    assert got.confidence.tolist() == [0.5, 0.5, 0.5, 0.0, 0.5, 0.5]
    # Request 2 stops at its first position (invalid prev_token), whatever the threshold.
    assert got.proposal_len.tolist() == [3, 0, 0] and got.expected_len.tolist() == [0.875, 0.0, 0.0]
    assert got.tokens.tolist() == [10, 11, 12, -1, -1, -1]
    got = derived(0.6)
    assert got.proposal_len.tolist() == [0, 0, 0] and got.expected_len.tolist() == [0.0, 0.0, 0.0]
    assert got.tokens.tolist() == [-1] * 6
    # Threshold 0 keeps every valid position; the invalid one still stops its request.
    got = derived(0.0)
    assert got.proposal_len.tolist() == [3, 0, 0] and got.tokens.tolist() == [10, 11, 12, -1, -1, -1]
    # Clamped tables: rows [2, 4) and [4, 6) (end 9 past N); rows 0 and 1 are padding.
    got = derived(0.5, [2, 4, 9])
    assert got.proposal_len.tolist() == [1, 2] and got.expected_len.tolist() == [0.5, 0.75]
    assert got.tokens.tolist() == [-1, -1, 12, -1, 14, 15]
    # Negative entries clamp to 0: rows [0, 0), [0, 2) and [2, 6).
    got = derived(0.5, [-3, -1, 2, 6])
    assert got.proposal_len.tolist() == [0, 2, 1] and got.expected_len.tolist() == [0.0, 0.75, 0.5]
    assert got.tokens.tolist() == [10, 11, 12, -1, -1, -1]


@pytest.mark.ref
def test_ref_nan_and_saturation():
    args = make_batch([4, 3], 8, 8, bad_tokens=0)
    args["hidden"] = args["hidden"].clone()
    args["hidden"][1, 2] = float("nan")
    # A huge logit saturates to exactly 1 (kept even at threshold 1), a hugely negative one to 0.
    args["hidden"][4:7] = 0
    args["w_e"] = torch.zeros(8)
    args["bias"] = torch.tensor([200.0])
    got = _ref(args, 1.0)
    assert got.confidence[1] == 0 and got.confidence[0] == 1.0 and got.confidence[4:7].tolist() == [1.0] * 3
    assert got.proposal_len.tolist() == [1, 3] and got.expected_len.tolist() == [1.0, 3.0]
    args["bias"] = torch.tensor([-200.0])
    got = _ref(args, 0.0)
    assert got.confidence[4:7].tolist() == [0.0] * 3 and got.proposal_len[1] == 0


@pytest.mark.ref
@pytest.mark.parametrize("threshold", (0.0, 0.5))
def test_cpu_interface_writes_every_output(threshold):
    lens = random_lens(9) + [16, 0, 1]
    args = make_batch(lens, 48, 24, extra_cols=5, pad_rows=3)
    outs = poisoned_outputs(args, "cpu")
    got = api.confidence_head(**args, threshold=threshold, out=outs)
    assert isinstance(got, api.DflashOutput) and all(g is o for g, o in zip(got, outs))
    assert_confidence_close(got.confidence, args)
    assert_derived_exact(got, got.confidence, args, threshold)
    assert got.tokens[-3:].tolist() == [-1] * 3  # padding rows


@pytest.mark.ref
@pytest.mark.parametrize("cu", NONCANONICAL_CU.values(), ids=NONCANONICAL_CU.keys())
def test_cpu_interface_noncanonical_cu(cu):
    args = make_batch([40], 48, 24, extra_cols=5)
    args["cu_draft_lens"] = torch.tensor(cu(40), dtype=torch.int32)
    outs = poisoned_outputs(args, "cpu")
    got = api.confidence_head(**args, threshold=0.3, out=outs)
    assert all(g is o for g, o in zip(got, outs))
    assert_confidence_close(got.confidence, args)
    assert_derived_exact(got, got.confidence, args, 0.3)


@pytest.mark.ref
def test_threshold_tensor_read_as_it_is():
    # A (1,) tensor equals its Python value; unchecked values: NaN keeps like 0, above 1 keeps nothing.
    args = make_batch(random_lens(12), 48, 24, bad_tokens=2)
    for tensor, same_as in ((0.3, 0.3), (0.0, 0.0), (math.nan, 0.0), (1.0, 1.0)):
        got = api.confidence_head(**args, threshold=torch.tensor([tensor]), out=poisoned_outputs(args, "cpu"))
        for name, g, e in zip(api.OUTPUTS, got, api.confidence_head(**args, threshold=same_as)):
            assert_bitwise_equal(g, e, what=f"{name}, threshold tensor {tensor}")
    got = api.confidence_head(**args, threshold=torch.tensor([1.5]))
    assert got.proposal_len.tolist() == [0] * 12 and got.expected_len.tolist() == [0.0] * 12
    assert got.tokens.tolist() == [-1] * got.tokens.shape[0]


@pytest.mark.ref
def test_empty_batch_outputs():
    # B == 0: every row is padding (confidence computed, token -1).
    args = make_batch([], 16, 8, pad_rows=4)
    got = api.confidence_head(**args, threshold=0.5)
    assert_confidence_close(got.confidence, args)
    assert got.proposal_len.shape == (0,) and got.expected_len.shape == (0,) and got.tokens.tolist() == [-1] * 4
    # N == 0: every request is empty.
    args = make_batch([0, 0, 0], 16, 8)
    got = api.confidence_head(**args, threshold=0.5)
    assert got.confidence.shape == (0,) and got.tokens.shape == (0,)
    assert got.proposal_len.tolist() == [0, 0, 0] and got.expected_len.tolist() == [0.0, 0.0, 0.0]


def _bad_inputs():
    i32, i64, f32, bf16 = torch.int32, torch.int64, torch.float32, torch.bfloat16
    base = make_batch([2, 1], 8, 4, bad_tokens=0)

    def outs():
        return api.DflashOutput(poisoned((3,), f32, "cpu"), poisoned((2,), i32, "cpu"), poisoned((2,), f32, "cpu"), poisoned((3,), i64, "cpu"))

    def case(name, error, message, **kw):
        args = dict(base, threshold=0.5, out=outs())
        args.update(kw)
        return (name, args, error, message)

    shared = torch.zeros(64, dtype=f32)
    shared_i32 = poisoned((2,), i32, "cpu")
    return [
        case("hidden-fp32", TypeError, "hidden has dtype torch.float32", hidden=base["hidden"].float()),
        case("hidden-1d", ValueError, "hidden must be 2-D", hidden=base["hidden"][0]),
        case("hidden-col-strided", ValueError, "hidden's last dimension must be contiguous", hidden=torch.zeros(3, 16, dtype=bf16)[:, ::2]),
        case("hidden-rows", ValueError, "prev_tokens must have shape (4,)", hidden=torch.zeros(4, 8, dtype=bf16)),
        case("hidden-wide", ValueError, "H (hidden.shape[1]) must be in [1, 16384]", hidden=torch.zeros(3, 16385, dtype=bf16), w_h=torch.zeros(16385)),
        case("prev-float", TypeError, "prev_tokens has dtype torch.float32", prev_tokens=base["prev_tokens"].float()),
        case("prev-short", ValueError, "prev_tokens must have shape (3,)", prev_tokens=base["prev_tokens"][:2]),
        case("emb-fp16", TypeError, "embedding has dtype torch.float16", embedding=base["embedding"].half()),
        case("emb-strided", ValueError, "embedding must be contiguous", embedding=torch.zeros(97, 8, dtype=bf16)[:, :4]),
        case("emb-empty", ValueError, "embedding must have V >= 1 rows", embedding=torch.zeros(0, 4, dtype=bf16)),
        case("w_h-bf16", TypeError, "w_h has dtype torch.bfloat16", w_h=base["w_h"].to(bf16)),
        case("w_h-mismatch", ValueError, "w_h must have shape (8,)", w_h=torch.zeros(4)),
        case("w_e-mismatch", ValueError, "w_e must have shape (4,)", w_e=torch.zeros(8)),
        case("bias-float", TypeError, "bias must be a torch.Tensor", bias=0.5),
        case("bias-shape", ValueError, "bias must have shape (1,)", bias=torch.zeros(())),
        case("draft-short", ValueError, "draft_tokens must have shape (3,)", draft_tokens=base["draft_tokens"][:1]),
        case("draft-int16", TypeError, "draft_tokens has dtype torch.int16", draft_tokens=base["draft_tokens"].to(torch.int16)),
        case("cu-float", TypeError, "cu_draft_lens has dtype torch.float32", cu_draft_lens=base["cu_draft_lens"].float()),
        case("cu-empty", ValueError, "cu_draft_lens must have B + 1 >= 1", cu_draft_lens=base["cu_draft_lens"][:0]),
        case("cu-meta", ValueError, "cu_draft_lens is on meta; tensors on meta are not supported", cu_draft_lens=base["cu_draft_lens"].to("meta")),
        case("prev-meta", ValueError, "prev_tokens is on meta but the input is on cpu", prev_tokens=base["prev_tokens"].to("meta")),
        case("threshold-high", ValueError, "threshold must be in [0, 1]", threshold=1.5),
        case("threshold-nan", ValueError, "threshold must be in [0, 1]", threshold=float("nan")),
        case("threshold-list", TypeError, "threshold must be a real number or a (1,) float32 tensor", threshold=[0.5]),
        case("threshold-0d", ValueError, "threshold must have shape (1,)", threshold=torch.tensor(0.5)),
        case("threshold-f64", TypeError, "threshold has dtype torch.float64", threshold=torch.tensor([0.5], dtype=torch.float64)),
        case("threshold-meta", ValueError, "threshold is on meta", threshold=torch.zeros(1, device="meta")),
        case("out-three", TypeError, "out must be a DflashOutput or tuple", out=outs()[:3]),
        case("out-conf-bf16", ValueError, "out.confidence must be (3,) torch.float32", out=(poisoned((3,), bf16, "cpu"),) + outs()[1:]),
        case("out-tokens-dtype", ValueError, "out.tokens must be (3,) torch.int64", out=outs()[:3] + (poisoned((3,), i32, "cpu"),)),
        case("out-plen-shape", ValueError, "out.proposal_len must be (2,) torch.int32", out=(outs()[0], poisoned((3,), i32, "cpu")) + outs()[2:]),
        case("out-on-w_h", ValueError, "out.expected_len overlaps w_h", w_h=shared[:8], out=outs()[:2] + (shared[6:8],) + outs()[3:]),
        case("out-len-none", TypeError, "out.expected_len must be a torch.Tensor, got NoneType", out=outs()[:2] + (None,) + outs()[3:]),
        case("out-tokens-none", TypeError, "out.tokens must be a torch.Tensor, got NoneType", out=outs()[:3] + (None,)),
        case("prev-strided", ValueError, "prev_tokens must be contiguous", prev_tokens=torch.zeros(6, dtype=i64)[::2]),
        case("w_h-strided", ValueError, "w_h must be contiguous", w_h=torch.zeros(16)[::2]),
        case("w_e-strided", ValueError, "w_e must be contiguous", w_e=torch.zeros(8)[::2]),
        case("draft-strided", ValueError, "draft_tokens must be contiguous", draft_tokens=torch.zeros(6, dtype=i64)[::2]),
        case("emb-wide", ValueError, "He (embedding.shape[1]) must be in [1, 16384]", embedding=torch.zeros(97, 16385, dtype=bf16), w_e=torch.zeros(16385)),
        case("out-len-on-plen", ValueError, "out.proposal_len overlaps out.expected_len", out=(outs()[0], shared_i32[:2], shared_i32[:2].view(f32), outs()[3])),
    ]


@pytest.mark.ref
@pytest.mark.parametrize("name", case_names(_bad_inputs))
def test_bad_input_raises_and_writes_nothing(name):
    _, kwargs, error, message = case_named(_bad_inputs, name)
    assert_rejected_without_writes(api.confidence_head, kwargs, error, message, kwargs["out"])


class _RecordingOps:
    """Stands in for tilelang_ops.ops: records each factory the interface builds (static arguments)
    and each launch of its kernel, in order; names in `missing` raise LookupError, as the dispatcher
    does for factories the backend lacks."""

    def __init__(self, missing=()):
        self.calls = []
        self.missing = set(missing)

    def __getattr__(self, factory):
        if factory in self.missing:
            raise LookupError(factory)

        def build(*static, **options):
            def kernel(*args):
                self.calls.append((factory, static, options, args))

            return kernel

        return build


def _dispatch(monkeypatch, ops):
    """(args, threshold, outs) of one interface call on CPU tensors treated as device ones, served
    by `ops`: strided hidden rows, w_e one element into its storage (4-byte aligned)."""
    monkeypatch.setattr(api, "is_host", lambda t: False)
    monkeypatch.setattr(api, "backend_ops", lambda name, t: types.SimpleNamespace(ops=ops))
    args = make_batch([3, 0, 5], 576, 320, prev_dtype=torch.int32, draft_dtype=torch.int64, cu_dtype=torch.int64, extra_cols=64)
    args["w_e"] = torch.randn(321)[1:]
    threshold = torch.tensor([0.5])
    outs = poisoned_outputs(args, "cpu")
    api.confidence_head(**args, threshold=threshold, out=outs)
    return args, threshold, outs


def _same(got, want) -> bool:
    return len(got) == len(want) and all(g is w for g, w in zip(got, want))


@pytest.mark.ref
@pytest.mark.parametrize("pdl", [False, True], ids=["before_sm90", "sm90"])
def test_dispatch_two_launches(monkeypatch, pdl):
    """A backend with both factories: the confidences of every row, then the derivation reading
    them, with the weights' alignment (w_e's 4 bytes) narrowing the weight loads; the second a
    programmatic dependent of the first where the device takes it (interface.takes_pdl)."""
    monkeypatch.setattr(api, "takes_pdl", lambda t: pdl)
    ops = _RecordingOps()
    args, threshold, outs = _dispatch(monkeypatch, ops)
    (first, conf_static, conf_options, conf_args), (second, derive_static, derive_options, derive_args) = ops.calls
    assert first == "dflash_confidence_tl" and second == "dflash_derive_tl"
    assert conf_static == (576, 320, 640, "int32") and conf_options == dict(h_align=16, e_align=16, w_align=4, pdl=pdl)
    assert derive_static == ("int64", "int64") and derive_options == dict(pdl=pdl)
    reads = [args[k] for k in ("hidden", "prev_tokens", "embedding", "w_h", "w_e", "bias")]
    assert _same(conf_args, (*reads, outs.confidence))
    assert _same(derive_args, (outs.confidence, threshold, args["draft_tokens"], args["cu_draft_lens"], *outs[1:]))


@pytest.mark.ref
def test_dispatch_falls_back_to_one_launch(monkeypatch):
    """A backend without the two-launch factories (Ascend) runs its one-launch dflash_tl."""
    ops = _RecordingOps(missing=("dflash_confidence_tl", "dflash_derive_tl"))
    args, threshold, outs = _dispatch(monkeypatch, ops)
    ((name, static, options, launched),) = ops.calls
    assert name == "dflash_tl" and static == (576, 320, 640, "int32", "int64", "int64")
    assert options == dict(h_align=16, e_align=16)
    reads = [args[k] for k in ("hidden", "prev_tokens", "embedding", "w_h", "w_e", "bias")]
    assert _same(launched, (*reads, threshold, args["draft_tokens"], args["cu_draft_lens"], *outs))


# ----------------------------------------------------------------------------------------------------
# Codegen (CPU): every shipped configuration lowers, compiles and fits on chip.


def _config_id(config) -> str:
    return "-".join(map(str, config))


def _static(config):
    """(positional, keyword) arguments of the factories for a shipped configuration."""
    *args, h_align, e_align = config
    return tuple(args), {"h_align": h_align, "e_align": e_align}


def _kernel_names(source: str) -> set[str]:
    return set(re.findall(r"__global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(", source))


def _cuda_confidence_configs():
    from kernels.dflash import cuda

    return cuda.confidence_shipped_configs()


def _cuda_derive_configs():
    from kernels.dflash import cuda

    return cuda.derive_shipped_configs()


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("pdl", [False, True], ids=["plain", "pdl"])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("config", _cuda_confidence_configs(), ids=_config_id)
def test_cuda_confidence_compiles_without_spills(arch, config, pdl):
    from kernels.dflash import cuda
    from testing import codegen_cuda

    *args, h_align, e_align, w_align = config
    kwargs = dict(h_align=h_align, e_align=e_align, w_align=w_align, pdl=pdl)
    source = codegen_cuda.cuda_source(cuda.dflash_confidence_tl, *args, arch=arch, **kwargs)
    # One launch, no atomics; with pdl every block lets the derive grid start.
    kernels = _kernel_names(source)
    assert "atomic" not in source.lower() and len(kernels) == 1, kernels
    assert ("cudaTriggerProgrammaticLaunchCompletion();" in source) == pdl
    report = codegen_cuda.check_cuda_resources(cuda.dflash_confidence_tl, *args, arch=arch, **kwargs)
    assert report.spill_store_bytes == report.spill_load_bytes == report.stack_frame_bytes == 0


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("pdl", [False, True], ids=["plain", "pdl"])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("config", _cuda_derive_configs(), ids=_config_id)
def test_cuda_derive_compiles_without_spills(arch, config, pdl):
    from kernels.dflash import cuda
    from testing import codegen_cuda

    source = codegen_cuda.cuda_source(cuda.dflash_derive_tl, *config, arch=arch, pdl=pdl)
    # One launch, no atomics; the in-order product and sum cannot be fused into an FMA; with pdl it
    # waits for the confidence grid before reading a confidence.
    kernels = _kernel_names(source)
    assert "atomic" not in source.lower() and len(kernels) == 1, kernels
    assert "__fmul_rn" in source and "__fadd_rn" in source
    assert ("cudaGridDependencySynchronize();" in source) == pdl
    report = codegen_cuda.check_cuda_resources(cuda.dflash_derive_tl, *config, arch=arch, pdl=pdl)
    assert report.spill_store_bytes == report.spill_load_bytes == report.stack_frame_bytes == 0


@pytest.mark.codegen_cuda
def test_cuda_shipped_configs_cover_every_path():
    from kernels.dflash import cuda

    configs = cuda.confidence_shipped_configs()
    assert {c[3] for c in configs} == set(ref.BACKEND_INDEX_DTYPES)
    assert {tuple(c) for c in cuda.derive_shipped_configs()} == {(d, c) for d in ref.BACKEND_INDEX_DTYPES for c in ref.BACKEND_INDEX_DTYPES}
    # Vector widths of hidden, embedding and weights: 16-byte, narrower and scalar loads of each.
    h_vecs = {ref.vector_elems(c[0], c[2], c[4]) for c in configs}
    e_vecs = {ref.vector_elems(c[1], c[1], c[5]) for c in configs}
    w_vecs = {cuda.weight_elems(ref.vector_elems(c[0], c[2], c[4]), c[6]) for c in configs}
    assert {1, 8} <= h_vecs and len(h_vecs) > 2 and {1, 8} <= e_vecs and len(e_vecs) > 2 and w_vecs == {1, 2, 4}
    assert {c[6] for c in configs} == {4, 8, 16}
    assert any(c[2] > c[0] for c in configs)
    # The widest rows (the most loads a thread holds), and rows with and without a partial last step.
    assert any(c[0] == c[1] == ref.MAX_WIDTH for c in configs)
    tails = {(c[0] // ref.vector_elems(c[0], c[2], c[4])) % 256 == 0 for c in configs}
    assert tails == {True, False}


@pytest.mark.codegen_cuda
def test_shipped_configs_cover_every_path():
    configs = ref.dflash_shipped_configs()
    for k in (3, 4, 5):
        assert {c[k] for c in configs} == set(ref.BACKEND_INDEX_DTYPES)
    vectors = {(ref.vector_elems(c[0], c[2], c[6]), ref.vector_elems(c[1], c[1], c[7])) for c in configs}
    assert (8, 8) in vectors and any(h < 8 and e < 8 for h, e in vectors)
    assert any(c[2] > c[0] for c in configs)


@pytest.mark.codegen_cuda
def test_bad_static_arguments_rejected_before_build():
    for kwargs, message in [
        (dict(H=0), "H must be in [1, 16384]"),
        (dict(h_stride=100), "h_stride 100 is smaller than H 576"),
        (dict(h_align=3), "h_align must be one of"),
    ]:
        args = dict(H=576, He=320, h_stride=576, h_align=16, e_align=16)
        args.update(kwargs)
        with pytest.raises(ValueError, match=re.escape(message)):
            ref.check_config("dflash", args["H"], args["He"], args["h_stride"], args["h_align"], args["e_align"], cu_dtype="int32")
    with pytest.raises(ValueError, match="cu_dtype 'int16'"):
        ref.check_config("dflash", 8, 8, 8, 16, 16, cu_dtype="int16")
    with pytest.raises(ValueError, match=re.escape("w_align must be one of")):
        ref.check_config("dflash", 8, 8, 8, 16, 16, w_align=32, prev_dtype="int32")
    with pytest.raises(ValueError, match="draft_dtype 'int8'"):
        ref.check_index_dtypes("dflash", draft_dtype="int8", cu_dtype="int32")


@pytest.mark.codegen_ascend
@pytest.mark.parametrize("config", ref.dflash_shipped_configs(), ids=_config_id)
def test_ascend_config_lowers_and_fits_ub(config):
    from kernels.dflash import asc
    from testing import codegen_ascend

    args, kwargs = _static(config)
    source = codegen_ascend.ascend_source(asc.dflash_tl, *args, **kwargs)
    assert "__global__" in source or "__aicore__" in source
    codegen_ascend.assert_ub_fits(asc.dflash_tl, *args, **kwargs)


# ----------------------------------------------------------------------------------------------------
# Device: the backend's kernel against the reference and the oracle, on the accelerator.

# (B, max draft length, H, He, extra hidden columns, padding rows): decode batches of the benchmark
# widths, ragged lengths up to 16, strided hidden rows, padding rows past the last request.
DEVICE_CASES = [
    (1, 1, 7168, 7168, 0, 0),
    (8, 4, 7168, 7168, 0, 0),
    (64, 16, 7168, 7168, 0, 5),
    (256, 8, 4096, 4096, 0, 0),
    (33, 16, 576, 320, 64, 0),
    (7, 16, 576, 320, 0, 3),
    (300, 2, 64, 40, 8, 0),
]


@pytest.mark.device
@pytest.mark.parametrize("threshold", (0.0, 0.5, 1.0))
@pytest.mark.parametrize("prev_dtype,draft_dtype,cu_dtype", [(torch.int32, torch.int64, torch.int32), (torch.int64, torch.int32, torch.int64)], ids=str)
@pytest.mark.parametrize("case", DEVICE_CASES, ids=lambda c: "B{}-L{}-H{}-He{}-x{}-p{}".format(*c))
def test_device_matches_ref(device, threshold, prev_dtype, draft_dtype, cu_dtype, case):
    n_req, max_len, H, He, extra_cols, pad_rows = case
    lens = random_lens(n_req, max_len)
    args = make_batch(lens, H, He, prev_dtype=prev_dtype, draft_dtype=draft_dtype, cu_dtype=cu_dtype, extra_cols=extra_cols, pad_rows=pad_rows, bad_tokens=3, vocab=1000, device=device)
    outs = poisoned_outputs(args, device)
    got = api.confidence_head(**args, threshold=threshold, out=outs)
    assert all(g is o for g, o in zip(got, outs))
    assert_confidence_close(got.confidence, args)
    # Derived outputs: exactly the reference's derivation of the kernel's own confidences.
    derived = ref.derive_from_confidence(got.confidence, args["draft_tokens"], args["cu_draft_lens"], threshold)
    for name, g, e in zip(api.OUTPUTS[1:], got[1:], derived):
        assert_bitwise_equal(g, e, what=name)
    assert_derived_exact(got, got.confidence, args, threshold)
    assert_matches_ref(got, args, threshold)


@pytest.mark.device
def test_device_misaligned_rows_and_nan(device):
    # Views one element into their storage: 2-byte aligned rows (scalar loads), a NaN hidden row.
    args = make_batch(random_lens(20), 576, 320, pad_rows=4, bad_tokens=2, device=device)
    args["hidden"] = torch.randn(args["hidden"].shape[0], 578, device=device).to(torch.bfloat16)[:, 1:577]
    args["hidden"][3, 5] = float("nan")
    emb = torch.randn(VOCAB * 320 + 1, device=device).to(torch.bfloat16)
    args["embedding"] = emb[1:].view(VOCAB, 320)
    # Weights one element into their storage: 4-byte aligned (scalar weight loads).
    args["w_h"] = (torch.randn(577, device=device) * (1.5 / math.sqrt(576)))[1:]
    args["w_e"] = (torch.randn(321, device=device) * (1.5 / math.sqrt(320)))[1:]
    got = api.confidence_head(**args, threshold=0.25, out=poisoned_outputs(args, device))
    assert_confidence_close(got.confidence, args)
    assert got.confidence[3] == 0
    assert_derived_exact(got, got.confidence, args, 0.25)
    assert_matches_ref(got, args, 0.25)


@pytest.mark.device
@pytest.mark.parametrize("cu_dtype", IDX, ids=str)
@pytest.mark.parametrize("cu", NONCANONICAL_CU.values(), ids=NONCANONICAL_CU.keys())
def test_device_noncanonical_cu(device, cu_dtype, cu):
    # Outputs are the heads of longer poisoned buffers: a write to a row >= N shows in their tails.
    n = 300
    args = make_batch([n], 576, 320, cu_dtype=cu_dtype, bad_tokens=3, vocab=1000, device=device)
    args["cu_draft_lens"] = torch.tensor(cu(n), dtype=cu_dtype, device=device)
    confidence, tokens = poisoned((n + 8,), torch.float32, device), poisoned((n + 8,), torch.int64, device)
    outs = poisoned_outputs(args, device)._replace(confidence=confidence[:n], tokens=tokens[:n])
    got = api.confidence_head(**args, threshold=0.5, out=outs)
    assert all(g is o for g, o in zip(got, outs))
    assert_confidence_close(got.confidence, args)
    assert_derived_exact(got, got.confidence, args, 0.5)
    assert_matches_ref(got, args, 0.5)
    for name, buf in (("confidence", confidence), ("tokens", tokens)):
        assert_bitwise_equal(buf[n:], poisoned((8,), buf.dtype, device), f"{name} past row N")


@pytest.mark.device
def test_device_empty_batch_launches_nothing(device, no_kernel_launches):
    args = make_batch([], 64, 32, pad_rows=5, device=device)
    got = api.confidence_head(**args, threshold=0.5, out=poisoned_outputs(args, device))
    assert_confidence_close(got.confidence, args)
    assert_matches_ref(got, args, 0.5)
    assert got.tokens.tolist() == [-1] * 5 and got.proposal_len.shape == (0,)
    args = make_batch([0, 0], 64, 32, device=device)
    got = api.confidence_head(**args, threshold=0.5, out=poisoned_outputs(args, device))
    assert got.proposal_len.tolist() == [0, 0] and got.expected_len.tolist() == [0.0, 0.0]


@pytest.mark.device
def test_device_cuda_graph_replay(device, backend):
    # Captured once at fixed sizes, replayed with new contents (bias, threshold and lengths included).
    if backend != "cuda":
        pytest.skip("CUDA graphs are a CUDA feature")
    n_req, n, H, He = 32, 256, 4096, 4096
    args = make_batch([8] * n_req, H, He, vocab=1000, device=device)
    outs = poisoned_outputs(args, device)
    threshold = torch.full((1,), 0.5, device=device)

    def call():
        api.confidence_head(**args, threshold=threshold, out=outs)

    call()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    for thr in (0.25, 0.75):
        threshold.fill_(thr)
        fresh = make_batch(random_lens(n_req, 8), H, He, vocab=1000, pad_rows=0)
        pad = n - fresh["hidden"].shape[0]
        for key in ("prev_tokens", "draft_tokens"):
            args[key].copy_(torch.cat([fresh[key], torch.zeros(pad, dtype=fresh[key].dtype)]))
        args["hidden"].copy_(torch.cat([fresh["hidden"], torch.zeros(pad, H, dtype=torch.bfloat16)]))
        for key in ("embedding", "w_h", "w_e", "bias", "cu_draft_lens"):
            args[key].copy_(fresh[key])
        for t in outs:
            t.fill_(float("nan") if t.dtype.is_floating_point else torch.iinfo(t.dtype).min)
        graph.replay()
        assert_confidence_close(outs.confidence, args)
        assert_derived_exact(outs, outs.confidence, args, thr, "graph")
        assert_matches_ref(outs, args, thr, "graph")
