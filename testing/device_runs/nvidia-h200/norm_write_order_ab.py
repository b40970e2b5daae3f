"""Same-run A/B of when the fused add_rmsnorm kernel writes the residual (kernels/norm/PERF.md,
2026-12-04 fifteenth session), kept as the record of what ran; no target runs it. Run from a source
tree's root on a CUDA device.

ncu on the H200 (bf16 16384 x 4096) saw the same DRAM bytes for the shipped kernel and Inductor's
in-place kernel but 3.94 against 4.11 TB/s; the register cap does not explain it
(norm_occupancy_ab.py). The shapes differ in their writes: the shipped kernel stores the residual
as soon as the sum is made, before the row's reduction, and y after it; Inductor's kernel only
reads before the reduction, then reads x and the residual again (from L1/L2) and writes both at the
end. Variants, all built from kernels/norm/cuda.py's own macros and launch shape:
  shipped   add_rmsnorm_tl
  late      the sum kept in registers, the residual stored after the reduction beside y
  reread    the sum made twice: before the reduction for the squares, after it from x and the
            residual read again (volatile loads, or nvcc reuses the first), then both stored
  hinted    reread with Inductor's hints: the first reads L1::evict_last, the second L1::evict_first
For bf16 rows of D in DIMS (rows that fill whole steps only) at T in ROWS, each variant is timed
against torch.compile of the fused reference in place (the bench's peer), testing.timer, median
of three alternating rounds. Checked in the same run: every variant's residual and y equal the
shipped kernel's bit for bit (same thread shape, same sum order)."""
import os
import sys

import tilelang
import tilelang.language as T
import torch

sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "platform")]
from kernels.norm import cuda as nc  # noqa: E402
from norm_probe import DT, EPS, compiled_peer, first_outputs, fused_sets, kernel_calls  # noqa: E402
from testing import timer  # noqa: E402
from testing.variants import alternating_median_us  # noqa: E402

DIMS = [int(d) for d in os.environ.get("DIMS", "4096,7168").split(",")]
ROWS = [int(t) for t in os.environ.get("ROWS", "1,64,1024,16384").split(",")]


# ld.global with an L1 eviction hint, volatile so that the second read is not folded into the first.
_PRELUDE = nc._NORM_PRELUDE + """
template <int Hint> __device__ __forceinline__ void probe_ld16(void *dst, const void *src) {
  uint4 v;
  if (Hint == 1) {
    asm volatile("ld.global.L1::evict_last.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(src));
  } else if (Hint == 2) {
    asm volatile("ld.global.L1::evict_first.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(src));
  } else {
    asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(src));
  }
  *reinterpret_cast<uint4 *>(dst) = v;
}
"""
_HINTS = {"plain": 0, "evict_last": 1, "evict_first": 2}


@tilelang.jit
def add_rmsnorm_variant(D: int, order: str):
    cfg = nc.add_norm_config(D, DT, D)
    assert cfg.row_vectors % cfg.threads_per_row == 0 and cfg.vector_bytes == 16, "rows of whole steps of 16-byte vectors only"
    load_row, add_rows, inv_rms, store_scaled = nc._kernel_macros(cfg, D, DT, EPS)
    prefetch_weight = nc._weight_prefetch(cfg, D)
    t = T.dynamic("t")
    tpr, rows, steps, vec = cfg.threads_per_row, cfg.rows_per_block, cfg.steps, cfg.vector_elems

    @T.macro
    def load_hinted(src, row, lane, buf, hint):
        for s in T.unroll(steps):
            T.evaluate(T.call_extern("handle", f"probe_ld16<{_HINTS[hint]}>", T.address_of(buf[s, 0]), T.address_of(src[row, (lane + s * tpr) * vec])))

    @T.macro
    def add_only(buf, rbuf):
        for s in T.unroll(steps):
            for v in T.vectorized(vec):
                buf[s, v] = T.cast(T.cast(buf[s, v], "float32") + T.cast(rbuf[s, v], "float32"), DT)

    @T.macro
    def store_row(dst, row, lane, buf):
        for s in T.unroll(steps):
            for v in T.vectorized(vec):
                dst[row, (lane + s * tpr) * vec + v] = buf[s, v]

    @T.prim_func
    def add_rmsnorm(
        x: T.Tensor((t, D), DT),
        residual: T.Tensor((t, D), DT),
        weight: T.Tensor((D,), DT),
        y: T.Tensor((t, D), DT),
    ):
        with T.Kernel(T.ceildiv(t, rows), threads=cfg.threads, prelude=_PRELUDE) as bx:
            T.annotate_min_blocks_per_sm(cfg.min_blocks_per_sm)
            tx = T.get_thread_binding(0)
            lane = tx % tpr
            prefetch_weight(weight, bx, tx)
            row = T.cast(bx * rows + tx // tpr, "int64")
            buf = T.alloc_local((steps, vec), DT)
            rbuf = T.alloc_local((steps, vec), DT)
            red = T.alloc_shared((rows, cfg.warps_per_row), "float32")
            inv = T.alloc_local((1,), "float32")
            if row < t:
                if order == "hinted":
                    load_hinted(x, row, lane, buf, "evict_last")
                    load_hinted(residual, row, lane, rbuf, "evict_last")
                else:
                    load_row(x, row, lane, buf)
                    load_row(residual, row, lane, rbuf)
                add_only(buf, rbuf)
            inv_rms(buf, row < t, tx, red, inv)
            if row < t:
                if order == "late":
                    store_row(residual, row, lane, buf)
                else:
                    load_hinted(x, row, lane, buf, "evict_first" if order == "hinted" else "plain")
                    load_hinted(residual, row, lane, rbuf, "evict_first" if order == "hinted" else "plain")
                    add_rows(residual, row, lane, buf, rbuf)
                store_scaled(y, weight, row, lane, buf, inv)

    return add_rmsnorm


def main():
    dev = torch.device("cuda")
    print("device", torch.cuda.get_device_name(), "empty kernel us", round(timer.empty_kernel_us(dev), 2), flush=True)
    peer = compiled_peer()
    for D in DIMS:
        variants = {
            "shipped": nc.add_rmsnorm_tl(D, DT, EPS, D, x_align=16),
            "late": add_rmsnorm_variant(D, "late"),
            "reread": add_rmsnorm_variant(D, "reread"),
            "hinted": add_rmsnorm_variant(D, "hinted"),
        }
        for t in ROWS:
            sets = fused_sets(t, D, dev)
            outs = first_outputs(variants.values(), sets)
            equal = all(torch.equal(a, outs[0][0]) and torch.equal(b, outs[0][1]) for a, b in outs)
            fns = {name: kernel_calls(k, sets) for name, k in variants.items()}
            fns["compile in place"] = [lambda s=s: peer(*s) for s in sets]
            times = alternating_median_us(fns)
            print(f"D={D} T={t} sets={len(sets)} variants_equal={equal} " + "  ".join(f"{k} {v:.2f}" for k, v in times.items()), flush=True)


if __name__ == "__main__":
    main()
