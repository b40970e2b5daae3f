"""The same-run probe behind quant's decode launch shape (kernels/quant/PERF.md, "Decode batches: one
vector a thread", 2026-12-02), kept as the record of what ran; no target runs it. Run from a source
tree's root on a CUDA device. At T x 7168 bf16 rows, per-token-group-128 FP8 (fp32 scales, row
layout), it times quant_fp8_group_tl compiled with 64 (the shipped shape), 32 and 16 input bytes a
thread in flight, each allocating its outputs per call as the bench's peers do, and torch.compile of
the reference. testing.timer (CUDA-graph replay, input sets rotated past 2 x L2), median of three
alternating rounds. Correctness in the same run: every shape's q and scale equal the reference's bit
for bit on rows of mixed magnitudes. It ran at 09b86bf, where quant_fp8_group_tl took a thread_bytes
keyword; the shipped factories now fix it, so this script compiles its variants itself."""
import os, sys
import tilelang
import torch
sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "platform")]
from kernels.quant import cuda as qc, ref
from testing import timer

D, G, DT = 7168, 128, "bfloat16"
dev, tb, fp8 = torch.device("cuda"), torch.bfloat16, torch.float8_e4m3fn
print("device", torch.cuda.get_device_name(), flush=True)


@tilelang.jit
def shaped(thread_bytes: int):
    return qc._quant_fp8_group_func(D, G, DT, False, "row", D, 16, thread_bytes)


shapes = {b: shaped(b) for b in (64, 32, 16)}
for b in shapes:
    cfg = qc.row_config(D, G, 2, D, 16, thread_bytes=b)
    print(f"thread_bytes {b}: threads_per_row {cfg.threads_per_row} col_blocks {cfg.col_blocks} steps {cfg.steps}", flush=True)


def run(kernel, x):
    q = torch.empty(x.shape, dtype=fp8, device=dev)
    s = torch.empty(x.shape[0], D // G, device=dev)
    kernel(x, q, s)
    return q, s


compiled = torch.compile(lambda x: ref.quant_fp8_ref(x, G), dynamic=False)
l2 = timer.l2_cache_bytes(dev)
for t in (1, 2, 8, 32, 64, 256, 1024):
    ok = True
    for _ in range(2):
        x = (torch.randn(t, D, device=dev) * torch.pow(10.0, torch.empty(t, 1, device=dev).uniform_(-3, 3))).to(tb)
        eq, es = ref.quant_fp8_ref(x, G)
        for k in shapes.values():
            q, s = run(k, x)
            ok &= torch.equal(q.view(torch.uint8), eq.view(torch.uint8)) and torch.equal(s, es)
    n = timer.sets_for_rotation(t * D * 2, l2)
    sets = [torch.randn(t, D, device=dev, dtype=tb) for _ in range(n)]
    fns = {f"bytes {b}": [lambda x=x, k=k: run(k, x) for x in sets] for b, k in shapes.items()}
    fns["compile"] = [lambda x=x: compiled(x) for x in sets]
    times = {k: [] for k in fns}
    for _ in range(3):
        for k, f in fns.items():
            times[k].append(timer.measure(f, budget_s=0.3).median_us)
    print(f"T={t} sets={n} equal={ok} " + "  ".join(f"{k} {sorted(v)[1]:.2f}" for k, v in times.items()), flush=True)
print("empty kernel us", timer.empty_kernel_us(dev), flush=True)
