"""The same-run probe behind the norm bench's output policy (kernels/norm/PERF.md, "Output buffers and
in-place peers", 2026-12-01 fourth session), kept as the record of what ran; no target runs it. Run
from a source tree's root on a CUDA device. At 1 to 1024 rows x 7168 bf16 it times the shipped
rmsnorm_tl / add_rmsnorm_tl writing into a preallocated output per input set ("out") and into an
output allocated per call ("alloc"), against torch.compile of the reference as the bench had it
(allocating its outputs; the fused one out of place), of the reference writing into the set's
output (`out.copy_(ref(...))`), and of the fused reference in place (`residual.add_(x)`, then the
plain reference). testing.timer (CUDA-graph replay, input sets rotated past 2 x L2, each set its
own x, residual, weight and output), median of three alternating rounds. Correctness: the mutating
peer's residual equals the kernel's bit for bit and its y is within bf16 rounding of the kernel's."""
import os, sys
import torch
sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "platform")]
from kernels.norm import cuda as nc, ref
from testing import timer

D, EPS, DT = 7168, 1e-6, "bfloat16"
dev, tb = torch.device("cuda"), torch.bfloat16
print("device", torch.cuda.get_device_name(), flush=True)
rms = nc.rmsnorm_tl(D, DT, EPS, D, x_align=16)
add = nc.add_rmsnorm_tl(D, DT, EPS, D, x_align=16)


def rms_into(x, w, out):
    out.copy_(ref.rms_norm_ref(x, w, EPS))


def add_in_place(x, r, w):
    r.add_(x)
    return ref.rms_norm_ref(r, w, EPS)


c_rms, c_rms_into = torch.compile(ref.rms_norm_ref, dynamic=False), torch.compile(rms_into, dynamic=False)
c_add, c_add_mut = torch.compile(ref.add_rms_norm_ref, dynamic=False), torch.compile(add_in_place, dynamic=False)
l2 = timer.l2_cache_bytes(dev)
for t in (1, 8, 64, 256, 1024):
    n = timer.sets_for_rotation(4 * t * D * 2 + D * 2, l2)
    sets = [(torch.randn(t, D, device=dev, dtype=tb), torch.randn(t, D, device=dev, dtype=tb),
             (1 + 0.1 * torch.randn(D, device=dev)).to(tb), torch.empty(t, D, device=dev, dtype=tb)) for _ in range(n)]
    x, r, w, _ = sets[0]
    r_k, y_k = r.clone(), torch.full((t, D), float("nan"), device=dev, dtype=tb)
    add(x, r_k, w, y_k)
    r_p = r.clone()
    y_p = c_add_mut(x, r_p, w)
    ok = torch.equal(r_k, r_p) and float((y_k.float() - y_p.float()).abs().max()) < 0.07
    fns = {
        "rms out": [lambda s=s: rms(s[0], s[2], s[3]) for s in sets],
        "rms alloc": [lambda s=s: rms(s[0], s[2], torch.empty_like(s[0])) for s in sets],
        "rms compile": [lambda s=s: c_rms(s[0], s[2], EPS) for s in sets],
        "rms compile into out": [lambda s=s: c_rms_into(s[0], s[2], s[3]) for s in sets],
        "add out": [lambda s=s: add(s[0], s[1], s[2], s[3]) for s in sets],
        "add alloc": [lambda s=s: add(s[0], s[1], s[2], torch.empty_like(s[0])) for s in sets],
        "add compile out of place": [lambda s=s: c_add(s[0], s[1], s[2], EPS) for s in sets],
        "add compile in place": [lambda s=s: c_add_mut(s[0], s[1], s[2]) for s in sets],
    }
    times = {k: [] for k in fns}
    for _ in range(3):
        for k, f in fns.items():
            times[k].append(timer.measure(f, budget_s=0.3).median_us)
    print(f"T={t} sets={n} peer_ok={ok} " + "  ".join(f"{k} {sorted(v)[1]:.2f}" for k, v in times.items()), flush=True)
