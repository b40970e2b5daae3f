"""CUDA graph set-ups for device tests."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping

import torch


# The largest allocation torch's caching allocator serves from its small pool (2 MiB segments).
SMALL_POOL_BYTES = 1 << 20


def dirty_graph_pool(device, nbytes: int = SMALL_POOL_BYTES, word: int = 0x5A5A5A5A):
    """(stream, pool, holder) for captures that must not rely on fresh memory being zero: a graph
    memory pool holding a freed block of `nbytes` bytes of `word`s, as a serving engine's shared pool
    holds after earlier captures, and the stream it was captured on. The next captures on that
    stream into that pool carve their small allocations (up to 1 MiB each) from that block first,
    so the first `nbytes` they take are dirty. Keep `holder` (the graph that dirtied the block)
    alive while the pool is in use: the pool's memory goes with its last graph."""
    stream, pool = torch.cuda.Stream(device), torch.cuda.graph_pool_handle()
    holder = torch.cuda.CUDAGraph()
    with torch.cuda.graph(holder, pool=pool, stream=stream):
        junk = torch.full((nbytes // 4,), word, dtype=torch.int32, device=device)
    holder.replay()
    torch.cuda.synchronize(device)
    del junk
    return stream, pool, holder


def capture_each_after_warm_up(calls: Mapping[Hashable, Callable[[], object]], stream, pool) -> dict:
    """{key: graph}: every call once outside any capture (the warm-up a serving engine runs), then
    each captured into its own graph on `stream` into `pool`, in the mapping's order."""
    for call in calls.values():
        call()
    graphs = {key: torch.cuda.CUDAGraph() for key in calls}
    for key, call in calls.items():
        with torch.cuda.graph(graphs[key], pool=pool, stream=stream):
            call()
    return graphs


def later_first(keys) -> list:
    """A replay order for graphs captured in `keys` order: the last captured first, then in order."""
    keys = list(keys)
    return [*keys[::-1], *keys]


def counters_left_zero(owner: str, device) -> list[torch.Tensor]:
    """Every stream-counter array of `owner` (kernels/interface.py: stream_counters) once the device
    is idle, each asserted all zero: what the owner's kernels must leave after every launch."""
    from kernels import interface

    torch.cuda.synchronize(device)
    mine = [c for (name, *_), c in interface._STREAM_COUNTERS.items() if name == owner]
    assert all(int(c.count_nonzero()) == 0 for c in mine), f"a launch of {owner} left an arrival counter nonzero"
    return mine
