"""Fold the benchmark results of device calls into this tree's baselines and memory profiles.

    python3 -m testing.device_results /work/.device/1/results.tar /work/.device/2/results.tar

A `tools/gpu/verify.sh` call returns `results.tar` holding one `bench_<entry>.json` per bench process
(its `--json`), whose records are the cases that process measured; a bench run in a branch's tree
(`.gpu/trees/TREE`) is `tree_<entry>.json`, read only with `--trees` (a branch's timings belong in
the baselines once it is merged, not before). This writes exactly those cases
into `testing/benchmark_baselines/<device>/` and `testing/gpu_mem_profiles/<device>/`, as the bench's
own `--refresh-baselines --refresh-memory` did on the device, tars in the order given (a later call's
case wins). Extracting a call's `baselines.tar` instead would put back every other case as that
call's tree had it, undoing what the other calls refreshed. Cases that ended in an error are skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from testing.benchmark import refresh_profiles


def bench_payloads(results_tar: Path | str, trees: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """(member name, parsed JSON) of every bench_*.json in a results tar (and tree_*.json with
    ``trees``), by member name."""
    prefixes = ("bench_", "tree_") if trees else ("bench_",)
    out = []
    with tarfile.open(results_tar) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            name = Path(member.name).name
            if member.isfile() and name.startswith(prefixes) and name.endswith(".json"):
                out.append((member.name, json.load(tar.extractfile(member))))
    return out


def merge(
    results_tars: Sequence[Path | str], baseline_dir: Path | None = None, memory_dir: Path | None = None, trees: bool = False
) -> list[str]:
    """Refresh the measured cases of every tar's bench JSONs; one line per bench JSON read."""
    lines = []
    for results in results_tars:
        for member, payload in bench_payloads(results, trees):
            records = payload.get("records") or []
            good = [r for r in records if not r.get("error")]
            kernels = sorted({r["kernel"] for r in good})
            refresh_profiles(
                good, payload["device_slug"], kernels, baselines=True, memory=True, baseline_dir=baseline_dir, memory_dir=memory_dir
            )
            skipped = len(records) - len(good)
            cases = ", ".join(f"{r['kernel']}/{r['case_id']}" for r in good) or "no cases"
            lines.append(f"{results}:{member}: {cases}" + (f" ({skipped} with errors skipped)" if skipped else ""))
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testing.device_results", description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="+", help="results.tar files of tools/gpu/verify.sh calls, oldest first")
    p.add_argument("--baseline-dir", type=Path, default=None, help="override testing/benchmark_baselines")
    p.add_argument("--memory-dir", type=Path, default=None, help="override testing/gpu_mem_profiles")
    p.add_argument("--trees", action="store_true", help="also fold the benches run in branch trees (tree_*.json)")
    args = p.parse_args(argv)
    for line in merge(args.results, args.baseline_dir, args.memory_dir, args.trees):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
