"""Same-run A/B of the fused add_rmsnorm kernel's vectors a thread (kernels/norm/PERF.md, 2026-12-02
eighth session), kept as the record of what ran; no target runs it. Run from a source tree's root on
a CUDA device. For D = 4096 bf16 (the fused case furthest behind torch.compile) at 1 to 16384 rows it times add_rmsnorm_tl as shipped (two
16-byte vectors of each operand a thread) against max_steps = 1 (one vector a thread: 512 threads a
row at 4096) and max_steps = 4, and torch.compile of the fused reference in place (the bench's
peer: `residual.add_(x)`, then the plain reference). testing.timer (CUDA-graph replay, input sets
rotated past 2 x L2, outputs allocated per call as the bench does), median of three alternating
rounds. Correctness in the same run: every variant's residual and y equal the shipped kernel's bit
for bit, and the peer's residual equals it too."""
import os, sys
import torch
sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "platform")]
from kernels.norm import cuda as nc, ref
from testing import timer

EPS, DT = 1e-6, "bfloat16"
dev, tb = torch.device("cuda"), torch.bfloat16
print("device", torch.cuda.get_device_name(), "empty kernel us", round(timer.empty_kernel_us(dev), 2), flush=True)


def add_in_place(x, r, w):
    r.add_(x)
    return ref.rms_norm_ref(r, w, EPS)


c_add = torch.compile(add_in_place, dynamic=False)
l2 = timer.l2_cache_bytes(dev)
for D in (4096,):
    variants = {"shipped": nc.add_rmsnorm_tl(D, DT, EPS, D, x_align=16)}
    for steps in (1, 4):
        cfg = nc.norm_config(D, DT, D, 16, None, steps, residual=True)
        variants[f"steps{steps} ({cfg.threads_per_row} thr)"] = nc.add_rmsnorm_tl(D, DT, EPS, D, x_align=16, max_steps=steps)
    for t in (1, 8, 64, 256, 1024, 16384):
        n = timer.sets_for_rotation(4 * t * D * 2 + D * 2, l2)
        sets = [(torch.randn(t, D, device=dev, dtype=tb), torch.randn(t, D, device=dev, dtype=tb),
                 (1 + 0.1 * torch.randn(D, device=dev)).to(tb)) for _ in range(n)]
        x, r, w = sets[0]
        outs = {}
        for name, k in variants.items():
            r_k, y_k = r.clone(), torch.full((t, D), float("nan"), device=dev, dtype=tb)
            k(x, r_k, w, y_k)
            outs[name] = (r_k, y_k)
        r_s, y_s = outs["shipped"]
        same = all(torch.equal(a, r_s) and torch.equal(b, y_s) for a, b in outs.values())
        r_p = r.clone()
        c_add(x, r_p, w)
        fns = {name: [lambda s=s, k=k: k(s[0], s[1], s[2], torch.empty_like(s[0])) for s in sets] for name, k in variants.items()}
        fns["compile in place"] = [lambda s=s: c_add(s[0], s[1], s[2]) for s in sets]
        times = {k: [] for k in fns}
        for _ in range(3):
            for k, f in fns.items():
                times[k].append(timer.measure(f, budget_s=0.3).median_us)
        print(f"D={D} T={t} sets={n} variants_equal={same} peer_residual_equal={torch.equal(r_p, r_s)} "
              + "  ".join(f"{k} {sorted(v)[1]:.2f}" for k, v in times.items()), flush=True)
