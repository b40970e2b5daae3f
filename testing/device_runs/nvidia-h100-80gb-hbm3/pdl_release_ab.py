"""Same-run A/B of where a PDL kernel lets the next grid launch, on swa_index's bench cases
(kernels/swa_index/PERF.md: W 4096 MTP 1 at B 64 and 256 run at 0.29x and 0.56x of a same-bytes
copy on an H100). Kept as the record of what ran; no target runs it. Run from a source tree's root
on a CUDA device, TileLang on the path:

    CASES=b64_mtp1_w4096,b64_mtp3_w4096 python3 testing/device_runs/nvidia-h100-80gb-hbm3/pdl_release_ab.py

Three builds of kernels/swa_index/cuda.py, each called as the interface calls it (outputs
allocated per call, as the bench's policy is) over the bench's inputs (decode_inputs; sets rotated
past 2 x L2):
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
from kernels.swa_index.swa_index_bench import BLOCK_SIZE, cases, decode_inputs  # noqa: E402
from kernels.tl_launch import release_dependents, wait_for_earlier_grids  # noqa: E402
from testing import timer  # noqa: E402
from testing.variants import load_variant, report_header, table_row, write_report  # noqa: E402

CASES = os.environ.get("CASES", "b64_mtp1_w4096,b256_mtp1_w4096,b64_mtp3_w4096,b1024_mtp1_w4096,b1_mtp1_w128,b64_mtp1_w128").split(",")


def _release_after_wait(pdl: bool) -> None:
    wait_for_earlier_grids(pdl)
    release_dependents(pdl)


late = load_variant("swa_index_cuda_late", cuda.__file__)
late.dependent_entry = _release_after_wait
BUILDS = {"plain": (cuda, False), "pdl": (cuda, True), "late": (late, True)}


def _call(kernel, inputs, outs_like):
    """One interface-like call: fresh outputs shaped like the reference's, then the kernel."""
    outs = [torch.empty_like(o) for o in outs_like]
    kernel(*inputs, *outs)
    return outs


def main():
    dev = torch.device("cuda")
    l2 = timer.l2_cache_bytes(dev)
    lines = report_header()
    wanted = {f"decode_{c}" for c in CASES}
    for case in cases():
        if case.case_id not in wanted:
            continue
        p = case.params
        gen = torch.Generator(device=dev).manual_seed(len(lines))
        sets = [decode_inputs(p["B"], p["tokens"] // p["B"], dev, gen) for _ in range(timer.sets_for_rotation(case.footprint_bytes, l2))]
        want = ref.swa_index_ref(*sets[0], p["window"], BLOCK_SIZE, "minus_one")
        fns, ok = {}, {}
        for name, (module, pdl) in BUILDS.items():
            kernel = module.swa_index_tl(BLOCK_SIZE, "minus_one", "int32", "int64", "int32", pdl=pdl)
            outs = [torch.full_like(w, -7) for w in want]
            kernel(*sets[0], *outs)
            ok[name] = all(torch.equal(got, exp) for got, exp in zip(outs, want))
            fns[name] = [lambda kernel=kernel, s=s: _call(kernel, s, want) for s in sets]
        table_row(f"{case.case_id:28s}", fns, ok, lines)
    write_report(lines, "pdl_release_ab.txt")


if __name__ == "__main__":
    main()
