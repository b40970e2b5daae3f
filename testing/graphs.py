"""CUDA graph set-ups for device tests."""

from __future__ import annotations

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
