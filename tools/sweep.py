"""`bazel run //tools:sweep`: batch sweep of every registered kernel and of the decode hot path.

For each kernel the backend provides, batch sizes 1, 2, 4 ... up to the kernel's maximum are timed with
the benchmark's timers (same copy ceiling, same peers as testing/benchmark.py). The decode hot path
chains the kernels a DeepSeek-V3-shaped decode step runs (the registered hot-path stages in
tools/sweep_lib.py) and times the whole chain as one CUDA graph per batch size.

Writes into --out: results.json, results.csv, latency_<kernel>.png, ceiling_<kernel>.png,
hot_path_pareto.png and plots.json (the plots are drawn from results.json by tools/plot_pareto.py).

Without a CUDA device the reference backend runs on the CPU at small sizes (batches up to 64, hidden
1024 and vocab 16384 unless given), timed by the host wall clock; every output says so.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

# Set before torch loads libgomp. On a small, busy CPU host an OpenMP thread spinning at a barrier
# holds the core that a parallel region (e.g. the torch_compile peer's kernel) waits for: calls of
# ~11 ms instead of ~50 us. Passive waiting changes only how idle threads wait, not how many run.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from absl import app, flags  # noqa: E402
from tqdm import tqdm  # noqa: E402

from testing.benchmark import render_table  # noqa: E402
from tools import plot_pareto, sweep_lib  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("kernels", None, "Kernels to sweep (default: every registered kernel the backend provides).")
flags.DEFINE_list(
    "batches",
    None,
    "Batch sizes, i.e. decode requests per GPU (default: 1, 2, 4 ... up to each kernel's SWEEP_MAX_BATCH; "
    f"at most {sweep_lib.CPU_MAX_BATCH} on the CPU).",
)
flags.DEFINE_integer(
    "hidden",
    sweep_lib.DEEPSEEK_V3.hidden,
    f"Model hidden size (DeepSeek-V3; on the CPU the default is scaled down to {sweep_lib.CPU_HIDDEN}).",
    lower_bound=1,
)
flags.DEFINE_integer(
    "vocab",
    sweep_lib.DEEPSEEK_V3.vocab,
    f"Vocabulary size (DeepSeek-V3; on the CPU the default is scaled down to {sweep_lib.CPU_VOCAB}).",
    lower_bound=1,
)
flags.DEFINE_integer(
    "block_size",
    sweep_lib.DEEPSEEK_V3.block_size,
    "KV-cache block size in tokens: part of the model config every sweep_case gets (for the KV-cache kernels).",
    lower_bound=1,
)
flags.DEFINE_integer(
    "mtp",
    sweep_lib.DEEPSEEK_V3.mtp,
    "MTP draft length: each request runs 1 + mtp tokens per decode step.",
    lower_bound=0,
    upper_bound=3,
)
flags.DEFINE_string("out", None, "Output directory (default: <workspace>/out/sweep).")
flags.DEFINE_enum(
    "method",
    None,
    sweep_lib.METHODS,
    "Timing method: cuda_graph or profiler (testing.timer on the GPU) or cpu_wall (the reference backend "
    "on the CPU, host wall clock). Default: cuda_graph with a CUDA device, else cpu_wall.",
)
flags.DEFINE_integer(
    "repeat",
    1,
    "Measure every point this many times and report the median (each run's time in run_times_us).",
    lower_bound=1,
)


def model_config(on_cpu: bool) -> tuple[sweep_lib.ModelConfig, str]:
    """The model shape from the flags, and a note when hidden / vocab were scaled down for the CPU."""
    scale = {}
    if on_cpu and not FLAGS["hidden"].present:
        scale["hidden"] = sweep_lib.CPU_HIDDEN
    if on_cpu and not FLAGS["vocab"].present:
        scale["vocab"] = sweep_lib.CPU_VOCAB
    model = sweep_lib.ModelConfig(
        hidden=scale.get("hidden", FLAGS.hidden),
        vocab=scale.get("vocab", FLAGS.vocab),
        block_size=FLAGS.block_size,
        mtp=FLAGS.mtp,
    )
    full = [str(getattr(sweep_lib.DEEPSEEK_V3, k)) for k in scale]
    note = f"{' and '.join(scale)} scaled down for the CPU from DeepSeek-V3's {' and '.join(full)}" if scale else ""
    return model, note


def parse_batches(values: Sequence[str] | None) -> list[int] | None:
    """--batches as sorted distinct positive integers (None: each kernel's default)."""
    if not values:
        return None
    if not all(v.strip().isdigit() and int(v) > 0 for v in values):
        raise ValueError(f"--batches must be positive integers, got {','.join(values)}")
    return sorted({int(v) for v in values})


def out_dir() -> Path:
    """--out, else <workspace>/out/sweep (the source tree under `bazel run`)."""
    if FLAGS.out:
        return plot_pareto.user_path(FLAGS.out)
    workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY") or Path(__file__).absolute().parent.parent
    return Path(workspace) / "out" / "sweep"


def summary(results: dict) -> str:
    """Tables of the results (per kernel, then the hot path), and every error."""
    parts = [_kernel_table(kernel, entry["records"]) for kernel, entry in results["kernels"].items()]
    hot = results["hot_path"]
    parts.append(plot_pareto.stages_line(hot))
    if hot["points"]:
        parts.append(_hot_path_table(hot["points"]))
    errors = [
        f"  {kernel} B={r['batch']}: {r['error']}"
        for kernel, entry in results["kernels"].items()
        for r in entry["records"]
        if "error" in r
    ]
    errors += [f"  hot path B={p['batch']}: {p['error']}" for p in hot["points"] if "error" in p]
    if errors:
        parts.append("errors:\n" + "\n".join(errors))
    return "\n\n".join(parts)


def _kernel_table(kernel: str, records: list[dict]) -> str:
    peers = list(dict.fromkeys(p for r in records for p in r["peers"]))
    rows = [
        [f"{kernel} B={r['batch']}", _fmt(r.get("time_us"), ".2f"), _fmt(r.get("pct_ceiling"), ".1f")]
        + [_fmt(r["peers"].get(p, {}).get("time_us"), ".2f") for p in peers]
        for r in records
    ]
    return render_table(["case", "us", "%ceil"] + [f"{p} us" for p in peers], rows)


def _hot_path_table(points: list[dict]) -> str:
    rows = [
        [
            f"B={p['batch']}",
            _fmt(p.get("step_us"), ".2f"),
            _fmt(p.get("tokens_per_s_per_user"), ".3g"),
            _fmt(p.get("tokens_per_s_per_gpu"), ".3g"),
        ]
        for p in points
    ]
    return render_table(["hot path", "step us", "tok/s/user", "tok/s/GPU"], rows)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main(argv: Sequence[str]) -> int:
    if len(argv) > 1:
        print(f"sweep: unexpected arguments {list(argv[1:])}", file=sys.stderr)
        return 2
    try:
        timer = sweep_lib.make_timer(FLAGS.method, log=tqdm.write)
        plan = sweep_lib.make_plan(timer, FLAGS.kernels, parse_batches(FLAGS.batches))
    except ValueError as exc:
        print(f"sweep: {exc}", file=sys.stderr)
        return 2
    model, model_note = model_config(on_cpu=timer.backend == "reference")
    print(f"sweep: {timer.label}, method {timer.name}; model {model.to_dict()}")
    if model_note:
        print(f"  {model_note}")
    for kernel, why in plan.skipped_kernels.items():
        print(f"  kernel {kernel} skipped: {why}")
    for stage in plan.skipped_stages:
        print(f"  hot-path stage {stage['name']} ({stage['kernel']}) skipped: {stage['reason']}")
    with tqdm(total=plan.points, unit="point") as progress:
        results = sweep_lib.run_sweep(plan, model, timer, progress, repeat=FLAGS.repeat, model_note=model_note)
    out = out_dir()
    json_path, csv_path = sweep_lib.write_results(results, out)
    manifest = plot_pareto.plot_results(json_path, out)
    print(summary(results))
    written = [json_path, csv_path, out / plot_pareto.MANIFEST] + [out / p["file"] for p in manifest["plots"]]
    print("\nwrote:\n" + "\n".join(f"  {p}" for p in written))
    print(f"({results['metadata']['label']}; {results['metadata']['elapsed_s']:.1f} s)")
    return 0


def run(argv: Sequence[str]) -> int:
    """Parse ``argv`` (program name first) into the flags and run: the in-process entry for tests."""
    FLAGS.unparse_flags()
    return main(FLAGS(list(argv)))


if __name__ == "__main__":
    app.run(main)
