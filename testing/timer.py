"""Microsecond-scale device timer for kernel benchmarks.

Two methods; the one used is recorded in every :class:`Timing`.

``"cuda_graph"``
    The callables (one per *input set*) are captured into one CUDA graph as
    ``L`` launches that cycle through the input sets in order (``L`` is a
    multiple of the number of sets and large enough that one replay takes
    about ``target_sample_us``).  The graph is warmed up, then replayed many
    times; each replay is bracketed by CUDA events and one sample is
    ``replay time / L``.  The result is the median over the samples.  The
    launch overhead of the host is gone (graph replay), the per-launch gap
    inside a graph (~1-2 us on Hopper) is included.

    L2 must not serve the inputs, so the graph *rotates* through a pool of
    input sets whose total footprint exceeds ``2 x L2`` (see
    :func:`sets_for_rotation`): between two uses of the same input set at
    least ``2 x L2`` bytes of other inputs were touched.  Nothing that is not
    the workload is inside the timed region.

``"profiler"``
    ``torch.profiler`` (CUPTI) records the device activities (kernels,
    memcpy, memset) of ``n`` iterations of ``flush(); fn()``.  ``flush``
    zeroes a buffer of ``>= 2 x L2`` bytes so every iteration starts with a
    cold L2.  The flush's own activities are excluded: its activity count is
    calibrated first, then the time-ordered activity list is cut into
    iterations (``flush activities, then fn activities``) and only the fn's
    activity durations are summed per iteration.  The result is the median
    over the iterations.  Gaps between the kernels of a multi-kernel fn are
    *not* counted in this method (pure device busy time).

Single launches are never timed with a pair of plain CUDA events: events only
bracket whole graph replays.  (A short eager run bracketed by events is used
only to *size* the graph / iteration count, never as a result.)

This module imports only ``torch`` and performs no CUDA call at import time,
so it can be imported on machines without a GPU.
"""

from __future__ import annotations


import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

METHODS = ("cuda_graph", "profiler")
DEFAULT_L2_BYTES = 50 * 1024 * 1024  # H100/H200, used when the driver does not say
FLUSH_TAG = "tk::l2_flush"
MIB = 1024 * 1024


class TimerError(RuntimeError):
    """The requested timing method could not be applied to the callable."""


@dataclass(frozen=True)
class Timing:
    """Result of one measurement; all times are microseconds per call."""

    median_us: float
    p20_us: float
    p80_us: float
    min_us: float
    max_us: float
    n: int  # number of samples the statistics are over
    method: str  # "cuda_graph" or "profiler"
    launches_per_sample: int = 1  # graph launches per replay (cuda_graph) / 1 (profiler)
    input_sets: int = 1  # distinct input sets rotated through
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------------------
# Pure helpers (unit-testable without a GPU)
# ----------------------------------------------------------------------------


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (q in [0, 1]) of a non-empty sequence."""
    if not values:
        raise ValueError("quantile of an empty sequence")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    frac = pos - lo
    return xs[lo] + (xs[hi] - xs[lo]) * frac


def summarize(
    samples_us: Sequence[float],
    method: str,
    *,
    launches_per_sample: int = 1,
    input_sets: int = 1,
    note: str = "",
) -> Timing:
    """Build a :class:`Timing` (median, p20, p80, min, max) from per-call samples."""
    if not samples_us:
        raise ValueError("no samples")
    return Timing(
        median_us=float(statistics.median(samples_us)),
        p20_us=float(quantile(samples_us, 0.2)),
        p80_us=float(quantile(samples_us, 0.8)),
        min_us=float(min(samples_us)),
        max_us=float(max(samples_us)),
        n=len(samples_us),
        method=method,
        launches_per_sample=launches_per_sample,
        input_sets=input_sets,
        note=note,
    )


def sets_for_rotation(
    footprint_bytes: int,
    l2_bytes: int,
    *,
    min_sets: int = 2,
    max_sets: int = 8192,
) -> int:
    """Number of input sets so that ``sets * footprint >= 2 * l2_bytes``.

    ``footprint_bytes`` is what one call touches (for a memory-bound kernel:
    its ``bytes_moved``).  At least ``min_sets`` so consecutive launches never
    see the same inputs; at most ``max_sets`` to bound graph size and memory
    (for tiny decode-size calls the cap may leave the pool below 2 x L2; the
    caller can see that from ``Timing.input_sets``).
    """
    if l2_bytes <= 0:
        return max(1, min_sets)
    need = math.ceil(2 * l2_bytes / max(int(footprint_bytes), 1))
    return int(max(min_sets, min(max_sets, need)))


def graph_launch_count(
    n_sets: int,
    est_call_us: float,
    target_sample_us: float,
    max_launches: int,
) -> int:
    """Launches captured per graph: a multiple of ``n_sets``, ~``target_sample_us`` long."""
    n_sets = max(1, n_sets)
    est = max(est_call_us, 0.5)
    rounds = max(1, math.ceil(target_sample_us / (est * n_sets)))
    max_rounds = max(1, max_launches // n_sets)
    return n_sets * min(rounds, max_rounds)


# The fewest graph-replay samples a slow callable gets: each already averages L launches.
FEWEST_SAMPLES = 5


def sample_count(
    sample_us: float, budget_s: float, min_samples: int, max_samples: int, max_total_s: float | None = None
) -> int:
    """How many samples fit in ``budget_s`` (clamped to [min_samples, max_samples]).

    With ``max_total_s``, ``min_samples`` gives way, down to :data:`FEWEST_SAMPLES`, where that many
    samples would take longer than it: a slow peer's graph replays thousands of its calls per sample
    (as many as the input sets), and 15 of them cost seconds without changing the median.
    """
    if sample_us <= 0:
        return max_samples
    fewest = min_samples
    if max_total_s is not None:
        fewest = min(min_samples, max(FEWEST_SAMPLES, int(max_total_s * 1e6 / sample_us)))
    return max(fewest, min(max_samples, int(budget_s * 1e6 / sample_us)))


def segment_iterations(
    activities: Sequence[tuple[float, float]],
    n_iters: int,
    flush_count: int,
) -> list[float]:
    """Per-iteration device time from a time-ordered activity list.

    ``activities`` are ``(start_us, end_us)`` of every device activity recorded
    while running ``n_iters`` times ``flush(); fn()`` on one stream.  Each
    iteration contributes ``flush_count`` flush activities followed by the
    same number ``k`` of fn activities.  Returns the summed fn durations per
    iteration.  Raises :class:`TimerError` when the activity count does not
    split evenly (fn launches a varying number of kernels, extra streams...).
    """
    acts = sorted(activities, key=lambda a: a[0])
    total = len(acts)
    if n_iters <= 0:
        raise ValueError("n_iters must be positive")
    if total % n_iters != 0:
        raise TimerError(
            f"{total} device activities do not split into {n_iters} iterations"
        )
    per_iter = total // n_iters
    k = per_iter - flush_count
    if k <= 0:
        raise TimerError(
            f"no device activity left for the timed callable "
            f"({per_iter} per iteration, {flush_count} of them the L2 flush)"
        )
    out: list[float] = []
    for i in range(n_iters):
        chunk = acts[i * per_iter + flush_count : (i + 1) * per_iter]
        out.append(float(sum(end - start for start, end in chunk)))
    return out


# ----------------------------------------------------------------------------
# Device helpers
# ----------------------------------------------------------------------------


def _as_device(device: Any = None) -> torch.device:
    if device is None:
        return torch.device("cuda", torch.cuda.current_device())
    if isinstance(device, int):
        return torch.device("cuda", device)
    dev = torch.device(device)
    if dev.type != "cuda":
        raise TimerError(f"the timer needs a CUDA device, got {dev}")
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def _require_cuda() -> None:
    if not torch.cuda.is_available():
        raise TimerError("CUDA is not available: the kernel timer needs an NVIDIA GPU")


def l2_cache_bytes(device: Any = None) -> int:
    """L2 size of ``device`` from its properties (50 MiB when not reported)."""
    _require_cuda()
    dev = _as_device(device)
    props = torch.cuda.get_device_properties(dev)
    size = int(getattr(props, "L2_cache_size", 0) or 0)
    return size if size > 0 else DEFAULT_L2_BYTES


def _as_list(fns: Callable[[], Any] | Sequence[Callable[[], Any]]) -> list[Callable[[], Any]]:
    if callable(fns):
        return [fns]
    out = list(fns)
    if not out or not all(callable(f) for f in out):
        raise TypeError("expected a callable or a non-empty sequence of callables")
    return out


def _eager_estimate_us(fns: list[Callable[[], Any]], dev: torch.device, extra: Callable[[], Any] | None = None) -> float:
    """Rough per-call time (device or host bound, whichever dominates).

    Only used to size graphs / iteration counts, never reported.
    """
    calls = min(max(len(fns), 5), 64)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(dev)
    start.record()
    for j in range(calls):
        if extra is not None:
            extra()
        fns[j % len(fns)]()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / calls


def _check_no_host_sync(fn: Callable[[], Any]) -> None:
    """Raise TimerError if ``fn`` performs a (torch-visible) host synchronisation.

    A synchronising call (``.item()``, ``nonzero``...) cannot be captured in
    a CUDA graph; detecting it up front gives a clear message instead of an
    invalidated capture.
    """
    prev = torch.cuda.get_sync_debug_mode()
    try:
        torch.cuda.set_sync_debug_mode("error")
        fn()
    except RuntimeError as exc:  # raised by the sync debug mode
        raise TimerError(f"callable synchronises with the host, cannot be graph-captured: {exc}") from exc
    finally:
        torch.cuda.set_sync_debug_mode(prev)


def _measure_cuda_graph(
    fns: list[Callable[[], Any]],
    dev: torch.device,
    *,
    warmup: int,
    target_sample_us: float,
    budget_s: float,
    min_samples: int,
    max_samples: int,
    max_launches: int,
    max_total_s: float,
) -> Timing:
    n_sets = len(fns)
    prev_stream = torch.cuda.current_stream(dev)
    side = torch.cuda.Stream(dev)
    # Warm up on a side stream (lazy init, JIT compilation, cuBLAS workspaces):
    # recommended before capture.
    side.wait_stream(prev_stream)
    with torch.cuda.stream(side):
        for _ in range(max(1, warmup)):
            for f in fns[: min(n_sets, 8)]:
                f()
    prev_stream.wait_stream(side)
    torch.cuda.synchronize(dev)

    _check_no_host_sync(fns[0])
    torch.cuda.synchronize(dev)

    est_us = _eager_estimate_us(fns, dev)
    launches = graph_launch_count(n_sets, est_us, target_sample_us, max(max_launches, n_sets))

    graph = torch.cuda.CUDAGraph()
    capture_stream = torch.cuda.Stream(dev)
    try:
        with torch.cuda.graph(graph, stream=capture_stream, capture_error_mode="thread_local"):
            for j in range(launches):
                fns[j % n_sets]()
    except Exception as exc:
        # torch.cuda.graph.__exit__ may raise before restoring the stream.
        torch.cuda.set_stream(prev_stream)
        del graph
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
        raise TimerError(f"CUDA graph capture failed: {type(exc).__name__}: {exc}") from exc

    try:
        # Two warm-up replays (instruction cache, TLB, clocks); the second, timed, sizes the number
        # of samples. A slow peer's replay is thousands of its calls (a second or more), so a
        # separate probe would cost as much as the samples it sizes.
        graph.replay()
        probe_s = torch.cuda.Event(enable_timing=True)
        probe_e = torch.cuda.Event(enable_timing=True)
        probe_s.record()
        graph.replay()
        probe_e.record()
        probe_e.synchronize()
        replay_us = probe_s.elapsed_time(probe_e) * 1000.0
        n = sample_count(replay_us, budget_s, min_samples, max_samples, max_total_s)

        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            starts[i].record()
            graph.replay()
            ends[i].record()
        torch.cuda.synchronize(dev)
        samples = [s.elapsed_time(e) * 1000.0 / launches for s, e in zip(starts, ends)]
    finally:
        del graph
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
    return summarize(samples, "cuda_graph", launches_per_sample=launches, input_sets=n_sets)


def _is_device_activity(evt: Any) -> bool:
    """Kernels, memcpys and memsets on the device; not annotations or sync records."""
    dtype = getattr(evt, "device_type", None)
    name = getattr(dtype, "name", str(dtype))
    if name not in ("CUDA", "HIP"):
        return False
    if getattr(evt, "is_user_annotation", False):
        return False
    kind = getattr(evt, "activity_type", None)
    if isinstance(kind, str) and any(w in kind.lower() for w in ("annotation", "sync", "overhead")):
        return False
    # GPU-side spans of record_function ranges on torch versions without
    # ``is_user_annotation``.
    return getattr(evt, "name", "") != FLUSH_TAG


def _profile_activities(body: Callable[[], None], dev: torch.device) -> list[tuple[float, float]]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        body()
        torch.cuda.synchronize(dev)
    # No filter on the device index: CUPTI's numbering need not match torch's
    # under CUDA_VISIBLE_DEVICES, and only this device runs work here.
    acts = []
    for evt in prof.events():
        if _is_device_activity(evt):
            tr = evt.time_range
            acts.append((float(tr.start), float(tr.end)))
    return acts


def _measure_profiler(
    fns: list[Callable[[], Any]],
    dev: torch.device,
    *,
    warmup: int,
    budget_s: float,
    min_samples: int,
    max_samples: int,
) -> Timing:
    n_sets = len(fns)
    l2 = l2_cache_bytes(dev)
    flush_bytes = max(2 * l2, 64 * MIB)
    flush_buf = torch.empty(flush_bytes // 4, dtype=torch.int32, device=dev)

    def flush() -> None:
        flush_buf.zero_()

    for i in range(max(1, warmup) * min(n_sets, 8)):
        flush()
        fns[i % n_sets]()
    torch.cuda.synchronize(dev)

    est_us = _eager_estimate_us(fns, dev, extra=flush)
    n = sample_count(est_us, budget_s, min_samples, max_samples)

    # Calibrate how many device activities one flush produces.
    cal_rounds = 3

    def flush_only() -> None:
        for _ in range(cal_rounds):
            flush()

    cal = _profile_activities(flush_only, dev)
    if not cal:
        raise TimerError("torch.profiler recorded no device activity (is CUPTI available?)")
    if len(cal) % cal_rounds:
        raise TimerError(f"L2 flush produced {len(cal)} activities over {cal_rounds} calls")
    flush_count = len(cal) // cal_rounds

    def body() -> None:
        from torch.profiler import record_function

        for i in range(n):
            with record_function(FLUSH_TAG):
                flush()
            fns[i % n_sets]()

    acts = _profile_activities(body, dev)
    samples = segment_iterations(acts, n, flush_count)
    del flush_buf
    return summarize(samples, "profiler", launches_per_sample=1, input_sets=n_sets)


def measure(
    fns: Callable[[], Any] | Sequence[Callable[[], Any]],
    *,
    method: str = "cuda_graph",
    device: Any = None,
    warmup: int = 2,
    target_sample_us: float = 2000.0,
    budget_s: float = 0.5,
    min_samples: int = 15,
    max_samples: int = 200,
    max_launches: int = 16384,
    max_total_s: float = 2.0,
) -> Timing:
    """Time ``fns`` (one callable per input set, rotated in order).

    Returns per-call statistics in microseconds.  ``method`` is
    ``"cuda_graph"`` (rotation through the input sets inside one graph) or
    ``"profiler"`` (CUPTI kernel time with an L2 flush before every call).
    ``cuda_graph`` takes ``budget_s`` worth of samples, at least ``min_samples`` unless they would
    take longer than ``max_total_s`` (:func:`sample_count`).
    The callables must only enqueue device work on the current stream; for
    ``"cuda_graph"`` they must be capturable (no host synchronisation).
    Raises :class:`TimerError` when the method cannot be applied.
    """
    if method not in METHODS:
        raise ValueError(f"unknown timing method {method!r}; expected one of {METHODS}")
    _require_cuda()
    fn_list = _as_list(fns)
    dev = _as_device(device)
    with torch.cuda.device(dev):
        if method == "cuda_graph":
            return _measure_cuda_graph(
                fn_list,
                dev,
                warmup=warmup,
                target_sample_us=target_sample_us,
                budget_s=budget_s,
                min_samples=min_samples,
                max_samples=max_samples,
                max_launches=max_launches,
                max_total_s=max_total_s,
            )
        return _measure_profiler(
            fn_list,
            dev,
            warmup=warmup,
            budget_s=budget_s,
            min_samples=min_samples,
            max_samples=max_samples,
        )


def copy_ceiling_timing(
    device: Any = None,
    nbytes: int = 2 * 1024**3,
    method: str = "cuda_graph",
) -> tuple[float, Timing]:
    """``(GB/s, Timing)`` of the fastest device-to-device copy of ``nbytes``.

    GB/s counts read + written bytes (``2 * nbytes``), GB = 1e9 bytes.  The
    buffer shrinks to at most 40% of the free memory (each of src and dst).
    Two copies are timed and the faster one is the ceiling: ``copy_`` (a
    memcpy; captured in a CUDA graph it becomes a memcpy node that the copy
    engines may serve, measured at ~2.7 TB/s on an H200) and a 16-byte
    vectorised SM kernel moving the same bytes (``bitwise_not`` on an int32
    view, ~4.3 TB/s there).  ``Timing.note`` names the winner.
    """
    _require_cuda()
    dev = _as_device(device)
    with torch.cuda.device(dev):
        free, _total = torch.cuda.mem_get_info(dev)
        size = min(int(nbytes), int(free * 0.4))
        size = max(MIB, size - size % MIB)
        src = torch.randint(0, 256, (size,), dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        src32, dst32 = src.view(torch.int32), dst.view(torch.int32)
        variants = {
            "memcpy": lambda: dst.copy_(src),
            "sm_copy_kernel": lambda: torch.bitwise_not(src32, out=dst32),
        }
        try:
            timings = {name: measure([fn], method=method, device=dev) for name, fn in variants.items()}
        finally:
            del src, dst, src32, dst32
            torch.cuda.empty_cache()
    name, timing = min(timings.items(), key=lambda kv: kv[1].median_us)
    others = ", ".join(f"{n} {t.median_us:.1f} us" for n, t in timings.items() if n != name)
    timing = replace(timing, note=f"fastest copy: {name} ({others})")
    gbs = 2 * size / (timing.median_us * 1e-6) / 1e9
    return gbs, timing


def copy_ceiling(device: Any = None, nbytes: int = 2 * 1024**3, method: str = "cuda_graph") -> float:
    """Device memory bandwidth ceiling in GB/s (read + write of a ~2 GiB copy).

    Expect ~4.3e3 GB/s on an H200.
    """
    return copy_ceiling_timing(device, nbytes, method)[0]


def same_bytes_copy(device: Any, nbytes: int, l2_bytes: int) -> list[Callable[[], Any]]:
    """One call per input set of an SM copy that moves ``nbytes`` in all: it reads half of them and
    writes the other half (each half rounded up to 16 bytes), like the ceiling's ``sm_copy_kernel``
    and under a case's output policy (each call allocates its output).

    Timed like a case, it is about the least a plainly launched kernel with that much DRAM traffic
    costs under the same timer, its launch and its first DRAM round trip included: the floor that a
    decode-size kernel, whose bytes are too few for the copy ceiling to mean anything, is judged
    against (a kernel launched as a programmatic dependent can beat it: its launch overlaps the grid
    before). The sources rotate past ``2 x l2_bytes`` as a case's input sets do, up to
    sets_for_rotation's cap.
    """
    half = max(16, -(-int(nbytes) // 32) * 16)
    sets = sets_for_rotation(half, l2_bytes)
    pool = torch.randint(-(2**31), 2**31 - 1, (sets, half // 4), dtype=torch.int32, device=device)
    return [lambda src=src: torch.bitwise_not(src) for src in pool]


def empty_kernel_us(device: Any = None, method: str = "cuda_graph") -> float:
    """Time of a tiny kernel (1-element in-place add) per launch, in us.

    With ``cuda_graph`` this is the graph-replay launch floor: the lowest
    time a launch-bound kernel can reach.
    """
    _require_cuda()
    dev = _as_device(device)
    with torch.cuda.device(dev):
        t = torch.ones(1, dtype=torch.float32, device=dev)
        timing = measure([lambda: t.add_(1.0)], method=method, device=dev)
    return timing.median_us
