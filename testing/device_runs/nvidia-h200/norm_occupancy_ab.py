"""Same-run A/B of the fused add_rmsnorm kernel's register cap and vector width (kernels/norm/PERF.md,
2026-12-04 fifteenth session), kept as the record of what ran; no target runs it. Run from a source
tree's root on a CUDA device.

ncu put the shipped kernel at 37 registers for bf16 D 4096 (512 threads, one vector of each operand
a thread): three blocks an SM, 48 warps, where Inductor's in-place kernel runs 64. Each variant is
kernels/norm/cuda.py loaded as its own module with `_RESIDENT_THREADS` (the threads an SM the
`__launch_bounds__` cap is sized for) set to one value of RESIDENT, built for each x_align in ALIGNS (16: the shipped 16-byte vectors;
8: 8-byte ones, which at D 4096 is Inductor's layout, a thread's two vectors half a row apart). For
bf16 rows of D in DIMS at T
in ROWS it times add_rmsnorm_tl of each variant against torch.compile of the fused reference in
place (the bench's peer). testing.timer (CUDA-graph replay, input sets rotated past 2 x L2, outputs
allocated per call as the bench does), median of three alternating rounds. Checked in the same run:
every variant's residual equals the first variant's and the peer's bit for bit, and y equals the
first variant's bit for bit where the vector width is the same (the register cap alone differs);
`y_ulps` is the largest distance in bf16 ulps over all variants (the sum's order follows the
thread shape)."""
import os
import sys

import torch

sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "platform")]
from norm_probe import DT, EPS, compiled_peer, first_outputs, fused_sets, kernel_calls  # noqa: E402
from testing import timer  # noqa: E402
from testing.numeric import ulp_distance  # noqa: E402
from testing.variants import alternating_median_us, load_variant  # noqa: E402

DIMS = [int(d) for d in os.environ.get("DIMS", "4096,7168").split(",")]
ROWS = [int(t) for t in os.environ.get("ROWS", "1,64,1024,16384").split(",")]
RESIDENT = [int(r) for r in os.environ.get("RESIDENT", "1024,1536,2048").split(",")]
ALIGNS = [int(a) for a in os.environ.get("ALIGNS", "16").split(",")]
dev = torch.device("cuda")
print("device", torch.cuda.get_device_name(), "empty kernel us", round(timer.empty_kernel_us(dev), 2), flush=True)


def norm_module(resident: int):
    """kernels/norm/cuda.py as a separate module (its own jit cache) with the given resident threads."""
    module = load_variant(f"norm_cuda_resident_{resident}", os.path.join("kernels", "norm", "cuda.py"))
    module._RESIDENT_THREADS = resident
    return module


modules = {r: norm_module(r) for r in RESIDENT}
peer = compiled_peer()
for D in DIMS:
    variants = {}
    for align in ALIGNS:
        for res, m in modules.items():
            cfg = m.add_norm_config(D, DT, D, align)
            name = f"resident {res} ({cfg.threads} thr, {cfg.min_blocks_per_sm} blk, {cfg.vector_bytes} B x {cfg.steps})"
            variants[name] = (cfg.vector_bytes, m.add_rmsnorm_tl(D, DT, EPS, D, x_align=align))
    for t in ROWS:
        sets = fused_sets(t, D, dev)
        outs = first_outputs([k for _, k in variants.values()], sets)
        x, r, w = sets[0]
        r_p = r.clone()
        peer(x, r_p, w)
        # y equals the first variant's of its vector width (the register cap alone differs).
        first = {}
        for (width, _), (_, y_k) in zip(variants.values(), outs):
            first.setdefault(width, y_k)
        equal = all(torch.equal(r_k, outs[0][0]) and torch.equal(y_k, first[width]) for (width, _), (r_k, y_k) in zip(variants.values(), outs))
        y_ulps = max(int(ulp_distance(y_k, outs[0][1]).max()) for _, y_k in outs)
        fns = {name: kernel_calls(k, sets) for name, (_, k) in variants.items()}
        fns["compile in place"] = [lambda s=s: peer(*s) for s in sets]
        times = alternating_median_us(fns)
        print(f"D={D} T={t} sets={len(sets)} variants_equal={equal} y_ulps={y_ulps} residual_equals_peer={torch.equal(r_p, outs[0][0])} "
              + "  ".join(f"{k} {v:.2f}" for k, v in times.items()), flush=True)
