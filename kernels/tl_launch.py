"""Launch order of the CUDA kernels: programmatic dependent launch (PDL, sm_90 and later).

A decode step is a chain of small kernels in one CUDA graph, each costing about a microsecond of
launch and scheduling before its first instruction. A kernel built with `pdl=True` starts with
`dependent_entry(True)`: it lets the next grid be launched at once (its blocks take free SM slots
and wait there), then waits on the device for every earlier grid of the stream to finish and its
writes to be visible, before it reads or writes anything. So its results are those of a plain
launch, and its own launch and scheduling overlap the grid before it (when that grid lets it, as
every PDL kernel here does from its first instruction). A kernel that splits the entry into its
two halves may prefetch into L2 while it waits (norm's weight): that DRAM round trip overlaps the
grid before it too.
"""

# No `from __future__ import annotations`: TileLang parses the callers' bodies.
import tilelang.language as T


def release_dependents(pdl: bool) -> None:
    """The first half of dependent_entry: lets the next grid launch now (emits nothing when pdl is
    False). Between it and wait_for_earlier_grids a kernel may issue L2 prefetches and nothing else
    that touches memory: a prefetch is a hint with no value, and L2 is where every grid's writes
    land, so a line it brings in early is never stale."""
    if pdl:
        T.evaluate(T.pdl_trigger())


def wait_for_earlier_grids(pdl: bool) -> None:
    """The second half of dependent_entry: waits on the device for every earlier grid of the stream
    to finish and its writes to be visible (emits nothing when pdl is False).

    The wait (cudaGridDependencySynchronize) makes TileLang launch the kernel with
    cudaLaunchAttributeProgrammaticStreamSerialization; TileLang lowers it for sm_90+ only, so the
    interfaces pass **kernels.interface.launch_options(tensor)."""
    if pdl:
        T.evaluate(T.pdl_sync())


def dependent_entry(pdl: bool) -> None:
    """Called first inside a kernel's T.Kernel scope: release_dependents, then wait_for_earlier_grids;
    emits nothing when pdl is False."""
    release_dependents(pdl)
    wait_for_earlier_grids(pdl)
