"""Times gather's CUDA launch-shape knobs side by side on the device (how the defaults were chosen).

    python3 tools/gpu/gather_tuning.py            # on a CUDA host, PYTHONPATH=repo:repo/platform

For each shape: the kernel at every (block threads, vectors per thread) pair and torch.compile of the
reference, timed with testing.timer (CUDA-graph replay, inputs rotated past 2 x L2), every variant
checked bit for bit against the reference first.
"""

from __future__ import annotations

import itertools

import torch

from kernels.gather import cuda, ref
from testing import timer
from testing.numeric import assert_bitwise_equal

SHAPES = [(65536, m, 7168) for m in (1, 8, 64, 256, 32768)] + [(65536, 32768, 4096), (65536, 32768, 576)]
KNOBS = list(itertools.product((128, 256), (1, 2, 4, 8)))


def main() -> None:
    dev = torch.device("cuda")
    l2 = timer.l2_cache_bytes(dev)
    ceiling = timer.copy_ceiling(dev)
    print(f"copy ceiling {ceiling:.0f} GB/s")
    compiled = torch.compile(ref.gather_ref, dynamic=False)
    header = ["n", "m", "D", "compile us"] + [f"b{b}v{v}" for b, v in KNOBS]
    print("  ".join(f"{h:>9}" for h in header))
    for n, m, d in SHAPES:
        x = torch.randn((n, d), device=dev).to(torch.bfloat16)
        nbytes = 2 * m * d * 2 + 8 * m
        sets = timer.sets_for_rotation(nbytes // 2, l2, max_sets=2048)
        indices = [torch.randint(0, n, (m,), device=dev) for _ in range(sets)]
        outs = [torch.empty((m, d), dtype=torch.bfloat16, device=dev) for _ in range(sets)]
        row = [n, m, d]
        t = timer.measure([lambda i=i: compiled(x, i) for i in indices])
        row.append(f"{t.median_us:.2f}")
        for b, v in KNOBS:
            k = cuda.gather_tl(d, "bfloat16", "int64", d, threads=b, vectors_per_thread=v)
            k(x, indices[0], outs[0])
            assert_bitwise_equal(outs[0], ref.gather_ref(x, indices[0]))
            t = timer.measure([lambda i=i, o=o: k(x, i, o) for i, o in zip(indices, outs)])
            row.append(f"{t.median_us:.2f}")
        print("  ".join(f"{str(c):>9}" for c in row), flush=True)
        del x, indices, outs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
