"""The committed benchmark baselines as Markdown tables, one per kernel (for closing notes and PERF.md).

    python3 -m testing.baseline_table [--kernels quant,norm] [--device nvidia-h200]
    bazel run //tools:baseline_table -- --kernels=quant

Reads ``testing/benchmark_baselines/<device>/<kernel>.jsonl`` only: every number is one a bench run
on that device measured and refreshed (time median, GB/s and % of the copy ceiling measured in the
same run, the peers' times). Nothing is measured here, so it runs anywhere.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from testing.benchmark import _fmt, _fmt_ratio, _fmt_us, find_profile_file, load_jsonl, peer_names, peer_time

DEFAULT_DEVICE = "nvidia-h200"
_DIR = "benchmark_baselines"
# The peers every bench times, in the order the issues' tables name them; others follow.
_FIRST_PEERS = ("torch_eager", "torch_compile")


def _span(values: Sequence[float], fmt: str) -> str:
    """"a" when every value prints the same, "lo-hi" otherwise, "-" for none."""
    printed = [format(v, fmt) for v in sorted(values)]
    return "-" if not printed else printed[0] if printed[0] == printed[-1] else f"{printed[0]}-{printed[-1]}"


def kernel_table(kernel: str, records: Sequence[Mapping[str, Any]]) -> str:
    """One kernel's records as a Markdown table: time, GB/s, % ceiling, the time over the same
    run's empty-kernel graph replay (records from before it was kept have none), each peer's time
    and the kernel's speed-up over it (> 1: the kernel is faster), with the runs' copy ceiling
    and empty-kernel ranges."""
    named = peer_names(records)
    peers = [p for p in _FIRST_PEERS if p in named] + [p for p in named if p not in _FIRST_PEERS]
    headers = ["case", "us", "GB/s", "% ceiling", "x empty kernel", *(f"{p} us" for p in peers), *(f"x {p}" for p in peers)]
    rows = []
    for rec in records:
        t = rec.get("time_us")
        row = [rec["case_id"], _fmt_us(t), _fmt(rec.get("bandwidth_gbs"), ".0f"), _fmt(rec.get("pct_ceiling"), ".1f")]
        row.append(_fmt_ratio(t, rec.get("empty_kernel_us")))
        row += [_fmt_us(peer_time(rec, p)) for p in peers]
        row += [_fmt_ratio(peer_time(rec, p), t) for p in peers]
        rows.append(row)
    ceilings = _span([float(r["ceiling_gbs"]) for r in records if r.get("ceiling_gbs")], ".0f")
    empties = _span([float(r["empty_kernel_us"]) for r in records if r.get("empty_kernel_us")], ".2f")
    devices = sorted({str(r.get("device", "?")) for r in records})
    title = f"### {kernel} ({', '.join(devices)}; {len(records)} cases; copy ceiling {ceilings} GB/s; empty kernel {empties} us)"
    lines = [title, "", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def tables(kernels: Sequence[str], device: str, baseline_dir: Path | None = None) -> tuple[str, list[str]]:
    """(the tables of the kernels that have baselines, the kernels that have none)."""
    out, missing = [], []
    for kernel in kernels:
        records = list(load_jsonl(find_profile_file(_DIR, device, kernel, baseline_dir)).values())
        if records:
            out.append(kernel_table(kernel, records))
        else:
            missing.append(kernel)
    return "\n\n".join(out), missing


def kernels_with_baselines(device: str, baseline_dir: Path | None = None) -> list[str]:
    folder = find_profile_file(_DIR, device, "_", baseline_dir).parent
    return sorted(p.stem for p in folder.glob("*.jsonl"))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testing.baseline_table", description=__doc__.split("\n\n")[0])
    p.add_argument("--kernels", default=None, help="comma-separated kernel names (default: every kernel with baselines)")
    p.add_argument("--device", default=DEFAULT_DEVICE, help=f"device slug of the baselines (default {DEFAULT_DEVICE})")
    p.add_argument("--baseline-dir", type=Path, default=None, help="override testing/benchmark_baselines")
    args = p.parse_args(argv)
    kernels = args.kernels.split(",") if args.kernels else kernels_with_baselines(args.device, args.baseline_dir)
    text, missing = tables(kernels, args.device, args.baseline_dir)
    if text:
        print(text)
    for kernel in missing:
        print(f"{kernel}: no baselines for {args.device}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
