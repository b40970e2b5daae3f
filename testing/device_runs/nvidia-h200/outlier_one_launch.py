"""The same-run probe behind outlier_detection's one-launch row mode (kernels/outlier_detection/PERF.md,
"One launch for decode batches", 2026-12-02), kept as the record of what ran; no target runs it. Run
from a source tree's root on a CUDA device. At T x 7168 bf16 rows it times the two-launch path
(outlier_rows_tl, then outlier_compact_tl) against the one-launch kernel (outlier_rows_compact_tl,
the last block compacts), both allocating their outputs per call as the bench's peers do, and
torch.compile of the reference. testing.timer (CUDA-graph replay, input sets rotated past 2 x L2),
median of three alternating rounds. Correctness in the same run: both paths equal the reference bit
for bit at four thresholds (none, ~0.4%, ~36% and every row flagged), and the counter is zero after."""
import os, sys
import torch
sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "platform")]
from kernels.interface import stream_counters
from kernels.outlier_detection import cuda as oc, ref
from testing import timer

D, DT = 7168, "bfloat16"
dev, tb = torch.device("cuda"), torch.bfloat16
print("device", torch.cuda.get_device_name(), flush=True)
rows, compact, one = oc.outlier_rows_tl(D, DT, D), oc.outlier_compact_tl(), oc.outlier_rows_compact_tl(D, DT, D)
arrivals = stream_counters("probe", dev, 1)


def outputs(t):
    return (torch.empty(t, device=dev), torch.empty(t, dtype=torch.bool, device=dev),
            torch.empty(t, dtype=torch.int32, device=dev), torch.empty(1, dtype=torch.int32, device=dev))


def two(x, thr):
    a, f, r, c = outputs(x.shape[0])
    rows(x, thr, a, f)
    compact(f, r, c)
    return a, f, r, c


def single(x, thr):
    a, f, r, c = outputs(x.shape[0])
    one(x, thr, a, f, r, c, arrivals)
    return a, f, r, c


compiled = torch.compile(ref.outlier_rows_ref, dynamic=False)
l2 = timer.l2_cache_bytes(dev)
for t in (1, 8, 64, 256, 1024, 2048, 4096, 16384):
    ok = True
    for thr_value in (float("inf"), 5.0, 4.0, -1.0):
        x = torch.randn(t, D, device=dev, dtype=tb)
        thr = torch.tensor([thr_value], device=dev)
        expected = ref.outlier_rows_ref(x, thr)
        for path in (two, single):
            got = path(x, thr)
            ok &= all(torch.equal(g, e) for g, e in zip(got, expected))
    torch.cuda.synchronize()
    ok &= int(arrivals.count_nonzero()) == 0
    n = timer.sets_for_rotation(t * D * 2 + 4, l2)
    sets = [(torch.randn(t, D, device=dev, dtype=tb), torch.tensor([5.0], device=dev)) for _ in range(n)]
    fns = {
        "two launches": [lambda s=s: two(*s) for s in sets],
        "one launch": [lambda s=s: single(*s) for s in sets],
        "compile": [lambda s=s: compiled(*s) for s in sets],
    }
    times = {k: [] for k in fns}
    for _ in range(3):
        for k, f in fns.items():
            times[k].append(timer.measure(f, budget_s=0.3).median_us)
    torch.cuda.synchronize()
    ok &= int(arrivals.count_nonzero()) == 0
    print(f"T={t} sets={n} equal={ok} " + "  ".join(f"{k} {sorted(v)[1]:.2f}" for k, v in times.items()), flush=True)
print("empty kernel us", timer.empty_kernel_us(dev), flush=True)
