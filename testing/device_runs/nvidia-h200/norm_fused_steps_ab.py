"""Same-run A/B of the vectors a thread of the fused add_rmsnorm kernel (kernels/norm/PERF.md,
2026-12-02 eighth session), kept as the record of what ran; no target runs it. Run from a source
tree's root on a CUDA device.

For bf16 rows of D in DIMS at T in ROWS it times add_rmsnorm_tl with max_steps 1, 2 and 4 (one, two
and four 16-byte vectors of each operand a thread) against torch.compile of the fused reference in
place (the bench's peer: `residual.add_(x)`, then the plain reference). testing.timer (CUDA-graph
replay, input sets rotated past 2 x L2, outputs allocated per call as the bench does), median of
three alternating rounds. Checked in the same run: every variant's residual equals the first's and
the peer's bit for bit; y differs between variants at most by the rounding of the row's sum, whose
order follows the thread shape (`y_ulps`: the largest distance in bf16 ulps)."""
import os, sys
import torch
sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "platform")]
from kernels.norm import cuda as nc, ref
from testing import timer
from testing.numeric import ulp_distance

EPS, DT = 1e-6, "bfloat16"
DIMS = [int(d) for d in os.environ.get("DIMS", "4096").split(",")]
ROWS = [int(t) for t in os.environ.get("ROWS", "1,8,64,256,1024,16384").split(",")]
STEPS = [int(s) for s in os.environ.get("STEPS", "1,2,4").split(",")]
dev, tb = torch.device("cuda"), torch.bfloat16
print("device", torch.cuda.get_device_name(), "empty kernel us", round(timer.empty_kernel_us(dev), 2), flush=True)


def add_in_place(x, r, w):
    r.add_(x)
    return ref.rms_norm_ref(r, w, EPS)


c_add = torch.compile(add_in_place, dynamic=False)
l2 = timer.l2_cache_bytes(dev)
for D in DIMS:
    variants = {}
    for steps in STEPS:
        cfg = nc.norm_config(D, DT, D, 16, None, steps, residual=True)
        variants[f"steps{steps} ({cfg.threads_per_row} thr)"] = nc.add_rmsnorm_tl(D, DT, EPS, D, x_align=16, max_steps=steps)
    for t in ROWS:
        n = timer.sets_for_rotation(4 * t * D * 2 + D * 2, l2)
        sets = [(torch.randn(t, D, device=dev, dtype=tb), torch.randn(t, D, device=dev, dtype=tb),
                 (1 + 0.1 * torch.randn(D, device=dev)).to(tb)) for _ in range(n)]
        x, r, w = sets[0]
        outs = []
        for k in variants.values():
            r_k, y_k = r.clone(), torch.full((t, D), float("nan"), device=dev, dtype=tb)
            k(x, r_k, w, y_k)
            outs.append((r_k, y_k))
        r_p = r.clone()
        c_add(x, r_p, w)
        residual_equal = all(torch.equal(a, outs[0][0]) for a, _ in outs) and torch.equal(r_p, outs[0][0])
        y_ulps = max(int(ulp_distance(b, outs[0][1]).max()) for _, b in outs)
        fns = {name: [lambda s=s, k=k: k(s[0], s[1], s[2], torch.empty_like(s[0])) for s in sets] for name, k in variants.items()}
        fns["compile in place"] = [lambda s=s: c_add(s[0], s[1], s[2]) for s in sets]
        times = {k: [] for k in fns}
        for _ in range(3):
            for k, f in fns.items():
                times[k].append(timer.measure(f, budget_s=0.3).median_us)
        print(f"D={D} T={t} sets={n} residual_equal={residual_equal} y_ulps={y_ulps} "
              + "  ".join(f"{k} {sorted(v)[1]:.2f}" for k, v in times.items()), flush=True)
