"""Tests of `gather`: reference vs a loop oracle, interface validation, codegen, and the device kernel.

Suites (markers, selected by `--tl-suite`; see testing/plugin.py): ref, codegen_cuda, codegen_ascend,
device. Inputs are drawn fresh per test from the plugin's per-test seed; outputs are poisoned first.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kernels.gather import api, ref
from testing.numeric import as_bits, assert_bitwise_equal, assert_rejected_without_writes, case_named, case_names, poisoned

DTYPES = list(api.DTYPES)
INDEX_DTYPES = list(api.INDEX_DTYPES)


def random_rows(n: int, d: int, dtype: torch.dtype, device="cpu", row_stride: int | None = None, col_offset=0):
    """(n, d) random rows of `dtype`; with row_stride/col_offset, a view into a wider random tensor."""
    width = (row_stride or d) + col_offset
    if dtype.is_floating_point and dtype.itemsize > 1:
        base = torch.randn((n, width), device=device).to(dtype)
    else:
        # Every bit pattern, fp8 NaNs included (gather must move bits, not values), except the
        # poison: a copied element equal to it would hide an unwritten one.
        base = torch.randint(-(2**31), 2**31 - 1, (n, width), dtype=torch.int32, device=device)
        base = base.view(torch.uint8)[:, : width * dtype.itemsize].view(dtype) if dtype.itemsize < 4 else base.view(dtype)
        bits = as_bits(base)
        bits.masked_fill_(bits == as_bits(poisoned((), dtype, device)), 0)
    return base[:, col_offset : col_offset + d]


def random_index(m: int, n: int, dtype: torch.dtype, device="cpu", invalid_fraction=0.25) -> torch.Tensor:
    """Valid rows mixed with negative, just-past-the-end and extreme indices."""
    idx = torch.randint(0, max(n, 1), (m,), dtype=torch.int64)
    info = torch.iinfo(dtype)
    bad = torch.tensor([-1, n, n + 1, info.min, info.max, -n - 1], dtype=torch.int64)
    pick = torch.rand(m) < invalid_fraction
    idx = torch.where(pick, bad[torch.randint(0, len(bad), (m,))], idx)
    if n == 0:
        idx = bad[torch.randint(0, len(bad), (m,))]
    return idx.to(dtype).to(device)


def loop_oracle(x: torch.Tensor, index: torch.Tensor) -> np.ndarray:
    """An independent oracle: a Python loop over raw bits."""
    xb = as_bits(x).cpu().numpy()
    out = np.zeros((index.shape[0], x.shape[1]), dtype=xb.dtype)
    for i, j in enumerate(index.cpu().tolist()):
        if 0 <= j < x.shape[0]:
            out[i] = xb[j]
    return out


SHAPES = [(0, 5, 3), (1, 1, 1), (7, 33, 5), (64, 1, 576), (5, 9, 128), (33, 65, 7)]


@pytest.mark.ref
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("n,m,d", SHAPES)
def test_ref_matches_loop_oracle(dtype, index_dtype, n, m, d):
    x = random_rows(n, d, dtype, row_stride=d + 3)
    index = random_index(m, n, index_dtype)
    y = ref.gather_ref(x, index)
    assert y.shape == (m, d) and y.dtype == dtype and y.is_contiguous()
    np.testing.assert_array_equal(as_bits(y).numpy(), loop_oracle(x, index))


@pytest.mark.ref
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn, torch.int32], ids=str)
def test_cpu_interface_writes_every_row_of_out(dtype):
    x = random_rows(40, 24, dtype, row_stride=31, col_offset=2)
    index = random_index(50, 40, torch.int64)
    out = poisoned((50, 24), dtype, "cpu")
    assert api.gather(x, index, out=out) is out
    np.testing.assert_array_equal(as_bits(out).numpy(), loop_oracle(x, index))


@pytest.mark.ref
@pytest.mark.parametrize("m,d", [(0, 8), (9, 0)])
def test_empty_input_calls_nothing(monkeypatch, m, d):
    def fail(*_):
        raise AssertionError("m == 0 or D == 0 must not reach the reference or a kernel")

    monkeypatch.setattr(ref, "gather_ref", fail)
    x = random_rows(4, 8, torch.float32)[:, :d]
    index = random_index(m, 4, torch.int32)
    y = api.gather(x, index)
    assert y.shape == (m, d) and y.dtype == torch.float32
    out = poisoned((m, d), torch.float32, "cpu")
    assert api.gather(x, index, out=out) is out


def _bad_inputs():
    x = random_rows(6, 8, torch.bfloat16)
    i = random_index(5, 6, torch.int32)
    wide = random_rows(6, 16, torch.bfloat16)
    shared = torch.zeros(8, dtype=torch.int32)  # valid indices (0) and an int32 out in one buffer
    return [
        ("x-not-tensor", dict(x=x.tolist(), index=i), TypeError, "x must be a torch.Tensor"),
        ("x-float64", dict(x=x.double(), index=i), TypeError, "x has dtype torch.float64"),
        ("index-float", dict(x=x, index=i.float()), TypeError, "index has dtype torch.float32"),
        ("index-int16", dict(x=x, index=i.short()), TypeError, "index has dtype torch.int16"),
        ("x-1d", dict(x=x[0], index=i), ValueError, "x must be 2-D"),
        ("index-2d", dict(x=x, index=i[None]), ValueError, "index must be 1-D"),
        ("index-strided", dict(x=x, index=random_index(10, 6, torch.int64)[::2]), ValueError, "index must be contiguous"),
        ("index-other-device", dict(x=x, index=i.to("meta")), ValueError, "index is on meta"),
        ("x-last-dim-strided", dict(x=wide[:, ::2], index=i), ValueError, "last dimension must be contiguous"),
        ("x-overlapping-rows", dict(x=wide.as_strided((6, 8), (4, 1)), index=i), ValueError, "row stride 4"),
        ("out-wrong-shape", dict(x=x, index=i, out=poisoned((5, 9), torch.bfloat16, "cpu")), ValueError, "out must be (5, 8)"),
        ("out-wrong-dtype", dict(x=x, index=i, out=poisoned((5, 8), torch.float16, "cpu")), ValueError, "out must be (5, 8)"),
        ("out-strided", dict(x=x, index=i, out=poisoned((5, 16), torch.bfloat16, "cpu")[:, ::2]), ValueError, "out must be contiguous"),
        ("out-is-x", dict(x=x, index=i, out=x[1:6]), ValueError, "out overlaps x"),
        ("out-is-index", dict(x=torch.randint(0, 9, (6, 1), dtype=torch.int32), index=shared[:5], out=shared[:5].view(5, 1)), ValueError, "out overlaps index"),
    ]


@pytest.mark.ref
@pytest.mark.parametrize("name", case_names(_bad_inputs))
def test_bad_input_raises_and_writes_nothing(name):
    _, kwargs, error, message = case_named(_bad_inputs, name)
    assert_rejected_without_writes(api.gather, kwargs, error, message, [kwargs.get("out")])


# ----------------------------------------------------------------------------------------------------
# Codegen (CPU): every configuration the dispatcher can pick lowers, compiles and fits on chip.

# The alignments the interface can pass (it folds x's and y's base pointers into x_align).
_ALIGNS = (1, 2, 4, 8, 16)
_ELEM_DTYPE = {1: "uint8", 2: "bfloat16", 4: "float32"}


def _worst_case_steps(backend_module, configs) -> dict[tuple[int, int], int]:
    """{(element bytes, vector bytes): most vectors per thread} over the given factory arguments."""
    worst: dict[tuple[int, int], int] = {}
    for d, dtype, _, stride, align in configs:
        cfg = backend_module.gather_config(d, dtype, stride, align)
        key = (torch.empty((), dtype=api_dtype(dtype)).element_size(), cfg.vector_bytes)
        worst[key] = max(worst.get(key, 0), cfg.steps)
    return worst


def api_dtype(name: str) -> torch.dtype:
    return {v: k for k, v in api.DTYPES.items()}.get(name, torch.float8_e4m3fn)


@pytest.mark.codegen_cuda
def test_cuda_shipped_configs_cover_every_reachable_width():
    # Register pressure grows with the unrolled vectors per thread: for every (element size, vector
    # width) class any D in 1..16384 can reach, the shipped set must hold that class's worst case.
    from kernels.gather import cuda

    reachable = [
        (d, _ELEM_DTYPE[e], "int64", d, a) for e in (1, 2, 4) for a in _ALIGNS if a >= e for d in range(1, 16385)
    ]
    assert _worst_case_steps(cuda, cuda.gather_shipped_configs()) == _worst_case_steps(cuda, reachable)
    assert {c[1] for c in cuda.gather_shipped_configs()} >= set(api.DTYPES.values()) - {"float8_e4m3"}
    assert {c[2] for c in cuda.gather_shipped_configs()} == set(INDEX_DTYPES_NAMES)


INDEX_DTYPES_NAMES = tuple(api.INDEX_DTYPES.values())


def _cuda_configs():
    from kernels.gather import cuda

    return cuda.gather_shipped_configs()


@pytest.mark.codegen_cuda
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("config", _cuda_configs(), ids=lambda c: "-".join(map(str, c)))
def test_cuda_config_compiles_without_spills(arch, config):
    from kernels.gather import cuda
    from testing import codegen_cuda

    d, dtype, index_dtype, stride, align = config
    # Built as the interface builds it for these archs: a programmatic dependent launch.
    lowered = codegen_cuda.lower_cuda(cuda.gather_tl, d, dtype, index_dtype, stride, x_align=align, arch=arch, pdl=True)
    # 64-bit offsets: the source row is widened before it meets the stride.
    assert "int64_t" in lowered.source
    report = codegen_cuda.check_cuda_resources(cuda.gather_tl, d, dtype, index_dtype, stride, x_align=align, arch=arch, pdl=True)
    assert report.spill_store_bytes == report.spill_load_bytes == 0


@pytest.mark.codegen_cuda
def test_cuda_dependent_launch_waits_before_memory():
    # pdl=True: nvcc keeps every global access after the wait for the grids before; pdl=False
    # emits neither call. The first shipped configuration.
    from kernels.gather import cuda
    from testing import codegen_cuda

    d, dtype, index_dtype, stride, align = _cuda_configs()[0]
    codegen_cuda.check_dependent_launch(cuda.gather_tl, d, dtype, index_dtype, stride, x_align=align)


def _asc_configs():
    from kernels.gather import asc

    return asc.gather_shipped_configs()


@pytest.mark.codegen_ascend
@pytest.mark.parametrize("config", _asc_configs(), ids=lambda c: "-".join(map(str, c)))
def test_ascend_config_lowers_and_fits_ub(config):
    from kernels.gather import asc
    from testing import codegen_ascend

    d, dtype, index_dtype, stride, align = config
    source = codegen_ascend.ascend_source(asc.gather_tl, d, dtype, index_dtype, stride, x_align=align)
    assert "__global__" in source or "__aicore__" in source
    codegen_ascend.assert_ub_fits(asc.gather_tl, d, dtype, index_dtype, stride, x_align=align)


@pytest.mark.codegen_ascend
def test_ascend_tiles_fit_for_every_width():
    # The tiling alone bounds the footprint; the shipped configs are checked on the lowered kernel.
    from kernels.gather import asc
    from testing import codegen_ascend

    for dtype in _ELEM_DTYPE.values():
        for d in range(1, 16385):
            cfg = asc.gather_config(d, dtype, d)
            tile = cfg.rows * cfg.pitch * cfg.elem_bytes + cfg.rows * 8  # data rows + int64 indices
            assert cfg.stages * tile <= codegen_ascend.UB_CAPACITY_BYTES, (d, dtype, cfg)


# ----------------------------------------------------------------------------------------------------
# Device: the backend's kernel against the reference, on the accelerator.

DEVICE_D = [1, 7, 128, 576, 4096, 7168, 16384]
DEVICE_M = [0, 1, 33, 65536]


def _check_device(device, dtype, index_dtype, n, m, d, row_stride=None, col_offset=0):
    x = random_rows(n, d, dtype, device=device, row_stride=row_stride, col_offset=col_offset)
    index = random_index(m, n, index_dtype, device=device)
    out = poisoned((m, d), dtype, device)
    api.gather(x, index, out=out)
    assert_bitwise_equal(out, ref.gather_ref(x, index), what=f"gather {dtype} D={d} m={m}")


@pytest.mark.device
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("d", DEVICE_D)
@pytest.mark.parametrize("m", DEVICE_M)
def test_device_bf16_every_width(device, index_dtype, d, m):
    _check_device(device, torch.bfloat16, index_dtype, 1000, m, d)


@pytest.mark.device
@pytest.mark.parametrize("dtype", [t for t in DTYPES if t != torch.bfloat16], ids=str)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("d", [7, 576, 16384])
def test_device_every_dtype(device, dtype, index_dtype, d):
    _check_device(device, dtype, index_dtype, 513, 33, d)


@pytest.mark.device
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn, torch.float32], ids=str)
@pytest.mark.parametrize("d,row_stride,col_offset", [(4096, 7168, 0), (576, 577, 0), (100, 130, 3), (7, 9, 1)])
def test_device_strided_and_misaligned_rows(device, dtype, d, row_stride, col_offset):
    _check_device(device, dtype, torch.int64, 300, 257, d, row_stride=row_stride, col_offset=col_offset)


@pytest.mark.device
@pytest.mark.parametrize("n", [0, 1])
def test_device_degenerate_sources(device, n):
    _check_device(device, torch.bfloat16, torch.int32, n, 65, 4096)


@pytest.mark.device
def test_device_64bit_offsets(device):
    # x holds more than 2^31 elements: rows near the end sit past any 32-bit offset.
    d = 16384
    n = (2**31) // d + 64
    x = torch.randint(0, 255, (n, d), dtype=torch.uint8, device=device)  # 255 is the poison
    index = torch.cat([torch.arange(n - 40, n + 3, device=device), torch.randint(0, n, (100,), device=device)])
    out = poisoned((index.shape[0], d), torch.uint8, device)
    api.gather(x, index, out=out)
    assert_bitwise_equal(out, ref.gather_ref(x, index))


@pytest.mark.device
@pytest.mark.parametrize("m,d", [(0, 64), (33, 0)])
def test_device_empty_batch_launches_nothing(device, no_kernel_launches, m, d):
    x = random_rows(10, 64, torch.bfloat16, device=device)[:, :d]
    index = random_index(m, 10, torch.int64, device=device)
    assert api.gather(x, index).shape == (m, d)
    out = poisoned((m, d), torch.bfloat16, device)
    assert api.gather(x, index, out=out) is out


@pytest.mark.device
def test_device_cuda_graph_replay(device, backend):
    if backend != "cuda":
        pytest.skip("CUDA graphs are a CUDA feature")
    x = random_rows(2048, 7168, torch.bfloat16, device=device)
    index = random_index(64, 2048, torch.int64, device=device)
    out = poisoned((64, 7168), torch.bfloat16, device)
    api.gather(x, index, out=out)  # compile and load outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        api.gather(x, index, out=out)
    for _ in range(3):
        index.copy_(random_index(64, 2048, torch.int64, device=device))
        out.copy_(poisoned((64, 7168), torch.bfloat16, device))
        graph.replay()
        assert_bitwise_equal(out, ref.gather_ref(x, index))
