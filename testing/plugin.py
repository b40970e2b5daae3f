"""The project's pytest plugin (loaded by `-p testing.plugin`; Bazel's test entry point always does).

Options:
  --backend=cuda|asc      backend for device tests (default: tilelang_ops.PLATFORM's choice)
  --tl-suite=NAME         run only tests marked NAME: ref, codegen_cuda, codegen_ascend, device
  --seed=N                base seed; each test gets its own seed derived from N and its node id

Behaviour:
  * every test starts with torch's RNG seeded from its own seed (fixture `seed` gives the value);
  * the CPU suites (ref, codegen_cuda, codegen_ascend) run torch on one intra-op thread: CI's two
    cores already run two test processes, and no result may depend on how torch splits an op
    between threads (on CI, 2026-12-03 and -04, an elementwise float32 op over 10**5 elements gave
    other bits from element 50000 on, where torch hands the second half to its second thread);
  * fixture `no_kernel_launches` makes any kernel lookup through tilelang_ops.ops fail the test;
  * skip_unless_backend_has(factory) skips a test meant for a kernel the backend does not have;
  * KernelUnavailableError raised by a test becomes a skip carrying the error's message;
  * `device` tests skip with a reason when the backend's accelerator is absent;
  * at session start, the standard library's `platform` module is checked to be the real one;
  * under pytest-xdist each worker binds one accelerator (testing/device_binding.py) and logs it.
"""

from __future__ import annotations

import os
import platform
import sysconfig
import zlib

import pytest

SUITES = ("ref", "codegen_cuda", "codegen_ascend", "device")
CPU_SUITES = ("ref", "codegen_cuda", "codegen_ascend")


def pytest_addoption(parser):
    group = parser.getgroup("tilelang_ops")
    group.addoption("--backend", choices=("cuda", "asc"), default=None, help="backend under test")
    group.addoption("--tl-suite", choices=SUITES, default=None, help="run only tests with this marker")
    group.addoption(
        "--seed",
        type=int,
        default=int(os.environ.get("TILELANG_OPS_SEED", "0")),
        help="base seed (per-test seeds derive from it and the test id)",
    )


def pytest_configure(config):
    # Under pytest-xdist, pin this worker to one accelerator before anything initialises a runtime.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        from testing.device_binding import apply_binding

        backend = config.getoption("--backend") or os.environ.get("TILELANG_OPS_BACKEND") or "cuda"
        config._tl_binding = apply_binding(backend=backend)
        if hasattr(config, "workeroutput"):  # sent to the controller when this worker finishes
            config.workeroutput["tl_binding"] = config._tl_binding
    for suite, doc in {
        "ref": "CPU: reference vs an independent oracle, interface validation",
        "codegen_cuda": "CPU: lower and nvcc-compile every shipped configuration for sm_90a / sm_100a",
        "codegen_ascend": "CPU: lower every shipped configuration to AscendC and check the UB footprint",
        "device": "runs kernels on the accelerator of the chosen backend",
    }.items():
        config.addinivalue_line("markers", f"{suite}: {doc}")
    if config.getoption("--tl-suite") in CPU_SUITES:
        import torch

        torch.set_num_threads(1)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    binding = getattr(node, "workeroutput", {}).get("tl_binding")
    if binding:
        node.config.__dict__.setdefault("_tl_worker_bindings", []).append(binding)


def pytest_terminal_summary(terminalreporter, config):
    for binding in sorted(getattr(config, "_tl_worker_bindings", [])):
        terminalreporter.write_line(f"tilelang_ops device binding: {binding}")


def pytest_report_header(config):
    binding = getattr(config, "_tl_binding", None)
    return [f"tilelang_ops device binding: {binding}"] if binding else []


def pytest_sessionstart(session):
    binding = getattr(session.config, "_tl_binding", None)
    if binding:
        print(f"[tilelang_ops] {binding}", flush=True)
    # Bazel runfiles hold a `platform/` directory; it must never shadow the standard library module.
    stdlib = sysconfig.get_paths()["stdlib"]
    assert os.path.dirname(platform.__file__) == stdlib, f"`platform` resolves to {platform.__file__}"
    assert platform.machine(), "platform.machine() returned nothing"


def pytest_collection_modifyitems(config, items):
    suite = config.getoption("--tl-suite")
    if suite is None:
        return
    selected = [item for item in items if item.get_closest_marker(suite) is not None]
    deselected = [item for item in items if item.get_closest_marker(suite) is None]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected


def test_seed(base: int, nodeid: str) -> int:
    """The seed of one test: stable for a (base seed, test id) pair, different across tests."""
    return zlib.crc32(f"{base}:{nodeid}".encode()) & 0x7FFFFFFF


test_seed.__test__ = False  # a helper, not a test


@pytest.fixture
def seed(request) -> int:
    return test_seed(request.config.getoption("--seed"), request.node.nodeid)


@pytest.fixture(autouse=True)
def _seeded_rng(seed):
    import torch

    torch.manual_seed(seed)
    yield


def skip_unless_backend_has(factory: str) -> None:
    """Skips the calling test when the selected backend has no `factory`: its interface would serve
    the case with another kernel, so running it would test that one under this kernel's name."""
    import tilelang_ops

    if factory not in tilelang_ops.ops.names():
        pytest.skip(f"backend {tilelang_ops.PLATFORM.tilelang_ops_backend!r} has no {factory}")


@pytest.fixture
def no_kernel_launches(monkeypatch):
    """tilelang_ops.ops raises on every factory lookup for the test's duration: an input that must
    launch nothing (an empty batch) fails the test if the interface reaches for a kernel."""
    import tilelang_ops

    class NoKernels:
        def __getattr__(self, name):
            raise AssertionError(f"an empty input must not build or launch {name}")

    monkeypatch.setattr(tilelang_ops, "ops", NoKernels())


@pytest.fixture(scope="session")
def backend(request) -> str:
    chosen = request.config.getoption("--backend")
    if chosen is not None:
        return chosen
    import tilelang_ops

    return tilelang_ops.PLATFORM.tilelang_ops_backend


def accelerator_missing(backend: str) -> str | None:
    """Why the backend's accelerator cannot run here, or None when it can."""
    import torch

    if backend == "cuda":
        return None if torch.cuda.is_available() else "no CUDA device visible to torch"
    npu = getattr(torch, "npu", None)
    if npu is None:
        return "torch_npu is not installed (no Ascend runtime)"
    return None if npu.is_available() else "no Ascend NPU visible to torch_npu"


@pytest.fixture
def device(request, backend) -> str:
    """The torch device of the backend under test; skips (with the reason) when it is absent."""
    reason = accelerator_missing(backend)
    if reason is not None:
        pytest.skip(f"device test for backend {backend!r}: {reason}")
    return "cuda" if backend == "cuda" else "npu"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is None:
        return
    try:
        from tilelang_ops.errors import KernelUnavailableError
    except ImportError:  # a test target without //platform:ops cannot raise it
        return
    if call.excinfo.errisinstance(KernelUnavailableError):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {call.excinfo.value}")
