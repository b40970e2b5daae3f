"""Same-run A/B of dflash's CUDA kernel file against other versions of it (kernels/dflash/PERF.md,
"Two launches"), kept as the record of what ran; no target runs it. Run from a source tree's root on
a CUDA device, TileLang on the path:

    VARIANTS="one=.gpu/dflash_one.py,two=kernels/dflash/cuda.py,pdl=kernels/dflash/cuda.py@pdl" python3 dflash_variants_ab.py

Each variant NAME=PATH[@pdl] is a copy of kernels/dflash/cuda.py, imported under its own module
name: one with dflash_confidence_tl runs it and then dflash_derive_tl (both launches timed; with
@pdl both built with pdl=True, the second a programmatic dependent of the first), one without runs
its dflash_tl (main's one-launch kernel). Outputs are allocated per call, as the interface does.
Inputs are the bench's (dflash_bench.decode_inputs: H = He = 7168, V = 129280, threshold 0.5 as a
device tensor) at B = 1, 8, 64, 256 x drafts 4 and 8. Every variant is checked in the same run on
the first input set: its confidences within the tests' bound of a float64 reference (0.25 * 4e-6 *
sum |terms| + 1e-6), proposal_len, expected_len and tokens bit for bit ref.derive_from_confidence
of its own confidences. Then testing.timer (CUDA-graph replay, input sets rotated past 2 x L2),
median of three alternating rounds. The table goes to stdout and $OUT/dflash_ab.txt."""
import os
import sys

import torch

sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "platform")]
from kernels.dflash import ref
from kernels.dflash.dflash_bench import BATCHES, DRAFT_LENS, H, HE, THRESHOLD, decode_inputs
from testing import timer
from testing.variants import alternating_median_us, load_variant

VARIANTS = [v.split("=") for v in os.environ.get("VARIANTS", "two=kernels/dflash/cuda.py").split(",")]
dev = torch.device("cuda")


def runner(mod, pdl):
    """run(args, threshold) -> (confidence, proposal_len, expected_len, tokens), fresh outputs."""
    if hasattr(mod, "dflash_confidence_tl"):
        options = dict(pdl=True) if pdl else {}
        confidence, derive = mod.dflash_confidence_tl(H, HE, H, "int64", **options), mod.dflash_derive_tl("int64", "int32", **options)

        def launch(reads, thr, draft, cu, outs):
            confidence(*reads, outs[0])
            derive(outs[0], thr, draft, cu, *outs[1:])
    else:
        launch_one = mod.dflash_tl(H, HE, H, "int64", "int64", "int32")

        def launch(reads, thr, draft, cu, outs):
            launch_one(*reads, thr, draft, cu, *outs)

    def run(a, thr):
        n, b = a["hidden"].shape[0], a["cu_draft_lens"].shape[0] - 1
        outs = (torch.empty(n, device=dev), torch.empty(b, dtype=torch.int32, device=dev), torch.empty(b, device=dev), torch.empty_like(a["draft_tokens"]))
        launch([a[k] for k in ("hidden", "prev_tokens", "embedding", "w_h", "w_e", "bias")], thr, a["draft_tokens"], a["cu_draft_lens"], outs)
        return outs

    return run


def check(got, a, thr, draft_len):
    """The tests' contract: confidences within the fp32 accumulation bound, the rest exact."""
    th = a["hidden"].double() * a["w_h"].double()
    te = a["embedding"][a["prev_tokens"]].double() * a["w_e"].double()
    logit = th.sum(-1) + te.sum(-1) + a["bias"].double()
    bound = 0.25 * 4e-6 * (th.abs().sum(-1) + te.abs().sum(-1) + a["bias"].double().abs()) + 1e-6
    close = bool(((got[0].double() - torch.sigmoid(logit)).abs() <= bound).all())
    derived = ref.derive_from_confidence(got[0], a["draft_tokens"], a["cu_draft_lens"], thr, max_len=draft_len)
    return close and all(torch.equal(g, d) for g, d in zip(got[1:], derived))


runs = {name: runner(load_variant(f"dflash_variant_{name}", path.split("@")[0]), path.endswith("@pdl")) for name, path in VARIANTS}
l2 = timer.l2_cache_bytes(dev)
lines = [f"device {torch.cuda.get_device_name()}, empty kernel {timer.empty_kernel_us(dev):.2f} us; median us of 3 alternating rounds"]
print(lines[0], flush=True)
for draft_len in DRAFT_LENS:
    for B in BATCHES:
        g = torch.Generator(device=dev).manual_seed(B * 100 + draft_len)
        thr = torch.full((1,), THRESHOLD, device=dev)
        sets = [decode_inputs(B, draft_len, g, dev) for _ in range(timer.sets_for_rotation(B * draft_len * (H + HE) * 2, l2))]
        ok = {name: check(run(sets[0], thr), sets[0], thr, draft_len) for name, run in runs.items()}
        times = alternating_median_us({name: [lambda s=s, run=run: run(s, thr) for s in sets] for name, run in runs.items()}, budget_s=0.25)
        cells = " ".join(f"{name} {us:7.2f}{'' if ok[name] else ' MISMATCH'}" for name, us in times.items())
        lines.append(f"B {B:3d} x {draft_len}  {cells}")
        print(lines[-1], flush=True)
with open(os.path.join(os.environ.get("OUT", "."), "dflash_ab.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")
