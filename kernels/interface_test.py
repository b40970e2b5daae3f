"""kernels/interface.stream_counters: which zeroed array each (owner, stream) gets, in and out of a
CUDA graph capture. The stream and the capture state are patched, so CPU tensors stand in for the
device's; what a capture does on a GPU is kernels/outlier_detection's device test of two graphs.
And interface.takes_pdl, with the compute capability patched."""

from __future__ import annotations

import types

import pytest
import torch

from kernels import interface

CPU = torch.device("cpu")


@pytest.fixture
def fake_streams(monkeypatch):
    """A settable current stream and capture flag, and empty counter tables."""
    state = {"stream": 1, "capturing": False}
    monkeypatch.setattr(interface, "_stream_id", lambda device: state["stream"])
    monkeypatch.setattr(interface, "_capturing", lambda device: state["capturing"])
    monkeypatch.setattr(interface, "_STREAM_COUNTERS", {})
    monkeypatch.setattr(interface, "_RETIRED", [])
    monkeypatch.setattr(interface, "_ARENAS", {})
    return state


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


@pytest.mark.ref
def test_one_zeroed_array_per_owner_and_stream(fake_streams):
    a = interface.stream_counters("op", CPU, 3)
    assert a.dtype == torch.int32 and a.numel() >= 3 and int(a.count_nonzero()) == 0
    assert interface.stream_counters("op", CPU, 3) is a, "one stream's launches share its array"
    assert interface.stream_counters("other", CPU, 3) is not a, "owners do not share"
    fake_streams["stream"] = 2
    b = interface.stream_counters("op", CPU, 3)
    assert b is not a and not _shares_memory(a, b), "streams do not share"


@pytest.mark.ref
def test_capture_takes_counters_zeroed_outside_it(fake_streams):
    """A stream first seen in a capture gets a slice of the arena zeroed earlier, never a fresh fill
    (which would only run when that one graph replays); slices do not overlap."""
    eager = interface.stream_counters("op", CPU, 5)
    arena = interface._ARENAS[CPU.index][0]
    fake_streams.update(stream=7, capturing=True)
    first = interface.stream_counters("op", CPU, 5)
    assert _shares_memory(first, arena) and int(first.count_nonzero()) == 0
    assert interface.stream_counters("op", CPU, 5) is first, "graphs captured on one stream share"
    second = interface.stream_counters("other", CPU, 5)
    assert _shares_memory(second, arena)
    spans = sorted((t.data_ptr(), t.data_ptr() + 4 * t.numel()) for t in (first, second))
    assert spans[0][1] <= spans[1][0], "two owners' arena slices overlap"
    assert not _shares_memory(eager, arena)


@pytest.mark.ref
def test_capture_before_any_warm_up_is_an_error(fake_streams):
    fake_streams["capturing"] = True
    with pytest.raises(RuntimeError, match="op: first call on this stream .* inside a CUDA graph capture"):
        interface.stream_counters("op", CPU, 1)
    assert interface._STREAM_COUNTERS == {}


@pytest.mark.ref
def test_capture_past_the_arena_is_an_error_until_a_call_outside_refills_it(fake_streams):
    interface.stream_counters("op", CPU, 1)
    free = interface._ARENAS[CPU.index][0].numel()
    fake_streams.update(stream=2, capturing=True)
    assert interface.stream_counters("op", CPU, free).numel() == free, "a request the arena holds exactly"
    fake_streams["stream"] = 3
    with pytest.raises(RuntimeError, match=r"no zeroed counters \(\d+\) were set aside"):
        interface.stream_counters("op", CPU, 1)
    # An ordinary call on a stream that already has its array refills the used-up arena.
    fake_streams.update(stream=1, capturing=False)
    interface.stream_counters("op", CPU, 1)
    fake_streams.update(stream=3, capturing=True)
    assert int(interface.stream_counters("op", CPU, 1).count_nonzero()) == 0
    # A capture asking for more than the arena holds needs a call outside with at least as many.
    fake_streams["stream"] = 4
    with pytest.raises(RuntimeError, match="at least as many rows"):
        interface.stream_counters("op", CPU, 2 * free)
    fake_streams.update(stream=1, capturing=False)
    interface.stream_counters("op", CPU, 2 * free)
    fake_streams.update(stream=4, capturing=True)
    assert interface.stream_counters("op", CPU, 2 * free).numel() >= 2 * free


@pytest.mark.ref
def test_arena_slices_start_on_whole_lines(fake_streams):
    interface.stream_counters("op", CPU, 1)
    fake_streams["capturing"] = True
    for stream, n in enumerate([interface._MIN_COUNTERS + 1, 3, interface._MIN_COUNTERS + 77], start=2):
        fake_streams["stream"] = stream
        counters = interface.stream_counters("op", CPU, n)
        offset = counters.data_ptr() - interface._ARENAS[CPU.index][0].data_ptr()
        assert counters.numel() >= n and offset % 128 == 0


@pytest.mark.ref
@pytest.mark.parametrize("capturing", [False, True], ids=["eager", "capture"])
def test_a_larger_request_replaces_the_array_and_keeps_the_old_alive(fake_streams, capturing):
    interface.stream_counters("warm-up", CPU, 4 * interface._MIN_COUNTERS)
    small = interface.stream_counters("op", CPU, 1)
    fake_streams["capturing"] = capturing
    big = interface.stream_counters("op", CPU, interface._MIN_COUNTERS + 1)
    assert big.numel() > interface._MIN_COUNTERS and int(big.count_nonzero()) == 0
    assert interface.stream_counters("op", CPU, 1) is big
    assert any(t is small for t in interface._RETIRED), "a graph captured with the smaller array still uses it"


def test_takes_pdl_from_sm90(monkeypatch):
    """Programmatic dependent launch from compute capability 9.0 on, read per device index."""
    seen = []

    def capability(index):
        seen.append(index)
        return {0: (8, 9), 1: (9, 0), 2: (10, 0)}[index]

    monkeypatch.setattr(interface, "cuda_capability", capability)
    on = [interface.takes_pdl(types.SimpleNamespace(device=torch.device("cuda", i))) for i in range(3)]
    assert on == [False, True, True] and seen == [0, 1, 2]


def test_launch_options_ask_for_pdl_on_cuda_devices_that_take_it(monkeypatch):
    """pdl=True for a CUDA tensor on an sm_90+ device; no option for older GPUs or other devices
    (an NPU's factories take none), and no capability query for them."""
    seen = []

    def capability(index):
        seen.append(index)
        return {0: (8, 0), 1: (9, 0)}[index]

    monkeypatch.setattr(interface, "cuda_capability", capability)
    # Fake devices: this torch build may know no "npu" device type.
    devices = [types.SimpleNamespace(type=kind, index=i) for kind, i in (("cuda", 0), ("cuda", 1), ("npu", 1), ("cpu", 0))]
    on = [interface.launch_options(types.SimpleNamespace(device=d)) for d in devices]
    assert on == [{}, {"pdl": True}, {}, {}] and seen == [0, 1]
