"""Bind each pytest-xdist worker to one accelerator before the runtime starts.

Call :func:`apply_binding` as early as possible in a worker (e.g. from a
``conftest.py`` at import time or ``pytest_configure``), before anything
initialises CUDA / the NPU runtime and before TileLang is imported (TileLang
reads ``TILELANG_CACHE_DIR`` when it is imported).  The device count is
found without initialising CUDA in this process.

Rules (:func:`plan_binding`, a pure function):

* No xdist worker (``PYTEST_XDIST_WORKER`` unset, or ``"master"``): nothing
  changes.
* Worker ``gwN`` gets device ``N mod device_count`` through
  ``CUDA_VISIBLE_DEVICES`` (backend ``cuda``) or
  ``ASCEND_RT_VISIBLE_DEVICES`` (backend ``asc``/``ascend``/``npu``).
* The visibility variable already holds a *single* device (the user pinned
  the run): left alone.  Set to the empty string (no device visible): left
  alone.
* The variable already holds a *list* (``"2,3,5"``): the user restricted the
  pool, so worker ``gwN`` gets entry ``N mod len(list)`` of that list (the
  device count is not needed then).
* No device found: nothing changes.
* ``TILELANG_OPS_PER_WORKER_CACHE=1``: ``TILELANG_CACHE_DIR`` becomes
  ``<base>/<worker id>`` where ``<base>`` is ``TILELANG_OPS_CACHE_BASE``, else
  the current ``TILELANG_CACHE_DIR``, else TileLang's default
  ``~/.tilelang/cache``.  Idempotent (a base already ending in the worker id
  is kept).

Device count (:func:`detect_device_count`): ``TILELANG_OPS_DEVICE_COUNT``
(override, used by tests) > ``nvidia-smi -L`` (``GPU`` lines) >
``/proc/driver/nvidia/gpus/*`` for CUDA; ``npu-smi info -l`` (``Total Count``)
> ``/dev/davinci<N>`` for Ascend.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path

CUDA_VAR = "CUDA_VISIBLE_DEVICES"
ASCEND_VAR = "ASCEND_RT_VISIBLE_DEVICES"
COUNT_OVERRIDE_VAR = "TILELANG_OPS_DEVICE_COUNT"
PER_WORKER_CACHE_VAR = "TILELANG_OPS_PER_WORKER_CACHE"
CACHE_BASE_VAR = "TILELANG_OPS_CACHE_BASE"
TILELANG_CACHE_VAR = "TILELANG_CACHE_DIR"
DEFAULT_TILELANG_CACHE = "~/.tilelang/cache"

_ASCEND_NAMES = ("asc", "ascend", "npu")
_CUDA_NAMES = ("cuda", "gpu", "nvidia")


def _normalize_backend(backend: str) -> str:
    b = (backend or "cuda").lower()
    if b in _ASCEND_NAMES:
        return "asc"
    if b in _CUDA_NAMES:
        return "cuda"
    raise ValueError(f"unknown backend {backend!r}; expected 'cuda' or 'asc'")


def visibility_var(backend: str) -> str:
    """Name of the device-visibility variable of ``backend``."""
    return ASCEND_VAR if _normalize_backend(backend) == "asc" else CUDA_VAR


def worker_index(worker_id: str | None) -> int | None:
    """``"gw3"`` -> 3; ``None`` / ``""`` / ``"master"`` -> None."""
    if not worker_id:
        return None
    m = re.fullmatch(r"gw(\d+)", worker_id.strip())
    return int(m.group(1)) if m else None


def _split_devices(value: str) -> list[str]:
    return [p.strip() for p in value.split(",") if p.strip()]


def plan_binding(
    worker_id: str | None,
    env: Mapping[str, str],
    device_count: int | None,
    backend: str = "cuda",
) -> dict[str, str]:
    """Environment updates that bind ``worker_id`` to one device (pure).

    ``device_count`` may be ``None`` when unknown; it is only needed when the
    visibility variable is unset.  See the module docstring for the rules.
    """
    idx = worker_index(worker_id)
    if idx is None:
        return {}
    updates: dict[str, str] = {}
    var = visibility_var(backend)
    current = env.get(var)
    if current is None:
        if device_count is not None and device_count > 0:
            updates[var] = str(idx % device_count)
    else:
        devices = _split_devices(current)
        if len(devices) > 1:
            updates[var] = devices[idx % len(devices)]
        # 0 entries ("" = nothing visible) or 1 entry (pinned): leave alone.

    if env.get(PER_WORKER_CACHE_VAR, "") == "1":
        base = env.get(CACHE_BASE_VAR) or env.get(TILELANG_CACHE_VAR) or DEFAULT_TILELANG_CACHE
        base = os.path.expanduser(base)
        wid = worker_id.strip()  # type: ignore[union-attr]
        if Path(base).name != wid:
            updates[TILELANG_CACHE_VAR] = str(Path(base) / wid)
    return updates


def _run_quiet(cmd: list[str]) -> str | None:
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout if res.returncode == 0 else None


def detect_device_count(backend: str = "cuda", env: Mapping[str, str] | None = None) -> int:
    """Number of physical devices, found without initialising any runtime.

    Returns 0 when none is found.  ``TILELANG_OPS_DEVICE_COUNT`` overrides.
    """
    env = os.environ if env is None else env
    override = env.get(COUNT_OVERRIDE_VAR)
    if override not in (None, ""):
        try:
            return max(0, int(override))  # type: ignore[arg-type]
        except ValueError as exc:
            raise ValueError(f"{COUNT_OVERRIDE_VAR} must be an integer, got {override!r}") from exc
    if _normalize_backend(backend) == "asc":
        out = _run_quiet(["npu-smi", "info", "-l"])
        if out:
            m = re.search(r"Total Count\s*:\s*(\d+)", out)
            if m:
                return int(m.group(1))
        return len([p for p in Path("/dev").glob("davinci*") if re.fullmatch(r"davinci\d+", p.name)])
    out = _run_quiet(["nvidia-smi", "-L"])
    if out:
        n = sum(1 for line in out.splitlines() if line.startswith("GPU "))
        if n:
            return n
    gpus = Path("/proc/driver/nvidia/gpus")
    try:
        return len([p for p in gpus.iterdir() if p.is_dir()])
    except OSError:
        return 0


def _runtime_already_initialised(backend: str) -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        if _normalize_backend(backend) == "asc":
            npu = getattr(torch, "npu", None)
            return bool(npu is not None and npu.is_initialized())
        return bool(torch.cuda.is_initialized())
    except Exception:
        return False


def apply_binding(
    worker_id: str | None = None,
    env: MutableMapping[str, str] | None = None,
    device_count: int | None = None,
    backend: str = "cuda",
) -> str:
    """Apply :func:`plan_binding` to ``env`` (default ``os.environ``).

    ``worker_id`` defaults to ``PYTEST_XDIST_WORKER``; ``device_count`` is
    detected when needed.  Returns a one-line description for logging, e.g.
    ``"gw1 -> CUDA_VISIBLE_DEVICES=1 (2 devices)"``.
    """
    env = os.environ if env is None else env
    if worker_id is None:
        worker_id = env.get("PYTEST_XDIST_WORKER")
    var = visibility_var(backend)
    if worker_index(worker_id) is None:
        return f"no xdist worker ({worker_id or 'unset'}): {var} unchanged"
    if device_count is None and env.get(var) is None:
        device_count = detect_device_count(backend, env)
    updates = plan_binding(worker_id, env, device_count, backend)
    before = env.get(var)
    env.update(updates)

    if var in updates:
        pool = f"{len(_split_devices(before))} listed devices" if before is not None else f"{device_count} devices"
        desc = f"{worker_id} -> {var}={updates[var]} ({pool})"
    elif before is not None:
        desc = f"{worker_id} -> {var}={before!r} already pinned, left alone"
    else:
        desc = f"{worker_id} -> no device found, {var} unchanged"
    if TILELANG_CACHE_VAR in updates:
        desc += f", {TILELANG_CACHE_VAR}={updates[TILELANG_CACHE_VAR]}"
    if var in updates and _runtime_already_initialised(backend):
        desc += " [WARNING: runtime already initialised, binding has no effect in this process]"
    return desc


def benchmark_allowed(worker_count: int, device_count: int) -> tuple[bool, str]:
    """Whether benchmarks may run with ``worker_count`` xdist workers.

    Timings are only meaningful with one process per device: refuse when
    workers would share a device.
    """
    if worker_count <= 1:
        return True, "single process"
    if device_count <= 0:
        return False, f"{worker_count} xdist workers but no device found; benchmarks need one device per worker"
    if worker_count > device_count:
        return False, (
            f"{worker_count} xdist workers would share {device_count} device(s); "
            f"benchmark timings need exclusive devices: run with -n {device_count} or fewer, or -p no:xdist"
        )
    return True, f"{worker_count} workers on {device_count} devices (one each)"
