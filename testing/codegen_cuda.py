"""CPU-side code generation checks for CUDA kernels: no GPU needed, only nvcc.

    report = check_cuda_resources(gather_tl, 4096, "bfloat16", "int64", 4096, arch="sm_90a")

`lower_cuda` lowers a `*_tl` factory for an SM architecture the way TileLang's JIT does (same pass
configs, same target), `compile_cuda` compiles the CUDA source with the nvcc command TileLang's
runtime compile uses plus `-Xptxas -v`, and `parse_ptxas` turns ptxas's report into a PtxasReport
per kernel. `assert_cuda_resources_ok` then rejects spills, local-memory stack frames and shared
memory beyond the per-block limit. ptxas output is cached on disk (see `cache_dir`), so a rerun
only lowers.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Sequence

# Largest shared memory one block may use (static + dynamic, after opting in), in bytes. CUDA C++
# Programming Guide, "Technical Specifications per Compute Capability": 227 KB for compute
# capability 9.0 and 10.0. CUDA 13.0's cuda_occupancy.h agrees: the largest shared-memory carveout
# for 9.x and 10.0 is 228 KiB per SM, of which the driver reserves 1 KiB per block
# (cudaDeviceProp::reservedSharedMemPerBlock), leaving 227 * 1024 bytes.
SMEM_PER_BLOCK_BYTES = {"sm_90a": 227 * 1024, "sm_100a": 227 * 1024}

ARCHS = tuple(SMEM_PER_BLOCK_BYTES)


@dataclasses.dataclass(frozen=True)
class PtxasReport:
    """ptxas's resource report for one kernel (entry function), plus its dynamic shared memory."""

    kernel: str
    arch: str
    registers: int
    stack_frame_bytes: int  # the kernel's frame, or the cumulative frame of its call tree if larger
    spill_store_bytes: int
    spill_load_bytes: int
    static_smem_bytes: int
    dynamic_smem_bytes: int = 0

    @property
    def smem_bytes(self) -> int:
        """Shared memory one block needs: static plus the dynamic amount requested at launch."""
        return self.static_smem_bytes + self.dynamic_smem_bytes


@dataclasses.dataclass(frozen=True)
class LoweredCuda:
    """A factory's kernel lowered for one architecture, with what nvcc needs to compile it like TileLang."""

    source: str
    arch: str
    dynamic_smem_bytes: int
    nvcc_flags: tuple[str, ...]  # from the factory's pass configs and compile flags


def find_nvcc() -> str:
    """Path of nvcc: $TILELANG_OPS_NVCC, else `nvcc` on PATH, else this Python's `nvidia-cuda-nvcc` wheel.

    The CUDA 13 wheel installs the toolkit under site-packages/nvidia/cu13/bin/nvcc; the package
    metadata is asked first, and the layouts of the 13.x and 12.x wheels are tried as a fallback.
    Raises FileNotFoundError naming every place looked at.
    """
    env = os.environ.get("TILELANG_OPS_NVCC")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return env
        raise FileNotFoundError(f"$TILELANG_OPS_NVCC={env!r} is not an executable file")
    on_path = shutil.which("nvcc")
    if on_path:
        return on_path
    candidates = []
    try:
        files = importlib.metadata.files("nvidia-cuda-nvcc") or ()
        candidates += [str(f.locate()) for f in files if f.name == "nvcc"]
    except importlib.metadata.PackageNotFoundError:
        pass
    for site in dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib")):
        candidates += [os.path.join(site, "nvidia", sub, "bin", "nvcc") for sub in ("cu13", "cuda_nvcc")]
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(
        "nvcc not found: set $TILELANG_OPS_NVCC, put nvcc on PATH, or `pip install nvidia-cuda-nvcc` "
        f"(looked at: {', '.join(candidates) or 'no wheel installed'})"
    )


def _pass_configs(factory, prim_func) -> dict:
    """The pass configs TileLang's JIT compiles `prim_func` with: the factory's over the function's own."""
    attrs = prim_func.attrs or {}
    configs = dict(attrs["tilelang_pass_configs"]) if "tilelang_pass_configs" in attrs else {}
    configs.update(getattr(factory, "pass_configs", None) or {})
    return configs


def _nvcc_flags(factory, prim_func, pass_configs: dict) -> tuple[str, ...]:
    """The options TileLang's CUDA compile callback derives from pass configs and compile flags."""
    from tilelang.transform import PassConfigKey

    attrs = prim_func.attrs or {}
    sources = (
        pass_configs.get(PassConfigKey.TL_DEVICE_COMPILE_FLAGS),
        getattr(factory, "compile_flags", None),
        attrs["tilelang_compile_flags"] if "tilelang_compile_flags" in attrs else None,
    )
    flags: list[str] = []
    for source in sources:
        for flag in [source] if isinstance(source, str) else list(source or ()):
            flags += shlex.split(str(flag))
    if pass_configs.get(PassConfigKey.TL_ENABLE_FAST_MATH, False):
        flags.append("--use_fast_math")
    level = pass_configs.get(PassConfigKey.TL_PTXAS_REGISTER_USAGE_LEVEL)
    if level is not None:
        flags.append(f"--ptxas-options=--register-usage-level={int(level)}")
    return tuple(flags)


def lower_cuda(factory, *args, arch: str = "sm_90a", **kwargs) -> LoweredCuda:
    """Lower `factory(*args, **kwargs)` (a `@tilelang.jit` factory) for `arch` on a machine without a GPU.

    The target, PassContext (opt level 3 and the factory's pass configs) and lowering entry point
    are the ones TileLang's JIT uses; device code generation stops at CUDA C++ (no nvcc).
    """
    import tilelang
    from tilelang import tvm
    from tvm.target import Target

    if arch not in SMEM_PER_BLOCK_BYTES:
        raise ValueError(f"unknown arch {arch!r}; expected one of {', '.join(ARCHS)}")
    prim_func = factory.get_tir(*args, **kwargs)
    pass_configs = _pass_configs(factory, prim_func)
    target = Target({"kind": "cuda", "arch": arch})
    with tvm.transform.PassContext(opt_level=3, config=pass_configs), target:
        artifact = tilelang.lower(prim_func, target=target)
    dynamic = 0
    for gvar, func in artifact.device_mod.functions.items():
        size = func.attrs.get("dyn_shared_memory_buf") if func.attrs else None
        if size is None:
            continue
        if not isinstance(size, (int, tvm.tirx.IntImm)):
            raise ValueError(f"{gvar.name_hint}: dynamic shared memory {size} is not a compile-time constant")
        dynamic += int(size)
    return LoweredCuda(artifact.kernel_source, arch, dynamic, _nvcc_flags(factory, prim_func, pass_configs))


def cuda_source(jit_kernel_factory, *args, arch: str = "sm_90a", **kwargs) -> str:
    """CUDA C++ source of `jit_kernel_factory(*args, **kwargs)` for `arch`, lowered without a GPU."""
    return lower_cuda(jit_kernel_factory, *args, arch=arch, **kwargs).source


@functools.cache
def _nvcc_version(nvcc: str) -> str:
    return subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout.strip()


def nvcc_command(arch: str, extra_flags: Sequence[str] = ()) -> list[str]:
    """TileLang's runtime nvcc command for `arch`, plus the ptxas report (`-Xptxas -v`).

    Mirrors tilelang/cuda/backend.py (tilelang_callback_cuda_compile) and contrib/nvcc.py.

    Source and output paths are appended by the caller. `-w` only silences host-compiler warnings
    so the report stays readable; it does not change the generated code.
    """
    from tilelang.contrib.cc import get_cplus_compiler
    from tilelang.env import CUTLASS_INCLUDE_DIR, TILELANG_TEMPLATE_PATH

    cxx = get_cplus_compiler()
    return [
        find_nvcc(),
        *([f"-ccbin={cxx}"] if cxx else []),
        "--cubin",
        "-O3",
        "-lineinfo",
        f"-arch={arch}",
        "-std=c++20",
        "-I" + TILELANG_TEMPLATE_PATH,
        "-I" + CUTLASS_INCLUDE_DIR,
        *extra_flags,
        "-w",
        "-Xptxas",
        "-v",
    ]


def cache_dir() -> pathlib.Path:
    """$TILELANG_OPS_CODEGEN_CACHE, else ~/.cache/tilelang_ops/codegen."""
    env = os.environ.get("TILELANG_OPS_CODEGEN_CACHE")
    return pathlib.Path(env) if env else pathlib.Path.home() / ".cache" / "tilelang_ops" / "codegen"


def _nvcc_cached(source: str, command: list[str], suffix: str, output: bool) -> str:
    """nvcc's report (output False) or its output file (True) for `source`, from the cache or a
    fresh nvcc run (which must succeed)."""
    import tilelang

    key_material = json.dumps([source, command[1:], _nvcc_version(command[0]), tilelang.__version__])
    cached = cache_dir() / (hashlib.sha256(key_material.encode()).hexdigest() + suffix)
    if cached.is_file():
        return cached.read_text()
    with tempfile.TemporaryDirectory(prefix="codegen_cuda_") as tmp:
        src = os.path.join(tmp, "kernel.cu")
        with open(src, "w") as f:
            f.write(source)
        out = os.path.join(tmp, "kernel.out")
        proc = subprocess.run([*command, "-o", out, src], capture_output=True, text=True)
        text = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc failed ({proc.returncode}): {shlex.join(command)}\n{text}")
        if output:
            with open(out) as f:
                text = f.read()
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(dir=cached.parent, suffix=".partial")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(partial, cached)
    except OSError:
        pass  # a read-only cache only costs the next run a compile
    return text


def _ptxas_text(source: str, command: list[str]) -> str:
    """ptxas's report for `source` (nvcc_command's --cubin run)."""
    return _nvcc_cached(source, command, ".ptxas.txt", output=False)


def ptx_text(factory, *args, arch: str = "sm_90a", **kwargs) -> str:
    """The PTX nvcc makes of `factory(*args, **kwargs)` for `arch` (TileLang's flags, --ptx)."""
    lowered = lower_cuda(factory, *args, arch=arch, **kwargs)
    command = [part for part in nvcc_command(arch, lowered.nvcc_flags) if part not in ("--cubin", "-Xptxas", "-v")]
    return _nvcc_cached(lowered.source, [*command, "--ptx"], ".ptx", output=True)


# A PTX instruction that may touch global memory: any load, store, atomic, reduction, prefetch or
# async copy but those of the parameter, shared, local and constant spaces.
_GLOBAL_ACCESS = re.compile(r"^\s*(@!?%\w+\s+)?(ld|ldu|st|atom|red|prefetch|prefetchu|cp\.async|cp\.reduce\.async|multimem)\.(?!param|shared|local|const)")
# An L2 prefetch may precede the wait (kernels/tl_launch.py: wait_for_earlier_grids): a hint, and L2 holds
# every grid's writes. A prefetch into L1 may not: that line could be stale.
_L2_PREFETCH = re.compile(r"^\s*(@!?%\w+\s+)?(prefetch(\.global)?\.L2|cp\.async\.bulk\.prefetch\.L2)[.:\s]")
_PDL_WAIT, _PDL_LAUNCH = "griddepcontrol.wait;", "griddepcontrol.launch_dependents;"


def assert_dependent_entry(ptx: str) -> list[str]:
    """Asserts a programmatic dependent kernel's PTX (kernels/tl_launch.py): it waits for the grids
    before it, once, ahead of every instruction that may touch global memory but L2 prefetches (nvcc
    moved none of them above the wait), and lets the next grid launch, once, after that wait. Returns
    the L2 prefetches before the wait."""
    lines = ptx.splitlines()
    waits = [i for i, line in enumerate(lines) if line.strip() == _PDL_WAIT]
    launches = [i for i, line in enumerate(lines) if line.strip() == _PDL_LAUNCH]
    assert len(waits) == 1 and len(launches) == 1, f"expected one {_PDL_WAIT} and one {_PDL_LAUNCH}, got {len(waits)} and {len(launches)}"
    assert launches[0] > waits[0], f"{_PDL_LAUNCH} before {_PDL_WAIT}: the next grid would launch before this one runs"
    early = [line.strip() for line in lines[: waits[0]] if _GLOBAL_ACCESS.match(line)]
    others = [line for line in early if not _L2_PREFETCH.match(line)]
    assert not others, f"global memory touched before {_PDL_WAIT}: {others}"
    return [line for line in early if _L2_PREFETCH.match(line)]


def assert_plain_launch(source: str) -> None:
    """Asserts a kernel's CUDA source neither waits for nor releases another grid (pdl=False)."""
    for call in ("cudaGridDependencySynchronize", "cudaTriggerProgrammaticLaunchCompletion"):
        assert call not in source, f"{call} in a kernel built without pdl"


def check_dependent_launch(factory, *args, **kwargs) -> list[str]:
    """`factory(*args, **kwargs, pdl=True)` passes assert_dependent_entry (sm_90a PTX) and the
    pdl=False build passes assert_plain_launch. Returns the pdl=True build's L2 prefetches before
    the wait."""
    prefetches = assert_dependent_entry(ptx_text(factory, *args, pdl=True, **kwargs))
    assert_plain_launch(cuda_source(factory, *args, **kwargs))
    return prefetches


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CUMULATIVE_STACK = re.compile(r"(\d+) bytes cumulative stack size")


def parse_ptxas(text: str) -> dict[str, PtxasReport]:
    """{kernel: PtxasReport} from `ptxas -v` output (nvcc -Xptxas -v), one entry per entry function.

    Reads, per "Compiling entry function 'K' for 'sm_XX'" block, the "N bytes stack frame, N bytes
    spill stores, N bytes spill loads" line of its "Function properties for K" and its "Used N
    registers, ..., N bytes smem, N bytes cumulative stack size" line (absent fields are 0).
    Non-inlined device functions get their own "Function properties" lines and are not reported;
    their frames still count through the caller's cumulative stack size. dynamic_smem_bytes is 0:
    ptxas cannot see it. Raises ValueError if an entry function lacks its register line.
    """
    entries: dict[str, dict] = {}
    entry = described = None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            entry = m.group(1)
            entries[entry] = {"arch": m.group(2)}
            described = None
        elif m := _PROPERTIES.search(line):
            described = m.group(1)
        elif (m := _FRAME.search(line)) and described is not None and described == entry:
            entries[entry].update(zip(("frame", "spill_store", "spill_load"), map(int, m.groups())))
        elif (m := _USED.search(line)) and entry is not None:
            fields = entries[entry]
            fields["registers"] = int(m.group(1))
            fields["smem"] = int(s.group(1)) if (s := _SMEM.search(line)) else 0
            fields["cumulative_stack"] = int(c.group(1)) if (c := _CUMULATIVE_STACK.search(line)) else 0
            entry = None  # later lines belong to other functions
    reports = {}
    for name, fields in entries.items():
        if "registers" not in fields:
            raise ValueError(f"ptxas output has no 'Used N registers' line for entry function {name!r}")
        reports[name] = PtxasReport(
            kernel=name,
            arch=fields["arch"],
            registers=fields["registers"],
            stack_frame_bytes=max(fields.get("frame", 0), fields["cumulative_stack"]),
            spill_store_bytes=fields.get("spill_store", 0),
            spill_load_bytes=fields.get("spill_load", 0),
            static_smem_bytes=fields["smem"],
        )
    return reports


def compile_cuda(
    source: str, arch: str, *, dynamic_smem_bytes: int = 0, extra_flags: Sequence[str] = ()
) -> PtxasReport:
    """nvcc-compile `source` (one kernel) for `arch` as TileLang does and return ptxas's report.

    `dynamic_smem_bytes` is the kernel's launch-time shared memory (LoweredCuda.dynamic_smem_bytes),
    added to the report; `extra_flags` are the factory's own nvcc options (LoweredCuda.nvcc_flags).
    Raises RuntimeError if nvcc fails and ValueError if the source holds other than one kernel.
    """
    if arch not in SMEM_PER_BLOCK_BYTES:
        raise ValueError(f"unknown arch {arch!r}; expected one of {', '.join(ARCHS)}")
    reports = parse_ptxas(_ptxas_text(source, nvcc_command(arch, extra_flags)))
    if len(reports) != 1:
        raise ValueError(f"expected one kernel in the source, ptxas reported {sorted(reports) or 'none'}")
    (report,) = reports.values()
    return dataclasses.replace(report, dynamic_smem_bytes=dynamic_smem_bytes)


def assert_cuda_resources_ok(report: PtxasReport, arch: str, *, max_stack_bytes: int = 0) -> None:
    """Asserts the kernel spills nothing, keeps no stack frame and fits the per-block shared memory.

    A stack frame without spills still means a local array lives in local memory (off-chip, like a
    spill), so any frame is rejected unless a kernel allows one explicitly with `max_stack_bytes`.
    Raises AssertionError naming the kernel, the arch and the numbers.
    """
    limit = SMEM_PER_BLOCK_BYTES[arch]
    problems = []
    if report.spill_store_bytes or report.spill_load_bytes:
        problems.append(f"spills {report.spill_store_bytes} B stored / {report.spill_load_bytes} B loaded")
    if report.stack_frame_bytes > max_stack_bytes:
        problems.append(f"stack frame {report.stack_frame_bytes} B > {max_stack_bytes} B allowed")
    if report.smem_bytes > limit:
        problems.append(
            f"shared memory {report.smem_bytes} B (static {report.static_smem_bytes} + dynamic "
            f"{report.dynamic_smem_bytes}) > {limit} B per block"
        )
    where = f"kernel {report.kernel} on {arch} ({report.registers} registers)"
    assert not problems, f"{where}: " + "; ".join(problems)


def check_cuda_resources(factory, *args, arch: str = "sm_90a", **kwargs) -> PtxasReport:
    """Lower `factory(*args, **kwargs)` for `arch`, compile it, assert its resources; return the report."""
    lowered = lower_cuda(factory, *args, arch=arch, **kwargs)
    report = compile_cuda(
        lowered.source, arch, dynamic_smem_bytes=lowered.dynamic_smem_bytes, extra_flags=lowered.nvcc_flags
    )
    assert_cuda_resources_ok(report, arch)
    return report
