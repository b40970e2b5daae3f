"""`bazel run //tools:sweep`: the project's main job.

The batch sweep with plots is tracked by its own issue; until it lands this prints the kernel table:
every registered kernel, the factories each backend provides, and the interface functions, so a user
sees at a glance what this build can run.
"""

from __future__ import annotations

import importlib
import sys

from absl import app

import tilelang_ops
from tilelang_ops import dispatcher
from tilelang_ops.platform_info import BACKENDS


def kernel_table() -> list[tuple[str, str, str]]:
    """(kernel, backend or 'api', comma-separated names) rows."""
    rows = []
    for kernel in tilelang_ops.KERNELS:
        for backend in BACKENDS:
            try:
                module = importlib.import_module(f"kernels.{kernel}.{backend}")
            except ModuleNotFoundError:
                rows.append((kernel, backend, "(not in this build)"))
                continue
            rows.append((kernel, backend, ", ".join(sorted(dispatcher.factories_of(module))) or "-"))
        api = importlib.import_module(f"kernels.{kernel}.api")
        rows.append((kernel, "api", ", ".join(sorted(dispatcher.interface_of(api)))))
    return rows


def main(argv):
    del argv
    p = tilelang_ops.PLATFORM
    print(f"tilelang_ops backend: {p.tilelang_ops_backend} (chosen by {p.chosen_by}); accelerator: {p.accelerator or 'none'}")
    print("The batch sweep is not implemented yet; kernel table:")
    rows = [("kernel", "provider", "names")] + kernel_table()
    widths = [max(len(r[i]) for r in rows) for i in range(2)]
    for kernel, provider, names in rows:
        print(f"  {kernel:<{widths[0]}}  {provider:<{widths[1]}}  {names}")
    return 0


if __name__ == "__main__":
    sys.exit(app.run(main))
