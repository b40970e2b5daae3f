"""Several versions of one kernel file in one process, and their alternating timing, for the
same-run A/B probes under testing/device_runs/ (they time a branch's kernels against main's in the
same run)."""
import importlib.util
import statistics
import sys
from collections.abc import Callable, Sequence
from types import ModuleType


def load_variant(name: str, path: str) -> ModuleType:
    """The Python file at `path` imported as a new module `name` (registered in sys.modules, as an
    import would, for inspect and dataclasses): its own module globals and its own `tilelang.jit`
    caches, so a copy whose constants are changed after loading compiles its own kernels. `name`
    must be new to the process."""
    if name in sys.modules:
        raise ValueError(f"load_variant: a module {name!r} is already loaded")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def alternating_median_us(fns: dict[str, Sequence[Callable[[], object]]], *, rounds: int = 3, budget_s: float = 0.3) -> dict[str, float]:
    """name -> us per call: each entry's calls (one per input set) timed by testing.timer.measure
    (CUDA-graph replay rotating the sets) once a round, the entries taking turns within each round
    so that a drift of the device's clocks reaches them all; the median over the rounds of each
    round's median."""
    from testing import timer

    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, calls in fns.items():
            times[name].append(timer.measure(list(calls), budget_s=budget_s).median_us)
    return {name: statistics.median(values) for name, values in times.items()}


def report_header() -> list[str]:
    """A probe's report so far: its first line (the CUDA device, its empty kernel's time, the method),
    printed; table_row appends to it."""
    import torch

    from testing import timer

    lines = [f"device {torch.cuda.get_device_name()}, empty kernel {timer.empty_kernel_us():.2f} us; median us of 3 alternating rounds"]
    print(lines[0], flush=True)
    return lines


def table_row(label: str, fns: dict[str, Sequence[Callable[[], object]]], ok: dict[str, bool], lines: list[str]) -> None:
    """One row of an A/B probe's table: `label`, then each entry's alternating_median_us time
    (budget 0.25 s), MISMATCH after an entry whose outputs differed from the reference (`ok`);
    printed as it comes and appended to `lines`."""
    times = alternating_median_us(fns, budget_s=0.25)
    cells = "  ".join(f"{name} {us:6.2f}{'' if ok[name] else ' MISMATCH'}" for name, us in times.items())
    lines.append(f"{label}  {cells}")
    print(lines[-1], flush=True)


def write_report(lines: list[str], filename: str) -> None:
    """A probe's report lines into $OUT/filename (the device call brings $OUT back), else ./filename."""
    import os

    with open(os.path.join(os.environ.get("OUT", "."), filename), "w") as f:
        f.write("\n".join(lines) + "\n")


def time_groups(groups: Sequence[dict[str, Sequence[Callable[[], object]]]], lines: list[str], filename: str, *, width: int = 18) -> None:
    """Each group of entries timed by alternating_median_us (budget 0.2 s), one line an entry,
    printed as it comes and appended to `lines`, which then go to write_report(filename)."""
    print("\n".join(lines), flush=True)
    for fns in groups:
        for name, us in alternating_median_us(fns, budget_s=0.2).items():
            lines.append(f"{name:{width}s} {us:6.2f} us")
            print(lines[-1], flush=True)
    write_report(lines, filename)
