"""Plots of a sweep's results.json: `bazel run //tools:plot_pareto -- --results DIR/results.json [--out DIR]`.

Everything is drawn from the JSON alone (matplotlib only, no torch), so results from a GPU host plot
anywhere. `bazel run //tools:sweep` writes its JSON first and then calls the same code on it.

  latency_<kernel>.png   time per call vs batch size, log-log; the kernel solid, its peers dashed
  ceiling_<kernel>.png   % of the copy ceiling vs batch size; the kernel solid, its peers dashed
  hot_path_pareto.png    the decode hot path (kernel path only): tokens/s per user against tokens/s
                         per GPU, one point per batch size, labelled B=<batch>

plots.json (next to the PNGs) lists every PNG with what the figure holds, read back from its axes:
title, axis labels, scales, series (name, line style, point count) and point labels.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display; must precede the pyplot import

from matplotlib import pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullLocator  # noqa: E402

MANIFEST = "plots.json"
BATCH_LABEL = "batch size (decode requests per GPU)"
LATENCY_LABEL = "time per call (µs)"
PER_GPU_LABEL = "tokens/s per GPU (batch / step time)"
PER_USER_LABEL = "tokens/s per user (1 / step time)"
HOT_PATH_TITLE = "Decode hot path, kernel path only (no GEMM, attention or communication)"
CEILING_SERIES = "copy ceiling"
# The CPU's caches hold the small tables, so the reference can beat a DRAM-sized copy.
CPU_CACHE_NOTE = "on the CPU the caches serve the inputs: above 100% is cache bandwidth"
KERNEL_STYLE = {"linestyle": "-", "marker": "o", "linewidth": 2.0}
PEER_STYLE = {"linestyle": "--", "marker": "s", "linewidth": 1.2, "markersize": 4}


def _run_line(meta: dict[str, Any]) -> str:
    return f"{meta['label']}, timed with {meta['method']}"


def _model_lines(meta: dict[str, Any]) -> str:
    """The model shape, and on its own line why it differs from DeepSeek-V3 (if it does)."""
    m = meta["model"]
    line = f"hidden {m['hidden']}, vocab {m['vocab']}, {m['tokens_per_request']} tokens/request (mtp {m['mtp']})"
    return f"{line}\n{meta['model_note']}" if meta["model_note"] else line


def _title(ax: Any, *lines: str) -> None:
    ax.set_title("\n".join(lines), fontsize=9)


def _si(value: float) -> str:
    """20000 -> 20k, 1500000 -> 1.5M: short labels for throughput axes."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def _plain(value: float) -> str:
    return f"{value:g}"


def _log_ticks(axis: Any, limits: tuple[float, float], fmt: Callable[[float], str]) -> None:
    """Plain-number labels on a log axis; over at most two decades the 2x and 5x ticks get labels too,
    so a short range never shows a single label."""
    few_decades = math.log10(limits[1] / limits[0]) <= 2

    def minor(value: float, _pos: int) -> str:
        leading = round(value / 10 ** math.floor(math.log10(value)))
        return fmt(value) if few_decades and leading in (2, 5) else ""

    axis.set_major_formatter(FuncFormatter(lambda value, _pos: fmt(value)))
    axis.set_minor_formatter(FuncFormatter(minor))


def _batch_axis(ax: Any, batches: Sequence[int]) -> None:
    """Log2 batch axis with a plain-number tick at every batch size swept."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(batches)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _pos: _plain(value)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(BATCH_LABEL)


Series = dict[str, tuple[list[int], list[float]]]  # name -> (batch sizes, values)


def _kernel_series(records: Sequence[dict[str, Any]], kernel: str, field: str) -> Series:
    """``field`` per batch size of the kernel first, then of each peer; failed points left out."""
    series: Series = {kernel: ([], [])}
    for rec in records:
        if rec.get(field) is not None:
            series[kernel][0].append(rec["batch"])
            series[kernel][1].append(rec[field])
        for peer, entry in rec.get("peers", {}).items():
            xs, ys = series.setdefault(peer, ([], []))
            if entry.get(field) is not None:
                xs.append(rec["batch"])
                ys.append(entry[field])
    return {name: xy for name, xy in series.items() if xy[0]}


def _draw_kernel_series(ax: Any, series: Series, kernel: str) -> None:
    for name, (xs, ys) in series.items():
        ax.plot(xs, ys, label=name, **(KERNEL_STYLE if name == kernel else PEER_STYLE))
    ax.legend(title="solid: kernel, dashed: peers", fontsize=8, title_fontsize=8)
    ax.grid(True, which="both", alpha=0.3)


def plot_latency(results: dict[str, Any], kernel: str, path: Path) -> dict[str, Any]:
    """Time per call vs batch size, log-log."""
    meta = results["metadata"]
    records = results["kernels"][kernel]["records"]
    fig, ax = plt.subplots(figsize=(8, 5.5))
    _draw_kernel_series(ax, _kernel_series(records, kernel, "time_us"), kernel)
    _batch_axis(ax, [r["batch"] for r in records])
    ax.set_yscale("log")
    _log_ticks(ax.yaxis, ax.get_ylim(), _plain)
    ax.set_ylabel(LATENCY_LABEL)
    _title(ax, f"{kernel}: time per call vs batch size", _run_line(meta), _model_lines(meta))
    return _save(fig, ax, path, meta, kind="latency", kernel=kernel)


def plot_ceiling(results: dict[str, Any], kernel: str, path: Path) -> dict[str, Any]:
    """% of the copy ceiling (bytes moved / time against the device's fastest copy) vs batch size."""
    meta = results["metadata"]
    records = results["kernels"][kernel]["records"]
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ax.axhline(100.0, color="gray", linestyle=":", label=CEILING_SERIES)
    _draw_kernel_series(ax, _kernel_series(records, kernel, "pct_ceiling"), kernel)
    _batch_axis(ax, [r["batch"] for r in records])
    ax.set_ylim(bottom=0)
    ax.set_ylabel(f"% of copy ceiling ({meta['ceiling_gbs']:.0f} GB/s = 100%)")
    lines = [f"{kernel}: % of the copy ceiling vs batch size", _run_line(meta), _model_lines(meta)]
    if meta["backend"] == "reference":
        lines.append(CPU_CACHE_NOTE)
    _title(ax, *lines)
    return _save(fig, ax, path, meta, kind="ceiling", kernel=kernel)


def stages_line(hot_path: dict[str, Any]) -> str:
    """Which stages the hot path ran and which it skipped."""
    line = "stages: " + (" -> ".join(f"{s['name']} ({s['kernel']})" for s in hot_path["stages"]) or "none")
    skipped = [f"{s['name']} ({s['kernel']})" for s in hot_path["skipped_stages"]]
    return f"{line}; skipped: {', '.join(skipped)}" if skipped else line


def timed_points(hot_path: dict[str, Any]) -> list[dict[str, Any]]:
    """The hot-path points that have a step time (failed batch sizes are left out)."""
    return [p for p in hot_path["points"] if p.get("step_us") is not None]


def plot_hot_path_pareto(results: dict[str, Any], path: Path) -> dict[str, Any]:
    """tokens/s per user against tokens/s per GPU, one point per batch size (labelled B=<batch>)."""
    meta = results["metadata"]
    hot_path = results["hot_path"]
    points = timed_points(hot_path)
    fig, ax = plt.subplots(figsize=(8, 6))
    xs = [p["tokens_per_s_per_gpu"] for p in points]
    ys = [p["tokens_per_s_per_user"] for p in points]
    ax.plot(xs, ys, label="kernel path: " + " -> ".join(s["name"] for s in hot_path["stages"]), **KERNEL_STYLE)
    for p, x, y in zip(points, xs, ys):
        ax.annotate(f"B={p['batch']}", (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.margins(0.1)  # room for the B=<batch> labels at the edges
    _log_ticks(ax.xaxis, ax.get_xlim(), _si)
    _log_ticks(ax.yaxis, ax.get_ylim(), _si)
    ax.set_xlabel(PER_GPU_LABEL)
    ax.set_ylabel(PER_USER_LABEL)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    methods = sorted({p["method"] for p in points})
    timing = "one CUDA graph per batch size" if methods == ["cuda_graph"] else f"whole step timed with {', '.join(methods)}"
    _title(ax, HOT_PATH_TITLE, stages_line(hot_path), f"{meta['label']}, {timing}", _model_lines(meta))
    return _save(fig, ax, path, meta, kind="hot_path_pareto", kernel=None)


def _save(fig: Any, ax: Any, path: Path, meta: dict[str, Any], *, kind: str, kernel: str | None) -> dict[str, Any]:
    """Write the PNG (its text chunks carry the title and the run label) and describe what it shows."""
    entry = {"file": path.name, "kind": kind, "kernel": kernel, **describe(ax)}
    fig.tight_layout()
    fig.savefig(path, dpi=120, metadata={"Title": entry["title"], "Description": meta["label"]})
    plt.close(fig)
    return entry


def describe(ax: Any) -> dict[str, Any]:
    """What a reader sees on ``ax``, read back from the figure (not from what was meant to be drawn)."""
    return {
        "title": ax.get_title(),
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "xscale": ax.get_xscale(),
        "yscale": ax.get_yscale(),
        "series": [
            {"name": line.get_label(), "linestyle": line.get_linestyle(), "points": len(line.get_xdata())}
            for line in ax.get_lines()
            if not line.get_label().startswith("_")
        ],
        "point_labels": [text.get_text() for text in ax.texts],
    }


def plot_all(results: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """Every plot of ``results`` into ``out_dir``, plus plots.json; returns the manifest."""
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = []
    for kernel in results["kernels"]:
        plots.append(plot_latency(results, kernel, out_dir / f"latency_{kernel}.png"))
        plots.append(plot_ceiling(results, kernel, out_dir / f"ceiling_{kernel}.png"))
    if timed_points(results["hot_path"]):
        plots.append(plot_hot_path_pareto(results, out_dir / "hot_path_pareto.png"))
    manifest = {"label": results["metadata"]["label"], "plots": plots}
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def plot_results(results_path: Path, out_dir: Path) -> dict[str, Any]:
    """Read a results.json and draw everything from it (see :func:`plot_all`)."""
    return plot_all(json.loads(results_path.read_text(encoding="utf-8")), out_dir)


def user_path(path: str) -> Path:
    """A path as the user typed it: relative to where they ran the command (``bazel run`` aware)."""
    p = Path(path)
    return p if p.is_absolute() else Path(os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd()) / p


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="plot_pareto", description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", required=True, help="results.json written by //tools:sweep")
    parser.add_argument("--out", default=None, help="directory for the PNGs and plots.json (default: next to --results)")
    args = parser.parse_args(argv)
    results_path = user_path(args.results)
    out_dir = user_path(args.out) if args.out else results_path.parent
    manifest = plot_results(results_path, out_dir)
    for entry in manifest["plots"]:
        print(f"wrote {out_dir / entry['file']}")
    print(f"wrote {out_dir / MANIFEST}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
