"""Same-run A/B of candidate_blocks' kernels against other versions of kernels/candidate_blocks/
cuda.py (kernels/candidate_blocks/PERF.md), kept as the record of what ran; no target runs it. Run
from a source tree's root on a CUDA device, TileLang on the path:

    VARIANTS="main=.gpu/cand_main.py,early=kernels/candidate_blocks/cuda.py" python3 candidate_variants_ab.py

Each variant NAME=PATH[:FACTORY] is a copy of cuda.py imported under its own module name; its
FACTORY (candidate_blocks_pair_tl unless named) is built for the bench's NB 2048, k 64, one sink and
two local blocks, int32 counts. Rows: the bench's (randn scores), at T queries of full counts (n =
NB) and of spread counts (1 + i * NB // T, shuffled: the prefill case); KINDS may add full rows of
`ties` (scores drawn from 16 integers: most keys tied, every radix pass runs) and of `narrow` scores
(1 + randn / 1000: half a row shares its top 11 key bits, so the later passes do the work). Every
variant's ids equal ref.py's on the first input set (the table marks a MISMATCH); then testing.timer
(CUDA-graph replay, input sets rotated past 2 x L2, ids allocated per call), median of three
alternating rounds, us. The table goes to stdout and $OUT/candidate_ab.txt."""
import os
import sys

import torch

sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "platform")]
from kernels.candidate_blocks import ref  # noqa: E402
from kernels.candidate_blocks.candidate_blocks_bench import NB, NUM_LOCAL, NUM_SINK  # noqa: E402
from testing import timer  # noqa: E402
from testing.variants import alternating_median_us, load_variant, write_report  # noqa: E402

K = 64
VARIANTS = [v.split("=") for v in os.environ.get("VARIANTS", "new=kernels/candidate_blocks/cuda.py").split(",")]
QUERIES = [int(t) for t in os.environ.get("QUERIES", "512,1024,4096").split(",")]
KINDS = os.environ.get("KINDS", "full,spread").split(",")


def main():
    dev = torch.device("cuda")
    kernels = {}
    for name, spec in VARIANTS:
        path, _, factory = spec.partition(":")
        module = load_variant(f"cand_variant_{name}", path)
        kernels[name] = getattr(module, factory or "candidate_blocks_pair_tl")(NB, K, NUM_SINK, NUM_LOCAL, "int32")
    l2 = timer.l2_cache_bytes(dev)
    lines = [f"device {torch.cuda.get_device_name()}, empty kernel {timer.empty_kernel_us(dev):.2f} us; median us of 3 alternating rounds"]
    print(lines[0], flush=True)
    for kind in KINDS:
        spread = kind == "spread"
        for t in QUERIES:
            counts = torch.tensor([1 + i * NB // t for i in range(t)] if spread else [NB] * t, dtype=torch.int32, device=dev)
            g = torch.Generator(device=dev).manual_seed(t * 3 + KINDS.index(kind))

            def scores():
                if kind == "ties":
                    return torch.randint(0, 16, (t, NB), generator=g, device=dev).float()
                x = torch.randn((t, NB), generator=g, device=dev)
                return 1 + x / 1000 if kind == "narrow" else x

            sets = [(scores(), counts[torch.randperm(t, generator=g, device=dev)]) for _ in range(timer.sets_for_rotation(t * NB * 4, l2))]
            want = ref.candidate_blocks_ref(*sets[0], K, NUM_SINK, NUM_LOCAL)
            ok = {}
            for name, k in kernels.items():
                ids = torch.full((t, K), -7, dtype=torch.int32, device=dev)
                k(*sets[0], ids)
                ok[name] = torch.equal(ids, want)
            fns = {name: [lambda s=s, k=k: k(s[0], s[1], torch.empty((t, K), dtype=torch.int32, device=dev)) for s in sets] for name, k in kernels.items()}
            times = alternating_median_us(fns, budget_s=0.25)
            cells = "  ".join(f"{name} {us:7.2f}{'' if ok[name] else ' MISMATCH'}" for name, us in times.items())
            lines.append(f"{kind:6s} T {t:5d}  {cells}")
            print(lines[-1], flush=True)
    write_report(lines, "candidate_ab.txt")


if __name__ == "__main__":
    main()
