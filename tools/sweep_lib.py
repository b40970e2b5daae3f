"""The batch sweep behind `bazel run //tools:sweep`: timing methods, the decode hot path, results files.

Per kernel, every batch size is one benchmark case made by the kernel's bench module
(``kernels/<k>/<k>_bench.py``: ``sweep_case(batch, model_config, device) -> BenchCase`` and
``SWEEP_MAX_BATCH``), timed with its peers. The decode hot path chains the cases of the registered
hot-path stages (:func:`register_stage`) and times the whole chain per batch size.

Timing methods (pluggable, see :func:`make_timer`):
  cuda_graph, profiler  testing.timer on a CUDA device, through testing.benchmark.measure_case for the
                        kernels, so the numbers are the benchmark's (same copy ceiling, same peers);
                        the hot path is one CUDA graph per batch size (cuda_graph).
  cpu_wall              the reference backend on the CPU, timed by the host wall clock (warm-up, then
                        the median over samples); every output is labelled "reference backend on CPU".

results.json (``SCHEMA``)::

    {"schema": "tilelang_ops.sweep/1",
     "metadata": {"label", "backend", "device", "method", "repeat", "torch", "torch_threads",
                  "ceiling_gbs", "ceiling_note", "model": {hidden, vocab, block_size, mtp,
                  tokens_per_request}, "model_note", "created", "elapsed_s"},
     "kernels": {<kernel>: {"max_batch", "records": [testing.benchmark.measure_case's record
                 (time_us, bandwidth_gbs, pct_ceiling, bytes, params, timing, peers: {<peer>:
                 {time_us, bandwidth_gbs, pct_ceiling, method} or {skipped}}, error?, ...)
                 + {"batch", "tokens"}]}},
     "skipped_kernels": {<kernel>: <reason>},
     "hot_path": {"stages": [{name, kernel, role}], "skipped_stages": [{name, kernel, role, reason}],
                  "points": [{batch, tokens, step_us, tokens_per_s_per_user, tokens_per_s_per_gpu,
                              bytes, method, timing} or {batch, tokens, error}]}}

With ``repeat`` > 1 a record's or point's time is the median of the runs, listed in run_times_us.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import gc
import importlib
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import tilelang_ops
from testing import benchmark
from testing import timer as _timer
from testing.benchmark import BenchCase

SCHEMA = "tilelang_ops.sweep/1"
METHODS = ("cuda_graph", "profiler", "cpu_wall")
CPU_LABEL = "reference backend on CPU"
CPU_MAX_BATCH = 64
CSV_COLUMNS = (
    "section",
    "kernel",
    "impl",
    "batch",
    "tokens",
    "time_us",
    "bandwidth_gbs",
    "pct_ceiling",
    "bytes",
    "tokens_per_s_per_user",
    "tokens_per_s_per_gpu",
    "method",
    "note",
)


# ----------------------------------------------------------------------------
# Model shape
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelConfig:
    """The decode-step shape the cases are built for (defaults: DeepSeek-V3)."""

    hidden: int = 7168
    vocab: int = 129280
    block_size: int = 64
    mtp: int = 1  # MTP draft length: each request runs 1 + mtp tokens per step

    @property
    def tokens_per_request(self) -> int:
        return 1 + self.mtp

    def to_dict(self) -> dict[str, int]:
        return {**dataclasses.asdict(self), "tokens_per_request": self.tokens_per_request}


DEEPSEEK_V3 = ModelConfig()
# On the CPU the reference must finish in seconds: hidden and vocab shrink unless given explicitly.
CPU_HIDDEN = 1024
CPU_VOCAB = 16384


def powers_of_two(limit: int) -> list[int]:
    """1, 2, 4, ... up to ``limit`` (inclusive)."""
    return [1 << i for i in range(max(limit, 1).bit_length()) if (1 << i) <= limit]


# ----------------------------------------------------------------------------
# Timing methods
# ----------------------------------------------------------------------------


def short_error(exc: BaseException, limit: int = 240) -> str:
    """``Type: first line`` of an exception, cut to ``limit`` characters."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bandwidth(nbytes: int, time_us: float, ceiling_gbs: float | None) -> tuple[float, float | None]:
    gbs = nbytes / (time_us * 1e-6) / 1e9
    return gbs, (100.0 * gbs / ceiling_gbs if ceiling_gbs else None)


class CpuWallTimer:
    """Host wall clock for the reference backend on the CPU (testing.timer needs CUDA).

    Each sample runs back-to-back calls (rotating through the input sets) for about
    ``target_sample_us``. After a warm-up round, samples are taken for ``budget_s`` (at least
    ``min_samples``, at most ``max_samples``, as testing.timer does) and the result is their median:
    on a busy host a long run of samples keeps a few preempted ones from moving the median.
    torch's thread count is left as it is.
    """

    name = "cpu_wall"
    device = torch.device("cpu")
    label = CPU_LABEL
    backend = "reference"
    # A few index sets, as on the GPU; the CPU's caches still serve the (small) table.
    input_set_count = 4
    copy_bytes = 256 * 1024 * 1024  # larger than most last-level caches

    def __init__(
        self, target_sample_us: float = 1000.0, budget_s: float = 0.2, min_samples: int = 15, max_samples: int = 200
    ):
        self.target_sample_us = target_sample_us
        self.budget_s = budget_s
        self.min_samples = min_samples
        self.max_samples = max_samples

    def device_name(self) -> str:
        return "cpu"

    def input_sets(self, footprint_bytes: int) -> int:
        del footprint_bytes  # the pool size does not matter when caches serve the table anyway
        return self.input_set_count

    def measure(self, fns: Sequence[Callable[[], Any]]) -> _timer.Timing:
        n_sets = len(fns)
        for f in fns:  # warm-up: first-call work (torch.compile, allocations) stays out of the estimate
            f()
        start = time.perf_counter()
        for f in fns:
            f()
        est_us = max((time.perf_counter() - start) * 1e6 / n_sets, 0.1)
        calls = n_sets * max(1, math.ceil(self.target_sample_us / (est_us * n_sets)))
        samples: list[float] = []
        deadline = time.perf_counter() + self.budget_s
        while len(samples) < self.min_samples or (len(samples) < self.max_samples and time.perf_counter() < deadline):
            start = time.perf_counter()
            for j in range(calls):
                fns[j % n_sets]()
            samples.append((time.perf_counter() - start) * 1e6 / calls)
        return _timer.summarize(samples, self.name, launches_per_sample=calls, input_sets=n_sets)

    def copy_ceiling(self) -> tuple[float, str]:
        """Host memcpy bandwidth (read + write bytes), GB/s, and how it was measured."""
        src = torch.randint(0, 256, (self.copy_bytes,), dtype=torch.uint8)
        dst = torch.empty_like(src)
        timing = self.measure([lambda: dst.copy_(src)])
        gbs = 2 * self.copy_bytes / (timing.median_us * 1e-6) / 1e9
        return gbs, f"host copy_ of {self.copy_bytes >> 20} MiB, {timing.median_us:.0f} us (read + write)"

    def measure_case(self, case: BenchCase, ceiling_gbs: float) -> dict[str, Any]:
        """The record testing.benchmark.measure_case makes, timed on the CPU (no memory profile)."""
        _fresh_compiler()
        record: dict[str, Any] = {
            "kernel": case.kernel,
            "case_id": case.case_id,
            "params": dict(case.params),
            "bytes": int(case.bytes_moved),
            "device": "cpu",
            "ceiling_gbs": ceiling_gbs,
            "torch": torch.__version__,
            "notes": [],
            "peers": {},
        }
        try:
            workloads = [case.make(self.device, k) for k in range(self.input_sets(case.footprint_bytes))]
            timing = self.measure([w.fn for w in workloads])
        except Exception as exc:  # the kernel failed: report it, keep sweeping
            record.update(time_us=None, method=self.name, error=short_error(exc))
            return record
        gbs, pct = _bandwidth(case.bytes_moved, timing.median_us, ceiling_gbs)
        record.update(
            time_us=timing.median_us, timing=timing.to_dict(), method=timing.method, bandwidth_gbs=gbs, pct_ceiling=pct
        )
        for name in workloads[0].peers:
            try:
                ptiming = self.measure([w.peers[name] for w in workloads])
            except Exception as exc:
                record["peers"][name] = {"skipped": f"failed to run: {short_error(exc)}"}
                continue
            pgbs, ppct = _bandwidth(case.bytes_moved, ptiming.median_us, ceiling_gbs)
            record["peers"][name] = {
                "time_us": ptiming.median_us,
                "bandwidth_gbs": pgbs,
                "pct_ceiling": ppct,
                "method": ptiming.method,
            }
        return record


def _fresh_compiler() -> None:
    """Reset torch.compile per case, as testing.benchmark does: a new shape per batch would otherwise
    hit dynamo's recompile limit and silently time eager code as the torch_compile peer."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:
        dynamo.reset()


class DeviceTimer:
    """testing.timer on a CUDA device with ``method`` (cuda_graph or profiler), as the benchmark uses it."""

    backend = "cuda"

    def __init__(self, method: str, device: torch.device, log: Callable[[str], None] = print):
        self.name = method
        self.device = device
        self.log = log
        self.label = f"{self.backend} backend on {self.device_name()}"

    def device_name(self) -> str:
        return torch.cuda.get_device_name(self.device)

    def input_sets(self, footprint_bytes: int) -> int:
        """Enough input sets that L2 never serves them (cuda_graph); the profiler flushes L2 instead."""
        if self.name != "cuda_graph":
            return 1
        return _timer.sets_for_rotation(footprint_bytes, _timer.l2_cache_bytes(self.device))

    def measure(self, fns: Sequence[Callable[[], Any]]) -> _timer.Timing:
        """One graph of all ``fns`` (cuda_graph); a capture failure falls back to the profiler (noted)."""
        fns[0]()  # JIT compilation / first-call work outside everything measured
        torch.cuda.synchronize(self.device)
        try:
            return _timer.measure(list(fns), method=self.name, device=self.device)
        except _timer.TimerError as exc:
            if self.name != "cuda_graph":
                raise
            timing = _timer.measure(list(fns), method="profiler", device=self.device)
            return dataclasses.replace(timing, note=f"cuda_graph unusable ({short_error(exc)}); profiler used")

    def copy_ceiling(self) -> tuple[float, str]:
        gbs, timing = _timer.copy_ceiling_timing(self.device, method=self.name)
        return gbs, f"device copy of ~2 GiB, {timing.median_us:.1f} us (read + write); {timing.note}"

    def measure_case(self, case: BenchCase, ceiling_gbs: float) -> dict[str, Any]:
        return benchmark.measure_case(case, self.device, method=self.name, ceiling_gbs=ceiling_gbs, log=self.log)


Timer = CpuWallTimer | DeviceTimer


def make_timer(method: str | None, log: Callable[[str], None] = print) -> Timer:
    """The timer for ``method``; None picks cuda_graph when a CUDA device is visible, else cpu_wall."""
    if method is None:
        method = "cuda_graph" if torch.cuda.is_available() else "cpu_wall"
    if method not in METHODS:
        raise ValueError(f"unknown timing method {method!r}; expected one of {METHODS}")
    if method == "cpu_wall":
        return CpuWallTimer()
    if not torch.cuda.is_available():
        raise ValueError(f"--method={method} needs a CUDA device; without one use cpu_wall (the default)")
    backend = tilelang_ops.PLATFORM.tilelang_ops_backend
    if backend != DeviceTimer.backend:
        raise ValueError(f"--method={method} times the cuda backend, but tilelang_ops was built for {backend!r}")
    device = torch.device("cuda", torch.cuda.current_device())
    return DeviceTimer(method, device, log)


# ----------------------------------------------------------------------------
# Kernels and the decode hot path
# ----------------------------------------------------------------------------


def bench_module(kernel: str):
    """``kernels.<kernel>.<kernel>_bench``."""
    return importlib.import_module(f"kernels.{kernel}.{kernel}_bench")


def kernel_availability(timer: Timer) -> dict[str, str]:
    """{registered kernel: "" if the timer's backend provides it, else why not}."""
    if timer.backend == "reference":  # every kernel ships ref.py
        return {k: "" for k in tilelang_ops.KERNELS}
    modules = set(tilelang_ops.ops.names().values())
    return {
        k: "" if f"kernels.{k}.{timer.backend}" in modules else f"not provided by the {timer.backend} backend"
        for k in tilelang_ops.KERNELS
    }


def sweepable(kernel: str) -> str:
    """"" when the kernel's bench module has the sweep hooks, else what is missing."""
    try:
        module = bench_module(kernel)
    except ImportError as exc:  # a kernel being added may have no bench module yet
        return f"cannot import kernels/{kernel}/{kernel}_bench.py ({short_error(exc)})"
    missing = [name for name in ("sweep_case", "SWEEP_MAX_BATCH") if not hasattr(module, name)]
    return f"kernels/{kernel}/{kernel}_bench.py has no {' or '.join(missing)}" if missing else ""


@dataclass(frozen=True)
class HotPathStage:
    """One step of the decode chain: the kernel it runs and the case it runs at a batch size.

    ``case(batch, model_config, device)`` returns the BenchCase of this stage; the hot path calls
    ``case.make(device, k).fn`` of every stage in registration order, as one step.
    """

    name: str
    kernel: str
    role: str  # what the stage does in a decode step, for the outputs
    case: Callable[[int, ModelConfig, torch.device], BenchCase]

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "kernel": self.kernel, "role": self.role}


# The decode step's kernel chain, in order. DeepSeek-V3's decode runs: token embedding (gather) ->
# norm+quant -> store_kv_cache -> get_kv_index -> ... -> sampler -> schedule_mtp_varlen; a kernel
# joins the hot path by registering its stage at its place in that order.
HOT_PATH_STAGES: list[HotPathStage] = []


def register_stage(stage: HotPathStage) -> HotPathStage:
    """Append ``stage`` to the hot path (the chain runs stages in registration order)."""
    if any(s.name == stage.name for s in HOT_PATH_STAGES):
        raise ValueError(f"hot-path stage {stage.name!r} is already registered")
    HOT_PATH_STAGES.append(stage)
    return stage


def kernel_sweep_case(kernel: str) -> Callable[[int, ModelConfig, torch.device], BenchCase]:
    """A stage's case taken from the kernel's own ``sweep_case`` (imported when the stage is built)."""

    def case(batch: int, model_config: ModelConfig, device: torch.device) -> BenchCase:
        return bench_module(kernel).sweep_case(batch, model_config, device)

    return case


register_stage(
    HotPathStage(
        name="embed",
        kernel="gather",
        role="token-embedding lookup: batch x (1 + mtp) token ids into the vocab x hidden bf16 table",
        case=kernel_sweep_case("gather"),
    )
)
register_stage(
    HotPathStage(
        name="attn_norm",
        kernel="norm",
        role="fused residual add + RMSNorm of the step's batch x (1 + mtp) tokens at hidden width, bf16",
        case=kernel_sweep_case("norm"),
    )
)


def split_stages(
    stages: Sequence[HotPathStage], registered: Sequence[str], reasons: dict[str, str]
) -> tuple[list[HotPathStage], list[dict[str, str]]]:
    """(stages that run, skipped stages with the reason).

    ``reasons``: each kernel selected by --kernels -> "" if it can be swept, else why not.
    """
    included, skipped = [], []
    for stage in stages:
        if stage.kernel not in registered:
            reason = "kernel not registered in kernels/registry.bzl"
        elif stage.kernel not in reasons:
            reason = "kernel not selected by --kernels"
        else:
            reason = reasons[stage.kernel]
        if reason:
            skipped.append({**stage.to_dict(), "reason": reason})
        else:
            included.append(stage)
    return included, skipped


# ----------------------------------------------------------------------------
# Measurement
# ----------------------------------------------------------------------------


def sweep_kernel_point(
    kernel: str, batch: int, model: ModelConfig, timer: Timer, ceiling_gbs: float, repeat: int
) -> dict[str, Any]:
    """One kernel at one batch size, measured ``repeat`` times (median; each run in run_times_us)."""
    tokens = batch * model.tokens_per_request
    try:
        case = bench_module(kernel).sweep_case(batch, model, timer.device)
        runs = [[timer.measure_case(case, ceiling_gbs)] for _ in range(repeat)]
    except Exception as exc:  # the case could not even be built: report it, keep sweeping
        return {"kernel": kernel, "batch": batch, "tokens": tokens, "time_us": None, "peers": {}, "error": short_error(exc)}
    (record,), _spreads = benchmark.combine_runs(runs)
    record.update(batch=batch, tokens=tokens)
    return record


def time_hot_path(
    stages: Sequence[HotPathStage], batch: int, model: ModelConfig, timer: Timer, repeat: int
) -> dict[str, Any]:
    """One decode step through ``stages`` at ``batch``, timed as a whole ``repeat`` times (median).

    With cuda_graph the timer captures the chain, rotated over enough input sets to defeat L2, into
    one CUDA graph per batch size. Throughput counts one token per request per step (the brief's
    1 / step time per user): how many MTP drafts are accepted is not modelled.
    """
    tokens = batch * model.tokens_per_request
    try:
        cases = [stage.case(batch, model, timer.device) for stage in stages]
        timings = _time_steps(cases, timer, repeat)
    except Exception as exc:  # report it, keep sweeping
        return {"batch": batch, "tokens": tokens, "step_us": None, "error": short_error(exc)}
    finally:
        _release_memory()
    step_us = float(statistics.median(t.median_us for t in timings))
    point: dict[str, Any] = {
        "batch": batch,
        "tokens": tokens,
        "step_us": step_us,
        "tokens_per_s_per_user": 1e6 / step_us,
        "tokens_per_s_per_gpu": batch * 1e6 / step_us,
        "bytes": sum(int(c.bytes_moved) for c in cases),
        "method": timings[0].method,
        "timing": timings[0].to_dict(),
    }
    if repeat > 1:
        point["run_times_us"] = [t.median_us for t in timings]
    return point


def _time_steps(cases: Sequence[BenchCase], timer: Timer, repeat: int) -> list[_timer.Timing]:
    """Time one step (every case's kernel call, in order) per input set; the inputs die on return."""
    n_sets = timer.input_sets(sum(c.footprint_bytes for c in cases))
    steps = [_chain([c.make(timer.device, k).fn for c in cases]) for k in range(n_sets)]
    return [timer.measure(steps) for _ in range(repeat)]


def _chain(fns: list[Callable[[], Any]]) -> Callable[[], None]:
    def step() -> None:
        for fn in fns:
            fn()

    return step


def _release_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@dataclass(frozen=True)
class SweepPlan:
    """What one sweep measures."""

    kernel_batches: dict[str, list[int]]  # kernel -> batch sizes
    skipped_kernels: dict[str, str]  # kernel -> why it is not swept
    stages: list[HotPathStage]
    skipped_stages: list[dict[str, str]]
    hot_path_batches: list[int]

    @property
    def points(self) -> int:
        """Measurements in the sweep (kernel batches plus hot-path batches): the progress bar's total."""
        return sum(map(len, self.kernel_batches.values())) + len(self.hot_path_batches)


def make_plan(timer: Timer, kernels: Sequence[str] | None, batches: Sequence[int] | None) -> SweepPlan:
    """Kernels (every available one, or the ``kernels`` subset) with their batch sizes, and the hot path.

    Without explicit ``batches`` each kernel goes 1, 2, 4 ... up to its SWEEP_MAX_BATCH (at most
    CPU_MAX_BATCH on the CPU) and the hot path up to the smallest maximum of its stages' kernels.
    """
    available = kernel_availability(timer)
    unknown = [k for k in kernels or () if k not in available]
    if unknown:
        raise ValueError(f"--kernels: {', '.join(unknown)} not registered (registered: {', '.join(available)})")
    selected = list(kernels) if kernels else list(available)
    reasons = {k: available[k] or sweepable(k) for k in selected}
    stages, skipped_stages = split_stages(HOT_PATH_STAGES, list(available), reasons)
    cap = CPU_MAX_BATCH if timer.backend == "reference" else None

    def batches_for(kernel_names: Sequence[str]) -> list[int]:
        if batches:
            return list(batches)
        top = min(bench_module(k).SWEEP_MAX_BATCH for k in kernel_names)
        return powers_of_two(min(top, cap) if cap else top)

    return SweepPlan(
        kernel_batches={k: batches_for([k]) for k in selected if not reasons[k]},
        skipped_kernels={k: why for k, why in reasons.items() if why},
        stages=stages,
        skipped_stages=skipped_stages,
        hot_path_batches=batches_for([s.kernel for s in stages]) if stages else [],
    )


def run_sweep(
    plan: SweepPlan, model: ModelConfig, timer: Timer, progress: Any, *, repeat: int = 1, model_note: str = ""
) -> dict[str, Any]:
    """Measure the plan; returns the results.json document (layout in the module docstring).

    ``progress`` is a tqdm bar with ``plan.points`` steps.
    """
    started = time.time()
    ceiling_gbs, ceiling_note = timer.copy_ceiling()
    kernels: dict[str, Any] = {}
    for kernel, batches in plan.kernel_batches.items():
        records = []
        for batch in batches:
            progress.set_description(f"{kernel} batch {batch}")
            records.append(sweep_kernel_point(kernel, batch, model, timer, ceiling_gbs, repeat))
            progress.update(1)
        kernels[kernel] = {"max_batch": max(batches), "records": records}
    points = []
    for batch in plan.hot_path_batches:
        progress.set_description(f"hot path batch {batch}")
        points.append(time_hot_path(plan.stages, batch, model, timer, repeat))
        progress.update(1)
    metadata = {
        "label": timer.label,
        "backend": timer.backend,
        "device": timer.device_name(),
        "method": timer.name,
        "repeat": repeat,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "ceiling_gbs": ceiling_gbs,
        "ceiling_note": ceiling_note,
        "model": model.to_dict(),
        "model_note": model_note,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "elapsed_s": time.time() - started,
    }
    return {
        "schema": SCHEMA,
        "metadata": metadata,
        "kernels": kernels,
        "skipped_kernels": plan.skipped_kernels,
        "hot_path": {
            "stages": [s.to_dict() for s in plan.stages],
            "skipped_stages": plan.skipped_stages,
            "points": points,
        },
    }


# ----------------------------------------------------------------------------
# Results files
# ----------------------------------------------------------------------------


def csv_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (kernel or peer, batch) and per hot-path batch; values as in results.json."""
    rows = []
    for kernel, entry in results["kernels"].items():
        for rec in entry["records"]:
            base = {
                "section": "kernel",
                "kernel": kernel,
                "batch": rec["batch"],
                "tokens": rec["tokens"],
                "bytes": rec.get("bytes"),
            }
            rows.append({**base, "impl": kernel, **_timed_columns(rec), "note": rec.get("error", "")})
            for peer, p in rec.get("peers", {}).items():
                rows.append({**base, "impl": peer, **_timed_columns(p), "note": p.get("skipped", "")})
    for point in results["hot_path"]["points"]:
        rows.append(
            {
                "section": "hot_path",
                "kernel": "+".join(s["kernel"] for s in results["hot_path"]["stages"]),
                "impl": "step",
                "batch": point["batch"],
                "tokens": point["tokens"],
                "time_us": point.get("step_us"),
                "bytes": point.get("bytes"),
                "tokens_per_s_per_user": point.get("tokens_per_s_per_user"),
                "tokens_per_s_per_gpu": point.get("tokens_per_s_per_gpu"),
                "method": point.get("method"),
                "note": point.get("error", ""),
            }
        )
    return rows


def _timed_columns(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: entry.get(k) for k in ("time_us", "bandwidth_gbs", "pct_ceiling", "method")}


def csv_comment(results: dict[str, Any]) -> str:
    """The CSV's first line: what produced the numbers."""
    meta = results["metadata"]
    model = meta["model"]
    note = f" ({meta['model_note']})" if meta["model_note"] else ""
    return (
        f"# tilelang-ops sweep: {meta['label']}; method {meta['method']}; copy ceiling {meta['ceiling_gbs']:.1f} GB/s; "
        f"hidden {model['hidden']}, vocab {model['vocab']}, block_size {model['block_size']}, mtp {model['mtp']}{note}"
    )


def write_results(results: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    """results.json and results.csv in ``out_dir``; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = out_dir / "results.json", out_dir / "results.csv"
    json_path.write_text(json.dumps(results, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        fh.write(csv_comment(results) + "\n")
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS, restval="")
        writer.writeheader()
        for row in csv_rows(results):
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return json_path, csv_path


def read_csv(path: Path) -> list[dict[str, str]]:
    """Rows of a results.csv (the ``#`` comment line skipped)."""
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(line for line in fh if not line.startswith("#")))
