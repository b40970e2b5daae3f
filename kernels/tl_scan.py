"""Block-wide prefix scan in TileLang for NVIDIA backends: one int32 value per thread, warp shuffles
within each warp, then the per-warp totals from shared memory. A fixed order, no atomics, so the
result is the same in every run.

    scan_block = block_scan_macro(warps)
    scan_block(mine, scan, before, total, warp_total, warp, lane)
    excl = carry + before[0] + scan[0] - mine[0]   # this thread's exclusive prefix in the block
"""

# No `from __future__ import annotations`: TileLang parses the macro's body.
import tilelang.language as T

__all__ = ["WARP", "block_scan_macro"]

WARP = 32
# Shuffle rounds of an inclusive scan over one warp: log2(WARP).
_SHUFFLES = 5


def block_scan_macro(warps: int):
    """A T.macro scanning one int32 per thread over a block of `warps` whole warps.

    scan_block(mine, scan, before, total, warp_total, warp, lane), with `mine`, `scan`, `before`,
    `total` local (1,) int32 buffers, `warp_total` a shared (warps,) int32 buffer, and `warp`, `lane`
    the thread's warp and lane (tx // WARP, tx % WARP), sets
      scan[0]   = the inclusive prefix of `mine[0]` within the thread's warp,
      before[0] = the sum of `mine[0]` over the lower warps of the block,
      total[0]  = the sum of `mine[0]` over the block.
    Every thread of the block must call it (it synchronises once). It writes `warp_total`, so the
    caller synchronises before `warp_total` is written again (the next scan).
    """

    @T.macro
    def scan_block(mine, scan, before, total, warp_total, warp, lane):
        scan[0] = mine[0]
        for i in T.unroll(_SHUFFLES):
            up = T.shfl_up(scan[0], 1 << i)
            if lane >= (1 << i):
                scan[0] += up
        if lane == WARP - 1:
            warp_total[warp] = scan[0]
        T.sync_threads()
        before[0] = 0
        total[0] = 0
        for w in T.unroll(warps):
            if w < warp:
                before[0] += warp_total[w]
            total[0] += warp_total[w]

    return scan_block
