"""Same-run A/B of fused_sample's CUDA kernel file against other versions of it (kernels/fused_sample/
PERF.md, 2026-12-03 tenth session), kept as the record of what ran; no target runs it. Run from a
source tree's root on a CUDA device:

    VARIANTS="base=.gpu/fs_base.py,new=kernels/fused_sample/cuda.py" python3 fused_sample_variants_ab.py

Each variant NAME=PATH[+SAMPLER][@FORM] is a copy of kernels/fused_sample/cuda.py, imported under
its own module name (the kernels it imports from, random_sampling's and the sampler's, are this
tree's; SAMPLER, a copy of kernels/sampler/cuda.py, gives the second launch's sampler_flagged_tl),
and run with the interface's workspace in one of its forms: `auto` (the default) as the interface
runs it, fused_sample_tl below api.FLAGGING_MIN_ROWS rows, else fused_sample_flagging_tl and
sampler_flagged_tl; `one` fused_sample_tl at every batch; `flag` the two launches at every batch;
`flag_only` fused_sample_flagging_tl alone (what the second launch costs: correct only while no
row is flagged, which the check below would show). Inputs are the bench's (logits randn * 4,
top-k 50, top-p 0.9, temperature 0.7, random counters): for each (dtype, V, B) every variant is
timed by testing.timer (CUDA-graph replay, input sets rotated past 2 x L2), median of three
alternating rounds, and checked in the same run: its tokens and logprobs equal the interface's
(the committed kernel) on the first set, tokens exactly, logprobs within 1e-5 relative.

NCU=1 instead launches each variant a few times at fp32 B = 128 (for a profiler run), and WARM=1
once at B = 1 and 64 in each dtype (compiling it, so that several processes can fill TileLang's cache at
once); neither times anything."""
import os
import sys

import torch

sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "platform")]
from kernels.fused_sample import api
from kernels.sampler.api import check_arguments, launch
from kernels.sampler.sampler_bench import decode_inputs
from testing import timer
from testing.variants import load_variant

VARIANTS = [v.split("=") for v in os.environ.get("VARIANTS", "new=kernels/fused_sample/cuda.py").split(",")]
FORMS = ("auto", "one", "flag", "flag_only")
SWEEP = [(torch.float32, 129280), (torch.bfloat16, 151936)]
BATCHES = [int(b) for b in os.environ.get("BATCHES", "1,64,128,512").split(",")]
dev = torch.device("cuda")


def runner(mod, second, form):
    assert form in FORMS, form

    def run(logits, t, k, p, mp, seed, offset):
        args = (logits, t, k, p, mp, seed, offset, True)
        result = check_arguments("fused_sample", *args, None)
        B, V = logits.shape
        ws = api._workspace(B, V, logits.device)
        if form == "one" or (form == "auto" and B < api.FLAGGING_MIN_ROWS):
            return launch(mod.fused_sample_tl, *args, result, ws)
        launch(mod.fused_sample_flagging_tl, *args, result, ws)
        if form == "flag_only":
            return result
        return launch(second.sampler_flagged_tl, *args, result, ws[-1:])

    return run


def inputs(dtype, V, B, g):
    return decode_inputs(dtype, V, B, g, dev)


modules = {}
runs = {}
for name, spec in VARIANTS:
    paths, _, form = spec.partition("@")
    path, _, sampler_path = paths.partition("+")
    for p in (path, sampler_path or "kernels/sampler/cuda.py"):
        if p not in modules:
            modules[p] = load_variant(f"fs_variant_{len(modules)}", p)
    runs[name] = runner(modules[path], modules[sampler_path or "kernels/sampler/cuda.py"], form or "auto")
print("device", torch.cuda.get_device_name(), "empty kernel us", round(timer.empty_kernel_us(dev), 2), flush=True)
if os.environ.get("NCU"):
    x = inputs(torch.float32, 129280, 128, torch.Generator(device=dev).manual_seed(0))
    for name, run in runs.items():
        for _ in range(3):
            run(*x)
    torch.cuda.synchronize()
    sys.exit(0)

if os.environ.get("WARM"):
    for dtype, V in SWEEP:
        for B in (1, 64):
            x = inputs(dtype, V, B, torch.Generator(device=dev).manual_seed(0))
            for run in runs.values():
                run(*x)
    torch.cuda.synchronize()
    sys.exit(0)

l2 = timer.l2_cache_bytes(dev)
for dtype, V in SWEEP:
    for B in BATCHES:
        g = torch.Generator(device=dev).manual_seed(B)
        sets = [inputs(dtype, V, B, g) for _ in range(timer.sets_for_rotation(B * V * dtype.itemsize, l2))]
        want = api.fused_sample(*sets[0], return_logprobs=True)
        checks = {}
        for name, run in runs.items():
            got = run(*sets[0])
            checks[name] = torch.equal(got.tokens, want.tokens) and torch.allclose(got.logprobs, want.logprobs, rtol=1e-5, atol=1e-5)
        times = {name: [] for name in runs}
        for _ in range(3):
            for name, run in runs.items():
                times[name].append(timer.measure([lambda s=s, run=run: run(*s) for s in sets], budget_s=0.25).median_us)
        line = " ".join(f"{name} {sorted(v)[1]:8.2f}{'' if checks[name] else ' MISMATCH'}" for name, v in times.items())
        print(f"{str(dtype)[6:]:8s} V={V} B={B:4d} {line}", flush=True)
