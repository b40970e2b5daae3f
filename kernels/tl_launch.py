"""Launch order of the CUDA kernels: programmatic dependent launch (PDL, sm_90 and later).

A decode step is a chain of small kernels in one CUDA graph, each costing about a microsecond of
launch and scheduling before its first instruction. A kernel built with `pdl=True` starts with
`dependent_entry(True)`: it waits on the device for every earlier grid of the stream to finish and
its writes to be visible, before it reads or writes anything, then lets the next grid be launched
(its blocks take free SM slots and wait there in turn). So its results are those of a plain launch,
and the next kernel's launch and scheduling overlap this one's work.

The release comes after the wait, not before it: released first, each grid of a graph replay lets
the next launch as soon as its own blocks are resident, so the blocks of many later grids pile up
waiting on the SMs and the running grid's later waves find no slots. On an H100 that made swa_index
at W 4096, MTP 1, batch 64 take 7.21 us against 3.87 us launched plainly; released after the wait,
3.27 us (testing/device_runs/nvidia-h100-80gb-hbm3/calls_2026-12-07f.md). Over 15 decode cases of 7
kernels the release after the wait gains up to 3.94 us and loses at most 0.10 us (a 64-token bf16
KV store, whose short work no longer hides the next launch; calls_2026-12-07g.md).

A kernel that splits the entry into its two halves may prefetch into L2 before it waits (norm's
weight): that DRAM round trip overlaps the grid before it too.
"""

# No `from __future__ import annotations`: TileLang parses the callers' bodies.
import tilelang.language as T


def wait_for_earlier_grids(pdl: bool) -> None:
    """The first half of dependent_entry: waits on the device for every earlier grid of the stream
    to finish and its writes to be visible (emits nothing when pdl is False). Before it a kernel may
    issue L2 prefetches and nothing else that touches memory: a prefetch is a hint with no value,
    and L2 is where every grid's writes land, so a line it brings in early is never stale.

    The wait (cudaGridDependencySynchronize) makes TileLang launch the kernel with
    cudaLaunchAttributeProgrammaticStreamSerialization; TileLang lowers it for sm_90+ only, so the
    interfaces pass **kernels.interface.launch_options(tensor)."""
    if pdl:
        T.evaluate(T.pdl_sync())


def release_dependents(pdl: bool) -> None:
    """The second half of dependent_entry: lets the next grid launch now (emits nothing when pdl is
    False)."""
    if pdl:
        T.evaluate(T.pdl_trigger())


def dependent_entry(pdl: bool) -> None:
    """Called first inside a kernel's T.Kernel scope: wait_for_earlier_grids, then
    release_dependents; emits nothing when pdl is False."""
    wait_for_earlier_grids(pdl)
    release_dependents(pdl)
