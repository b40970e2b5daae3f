"""Same-run A/B of random_sampling's two CUDA kernels (kernels/random_sampling/PERF.md, 2026-12-03
ninth session), kept as the record of what ran; no target runs it. Run from a source tree's root on
a CUDA device.

For each row kind and batch in BATCHES it times the chunked kernel (random_sample_chunked_tl, with
its workspace and counters as the interface passes them) and the row kernel (random_sample_tl) on
the same inputs: testing.timer (CUDA-graph replay, input sets rotated past 2 x L2), median of three
alternating rounds. Checked in the same run: both kernels' tokens equal the reference's on the
first set. Row kinds: the bench's logits (fp32 randn * 4, t in [0.5, 1.5)), peaked logits (randn
* 2.5 plus 64 ids per row raised by 12 to 20, as a model's logits sit far below their top few),
and the bench's probs (uniform: nothing skips the noise)."""
import os, sys
import torch
sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "platform")]
from kernels.random_sampling import api, cuda, ref
from testing import timer

BATCHES = [int(b) for b in os.environ.get("BATCHES", "1,8,64,100,128,200,256,512").split(",")]
V = 129280
dev = torch.device("cuda")
print("device", torch.cuda.get_device_name(), "SMs", api._multiprocessors(dev), "empty kernel us", round(timer.empty_kernel_us(dev), 2), flush=True)


def rows(kind, B, g):
    if kind == "probs":
        return torch.rand(B, V, generator=g, device=dev)
    x = torch.randn(B, V, generator=g, device=dev)
    if kind == "bench logits":
        return x * 4
    x *= 2.5
    top = torch.randint(0, V, (B, 64), generator=g, device=dev)
    return x.scatter_add_(1, top, 12 + 8 * torch.rand(B, 64, generator=g, device=dev))


l2 = timer.l2_cache_bytes(dev)
for kind in ("bench logits", "peaked logits", "probs"):
    source = "probs" if kind == "probs" else "logits"
    chunked, row = cuda.random_sample_chunked_tl(source, "float32", 4), cuda.random_sample_tl(source, "float32", 4)
    for B in BATCHES:
        g = torch.Generator(device=dev).manual_seed(B)
        n = timer.sets_for_rotation(B * V * 4, l2)
        sets = []
        for _ in range(n):
            x = rows(kind, B, g)
            seed = torch.randint(-2**62, 2**62, (B,), generator=g, device=dev)
            offset = torch.randint(0, 2**62, (B,), generator=g, device=dev)
            t = torch.rand(B, generator=g, device=dev) + 0.5
            sets.append((x, seed, offset, t, api._workspace(B, V, dev)))
        x, seed, offset, t, ws = sets[0]
        want = ref.random_sample_probs_ref(x, seed, offset) if source == "probs" else ref.random_sample_logits_ref(x, seed, offset, t)
        got_c, got_r = torch.full((B,), -7, dtype=torch.int64, device=dev), torch.full((B,), -7, dtype=torch.int64, device=dev)
        chunked(x, seed, offset, t, got_c, *ws)
        row(x, seed, offset, t, got_r)
        equal = torch.equal(got_c, want) and torch.equal(got_r, want)
        fns = {
            "chunked": [lambda s=s: chunked(s[0], s[1], s[2], s[3], torch.empty(B, dtype=torch.int64, device=dev), *s[4]) for s in sets],
            "row": [lambda s=s: row(s[0], s[1], s[2], s[3], torch.empty(B, dtype=torch.int64, device=dev)) for s in sets],
        }
        times = {k: [] for k in fns}
        for _ in range(3):
            for k, f in fns.items():
                times[k].append(timer.measure(f, budget_s=0.25).median_us)
        med = {k: sorted(v)[1] for k, v in times.items()}
        print(f"{kind:13s} B={B:4d} equal={equal} chunked {med['chunked']:8.2f} row {med['row']:8.2f} "
              f"row/chunked {med['row'] / med['chunked']:.2f} api picks {'row' if api.use_row_kernel(B, V, api._multiprocessors(dev)) else 'chunked'}", flush=True)
