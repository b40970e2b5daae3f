"""What every kernel's `api.py` shares: argument checks, aliasing, alignment and backend dispatch.

Every check raises TypeError (a wrong Python type, or an input tensor's dtype) or ValueError
(anything else, a caller's `out` of the wrong dtype included) whose message starts with the public
function's name and names the argument, before anything is written. Nothing here synchronises the
host; only `stream_counters` (zero fills, outside CUDA graph capture) and `scalar_tensor` (a (1,)
fill holding a Python value) launch anything.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import torch

__all__ = [
    "CUDA_MAX_GRID_Y",
    "DEVICE_BACKEND",
    "INDEX_DTYPES",
    "INT32_MAX",
    "backend_ops",
    "base_alignment",
    "canonical_strides",
    "check_block_dense",
    "check_block_table",
    "check_choice",
    "check_device",
    "check_flag",
    "check_indptr",
    "check_int",
    "check_out",
    "check_no_overlap",
    "check_rows",
    "check_scalar",
    "check_tensor",
    "dense_rows",
    "dense_table",
    "is_host",
    "launch_options",
    "overlaps",
    "scalar_tensor",
    "stream_counters",
]

# torch device type -> the tilelang_ops backend that serves it. CPU tensors use the reference.
DEVICE_BACKEND = {"cuda": "cuda", "npu": "asc"}
# torch index dtype -> the element type name the factories take.
INDEX_DTYPES = {torch.int32: "int32", torch.int64: "int64"}
INT32_MAX = 2**31 - 1
# CUDA caps a grid's y and z dimensions at this many blocks; a launch past it fails with a CUDA error.
CUDA_MAX_GRID_Y = 65535
# Programmatic dependent launch (a second kernel starting during the first's tail, waiting on the
# device for its end): TileLang lowers T.pdl_trigger / T.pdl_sync for sm_90 and later only.
PDL_MIN_CAPABILITY = (9, 0)


def _ops():
    import tilelang_ops  # deferred: tilelang_ops imports every api module while it loads

    return tilelang_ops


def _dtype_list(dtypes: Iterable[torch.dtype]) -> str:
    return ", ".join(map(str, dtypes))


def check_tensor(
    name: str,
    arg: str,
    t,
    *,
    dtypes: Iterable[torch.dtype] | None = None,
    dim: int | None = None,
    shape: tuple[int, ...] | None = None,
    like: torch.Tensor | None = None,
    contiguous: bool = False,
) -> None:
    """t is a tensor with one of `dtypes`, `dim` dimensions or exactly `shape`, on `like`'s device,
    and (when asked) contiguous."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: {arg} must be a torch.Tensor, got {type(t).__name__}")
    if dtypes is not None:
        dtypes = tuple(dtypes)
        if t.dtype not in dtypes:
            raise TypeError(f"{name}: {arg} has dtype {t.dtype}; expected {_dtype_list(dtypes)}")
    if dim is not None and t.dim() != dim:
        raise ValueError(f"{name}: {arg} must be {dim}-D, got shape {tuple(t.shape)}")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name}: {arg} must have shape {tuple(shape)}, got {tuple(t.shape)}")
    if like is not None and t.device != like.device:
        raise ValueError(f"{name}: {arg} is on {t.device} but the input is on {like.device}")
    if contiguous and not t.is_contiguous():
        raise ValueError(f"{name}: {arg} must be contiguous, got strides {t.stride()}")


def check_flag(name: str, arg: str, value) -> None:
    """A static option that must be a bool (not merely truthy)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name}: {arg} must be a bool, got {type(value).__name__}")


def check_scalar(name: str, arg: str, value, like: torch.Tensor, to_fp32) -> float | None:
    """A float32 run-time scalar: either a (1,) float32 tensor on like's device, which the kernels
    read as it is (None returned: checking its value would read it on the host), or a Python value
    that to_fp32(value, name) checks and rounds to float32 (returned). A tensor lets the value change
    with no recompile and lets a captured CUDA graph see its current value on every replay."""
    if isinstance(value, torch.Tensor):
        check_tensor(name, arg, value, dtypes=[torch.float32], shape=(1,), like=like)
        return None
    return to_fp32(value, name)


def scalar_tensor(value, rounded: float | None, like: torch.Tensor) -> torch.Tensor:
    """The (1,) float32 tensor the kernels read for a check_scalar argument: the caller's tensor, or
    a fresh one filled with the rounded Python value (one small allocation and fill launch)."""
    return value if rounded is None else torch.full((1,), rounded, dtype=torch.float32, device=like.device)


def check_choice(name: str, arg: str, value, choices) -> None:
    """A static option that must be one of the strings in `choices`."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name}: {arg} must be one of {', '.join(map(repr, choices))}, got {value!r}")


def check_rows(name: str, arg: str, x, dtypes: Iterable[torch.dtype], max_width: int | None = None) -> None:
    """x is a 2-D (rows, width) tensor whose last dimension is contiguous; rows may be strided (a view
    of a wider tensor) with a row stride >= width; width <= max_width when given; device supported."""
    check_tensor(name, arg, x, dtypes=dtypes, dim=2)
    n, d = x.shape
    if max_width is not None and d > max_width:
        raise ValueError(f"{name}: {arg} has width {d}; at most {max_width} is supported")
    if d > 1 and x.stride(1) != 1:
        raise ValueError(f"{name}: {arg}'s last dimension must be contiguous (stride 1), got strides {x.stride()}")
    if n > 1 and x.stride(0) < d:
        raise ValueError(f"{name}: {arg}'s row stride {x.stride(0)} is smaller than its width {d}")
    check_device(name, arg, x)


def check_device(name: str, arg: str, t: torch.Tensor) -> None:
    """t lives on the host or on a device some backend serves."""
    if t.device.type != "cpu" and t.device.type not in DEVICE_BACKEND:
        raise ValueError(f"{name}: {arg} is on {t.device}; tensors on {t.device} are not supported (cuda, npu or cpu)")


def check_int(name: str, arg: str, value, low: int, high: int | None = INT32_MAX) -> None:
    """A static size: a Python int (not a bool) in [low, high] (high None: no upper bound)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: {arg} must be an int, got {type(value).__name__}")
    if value < low or (high is not None and value > high):
        raise ValueError(f"{name}: {arg} must be in [{low}, {high if high is not None else 'inf'}], got {value}")


def check_indptr(name: str, arg: str, indptr) -> int:
    """The batch size B of a (B + 1,) contiguous int32/int64 indptr on a supported device."""
    check_tensor(name, arg, indptr, dtypes=INDEX_DTYPES, dim=1, contiguous=True)
    check_device(name, arg, indptr)
    if indptr.shape[0] == 0:
        raise ValueError(f"{name}: {arg} must have B + 1 >= 1 entries, got shape (0,)")
    return indptr.shape[0] - 1


def check_block_table(name: str, block_table, like: torch.Tensor, rows: int | None = None) -> None:
    """A (B, max_blocks) int32 block table on like's device: last dimension contiguous, rows strided
    no closer than max_blocks, max_blocks >= 1; exactly `rows` rows when given, else at least one."""
    check_tensor(name, "block_table", block_table, dtypes=[torch.int32], dim=2, like=like)
    n, max_blocks = block_table.shape
    if rows is not None and n != rows:
        raise ValueError(f"{name}: block_table has {n} rows; expected B = {rows}")
    if rows is None and n == 0:
        raise ValueError(f"{name}: block_table must have at least one row, got shape {tuple(block_table.shape)}")
    if max_blocks == 0:
        raise ValueError(f"{name}: block_table has 0 columns; max_blocks must be >= 1")
    if max_blocks > 1 and block_table.stride(1) != 1:
        raise ValueError(f"{name}: block_table's last dimension must be contiguous (stride 1), got strides {block_table.stride()}")
    if n > 1 and block_table.stride(0) < max_blocks:
        raise ValueError(f"{name}: block_table's row stride {block_table.stride(0)} is smaller than max_blocks {max_blocks}")


def dense_table(block_table: torch.Tensor) -> torch.Tensor:
    """block_table with strides a kernel accepts: a single row's stride is never used, so it is
    declared dense (torch may report any stride for a one-row view)."""
    rows, max_blocks = block_table.shape
    if rows <= 1 and block_table.stride() != (max_blocks, 1):
        return block_table.as_strided((rows, max_blocks), (max_blocks, 1))
    return block_table


def check_out(
    name: str,
    arg: str,
    out,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    like: torch.Tensor,
    strides: tuple[int, ...] | None = None,
    *,
    required: bool = False,
) -> None:
    """A caller-owned output: None (unless `required`: a slot of an output tuple the call always
    writes), or a tensor of exactly this shape and dtype on like's device that is contiguous, or,
    when `strides` is given, has exactly those strides in every dimension of more than one element
    (an empty tensor has no layout to check)."""
    if out is None and not required:
        return
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{name}: {arg} must be a torch.Tensor, got {type(out).__name__}")
    if tuple(out.shape) != tuple(shape) or out.dtype != dtype or out.device != like.device:
        raise ValueError(
            f"{name}: {arg} must be {tuple(shape)} {dtype} on {like.device}, "
            f"got {tuple(out.shape)} {out.dtype} on {out.device}"
        )
    if strides is None:
        if not out.is_contiguous():
            raise ValueError(f"{name}: {arg} must be contiguous")
    elif out.numel() and any(n > 1 and st != want for n, st, want in zip(out.shape, out.stride(), strides)):
        raise ValueError(f"{name}: {arg} must have strides {tuple(strides)}, got {out.stride()}")


def _span(t: torch.Tensor) -> tuple[int, int]:
    """[first byte, last byte + 1) that t's elements occupy."""
    start = t.data_ptr()
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return start, start + (last + 1) * t.element_size()


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the byte ranges a and b span intersect (conservative for interleaved views)."""
    if a.numel() == 0 or b.numel() == 0 or a.device != b.device:
        return False
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 < b1 and b0 < a1


def check_no_overlap(name: str, written: dict, read: dict) -> None:
    """No written tensor overlaps another written or read one (the kernels declare them non-aliasing).
    Both arguments map argument names to tensors, or to anything else (None, a Python scalar such
    as a check_scalar argument), which holds no memory and is skipped."""
    for wname, w in written.items():
        for oname, o in {**read, **written}.items():
            if isinstance(w, torch.Tensor) and isinstance(o, torch.Tensor) and wname != oname and overlaps(w, o):
                raise ValueError(f"{name}: {wname} overlaps {oname} in memory")


def is_host(t: torch.Tensor) -> bool:
    """CPU tensors are served by the PyTorch reference instead of a kernel."""
    return t.device.type == "cpu"


def backend_ops(name: str, t: torch.Tensor):
    """The tilelang_ops module, after checking it was built for the backend that serves t's device."""
    tl = _ops()
    backend = DEVICE_BACKEND.get(t.device.type)
    if tl.PLATFORM.tilelang_ops_backend != backend:
        raise ValueError(
            f"{name}: the input is on {t.device} but tilelang_ops was built for backend "
            f"{tl.PLATFORM.tilelang_ops_backend!r}"
        )
    return tl


@functools.cache
def cuda_capability(index: int) -> tuple[int, int]:
    """The CUDA device's compute capability, read once (a host-side query, no sync)."""
    return torch.cuda.get_device_capability(index)


def takes_pdl(t: torch.Tensor) -> bool:
    """Whether kernels on CUDA tensor t's device may be launched as programmatic dependents."""
    return cuda_capability(t.device.index) >= PDL_MIN_CAPABILITY


def launch_options(t: torch.Tensor) -> dict:
    """Keyword options of a backend factory for a launch on t's device: pdl=True (the kernel waits on
    the device for the grids before it and lets the next one start early: kernels/tl_launch.py)
    where CUDA tensor t's device takes it, none otherwise (other backends' factories take none)."""
    return {"pdl": True} if t.device.type == "cuda" and takes_pdl(t) else {}


def base_alignment(*tensors: torch.Tensor) -> int:
    """Largest power of two (<= 16) dividing every data pointer: it caps the kernels' vector width."""
    align = 16
    for t in tensors:
        ptr = t.data_ptr()
        if ptr:
            align = min(align, ptr & -ptr)
    return align


def check_block_dense(name: str, arg: str, cache: torch.Tensor) -> None:
    """A paged cache (num_blocks, ...) whose every block cache[b] is one contiguous run of memory and
    whose blocks do not overlap each other; blocks may be strided (one layer of a multi-layer pool,
    K and V interleaved per block)."""
    inner = cache.shape[1:]
    want = 1
    for size, stride in reversed(list(zip(inner, cache.stride()[1:]))):
        if size > 1 and stride != want:
            raise ValueError(f"{name}: {arg} must be contiguous within each block, got strides {cache.stride()}")
        want *= size
    if cache.shape[0] > 1 and cache.stride(0) < want:
        raise ValueError(f"{name}: {arg}'s block stride {cache.stride(0)} is smaller than a block of {want} elements")


def canonical_strides(t: torch.Tensor) -> torch.Tensor:
    """t with the stride of every size-1 dimension set as if the dimension were dense, so equal
    shapes give equal static kernel arguments (a stride of a size-1 dimension is never used)."""
    strides = list(t.stride())
    for i in reversed(range(t.dim())):
        if t.shape[i] == 1:
            strides[i] = strides[i + 1] * t.shape[i + 1] if i + 1 < t.dim() else 1
    return t if strides == list(t.stride()) else t.as_strided(t.shape, strides)


def dense_rows(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(x, its row stride) for a kernel; with at most one row the stride is never used, so it is
    declared dense and one compiled kernel serves every one-row view."""
    n, d = x.shape
    if n > 1:
        return x, x.stride(0)
    if x.stride(0) != d:
        x = x.as_strided((n, d), (d, 1))
    return x, d


# (owner, device index, stream) -> int32 counters that the owner's kernels leave zero after each launch.
_STREAM_COUNTERS: dict[tuple[str, int, int], torch.Tensor] = {}
# Arrays a larger request replaced: a captured CUDA graph may still use them, so they are never freed.
_RETIRED: list[torch.Tensor] = []
# device index -> [zeroed int32 arena, first free index]: counters for streams first seen in a capture.
_ARENAS: dict[int, list] = {}
# Counters an arena holds (256 KiB): every (owner, capture stream) pair takes at least _MIN_COUNTERS.
_ARENA_COUNTERS = 1 << 16
_MIN_COUNTERS = 1024
_ALIGN_COUNTERS = 32


def _stream_id(device: torch.device) -> int:
    return torch.cuda.current_stream(device).cuda_stream


def _capturing(device: torch.device) -> bool:
    with torch.cuda.device(device):
        return torch.cuda.is_current_stream_capturing()


def stream_counters(owner: str, device: torch.device, n: int) -> torch.Tensor:
    """At least n int32 counters, all zero, for `owner`'s launches on the current stream of `device`.

    A kernel whose blocks count their arrivals (the last one to arrive finishes the work) needs
    zeroed counters before it starts; a fill per call would be a second launch. So each owner gets
    one array per stream, zeroed once, and its kernels reset every counter they touch before they
    end. Launches on one stream run in order, so they share the array. A captured CUDA graph keeps
    the array of the stream it was captured on: do not replay it concurrently with other users of
    that array (another graph captured on that stream, or the owner's calls on that stream).

    Inside a CUDA graph capture nothing runs, so a zero fill recorded there would only run when
    that graph replays, and another graph captured on the same stream could replay first. A stream
    first seen inside a capture therefore takes its counters from a per-device arena that calls
    outside any capture zero and refill (the warm-up every capture needs anyway); RuntimeError,
    with nothing launched, when it lacks room: no call outside a capture on that device yet, or a
    request larger than any such call made. An array replaced by a larger one is kept alive, since
    captured graphs may still hold it.
    """
    key = (owner, device.index, _stream_id(device))
    counters = _STREAM_COUNTERS.get(key)
    if counters is not None and counters.numel() >= n:
        if _arena_low(device) and not _capturing(device):
            _top_up_arena(device, n)
        return counters
    # Whole 128-byte lines, so every arena slice starts as aligned as a fresh allocation's lines.
    size = -(-max(n, _MIN_COUNTERS) // _ALIGN_COUNTERS) * _ALIGN_COUNTERS
    if _capturing(device):
        fresh = _from_arena(owner, device, size)
    else:
        fresh = torch.zeros(size, dtype=torch.int32, device=device)
        _top_up_arena(device, size)
    if counters is not None:
        _RETIRED.append(counters)
    _STREAM_COUNTERS[key] = fresh
    return fresh


def _arena_free(device: torch.device) -> int:
    """Counters the device's arena can still hand out (0 before the first call outside a capture)."""
    arena = _ARENAS.get(device.index)
    return 0 if arena is None else arena[0].numel() - arena[1]


def _arena_low(device: torch.device) -> bool:
    return _arena_free(device) < _ARENA_COUNTERS // 2


def _top_up_arena(device: torch.device, size: int) -> None:
    """Outside a capture: make sure the device's arena can serve a capture's request of `size`."""
    if _arena_free(device) < max(size, _ARENA_COUNTERS // 2):
        # The old arena stays alive through the slices it handed out.
        _ARENAS[device.index] = [torch.zeros(max(_ARENA_COUNTERS, 2 * size), dtype=torch.int32, device=device), 0]


def _from_arena(owner: str, device: torch.device, size: int) -> torch.Tensor:
    if _arena_free(device) < size:
        raise RuntimeError(
            f"{owner}: first call on this stream of {device} inside a CUDA graph capture, and no zeroed "
            f"counters ({size}) were set aside outside a capture; call {owner} once outside any capture "
            "on this device (a warm-up run, with at least as many rows) before capturing"
        )
    arena = _ARENAS[device.index]
    first = arena[1]
    arena[1] += size
    return arena[0][first : first + size]
