"""The same-run A/B probe of the 2026-12-01 norm calls (norm_2026-12-01.md), kept as the record of what
ran; no target runs it. Run from a source tree's root on a CUDA device, with the baseline's
kernels/norm/cuda.py copied beside this file as norm_cuda_main.py (e.g. `git show
main:kernels/norm/cuda.py > .../norm_cuda_main.py`): main's FP8 kernels against the tree's,
outputs compared bit for bit, timed alternately (testing.timer, every input set its own tensors),
median of three rounds."""
import importlib.util, os, sys
import torch
sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "platform")]
from kernels.norm import cuda as new
from testing import timer
here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("norm_cuda_main", os.path.join(here, "norm_cuda_main.py"))
old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
dev = torch.device("cuda"); dt = torch.bfloat16
print("device", torch.cuda.get_device_name(), flush=True)
F8 = torch.float8_e4m3fn

def kern(mod, kind, D, group, **kw):
    if kind == "fp8": return mod.rmsnorm_fp8_tl(D, "bfloat16", 1e-6, D, group, x_align=16, **kw)
    if kind == "add_fp8": return mod.add_rmsnorm_fp8_tl(D, "bfloat16", 1e-6, D, group, x_align=16, **kw)
    if kind == "rms": return mod.rmsnorm_tl(D, "bfloat16", 1e-6, D, x_align=16, **kw)
    return mod.add_rmsnorm_tl(D, "bfloat16", 1e-6, D, x_align=16, **kw)

def sets(kind, t, D, group, n, kw, seed):
    g = torch.Generator(device=dev).manual_seed(seed)
    out = []
    tma = kw.get("scale_layout") == "tma_col"
    for _ in range(n):
        x = torch.randn(t, D, generator=g, device=dev, dtype=dt)
        r = torch.randn(t, D, generator=g, device=dev, dtype=dt)
        w = (1 + 0.1 * torch.randn(D, generator=g, device=dev)).to(dt)
        if kind in ("fp8", "add_fp8"):
            s = torch.empty(D // group, (t + 3) // 4 * 4, device=dev)[:, :t] if tma else torch.empty(t, D // group, device=dev)
            tail = (torch.empty(t, D, device=dev, dtype=F8), s) + ((torch.empty(t, D, device=dev, dtype=dt),) if kw.get("with_y") else ())
        else:
            tail = (torch.empty(t, D, device=dev, dtype=dt),)
        out.append(((x, r, w) if kind.startswith("add") else (x, w)) + tail)
    return out

def same(a, b):
    if a.dtype == F8: return torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    return torch.equal(a, b)

def ab(label, ka, kb, kind, t, D, group, kw, names=("main", "new")):
    per = t * D * 2 * (2 if kind in ("rms", "fp8") else 4)
    n = timer.sets_for_rotation(per, timer.l2_cache_bytes(dev), max_sets=2048)
    a = sets(kind, t, D, group, 1, kw, 1000 + t)[0]; b = tuple(z.clone() for z in a)
    ka(*a); kb(*b)
    ok = all(same(za, zb) for za, zb in zip(a, b))
    inputs = sets(kind, t, D, group, n, kw, t)
    res = {names[0]: [], names[1]: []}
    for rnd in range(3):
        pair = ((names[0], ka), (names[1], kb)) if rnd % 2 == 0 else ((names[1], kb), (names[0], ka))
        for name, k in pair:
            res[name].append(timer.measure([lambda a=a, k=k: k(*a) for a in inputs]).median_us)
    m = {k: sorted(v)[1] for k, v in res.items()}
    print(f"{label:34s} T={t:6d}: {names[0]} {m[names[0]]:8.2f} us  {names[1]} {m[names[1]]:8.2f} us  ({100*(m[names[1]]/m[names[0]]-1):+.1f}%)  equal {ok}", flush=True)
    del inputs
    return ok

ok = True
for kind, D, group, kw, ts in [
    ("fp8", 7168, 128, {}, (1, 64, 256, 4096, 16384)),
    ("fp8", 4096, 128, {}, (16384,)),
    ("fp8", 7168, 128, {"ue8m0": True, "scale_layout": "tma_col"}, (16384,)),
    ("fp8", 7168, 128, {"with_y": True}, (16384,)),
    ("fp8", 7168, 7168, {}, (16384,)),
    ("fp8", 7168, 16, {}, (16384,)),
    ("fp8", 1536, 64, {}, (16384,)),
    ("add_fp8", 7168, 128, {}, (1, 64, 16384)),
]:
    for t in ts:
        ok &= ab(f"{kind} D{D} g{group} {kw}", kern(old, kind, D, group, **kw), kern(new, kind, D, group, **kw), kind, t, D, group, kw)
print("fp8 equal outputs:", ok, flush=True)
