"""Same-run A/B of where a PDL kernel lets the next grid launch, on swa_index's bench cases
(kernels/swa_index/PERF.md: W 4096 MTP 1 at B 64 and 256 run at 0.29x and 0.56x of a same-bytes
copy on an H100). Kept as the record of what ran; no target runs it. Run from a source tree's root
on a CUDA device, TileLang on the path:

    CASES=b64_mtp1_w4096,b64_mtp3_w4096 python3 testing/device_runs/nvidia-h100-80gb-hbm3/pdl_release_ab.py

Three builds of kernels/swa_index/cuda.py, each called as the interface calls it (outputs
allocated per call, as the bench's policy is) over the bench's input sets (rotated past 2 x L2):
  plain  pdl=False: a plain launch.
  pdl    pdl=True: the shipped entry, the next grid released first, then the wait
         (kernels/tl_launch.py). Under graph replay each grid releases the next as soon as its blocks
         are resident, so many later grids' blocks can wait on the SMs at once.
  late   pdl=True with the release after the wait (a copy of cuda.py whose dependent_entry is
         swapped): the next grid launches only once this one runs, so at most two grids share
         the SMs.
Each build's outputs are checked against ref.py on the first input set (MISMATCH marks a
difference); median of three alternating rounds, us. The table goes to stdout and
$OUT/pdl_release_ab.txt."""
import os
import sys

import torch

sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "platform")]
from kernels.swa_index import cuda, ref  # noqa: E402
from kernels.swa_index.swa_index_bench import BLOCK_SIZE, cases  # noqa: E402
from kernels.tl_launch import release_dependents, wait_for_earlier_grids  # noqa: E402
from testing import timer  # noqa: E402
from testing.variants import load_variant, table_row, write_report  # noqa: E402

CASES = os.environ.get("CASES", "b64_mtp1_w4096,b256_mtp1_w4096,b64_mtp3_w4096,b1024_mtp1_w4096,b1_mtp1_w128,b64_mtp1_w128").split(",")


def _release_after_wait(pdl: bool) -> None:
    wait_for_earlier_grids(pdl)
    release_dependents(pdl)


late = load_variant("swa_index_cuda_late", cuda.__file__)
late.dependent_entry = _release_after_wait
BUILDS = {"plain": (cuda, False), "pdl": (cuda, True), "late": (late, True)}


def main():
    dev = torch.device("cuda")
    l2 = timer.l2_cache_bytes(dev)
    lines = [f"device {torch.cuda.get_device_name()}, empty kernel {timer.empty_kernel_us(dev):.2f} us; median us of 3 alternating rounds"]
    print(lines[0], flush=True)
    wanted = {f"decode_{c}": c for c in CASES}
    for case in cases():
        if case.case_id not in wanted:
            continue
        p = case.params
        q = p["tokens"] // p["B"]
        gen = torch.Generator(device=dev).manual_seed(len(lines))
        sets = []
        for _ in range(timer.sets_for_rotation(case.footprint_bytes, l2)):
            qsl = torch.arange(p["B"] + 1, dtype=torch.int32, device=dev) * q
            pos = (torch.arange(q, device=dev) + 8192).repeat(p["B"])
            table = torch.randperm(p["B"] * p["max_blocks"], generator=gen, device=dev).to(torch.int32).reshape(p["B"], p["max_blocks"])
            lens = torch.full((p["B"],), 8192 + q, dtype=torch.int32, device=dev)
            sets.append((qsl, pos, table, lens))
        want = ref.swa_index_ref(*sets[0], p["window"], BLOCK_SIZE, "minus_one")
        specs = [((p["tokens"], p["window"]), torch.int32), ((p["tokens"],), torch.int32), ((p["B"],), torch.int32), ((p["B"],), torch.int64), ((p["B"],), torch.int64)]
        fns, ok = {}, {}
        for name, (module, pdl) in BUILDS.items():
            kernel = module.swa_index_tl(BLOCK_SIZE, "minus_one", "int32", "int64", "int32", pdl=pdl)
            outs = [torch.full(shape, -7, dtype=dtype, device=dev) for shape, dtype in specs]
            kernel(*sets[0], *outs)
            ok[name] = all(torch.equal(got, exp.to(got.dtype)) for got, exp in zip(outs, want))

            def call(kernel=kernel, s=None):
                outs = [torch.empty(shape, dtype=dtype, device=dev) for shape, dtype in specs]
                kernel(*s, *outs)
                return outs

            fns[name] = [lambda call=call, s=s: call(s=s) for s in sets]
        table_row(f"{case.case_id:28s}", fns, ok, lines)
    write_report(lines, "pdl_release_ab.txt")


if __name__ == "__main__":
    main()
