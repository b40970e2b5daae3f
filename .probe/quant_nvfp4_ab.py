"""Same-run A/B on a CUDA device (drop this directory before merging): main's quant cuda.py
(.probe/quant_cuda_main.py, a copy) against this branch's, NVFP4 and MX FP4; packed
codes and scales checked equal bit for bit; timed alternately (testing.timer, every input set its
own x), median of three rounds. Global scales from the data (the fast divisor path) and, for one
case, 1e30 (the IEEE path). Run from the tree root: python3 .probe/quant_nvfp4_ab.py"""
import importlib.util, os, sys
import torch
sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "platform")]
from kernels.quant import cuda as new
from kernels.quant import ref
from testing import timer
here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("quant_cuda_main", os.path.join(here, "quant_cuda_main.py"))
old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
dev = torch.device("cuda")
print("device", torch.cuda.get_device_name(), flush=True)

def kern(mod, fmt, D, dtype):
    f = mod.quant_fp4_e4m3_tl if fmt == "e4m3" else mod.quant_fp4_ue8m0_tl
    return f(D, dtype, D, x_align=16)

def sets(fmt, t, D, dtype, n, gs_value, seed):
    g = torch.Generator(device=dev).manual_seed(seed)
    out = []
    for _ in range(n):
        x = torch.randn(t, D, generator=g, device=dev).to(getattr(torch, dtype))
        group = 16 if fmt == "e4m3" else 32
        scale = torch.empty(t, D // group, device=dev, dtype=torch.float8_e4m3fn if fmt == "e4m3" else torch.uint8)
        packed = torch.empty(t, D // 2, device=dev, dtype=torch.uint8)
        if fmt == "e4m3":
            gs = ref.fp4_global_scale_ref(x).reshape(1) if gs_value is None else torch.tensor([gs_value], device=dev)
            out.append((x, gs, packed, scale))
        else:
            out.append((x, packed, scale))
    return out

def bits(z):
    return z.view(torch.uint8) if z.dtype == torch.float8_e4m3fn else z

ok = True
for fmt, t, D, dtype, gs_value in [("e4m3", 16384, 7168, "bfloat16", None), ("e4m3", 64, 7168, "bfloat16", None),
                                   ("e4m3", 16384, 7168, "float16", None), ("e4m3", 16384, 4096, "bfloat16", None),
                                   ("e4m3", 16384, 7168, "float32", None), ("e4m3", 16384, 7168, "bfloat16", 1e30),
                                   ("ue8m0", 16384, 7168, "bfloat16", None), ("ue8m0", 16384, 7168, "float16", None)]:
    ko, kn = kern(old, fmt, D, dtype), kern(new, fmt, D, dtype)
    a = sets(fmt, t, D, dtype, 1, gs_value, 99)[0]; b = tuple(z.clone() for z in a)
    ko(*a); kn(*b)
    same = all(torch.equal(bits(za), bits(zb)) for za, zb in zip(a, b)); ok &= same
    per = t * D * (2 if dtype == "bfloat16" else 4) + t * D // 2
    n = timer.sets_for_rotation(per, timer.l2_cache_bytes(dev), max_sets=2048)
    inputs = sets(fmt, t, D, dtype, n, gs_value, 7)
    res = {"main": [], "new": []}
    for rnd in range(3):
        for name, k in ((("main", ko), ("new", kn)) if rnd % 2 == 0 else (("new", kn), ("main", ko))):
            res[name].append(timer.measure([lambda a=a, k=k: k(*a) for a in inputs]).median_us)
    m = {k: sorted(v)[1] for k, v in res.items()}
    print(f"fp4 {fmt} {dtype} T={t} D={D} gs={gs_value}: main {m['main']:.2f} us  new {m['new']:.2f} us ({100*(m['new']/m['main']-1):+.1f}%)  equal {same}", flush=True)
    del inputs
print("equal outputs:", ok)
