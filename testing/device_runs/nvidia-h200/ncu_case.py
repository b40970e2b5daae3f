"""One benchmark case's call, or one of its peers', inside a CUDA profiler range, for Nsight Compute.
Kept as the record of what ran; no target runs it. Run from a source tree's root on a CUDA device:

    ncu --profile-from-start off --clock-control none --section WarpStateStats ... \
        python3 testing/device_runs/nvidia-h200/ncu_case.py KERNEL CASE_ID [PEER]

The case comes from kernels/KERNEL/KERNEL_bench.py (the id as the bench prints it, without the
kernel's name); PEER names one of its peers (torch_eager, torch_compile, ...) to profile that
instead. Input set 1 is profiled after set 0 has warmed every compile up, so the profiled launch
finds the data in DRAM, not L2, as the bench's rotation does. Every launch between the profiler's
start and stop is profiled; the call's outputs are not checked here (the bench and the device tests
do that).
"""
import os
import sys

import torch

sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "platform")]
from testing.benchmark import load_cases  # noqa: E402


def main(kernel: str, case_id: str, peer: str | None = None) -> None:
    (case,) = [c for c in load_cases([kernel]) if c.case_id == case_id]
    dev = torch.device("cuda")
    warm, measured = case.make(dev, 0), case.make(dev, 1)
    pick = (lambda w: w.fn) if peer is None else (lambda w: w.peers[peer])
    for _ in range(3):
        pick(warm)()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    pick(measured)()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(f"profiled {kernel}/{case_id}" + (f" peer {peer}" if peer else ""), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
