"""The pytest plugin: per-test seeds, suite selection, KernelUnavailableError -> skip, device skips."""

from __future__ import annotations

import pytest

# Imported here, before any in-process pytester run: pytester restores sys.modules after each run,
# and TileLang's FFI registry cannot be imported a second time in one process.
import tilelang_ops  # noqa: F401
from testing import plugin

pytest_plugins = ["pytester"]


def test_seeds_are_stable_per_test_and_differ_across_tests():
    a = plugin.test_seed(0, "k_test.py::test_a")
    assert a == plugin.test_seed(0, "k_test.py::test_a")
    assert a != plugin.test_seed(0, "k_test.py::test_b")
    assert a != plugin.test_seed(1, "k_test.py::test_a")


def test_skip_unless_backend_has():
    plugin.skip_unless_backend_has("gather_tl")  # every backend has it: no skip
    with pytest.raises(pytest.skip.Exception, match="has no no_such_kernel_tl"):
        plugin.skip_unless_backend_has("no_such_kernel_tl")


def test_torch_rng_is_seeded_from_the_test_seed(seed):
    import torch

    drawn = torch.rand(4)
    torch.manual_seed(seed)
    assert torch.equal(drawn, torch.rand(4))


def _run(pytester, source: str, *args: str):
    pytester.makepyfile(test_inline=source)
    return pytester.runpytest_inprocess("-p", "testing.plugin", "-p", "no:cacheprovider", *args)


def test_kernel_unavailable_becomes_a_skip_with_its_message(pytester):
    result = _run(
        pytester,
        """
from tilelang_ops.errors import KernelUnavailableError

def test_needs_missing_kernel():
    raise KernelUnavailableError("x_tl", "x", "asc", ("cuda",))
""",
        "-rs",
    )
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*x_tl (kernel 'x') is not available on backend 'asc'; provided by: cuda*"])


@pytest.mark.parametrize("suite,threads", [("ref", "1"), ("codegen_cuda", "1"), ("device", "as set")])
def test_cpu_suites_run_torch_on_one_thread(pytester, suite, threads):
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        source = f"""
import pytest, torch

@pytest.mark.{suite}
def test_threads():
    assert torch.get_num_threads() == {1 if threads == "1" else 3}
"""
        _run(pytester, source, f"--tl-suite={suite}").assert_outcomes(passed=1)
    finally:
        torch.set_num_threads(before)


def test_other_errors_still_fail(pytester):
    result = _run(pytester, "def test_broken():\n    raise LookupError('real bug')\n")
    result.assert_outcomes(failed=1)


def test_suite_option_selects_by_marker(pytester):
    source = """
import pytest

@pytest.mark.ref
def test_r():
    pass

@pytest.mark.codegen_cuda
def test_c():
    pass

def test_unmarked():
    pass
"""
    result = _run(pytester, source, "--tl-suite=codegen_cuda", "-v")
    result.assert_outcomes(passed=1, deselected=2)
    result.stdout.fnmatch_lines(["*test_c PASSED*"])


def test_device_fixture_skips_with_a_reason_when_the_accelerator_is_absent(pytester, monkeypatch):
    monkeypatch.setattr(plugin, "accelerator_missing", lambda backend: f"no {backend} here")
    result = _run(pytester, "def test_dev(device):\n    pass\n", "--backend=asc", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*device test for backend 'asc': no asc here*"])


@pytest.mark.parametrize("backend", ["cuda", "asc"])
def test_accelerator_missing_explains_itself_on_this_host(backend):
    import torch

    reason = plugin.accelerator_missing(backend)
    npu = getattr(torch, "npu", None)
    present = torch.cuda.is_available() if backend == "cuda" else npu is not None and npu.is_available()
    assert (reason is None) == present
    if reason is not None:
        # The reason names what is missing: the CUDA device, or Ascend's runtime or NPU.
        assert ("CUDA device" if backend == "cuda" else "torch_npu") in reason, reason


def test_no_kernel_launches_fails_a_test_that_reaches_for_a_kernel(pytester):
    source = """
import tilelang_ops

def test_launches(no_kernel_launches):
    tilelang_ops.ops.gather_tl

def test_quiet(no_kernel_launches):
    pass
"""
    result = _run(pytester, source)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*an empty input must not build or launch gather_tl*"])
