"""Same-run A/B of schedule_mtp_varlen's three NVIDIA kernels (block, warp, lane) at decode batches
(kernels/schedule_mtp_varlen/PERF.md), kept as the record of what ran; no target runs it. Run from a
source tree's root on a CUDA device, TileLang on the path:

    BATCHES=64,128,256,512,1024 python3 testing/device_runs/nvidia-h100-80gb-hbm3/schedule_kernels_ab.py

VARIANTS=NAME=PATH[,NAME=PATH] adds, beside the tree's lane kernel, the lane kernel of each cuda.py at
PATH as lane_NAME (testing.variants.load_variant; it imports the tree's helpers).

Inputs as the bench's (block size 64, 132 parts, contexts uniform in [0, 8192), num_accepted uniform
in [0, k], num_tokens = B (1 + k)), k 1 and 3. Each kernel is built as the interface builds it
(pdl on sm_90+, the smallest slot or warp count holding B, the warp kernel up to its capacity; the
recorded run, PERF.md's "lane kernel", still had slots 8 and 4 warps, since dropped) and its outputs
are checked against ref.py on the first input set (the table marks a MISMATCH); then
testing.timer (CUDA-graph replay, input sets rotated past 2 x L2, outputs allocated per call),
median of three alternating rounds, us. The table goes to stdout and $OUT/schedule_ab.txt."""
import os
import sys

import torch

sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "platform")]
from kernels.interface import launch_options  # noqa: E402
from kernels.schedule_mtp_varlen import api, cuda, ref  # noqa: E402
from kernels.schedule_mtp_varlen.schedule_mtp_varlen_bench import BLOCK_SIZE, MAX_CONTEXT, NUM_SM_PARTS  # noqa: E402
from testing import timer  # noqa: E402
from testing.variants import load_variant, report_header, table_row, write_report  # noqa: E402

BATCHES = [int(b) for b in os.environ.get("BATCHES", "64,128,256,512,1024").split(",")]
DRAFTS = (1, 3)
VARIANTS = {
    name: load_variant(f"schedule_variant_{name}", path)
    for name, path in (v.split("=", 1) for v in os.environ.get("VARIANTS", "").split(",") if v)
}


def kernels_for(batch: int, k: int, dev: torch.device) -> dict:
    config = (k, BLOCK_SIZE, NUM_SM_PARTS, "int32", "int32")
    options = launch_options(torch.empty(0, device=dev))
    out = {"block": cuda.schedule_mtp_varlen_tl(*config, **options)}
    if batch <= 32 * ref.WARP_KERNEL_SLOTS[-1]:
        out["warp"] = cuda.schedule_mtp_varlen_warp_tl(*config, next(s for s in ref.WARP_KERNEL_SLOTS if 32 * s >= batch), **options)
    if batch <= 32 * ref.LANE_KERNEL_WARPS[-1]:
        warps = next(w for w in ref.LANE_KERNEL_WARPS if 32 * w >= batch)
        out["lane"] = cuda.schedule_mtp_varlen_lane_tl(*config, warps, **options)
        for name, module in VARIANTS.items():
            out[f"lane_{name}"] = module.schedule_mtp_varlen_lane_tl(*config, warps, **options)
    return out


def main():
    dev = torch.device("cuda")
    l2 = timer.l2_cache_bytes(dev)
    lines = report_header()
    for k in DRAFTS:
        for batch in BATCHES:
            tokens = batch * (1 + k)
            g = torch.Generator(device=dev).manual_seed(batch * 7 + k)

            def inputs():
                lens = torch.randint(0, MAX_CONTEXT, (batch,), generator=g, device=dev, dtype=torch.int32)
                return lens, torch.randint(0, k + 1, (batch,), generator=g, device=dev, dtype=torch.int32)

            sets = [inputs() for _ in range(timer.sets_for_rotation(batch * 8, l2))]
            want = ref.schedule_mtp_varlen_ref(*sets[0], k, BLOCK_SIZE, NUM_SM_PARTS, tokens)
            shapes = api.output_shapes(batch, tokens, NUM_SM_PARTS)
            kernels = kernels_for(batch, k, dev)
            ok = {}
            for name, kernel in kernels.items():
                outs = [torch.full(shape, -7, dtype=torch.int32, device=dev) for shape in shapes]
                kernel(*sets[0], *outs)
                ok[name] = all(torch.equal(got, exp) for got, exp in zip(outs, want))

            def call(kernel, s):
                kernel(*s, *(torch.empty(shape, dtype=torch.int32, device=dev) for shape in shapes))

            fns = {name: [lambda kernel=kernel, s=s: call(kernel, s) for s in sets] for name, kernel in kernels.items()}
            table_row(f"k {k} B {batch:5d}", fns, ok, lines)
    write_report(lines, "schedule_ab.txt")


if __name__ == "__main__":
    main()
