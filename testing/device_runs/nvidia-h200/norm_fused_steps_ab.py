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
from kernels.norm import cuda as nc
from norm_probe import DT, EPS, compiled_peer, first_outputs, fused_sets, kernel_calls
from testing import timer
from testing.numeric import ulp_distance
from testing.variants import alternating_median_us

DIMS = [int(d) for d in os.environ.get("DIMS", "4096").split(",")]
ROWS = [int(t) for t in os.environ.get("ROWS", "1,8,64,256,1024,16384").split(",")]
STEPS = [int(s) for s in os.environ.get("STEPS", "1,2,4").split(",")]
dev = torch.device("cuda")
print("device", torch.cuda.get_device_name(), "empty kernel us", round(timer.empty_kernel_us(dev), 2), flush=True)

peer = compiled_peer()
for D in DIMS:
    variants = {}
    for steps in STEPS:
        cfg = nc.norm_config(D, DT, D, 16, None, steps, residual=True)
        variants[f"steps{steps} ({cfg.threads_per_row} thr)"] = nc.add_rmsnorm_tl(D, DT, EPS, D, x_align=16, max_steps=steps)
    for t in ROWS:
        sets = fused_sets(t, D, dev)
        outs = first_outputs(variants.values(), sets)
        x, r, w = sets[0]
        r_p = r.clone()
        peer(x, r_p, w)
        residual_equal = all(torch.equal(a, outs[0][0]) for a, _ in outs) and torch.equal(r_p, outs[0][0])
        y_ulps = max(int(ulp_distance(b, outs[0][1]).max()) for _, b in outs)
        fns = {name: kernel_calls(k, sets) for name, k in variants.items()}
        fns["compile in place"] = [lambda s=s: peer(*s) for s in sets]
        times = alternating_median_us(fns)
        print(f"D={D} T={t} sets={len(sets)} residual_equal={residual_equal} y_ulps={y_ulps} "
              + "  ".join(f"{k} {v:.2f}" for k, v in times.items()), flush=True)
