"""Same-run probe: does a TileLang launch cost more than torch's or Inductor's in graph replay
(testing/device_runs/nvidia-h200/decode_floor.md, 2026-12-02 eighth session)? Kept as the record of
what ran; no target runs it. Run from a source tree's root on a CUDA device.

Pairs of kernels doing the same work, each timed by testing.timer both ways ("graph": CUDA-graph
replay over input sets rotated past 2 x L2, per launch; "kernel": CUPTI kernel time with L2 flushed),
median of three alternating rounds:
  add1   one float32 incremented in place (the bench's empty-kernel floor is torch's form of it)
  copy   one row of D bf16 read and written (rotated sets), 16-byte vectors, D / 8 threads
  store  store_kv_cache's MLA bf16 row (576) at T tokens through the api, against torch.compile of
         the reference (the bench's peers), each set its own rows, slots and cache
Outputs are checked against torch in the same run."""
import os, sys
import torch
sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "platform")]
import tilelang
import tilelang.language as T
from testing import timer

dev = torch.device("cuda")
print("device", torch.cuda.get_device_name(), flush=True)


@tilelang.jit
def tl_add1(threads: int):
    @T.prim_func
    def add1(x: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding(0)
            if tx == 0:
                x[0] = x[0] + T.float32(1)

    return add1


@tilelang.jit
def tl_copy(D: int):
    @T.prim_func
    def copy(x: T.Tensor((D,), "bfloat16"), y: T.Tensor((D,), "bfloat16")):
        with T.Kernel(1, threads=D // 8):
            tx = T.get_thread_binding(0)
            buf = T.alloc_local((8,), "bfloat16")
            for v in T.vectorized(8):
                buf[v] = x[tx * 8 + v]
            for v in T.vectorized(8):
                y[tx * 8 + v] = buf[v]

    return copy


def rounds(fns: dict, method: str) -> dict:
    times = {k: [] for k in fns}
    for _ in range(3):
        for k, f in fns.items():
            times[k].append(timer.measure(f, method=method, budget_s=0.3).median_us)
    return {k: sorted(v)[1] for k, v in times.items()}


def report(label: str, fns: dict) -> None:
    for method, name in (("cuda_graph", "graph"), ("profiler", "kernel")):
        got = rounds(fns, method)
        print(f"{label} {name}: " + "  ".join(f"{k} {v:.3f}" for k, v in got.items()), flush=True)


l2 = timer.l2_cache_bytes(dev)

# add1: torch's floor kernel against TileLang's at 32 and 128 threads, and Inductor's.
t = torch.zeros(1, device=dev)
k32, k128 = tl_add1(32), tl_add1(128)
k32(t)
ok = float(t) == 1.0
c_add = torch.compile(lambda x: x.add_(1.0))
report(f"add1 ok={ok}", {"torch": [lambda: t.add_(1.0)], "tilelang32": [lambda: k32(t)], "tilelang128": [lambda: k128(t)], "inductor": [lambda: c_add(t)]})

# copy: one row, rotated sets.
for D in (576, 7168):
    n = timer.sets_for_rotation(2 * D * 2, l2)
    sets = [(torch.randn(D, device=dev, dtype=torch.bfloat16), torch.empty(D, device=dev, dtype=torch.bfloat16)) for _ in range(n)]
    kc = tl_copy(D)
    kc(*sets[0])
    ok = torch.equal(sets[0][0], sets[0][1])
    c_copy = torch.compile(lambda x, y: y.copy_(x))
    report(f"copy D={D} sets={n} ok={ok}", {
        "torch": [lambda s=s: s[1].copy_(s[0]) for s in sets],
        "tilelang": [lambda s=s: kc(*s) for s in sets],
        "inductor": [lambda s=s: c_copy(*s) for s in sets],
    })

# store: the bench's MLA bf16 cases at decode sizes.
from kernels.store_kv_cache import api, ref

for T_ in (1, 8, 64):
    nb = max(4, 2 * (T_ // 64 + 1))
    per_set = T_ * 576 * 2 * 2 + nb * 64 * 576 * 2
    n = timer.sets_for_rotation(per_set, l2)
    sets = []
    for _ in range(n):
        kv = torch.randn(T_, 576, device=dev, dtype=torch.bfloat16)
        slots = torch.randperm(nb * 64, device=dev)[:T_].to(torch.int64)
        sets.append((kv, torch.zeros(nb, 64, 576, device=dev, dtype=torch.bfloat16), slots))
    kv, cache, slots = sets[0]
    mine, theirs = cache.clone(), cache.clone()
    api.store_kv_cache(kv, mine, slots)
    compiled = torch.compile(ref.scatter_rows)
    compiled(kv, theirs, slots)
    ok = torch.equal(mine, theirs)
    report(f"store T={T_} sets={n} ok={ok}", {
        "api": [lambda s=s: api.store_kv_cache(s[0], s[1], s[2]) for s in sets],
        "inductor": [lambda s=s: compiled(s[0], s[1], s[2]) for s in sets],
    })
