"""Tests of `outlier_detection`: reference vs a Python-loop oracle, interface validation, codegen, and
the device kernels.

Suites (markers, selected by `--tl-suite`; see testing/plugin.py): ref, codegen_cuda, codegen_ascend,
device. Inputs are drawn fresh per test from the plugin's per-test seed; outputs are poisoned first.
Every output is exact (maxima, comparisons, ids and counts), so every comparison is bit for bit.
"""

from __future__ import annotations

import functools
import math
import re

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from kernels.outlier_detection import api, ref
from testing.graphs import capture_each_after_warm_up, counters_left_zero, dirty_graph_pool, later_first
from testing.numeric import assert_bitwise_equal, assert_rejected_without_writes, case_named, case_names, poisoned

DTYPES = list(api.DTYPES)
NAN, INF = math.nan, math.inf


def random_rows(t: int, d: int, dtype: torch.dtype, device="cpu", row_stride: int | None = None, col_offset=0):
    """(t, d) normal rows with a random per-row scale (10^-2..10^2); with row_stride/col_offset a
    view into a wider tensor."""
    width = (row_stride or d) + col_offset
    base = torch.randn((t, width), device=device) * torch.pow(10.0, torch.empty((t, 1), device=device).uniform_(-2, 2))
    return base.to(dtype)[:, col_offset : col_offset + d]


def sprinkle(x: torch.Tensor, fraction: float = 0.05) -> torch.Tensor:
    """x with NaN, +Inf and -Inf written at random places of about `fraction` of its rows (in place)."""
    t, d = x.shape
    rows = torch.nonzero(torch.rand(t) < fraction).flatten().tolist()
    for i in rows:
        x[i, int(torch.randint(d, ()))] = [NAN, INF, -INF][i % 3]
    return x


def _row_outputs(t: int, device) -> tuple[torch.Tensor, ...]:
    """Poisoned (absmax, flag, flagged_rows, count); the flag's bytes hold 0x5A, neither False nor True."""
    flag = torch.empty((t,), dtype=torch.bool, device=device)
    flag.view(torch.uint8).fill_(0x5A)
    return poisoned((t,), torch.float32, device), flag, poisoned((t,), torch.int32, device), poisoned((1,), torch.int32, device)


def assert_flag_equal(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """Byte for byte, so a poisoned (unwritten) flag never passes as True."""
    assert_bitwise_equal(actual.view(torch.uint8), expected.view(torch.uint8), what=what)


# ----------------------------------------------------------------------------------------------------
# The independent oracle: a Python loop over float64 copies of the exact values.


def oracle_rows(x: torch.Tensor, thr: float):
    """(absmax, flag, flagged_rows, count) as Python lists / int, row by row."""
    absmax, flag = [], []
    for row in x.double().tolist():
        m, bad = 0.0, False
        for v in row:
            if math.isnan(v):
                bad = True
                continue
            bad = bad or math.isinf(v)
            m = max(m, abs(v))
        absmax.append(m)
        flag.append(bad or m > thr)
    ids = [i for i, f in enumerate(flag) if f]
    return absmax, flag, ids + [-1] * (len(flag) - len(ids)), len(ids)


def oracle_columns(x: torch.Tensor, thr: float) -> list[int]:
    a = np.abs(x.double().numpy())
    with np.errstate(invalid="ignore"):
        return [int(sum(1 for v in a[:, j] if v > thr)) for j in range(a.shape[1])]


def assert_rows_equal(got, expected, what: str) -> None:
    absmax, flag, flagged_rows, count = got
    e_absmax, e_flag, e_rows, e_count = expected
    assert_bitwise_equal(absmax.cpu(), torch.tensor(e_absmax, dtype=torch.float32).reshape(-1), what=f"{what} absmax")
    assert_flag_equal(flag.cpu(), torch.tensor(e_flag, dtype=torch.bool).reshape(-1), what=f"{what} flag")
    assert_bitwise_equal(flagged_rows.cpu(), torch.tensor(e_rows, dtype=torch.int32).reshape(-1), what=f"{what} flagged_rows")
    assert_bitwise_equal(count.cpu(), torch.tensor([e_count], dtype=torch.int32), what=f"{what} count")


def thresholds_for(x: torch.Tensor) -> list[float]:
    """Thresholds flagging about 1% of the rows, about half, every row, and only non-finite ones."""
    a = torch.nan_to_num(x.float().abs(), nan=0.0, posinf=0.0, neginf=0.0).amax(dim=1)
    if a.numel() == 0:
        return [1.0, -1.0, INF]
    quantiles = torch.tensor([0.99, 0.5], dtype=a.dtype)
    return [float(q) for q in torch.quantile(a, quantiles)] + [-1.0, INF]


# ----------------------------------------------------------------------------------------------------
# Reference suite.

REF_SHAPES = [(0, 7), (1, 1), (1, 7168), (5, 7), (37, 576), (64, 1), (9, 7168), (203, 33)]


@pytest.mark.ref
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("t,d", REF_SHAPES)
def test_ref_rows_match_oracle(dtype, t, d):
    x = sprinkle(random_rows(t, d, dtype, row_stride=d + 3, col_offset=1))
    for thr in thresholds_for(x):
        thr32 = ref.fp32_threshold(thr)
        assert_rows_equal(ref.outlier_rows_ref(x, thr), oracle_rows(x, thr32), f"{dtype} {t}x{d} thr={thr}")
        # A device-scalar threshold means the same.
        tensor = torch.tensor([thr32], dtype=torch.float32)
        assert_rows_equal(ref.outlier_rows_ref(x, tensor), oracle_rows(x, thr32), f"{dtype} {t}x{d} tensor thr")
    # A NaN threshold tensor (only a tensor can hold one): every comparison with it is false, so
    # only the non-finite rows are flagged.
    assert_rows_equal(ref.outlier_rows_ref(x, torch.tensor([NAN])), oracle_rows(x, NAN), f"{dtype} {t}x{d} NaN thr")


@pytest.mark.ref
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("t,d", REF_SHAPES)
def test_ref_columns_match_oracle(dtype, t, d):
    x = sprinkle(random_rows(t, d, dtype, row_stride=d + 5), fraction=0.2)
    for thr in [0.0, 1.0, 3.0, -1.0, INF]:
        counts = ref.outlier_columns_ref(x, thr)
        assert counts.dtype == torch.int32 and counts.shape == (d,)
        assert counts.tolist() == oracle_columns(x, ref.fp32_threshold(thr)), f"thr={thr}"
    assert ref.outlier_columns_ref(x, torch.tensor([NAN])).tolist() == oracle_columns(x, NAN) == [0] * d


def _special_rows(d: int, dtype: torch.dtype) -> tuple[torch.Tensor, dict[str, int]]:
    """Named edge-case rows between normal ones; returns x and {name: row index}."""
    huge = float(torch.finfo(dtype).max)
    tiny = float(torch.finfo(dtype).smallest_normal) / 4  # subnormal in the dtype
    one = lambda value, at: torch.zeros(d).index_fill_(0, torch.tensor([at]), value)  # noqa: E731
    rows = {
        "zeros": torch.zeros(d),
        "all_nan": torch.full((d,), NAN),
        "nan": torch.randn(d).index_fill_(0, torch.tensor([d - 1]), NAN),
        "pos_inf": torch.randn(d).index_fill_(0, torch.tensor([0]), INF),
        "neg_inf": torch.randn(d).index_fill_(0, torch.tensor([d // 2]), -INF),
        "nan_and_inf": one(INF, 0).index_fill_(0, torch.tensor([d - 1]), NAN),
        "huge": one(-huge, d // 3),
        "tiny": one(tiny, d - 1),
        "negative_zero": torch.full((d,), -0.0),
    }
    names, out = {}, []
    for name, row in rows.items():
        out.append(torch.randn(d) * 0.01)
        names[name] = len(out)
        out.append(row)
    return torch.stack(out).to(dtype), names


@pytest.mark.ref
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("d", [1, 7, 576])
def test_ref_special_rows(dtype, d):
    x, rows = _special_rows(d, dtype)
    thr = 1.0
    absmax, flag, flagged_rows, count = ref.outlier_rows_ref(x, thr)
    assert_rows_equal((absmax, flag, flagged_rows, count), oracle_rows(x, thr), f"{dtype} special")
    a = absmax.tolist()
    assert a[rows["zeros"]] == 0.0 and not flag[rows["zeros"]]
    assert a[rows["all_nan"]] == 0.0 and flag[rows["all_nan"]], "NaN is ignored by absmax but flags the row"
    assert a[rows["pos_inf"]] == INF and a[rows["neg_inf"]] == INF
    assert a[rows["huge"]] == float(torch.finfo(dtype).max) and flag[rows["huge"]]
    assert 0 < a[rows["tiny"]] < 1e-4 and not flag[rows["tiny"]]
    assert a[rows["negative_zero"]] == 0.0 and math.copysign(1.0, a[rows["negative_zero"]]) == 1.0
    if d > 1:  # (with one column the NaN overwrites the row's only other value)
        assert a[rows["nan"]] < INF and flag[rows["nan"]] and a[rows["nan_and_inf"]] == INF
    # An infinite threshold still flags non-finite rows, and only them.
    _, flag_inf, _, count_inf = ref.outlier_rows_ref(x, INF)
    non_finite = {rows[k] for k in ("all_nan", "nan", "pos_inf", "neg_inf", "nan_and_inf")}
    assert set(torch.nonzero(flag_inf).flatten().tolist()) == non_finite and count_inf.item() == len(non_finite)


@pytest.mark.ref
def test_ref_threshold_is_compared_in_float32():
    # float32(0.1) > 0.1 in float64: a row holding exactly float32(0.1) is not above the fp32 threshold.
    x = torch.full((2, 4), 0.1, dtype=torch.float32)
    x[1, 2] = 0.2
    _, flag, flagged_rows, count = ref.outlier_rows_ref(x, 0.1)
    assert flag.tolist() == [False, True] and flagged_rows.tolist() == [1, -1] and count.tolist() == [1]
    assert ref.outlier_columns_ref(x, 0.1).tolist() == [0, 0, 1, 0]
    assert ref.fp32_threshold(1e39) == INF and ref.fp32_threshold(-1e39) == -INF
    # Beyond a double's range too (an int float() cannot convert).
    assert ref.fp32_threshold(10**400) == INF and ref.fp32_threshold(-(10**400)) == -INF


@pytest.mark.ref
@pytest.mark.parametrize("bad,error", [(NAN, ValueError), (True, TypeError), ("1.0", TypeError), (None, TypeError)])
def test_fp32_threshold_rejects(bad, error):
    with pytest.raises(error, match="threshold"):
        ref.fp32_threshold(bad)


@pytest.mark.ref
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cpu_interface_writes_every_output(dtype):
    x = sprinkle(random_rows(40, 24, dtype, row_stride=31, col_offset=2), fraction=0.2)
    thr = float(x.float().abs().nan_to_num(0.0, 0.0, 0.0).amax(dim=1).median())
    out = _row_outputs(40, "cpu")
    got = api.detect_outlier_rows(x, thr, out=out)
    assert all(g is o for g, o in zip(got, out))
    assert_rows_equal(got, oracle_rows(x, ref.fp32_threshold(thr)), "cpu interface")
    fresh = api.detect_outlier_rows(x, torch.tensor([thr], dtype=torch.float32))
    assert all(t.is_contiguous() for t in fresh)
    assert_rows_equal(fresh, oracle_rows(x, ref.fp32_threshold(thr)), "cpu interface, tensor threshold")
    counts = poisoned((24,), torch.int32, "cpu")
    assert api.count_outlier_columns(x, 1.5, out=counts) is counts
    assert counts.tolist() == oracle_columns(x, 1.5)


@pytest.mark.ref
def test_cpu_single_row_with_any_stride():
    x = random_rows(1, 64, torch.bfloat16, row_stride=100).as_strided((1, 64), (7, 1))
    assert_rows_equal(api.detect_outlier_rows(x, 0.5), oracle_rows(x, 0.5), "one row")


class _RecordingOps:
    """A backend namespace that records which factories the interface takes and launches nothing;
    `missing` names factories the backend lacks (the dispatcher raises LookupError for those)."""

    def __init__(self, missing=()):
        self.calls, self.missing = [], set(missing)

    def __getattr__(self, factory):
        if factory in self.missing or not factory.startswith("outlier_"):
            raise LookupError(factory)

        def build(*static, **options):
            def launch(*args):
                self.calls.append((factory, static, options, args))

            return launch

        return build


@pytest.mark.ref
@pytest.mark.parametrize("t", [1, 5, 6])
@pytest.mark.parametrize("one_launch", [True, False], ids=["cuda", "no-one-launch-kernel"])
def test_row_dispatch(monkeypatch, t, one_launch):
    """Up to ONE_LAUNCH_MAX_ROWS rows take the one-launch kernel with the stream's counter; larger
    batches, or a backend without that kernel, take the two launches; the same static arguments,
    and every factory the device's launch options (interface.launch_options)."""
    import types

    ops = _RecordingOps(missing=() if one_launch else ("outlier_rows_compact_tl",))
    monkeypatch.setattr(api, "is_host", lambda x: False)
    monkeypatch.setattr(api, "launch_options", lambda t: {"pdl": True})
    monkeypatch.setattr(api, "backend_ops", lambda name, x: types.SimpleNamespace(ops=ops))
    monkeypatch.setattr(api, "ONE_LAUNCH_MAX_ROWS", 5)
    counter = torch.zeros(3, dtype=torch.int32)
    monkeypatch.setattr(api, "stream_counters", lambda owner, device, n: counter)
    x = random_rows(t, 24, torch.bfloat16, row_stride=31)
    thr = torch.tensor([1.0])
    out = _row_outputs(t, "cpu")
    api.detect_outlier_rows(x, thr, out=out)
    if one_launch and t <= 5:
        ((factory, static, options, args),) = ops.calls
        assert factory == "outlier_rows_compact_tl" and args[-1] is counter
        assert all(a is o for a, o in zip(args[2:6], out))
    else:
        assert [c[0] for c in ops.calls] == ["outlier_rows_tl", "outlier_compact_tl"]
        (_, static, options, args), (_, _, compact_options, compact_args) = ops.calls
        assert compact_options == {"pdl": True}
        assert args[2] is out[0] and args[3] is out[1]
        assert all(a is o for a, o in zip(compact_args, out[1:]))
    # One row is declared dense (api.dense_rows), so one compiled kernel serves every one-row view.
    assert args[0].data_ptr() == x.data_ptr() and args[0].shape == x.shape and args[1] is thr
    assert static == (24, "bfloat16", 24 if t == 1 else 31) and options == {"x_align": api.base_alignment(x), "pdl": True}


@pytest.mark.ref
@pytest.mark.parametrize("missing", ["outlier_columns_tl", "outlier_compact_tl"])
def test_a_missing_kernel_writes_nothing(monkeypatch, missing):
    # Every kernel a call launches is built before the first launch writes: a backend without one
    # (LookupError, as the dispatcher raises) leaves the caller's outputs as they were.
    import types

    ops = _RecordingOps(missing=("outlier_rows_compact_tl", missing))
    monkeypatch.setattr(api, "is_host", lambda x: False)
    monkeypatch.setattr(api, "backend_ops", lambda name, x: types.SimpleNamespace(ops=ops))
    x = random_rows(6, 24, torch.bfloat16)
    if missing == "outlier_columns_tl":
        call, out = api.count_outlier_columns, poisoned((24,), torch.int32, "cpu")
    else:
        call, out = api.detect_outlier_rows, _row_outputs(6, "cpu")
    assert_rejected_without_writes(call, dict(x=x, threshold=1.0, out=out), LookupError, missing, out if isinstance(out, tuple) else [out])
    assert ops.calls == []


@pytest.mark.ref
def test_empty_batch_is_well_defined(monkeypatch):
    def fail(*_, **__):
        raise AssertionError("an empty batch must not reach the reference or a kernel")

    monkeypatch.setattr(ref, "outlier_rows_ref", fail)
    monkeypatch.setattr(ref, "outlier_columns_ref", fail)
    x = torch.randn(0, 576).to(torch.bfloat16)
    absmax, flag, flagged_rows, count = api.detect_outlier_rows(x, 1.0)
    assert absmax.shape == flag.shape == flagged_rows.shape == (0,) and count.tolist() == [0]
    out = _row_outputs(0, "cpu")
    assert api.detect_outlier_rows(x, 1.0, out=out)[3].tolist() == [0], "count is written even for T == 0"
    counts = poisoned((576,), torch.int32, "cpu")
    assert api.count_outlier_columns(x, 1.0, out=counts) is counts and counts.tolist() == [0] * 576


def _bad_inputs():
    bf = torch.bfloat16
    x = random_rows(6, 8, bf)
    wide = random_rows(6, 16, bf)
    shared = torch.zeros(6, 8, dtype=torch.float32)
    thr = torch.tensor([1.0])
    ids = poisoned((6,), torch.int32, "cpu")
    counts = poisoned((8,), torch.int32, "cpu")
    common = [
        ("x-not-tensor", dict(x=x.tolist()), TypeError, "x must be a torch.Tensor"),
        ("x-float64", dict(x=x.double()), TypeError, "x has dtype torch.float64"),
        ("x-int8", dict(x=x.to(torch.int8)), TypeError, "x has dtype torch.int8"),
        ("x-1d", dict(x=x[0]), ValueError, "x must be 2-D"),
        ("x-3d", dict(x=x[None]), ValueError, "x must be 2-D"),
        ("x-no-columns", dict(x=x[:, :0]), ValueError, "x has width 0"),
        ("x-last-dim-strided", dict(x=wide[:, ::2]), ValueError, "x's last dimension must be contiguous"),
        ("x-overlapping-rows", dict(x=wide.as_strided((6, 8), (4, 1))), ValueError, "x's row stride 4"),
        ("x-on-meta", dict(x=x.to("meta"), threshold=thr.to("meta")), ValueError, "x is on meta; tensors on meta are not supported"),
        ("threshold-nan", dict(x=x, threshold=NAN), ValueError, "threshold must not be NaN"),
        ("threshold-bool", dict(x=x, threshold=True), TypeError, "threshold must be a real number"),
        ("threshold-string", dict(x=x, threshold="1"), TypeError, "threshold must be a real number"),
        ("threshold-fp64", dict(x=x, threshold=thr.double()), TypeError, "threshold has dtype torch.float64"),
        ("threshold-shape", dict(x=x, threshold=torch.ones(2)), ValueError, "threshold must have shape (1,)"),
        ("threshold-0d", dict(x=x, threshold=torch.tensor(1.0)), ValueError, "threshold must have shape (1,)"),
        ("threshold-other-device", dict(x=x, threshold=thr.to("meta")), ValueError, "threshold is on meta"),
    ]
    rows_out = lambda: _row_outputs(6, "cpu")  # noqa: E731
    rows = [(f"rows-{n}", api.detect_outlier_rows, {"threshold": 1.0, **kw, "out": rows_out()}, e, m) for n, kw, e, m in common]
    columns = [
        (f"columns-{n}", api.count_outlier_columns, {"threshold": 1.0, **kw, "out": poisoned((8,), torch.int32, "cpu")}, e, m)
        for n, kw, e, m in common
    ]

    def rows_with(field: int, t):
        out = list(rows_out())
        out[field] = t
        return tuple(out)

    def row(case, error, message, x=x, threshold=1.0, out=None):
        return (f"rows-{case}", api.detect_outlier_rows, dict(x=x, threshold=threshold, out=out), error, message)

    def column(case, error, message, threshold=1.0, out=None):
        return (f"columns-{case}", api.count_outlier_columns, dict(x=x, threshold=threshold, out=out), error, message)

    cpu = lambda shape, dtype: poisoned(shape, dtype, "cpu")  # noqa: E731
    rows += [
        row("x-too-wide", ValueError, "x has width 16385", x=torch.zeros(2, 16385, dtype=bf)),
        row("out-not-tuple", TypeError, "out must be a tuple", out=cpu((6,), torch.float32)),
        row("out-three", TypeError, "out must be a tuple", out=rows_out()[:3]),
        row("absmax-fp16", ValueError, "out.absmax must be (6,)", out=rows_with(0, cpu((6,), torch.float16))),
        row("flag-int8", ValueError, "out.flag must be (6,) torch.bool", out=rows_with(1, torch.zeros(6, dtype=torch.int8))),
        row("ids-short", ValueError, "out.flagged_rows must be (6,)", out=rows_with(2, cpu((5,), torch.int32))),
        row("ids-int64", ValueError, "out.flagged_rows must be (6,)", out=rows_with(2, cpu((6,), torch.int64))),
        row("count-0d", ValueError, "out.count must be (1,)", out=rows_with(3, cpu((), torch.int32))),
        row("ids-strided", ValueError, "out.flagged_rows must be contiguous", out=rows_with(2, cpu((12,), torch.int32)[::2])),
        row("ids-not-tensor", TypeError, "out.flagged_rows must be a torch.Tensor", out=rows_with(2, [0] * 6)),
        row("flag-none", TypeError, "out.flag must be a torch.Tensor, got NoneType", out=rows_with(1, None)),
        row("absmax-is-x", ValueError, "out.absmax overlaps x", x=shared, out=rows_with(0, shared[0, :6])),
        row("count-in-ids", ValueError, "out.flagged_rows overlaps out.count", out=rows_out()[:2] + (ids, ids[:1])),
        row("absmax-on-thr", ValueError, "out.absmax overlaps threshold", threshold=shared[1, :1], out=rows_with(0, shared[1, :6])),
    ]
    columns += [
        column("out-wrong-length", ValueError, "out must be (8,)", out=cpu((9,), torch.int32)),
        column("out-int64", ValueError, "out must be (8,)", out=cpu((8,), torch.int64)),
        column("out-strided", ValueError, "out must be contiguous", out=cpu((16,), torch.int32)[::2]),
        column("out-not-tensor", TypeError, "out must be a torch.Tensor", out=[0] * 8),
        column("out-is-threshold", ValueError, "out overlaps threshold", threshold=counts[:1].view(torch.float32), out=counts),
    ]
    return rows + columns


def _written(out) -> list[torch.Tensor]:
    outs = out if isinstance(out, (tuple, list)) else [out]
    return [t for t in outs if isinstance(t, torch.Tensor) and t.device.type == "cpu"]


@pytest.mark.ref
@pytest.mark.parametrize("name", case_names(_bad_inputs))
def test_bad_input_raises_and_writes_nothing(name):
    _, fn, kwargs, error, message = case_named(_bad_inputs, name)
    assert_rejected_without_writes(fn, kwargs, error, message, _written(kwargs.get("out")))


@pytest.mark.ref
@pytest.mark.parametrize("mode", ["rows", "columns"])
def test_more_than_int32_rows_rejected(mode):
    # Fake tensors carry shape, strides and device but no storage, so 2**31 rows cost nothing (an
    # expand()ed view cannot stand in: its row stride 0 is rejected first). The outputs are fake too,
    # so that a missing row check fails this test without allocating gigabytes.
    n = 2**31
    with FakeTensorMode():
        x = torch.empty((n, 8), dtype=torch.bfloat16)
        if mode == "rows":
            fn = api.detect_outlier_rows
            specs = ((n,), torch.float32), ((n,), torch.bool), ((n,), torch.int32), ((1,), torch.int32)
            out = tuple(torch.empty(shape, dtype=dtype) for shape, dtype in specs)
        else:
            fn, out = api.count_outlier_columns, torch.empty((8,), dtype=torch.int32)
    with pytest.raises(ValueError, match=re.escape(f"x has {n} rows; at most {n - 1} are supported")):
        fn(x, 1.0, out=out)


# ----------------------------------------------------------------------------------------------------
# Codegen (CPU): every configuration the dispatcher can pick lowers, compiles and fits on chip.

# The alignments the interface can pass (base_alignment of x's data pointer).
_ALIGNS = (1, 2, 4, 8, 16)
_ELEM_DTYPE = {2: "bfloat16", 4: "float32"}

def _configs(backend: str) -> list[tuple[str, tuple[int, str, int, int]]]:
    """(factory, configuration) pairs: each mode's shipped configurations of one backend."""
    import importlib

    module = importlib.import_module(f"kernels.outlier_detection.{backend}")
    rows = module.outlier_rows_shipped_configs()
    one_launch = [("outlier_rows_compact_tl", c) for c in rows] if backend == "cuda" else []
    return [("outlier_rows_tl", c) for c in rows] + one_launch + [
        ("outlier_columns_tl", c) for c in module.outlier_columns_shipped_configs()
    ]


def _config_id(case) -> str:
    factory, config = case
    return factory.removeprefix("outlier_").removesuffix("_tl") + "-" + "-".join(map(str, config))


def _classes(cuda, configs) -> dict[tuple[int, int], int]:
    """{(element bytes, vector bytes): most row-mode vectors per thread} over the factory arguments."""
    worst: dict[tuple[int, int], int] = {}
    for d, dtype, stride, align in configs:
        cfg = cuda.rows_config(d, dtype, stride, align)
        elem = 4 if dtype == "float32" else 2
        key = (elem, cfg.vector_elems * elem)
        worst[key] = max(worst.get(key, 0), cfg.steps)
        assert cuda.columns_config(d, dtype, stride, align).vector_elems * elem == key[1]
    return worst


@pytest.mark.codegen_cuda
def test_cuda_shipped_configs_cover_every_reachable_class():
    # Register pressure grows with the vectors a thread holds; the column mode holds 8 per thread in
    # every class, the row mode up to 8: the shipped set must hold each class's worst row case.
    from kernels.outlier_detection import cuda

    reachable = [(d, _ELEM_DTYPE[e], d, a) for e in (2, 4) for a in _ALIGNS if a >= e for d in range(1, cuda.MAX_D + 1)]
    shipped = cuda.outlier_rows_shipped_configs()
    assert _classes(cuda, shipped) == _classes(cuda, reachable)
    assert {c[1] for c in shipped} == set(api.DTYPES.values())
    # Every reachable row configuration holds at most 32 registers of row data per thread (a 2-byte
    # element still takes a register), in one block of at most 1024 threads.
    for d, dtype, stride, align in reachable:
        rows = cuda.rows_config(d, dtype, stride, align)
        vector_bytes = rows.vector_elems * (4 if dtype == "float32" else 2)
        assert rows.threads <= 1024 and rows.steps * max(4, vector_bytes) // 4 <= 32, (d, dtype, align, rows)
    columns = [cuda.columns_config(*c) for c in cuda.outlier_columns_shipped_configs()]
    assert {c.row_lanes for c in columns} >= {1, 16, 128} and any(c.row_vectors % c.col_threads for c in columns)


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("case", _configs("cuda"), ids=_config_id)
def test_cuda_config_compiles_without_spills(arch, case):
    from kernels.outlier_detection import cuda
    from testing import codegen_cuda

    factory, (d, dtype, stride, align) = case
    fn = getattr(cuda, factory)
    # Built as the interface builds it for these archs: a programmatic dependent launch.
    lowered = codegen_cuda.lower_cuda(fn, d, dtype, stride, x_align=align, arch=arch, pdl=True)
    # 64-bit offsets into x: the row is widened before it meets the stride.
    assert "int64_t" in lowered.source
    # check_cuda_resources asserts 0 spill bytes, no stack frame and shared memory within the limit.
    report = codegen_cuda.check_cuda_resources(fn, d, dtype, stride, x_align=align, arch=arch, pdl=True)
    assert report.spill_store_bytes == report.spill_load_bytes == report.stack_frame_bytes == 0


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_cuda_compaction_compiles_without_spills(arch):
    from kernels.outlier_detection import cuda
    from testing import codegen_cuda

    source = codegen_cuda.cuda_source(cuda.outlier_compact_tl, arch=arch, pdl=True)
    assert "atomic" not in source.lower(), "the compaction must place ids without atomics"
    report = codegen_cuda.check_cuda_resources(cuda.outlier_compact_tl, arch=arch, pdl=True)
    assert report.spill_store_bytes == report.spill_load_bytes == report.stack_frame_bytes == 0


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("factory", ["outlier_rows_tl", "outlier_rows_compact_tl", "outlier_columns_tl", "outlier_compact_tl"])
def test_cuda_dependent_launch_waits_before_memory(factory):
    # pdl=True: nvcc keeps every global access (the arrival counter's atomic included) after the
    # wait for the grids before; pdl=False emits neither call. The first shipped configuration.
    from kernels.outlier_detection import cuda
    from testing import codegen_cuda

    fn = getattr(cuda, factory)
    if factory == "outlier_compact_tl":
        codegen_cuda.check_dependent_launch(fn)
        return
    d, dtype, stride, align = next(config for f, config in _configs("cuda") if f == factory)
    codegen_cuda.check_dependent_launch(fn, d, dtype, stride, x_align=align)


@pytest.mark.codegen_ascend
@pytest.mark.parametrize("case", _configs("asc"), ids=_config_id)
def test_ascend_config_lowers_and_fits_ub(case):
    from kernels.outlier_detection import asc
    from testing import codegen_ascend

    factory, (d, dtype, stride, align) = case
    fn = getattr(asc, factory)
    source = codegen_ascend.ascend_source(fn, d, dtype, stride, x_align=align)
    assert "__global__" in source or "__aicore__" in source
    codegen_ascend.assert_ub_fits(fn, d, dtype, stride, x_align=align)


@pytest.mark.codegen_ascend
def test_ascend_compaction_lowers_and_fits_ub():
    from kernels.outlier_detection import asc
    from testing import codegen_ascend

    assert "__global__" in codegen_ascend.ascend_source(asc.outlier_compact_tl)
    codegen_ascend.assert_ub_fits(asc.outlier_compact_tl)


@pytest.mark.codegen_ascend
def test_ascend_shipped_configs_cover_the_tiling():
    from kernels.outlier_detection import asc

    configs = asc.outlier_rows_shipped_configs()
    wide = asc.outlier_columns_shipped_configs()
    rows = [asc.rows_config(*c) for c in configs]
    columns = [asc.columns_config(*c) for c in wide]
    assert {c[1] for c in configs} == set(asc.DTYPES) and any(s > d for d, _, s, _ in configs)
    # The largest row tile (float32, D = MAX_D) is shipped, so the UB check sees the worst case.
    assert (asc.MAX_D, "float32") in {(d, dt) for d, dt, _, _ in configs}
    assert {c.rows for c in rows} >= {1, 64} and any(1 < c.rows < 64 for c in rows)
    assert any(c.tail and c.full_vregs for c in rows) and any(c.tail and not c.full_vregs for c in rows)
    assert any(not c.tail for c in rows)
    assert {c.chunk for c in columns} >= {64, 1024} and {c.rows for c in columns} >= {8, 128}
    assert any(d % c.chunk for (d, *_), c in zip(wide, columns)) and any(d % c.chunk == 0 for (d, *_), c in zip(wide, columns))
    assert any(c.num_chunks == 1 for c in columns) and any(c.num_chunks > 64 for c in columns)


# ----------------------------------------------------------------------------------------------------
# Device: the backend's kernels against the reference, on the accelerator.

DEVICE_T = [0, 1, 33, 4096, 65537]
DEVICE_D = [1, 7, 576, 4096, 7168, 16384]


def _device_input(t, d, dtype, device):
    """Random rows, about 0.3% of them holding a NaN or an Inf, drawn on the device."""
    return sprinkle(random_rows(t, d, dtype, device=device), fraction=0.003)


def _check_rows(x: torch.Tensor, threshold, what: str) -> None:
    out = _row_outputs(x.shape[0], x.device)
    got = api.detect_outlier_rows(x, threshold, out=out)
    assert all(g is o for g, o in zip(got, out))
    expected = ref.outlier_rows_ref(x, threshold)
    for name, g, e in zip(api.ROW_OUTPUTS, got, expected):
        (assert_flag_equal if name == "flag" else assert_bitwise_equal)(g, e, what=f"{what} {name}")


def _check_columns(x: torch.Tensor, threshold, what: str) -> None:
    out = poisoned((x.shape[1],), torch.int32, x.device)
    assert api.count_outlier_columns(x, threshold, out=out) is out
    assert_bitwise_equal(out, ref.outlier_columns_ref(x, threshold), what=f"{what} counts")


def _device_thresholds(x: torch.Tensor) -> list[float]:
    """About 1% of the rows flagged (plus the non-finite ones), none beyond those, every row."""
    a = torch.nan_to_num(x.float().abs(), nan=0.0, posinf=0.0, neginf=0.0).amax(dim=1)
    one_percent = float(a.kthvalue(max(1, int(0.99 * a.numel()))).values) if a.numel() else 1.0
    return [one_percent, INF, -1.0]


@pytest.mark.device
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("d", DEVICE_D)
@pytest.mark.parametrize("t", DEVICE_T)
def test_device_rows(device, dtype, d, t):
    x = _device_input(t, d, dtype, device)
    for thr in _device_thresholds(x):
        _check_rows(x, thr, f"rows {dtype} T={t} D={d} thr={thr}")
    # The same through a device-scalar threshold.
    _check_rows(x, torch.tensor([0.5], device=device), f"rows {dtype} T={t} D={d} tensor thr")
    _check_rows(x, torch.tensor([NAN], device=device), f"rows {dtype} T={t} D={d} NaN thr")


@pytest.mark.device
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("d", DEVICE_D)
@pytest.mark.parametrize("t", DEVICE_T)
def test_device_columns(device, dtype, d, t):
    x = _device_input(t, d, dtype, device)
    for thr in [3.0, 0.0, -1.0, INF, torch.tensor([NAN], device=device)]:
        _check_columns(x, thr, f"columns {dtype} T={t} D={d} thr={thr}")


@pytest.mark.device
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "d,row_stride,col_offset",
    [(4096, 7168, 0), (7168, 7168 + 64, 0), (576, 577, 0), (2880, 3000, 3), (16384, 16385, 1), (1000, 1003, 1), (7, 9, 1)],
)
def test_device_strided_and_misaligned_rows(device, dtype, d, row_stride, col_offset):
    # Odd strides and offsets shrink the vectors (down to one element); a view into a wider tensor.
    x = random_rows(300, d, dtype, device=device, row_stride=row_stride, col_offset=col_offset)
    x[5, d // 2] = NAN
    x[77, 0] = -INF
    for thr in _device_thresholds(x):
        _check_rows(x, thr, f"strided rows {dtype} D={d} thr={thr}")
    _check_columns(x, 2.0, f"strided columns {dtype} D={d}")


@pytest.mark.device
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("d", [1, 7, 576, 7168])
def test_device_special_rows(device, dtype, d):
    x, _ = _special_rows(d, dtype)
    for thr in [1.0, INF, -1.0, 0.0]:
        _check_rows(x.to(device), thr, f"special {dtype} D={d} thr={thr}")
        _check_columns(x.to(device), thr, f"special {dtype} D={d} thr={thr}")


@pytest.mark.device
def test_device_64bit_offsets(device):
    # t * D passes 2**31 elements: rows near the end sit past any 32-bit offset.
    d = 16384
    t = (2**31) // d + 64
    x = torch.randn((t, d), device=device, dtype=torch.bfloat16)
    # Outliers only past the 32-bit offsets (randn stays far below 100): a kernel that wraps there
    # misses them or flags other rows and columns.
    x[t - 3, d - 1] = NAN
    x[t - 2, 7] = 1000.0
    _check_rows(x, 100.0, "64-bit offsets")
    _check_columns(x, 100.0, "64-bit offsets")


@pytest.mark.device
@pytest.mark.parametrize("t", [1, 2, 300, api.ONE_LAUNCH_MAX_ROWS, api.ONE_LAUNCH_MAX_ROWS + 1])
def test_device_one_launch_edges_and_counter(device, t):
    """Both sides of ONE_LAUNCH_MAX_ROWS, back to back on one stream with fresh data each time: the
    counter the one-launch kernel's blocks arrive on is left zero, so every next launch finds its
    last block (a stale count would skip the compaction and leave the poison)."""
    for i in range(3):
        x = sprinkle(random_rows(t, 7168, torch.bfloat16, device=device), fraction=0.05 * i)
        _check_rows(x, 3.5, f"launch {i} T={t}")
    if torch.device(device).type == "cuda":
        mine = counters_left_zero("detect_outlier_rows", device)
        assert mine or t > api.ONE_LAUNCH_MAX_ROWS, "the one-launch kernel ran without the stream's counter"


@pytest.mark.device
def test_device_graphs_captured_on_one_stream_replay_in_any_order(device, backend):
    """Serving engines capture a graph per batch size on one stream from one memory pool, then
    replay any of them first. Each must find its arrival counter zero: a zero fill recorded in the
    first capture would run only when that graph replays, over pool memory another graph dirtied
    (a stale count skips the compaction and leaves the poison)."""
    if backend != "cuda":
        pytest.skip("CUDA graphs are a CUDA feature")
    sizes, d = [8, 64], 7168
    xs = {t: random_rows(t, d, torch.bfloat16, device=device) for t in sizes}
    outs = {t: _row_outputs(t, device) for t in sizes}
    threshold = torch.tensor([3.5], device=device)
    stream, pool, _holder = dirty_graph_pool(device)
    calls = {t: functools.partial(api.detect_outlier_rows, xs[t], threshold, out=outs[t]) for t in sizes}
    graphs = capture_each_after_warm_up(calls, stream, pool)
    for i, t in enumerate(later_first(sizes)):
        xs[t].copy_(sprinkle(random_rows(t, d, torch.bfloat16), fraction=0.1).to(device))
        for o, fresh in zip(outs[t], _row_outputs(t, device)):
            o.copy_(fresh)
        graphs[t].replay()
        for name, g, e in zip(api.ROW_OUTPUTS, outs[t], ref.outlier_rows_ref(xs[t], threshold)):
            (assert_flag_equal if name == "flag" else assert_bitwise_equal)(g, e, what=f"replay {i} T={t} {name}")
    assert counters_left_zero("detect_outlier_rows", device)


@pytest.mark.device
def test_device_empty_batch_launches_nothing(device, no_kernel_launches):
    x = random_rows(0, 7168, torch.bfloat16, device=device)
    out = _row_outputs(0, device)
    assert api.detect_outlier_rows(x, 1.0, out=out)[3].tolist() == [0]
    assert api.count_outlier_columns(x, 1.0).tolist() == [0] * 7168


@pytest.mark.device
def test_device_cuda_graph_replay(device, backend):
    # Everything in a decode step must be capturable: no host sync, and a device threshold that can
    # be retuned between replays.
    if backend != "cuda":
        pytest.skip("CUDA graphs are a CUDA feature")
    t, d = 64, 7168
    x = random_rows(t, d, torch.bfloat16, device=device)
    threshold = torch.tensor([1.0], device=device)
    out = _row_outputs(t, device)
    counts = poisoned((d,), torch.int32, device)

    def call():
        api.detect_outlier_rows(x, threshold, out=out)
        api.count_outlier_columns(x, threshold, out=counts)

    call()  # compile and load outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    for thr in [0.5, 50.0, INF]:
        x.copy_(sprinkle(random_rows(t, d, torch.bfloat16), fraction=0.1).to(device))
        threshold.fill_(thr)
        for o, fresh in zip(out, _row_outputs(t, device)):
            o.copy_(fresh)
        counts.copy_(poisoned((d,), torch.int32, device))
        graph.replay()
        for name, g, e in zip(api.ROW_OUTPUTS, out, ref.outlier_rows_ref(x, threshold)):
            (assert_flag_equal if name == "flag" else assert_bitwise_equal)(g, e, what=f"graph thr={thr} {name}")
        assert_bitwise_equal(counts, ref.outlier_columns_ref(x, threshold), what=f"graph thr={thr} counts")
