"""Same-run probe: does one decode row of a fused norm wait on its one SM's loads? Kept as the record
of what ran (testing/device_runs/nvidia-h200/decode_floor.md, 2026-12-06); no target runs it. Run
from a source tree's root on a CUDA device, TileLang on the path, with
testing/device_runs/nvidia-h200/norm_cluster_kernels.patch applied (`git apply`): `shipped_rows`
times that patch's rmsnorm_cluster_tl / add_rmsnorm_cluster_tl, which were measured and not merged.

A decode-size norm (T = 1) runs one block: a single SM issues every load of the row (x, residual and
weight: 3 x 14 KB at D 7168) and every store. What runs:
- `shipped_rows`: norm/cuda.py's one-block kernels against the patch's cluster kernels (each row's
  warps spread over a cluster of CTAs, the same lanes and sums, so the same bits: checked) at
  several batch sizes;
- `split(D, parts)`: the fused traffic with no reduction (residual += x in place, y = residual *
  weight, one 16-byte vector of each operand a thread) over `parts` blocks, the floor any split
  can reach.
Timer: testing.timer's CUDA-graph replay over input sets rotated past 2 x L2, median of three
alternating rounds."""
import os
import sys

import torch

sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "platform")]
import tilelang  # noqa: E402
import tilelang.language as T  # noqa: E402

from testing import timer  # noqa: E402
from testing.variants import time_groups  # noqa: E402

D = 7168
VEC = 8
EPS = 1e-6
PARTS = (1, 2, 4, 7, 14, 28)


@tilelang.jit
def split(d: int, parts: int):
    per = d // parts

    @T.prim_func
    def fused_no_reduce(
        x: T.Tensor((d,), "bfloat16"), r: T.Tensor((d,), "bfloat16"), w: T.Tensor((d,), "bfloat16"), y: T.Tensor((d,), "bfloat16")
    ):
        with T.Kernel(parts, threads=per // VEC) as bx:
            tx = T.get_thread_binding(0)
            xs = T.alloc_local((VEC,), "bfloat16")
            rs = T.alloc_local((VEC,), "bfloat16")
            ws = T.alloc_local((VEC,), "bfloat16")
            base = bx * per + tx * VEC
            for v in T.vectorized(VEC):
                xs[v] = x[base + v]
            for v in T.vectorized(VEC):
                rs[v] = r[base + v]
            for v in T.vectorized(VEC):
                ws[v] = w[base + v]
            for v in T.vectorized(VEC):
                rs[v] = T.cast(T.cast(xs[v], "float32") + T.cast(rs[v], "float32"), "bfloat16")
            for v in T.vectorized(VEC):
                r[base + v] = rs[v]
            for v in T.vectorized(VEC):
                y[base + v] = T.cast(T.cast(rs[v], "float32") * T.cast(ws[v], "float32"), "bfloat16")

    return fused_no_reduce


def rows(dev, t, n, d=D):
    return [
        (torch.randn(t, d, device=dev, dtype=torch.bfloat16), torch.randn(t, d, device=dev, dtype=torch.bfloat16),
         torch.randn(d, device=dev, dtype=torch.bfloat16), torch.empty(t, d, device=dev, dtype=torch.bfloat16))
        for _ in range(n)
    ]


def split_rows(dev, lines):
    """T = 1: the fused traffic with no reduction over 1 to 28 blocks, outputs checked against torch."""
    sets = rows(dev, 1, timer.sets_for_rotation(5 * D * 2, timer.l2_cache_bytes(dev)))
    x, r, w, _ = (t.clone() for t in sets[0])
    want_r = (x.float() + r.float()).bfloat16()
    want_y = (want_r.float() * w.float()).bfloat16()
    fns = {}
    for parts in PARTS:
        kernel = split(D, parts)
        rr, y = r.clone(), torch.full_like(w, float("nan"))
        kernel(x[0], rr[0], w, y)
        ok = torch.equal(rr[0], want_r[0]) and torch.equal(y, want_y[0])
        lines.append(f"split {parts:2d}: {D // parts // VEC} threads a block, outputs {'ok' if ok else 'MISMATCH'}")
        fns[f"split{parts}"] = [lambda s=s, k=kernel: k(s[0][0], s[1][0], s[2], s[3][0]) for s in sets]
    return fns


def run(kernel, residual, x, r, w, y):
    """One launch of a plain (x, w, y) or fused (x, r, w, y) norm kernel."""
    return kernel(x, r, w, y) if residual else kernel(x, w, y)


def shipped_rows(dev, d, t, lines):
    """norm/cuda.py's one-block kernels against its cluster kernels, bf16 rows of d, t rows."""
    from kernels.norm import cuda as nc  # with norm_cluster_kernels.patch applied

    sets = rows(dev, t, timer.sets_for_rotation(5 * t * d * 2, timer.l2_cache_bytes(dev)), d)
    fns = {}
    for residual in (False, True):
        one = (nc.add_rmsnorm_tl if residual else nc.rmsnorm_tl)(d, "bfloat16", EPS, d)
        cfg = (nc.add_norm_config if residual else nc.norm_config)(d, "bfloat16", d)
        name = f"D{d} T{t} {'add' if residual else 'plain'}"
        x, r, w, _ = (u.clone() for u in sets[0])
        r1, y1 = r.clone(), torch.full_like(x, float("nan"))
        run(one, residual, x, r1, w, y1)
        fns[f"{name} one"] = [lambda s=s, k=one, res=residual: run(k, res, *s) for s in sets]
        for parts in [p for p in range(2, 9) if cfg.warps_per_row % p == 0]:
            k = (nc.add_rmsnorm_cluster_tl if residual else nc.rmsnorm_cluster_tl)(d, "bfloat16", EPS, d, parts=parts)
            r2, y2 = r.clone(), torch.full_like(x, float("nan"))
            run(k, residual, x, r2, w, y2)
            same = torch.equal(y1.view(torch.int16), y2.view(torch.int16)) and torch.equal(r1, r2)
            lines.append(f"{name} cluster {parts}: {'bit-identical' if same else 'DIFFERS'} to the one-block kernel")
            fns[f"{name} cl{parts}"] = [lambda s=s, k=k, res=residual: run(k, res, *s) for s in sets]
    return fns


def main():
    dev = torch.device("cuda")
    lines = [f"device {torch.cuda.get_device_name()}, empty kernel {timer.empty_kernel_us(dev):.2f} us, D {D}"]
    groups = [shipped_rows(dev, d, t, lines) for d, t in ((D, 1), (D, 8), (D, 64), (D, 256), (4096, 1), (4096, 64))]
    groups.append(split_rows(dev, lines))
    time_groups(groups, lines, "decode_split.txt")


if __name__ == "__main__":
    main()
