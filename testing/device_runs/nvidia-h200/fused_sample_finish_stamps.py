"""Where the flagging form's time goes at a large batch: a copy of kernels/fused_sample/cuda.py whose
blocks read the GPU's global timer at up to sixteen points and leave the readings in the unused end
of their own list row, then one cold launch per batch (kernels/fused_sample/PERF.md; the eleventh
session wrote it with points 0-7, the twelfth, 2026-12-03, ran it and added 8-15 inside the finish).
Kept as the record of what ran; no target runs it. Run from a source tree's root on a CUDA device:

    BATCHES=1,128,512 python3 testing/device_runs/nvidia-h200/fused_sample_finish_stamps.py

The points (ns of %globaltimer, the low 32 bits; every block fills 0-2, the row's finishing block
the others too; in the order a finish passes them):
  0 block start          1 stage 1's loads, max, finite count and T0 folded
  2 record written, just before the arrival (thread 0)
  3 finish start         4 records read and folded   5 normaliser done, before the gather
  8 warp 0's lists gathered   9 decide_max done (both thread 0's own)
  6 every warp's lists gathered, before finish_from_lists
  10 top-k's threshold   11 survivors listed   12 top-p's threshold   13 the race's noise keys
  14 the race's candidates visited   15 the block's best folded   7 outputs written
They go to list_id[rec, LIST_CAP - 1 - k] at the block's end: a chunk lists at most a few hundred
entries and the finish reads only a list's first n, so with the bench's inputs (about 100 a chunk)
nothing the kernel reads is overwritten (the run checks n < LIST_CAP - 16 for every chunk).

Inputs are the bench's (fp32 V 129280, top-k 50, top-p 0.9, t 0.7). Each batch: three warm
launches, then 512 MiB written (L2 cold, as a serving step finds it) and one launch whose stamps
are read. Printed, in us from the first block's start: when the last block starts, the last
arrival, the last finish's end, and the last-ending row's points from its finish's start; the
medians of a block's stage 1 (0 -> 2), of a finish (3 -> 7) and of each point over the finishers;
and the timer's smallest nonzero step seen (its resolution on this device)."""
import importlib.util
import os
import pathlib
import sys
import tempfile

sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "platform")]

# (anchor line in cuda.py, code put before (-) or after (+) it or in its place (=), at the anchor's
# indentation).
_CLOCK = "tl_ops_globaltimer_lo"
_N_STAMPS = 16
# The finish's points in the order they are passed (8 and 9: thread 0's own gather and decide_max).
_FINISH = (3, 4, 5, 8, 9, 6, 10, 11, 12, 13, 14, 15, 7)
_STAMPS = [
    # A kernel takes one imported source: ex2's and the timer's together.
    ("            declare_ex2_ftz()", "=", ["T.import_source(_EX2_FTZ_SOURCE + _STAMP_SOURCE)"]),
    # The stamps live in r (alloc_row, wrapped below), where finish_from_lists, a module-level
    # macro, reaches them; the block's first code follows r's allocation.
    ("            tp = alloc_top_p()", "+", [
        "stamps = r.stamps",
        "for q in T.unroll(_N_STAMPS):",
        "    stamps[q] = 0",
        f'stamps[0] = T.call_extern("int32", "{_CLOCK}")',
    ]),
    ("            # 2. The normaliser, sum of exp(s - m) over the finite entries (d = 0 at the max: also", "-", [
        f'stamps[1] = T.call_extern("int32", "{_CLOCK}")',
    ]),
    ("                arrive(arrivals, bx, n_chunks, slot, last)", "-", [
        f'stamps[2] = T.call_extern("int32", "{_CLOCK}")',
    ]),
    ("            if last[0] != 0:", "+", [
        f'    stamps[3] = T.call_extern("int32", "{_CLOCK}")',
    ]),
    ("                        T.atomic_min(lo_img[0], img_lo[0])", "-", [
        f'stamps[8] = T.call_extern("int32", "{_CLOCK}")',
    ]),
    ("                        decide_max(bx, V, top_k, top_p, min_p, t, token, logprob, empty, best_key, best_id, fin64, r.st, r.sf, 1)", "+", [
        f'stamps[9] = T.call_extern("int32", "{_CLOCK}")',
    ]),
    ("            top_k_threshold(r, hist, sel, tx, warp, lane, n, r.st[_ST_REMAIN], lo, _ordered(m) - lo, tau_k)", "+", [
        f'r.stamps[10] = T.call_extern("int32", "{_CLOCK}")',
    ]),
    ("            tp.count[0] = tp.n[0]", "+", [
        f'r.stamps[11] = T.call_extern("int32", "{_CLOCK}")',
    ]),
    ("    # The race among the kept (sampled rows): the largest w / E, ties to the lower id.", "-", [
        f'r.stamps[12] = T.call_extern("int32", "{_CLOCK}")',
    ]),
    ("    noise_row_keys(row_seed, row_offset, r.keys)", "+", [
        f'r.stamps[13] = T.call_extern("int32", "{_CLOCK}")',
    ]),
    ("    block_fold(warp, lane, (), (best_key, best_id, other_key, other_id, red_key, red_id))", "-", [
        f'r.stamps[14] = T.call_extern("int32", "{_CLOCK}")',
    ]),
    ("    if tx == 0 and mode != T.int64(_DONE):", "-", [
        f'r.stamps[15] = T.call_extern("int32", "{_CLOCK}")',
    ]),
    ("                row_max[0] = best_key[0]", "+", [
        f'stamps[4] = T.call_extern("int32", "{_CLOCK}")',
    ]),
    ("                over[0] = fast[0]", "+", [
        f'stamps[5] = T.call_extern("int32", "{_CLOCK}")',
    ]),
    ("                    finish_from_lists(", "-", [
        f'stamps[6] = T.call_extern("int32", "{_CLOCK}")',
    ]),
    ("                elif layout.flag_overflow:", "-", [
        f'    stamps[7] = T.call_extern("int32", "{_CLOCK}")',
    ]),
    ("    return fused_sample", "-", [
        "        if tx == 0:",
        "            for q in T.unroll(_N_STAMPS):",
        "                list_id[rec, LIST_CAP - 1 - q] = stamps[q]",
        "",
    ]),
]
_SOURCE = f'''
from kernels.tl_ptx import _EX2_FTZ_SOURCE

_N_STAMPS = {_N_STAMPS}
_alloc_row_unstamped = alloc_row


def alloc_row(*args):
    r = _alloc_row_unstamped(*args)
    r.stamps = T.alloc_local((_N_STAMPS,), "int32")
    return r

_STAMP_SOURCE = """
#ifndef TL_OPS_GLOBALTIMER_LO
#define TL_OPS_GLOBALTIMER_LO
__device__ __forceinline__ int {_CLOCK}() {{
  unsigned int t;
  asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(t) :: "memory");
  return (int)t;
}}
#endif
"""
'''


def stamped_source(text: str) -> str:
    """cuda.py's text with the stamps above; every anchor must be one whole line, found once."""
    lines = text.split("\n")
    for anchor, where, code in _STAMPS:
        at = [i for i, line in enumerate(lines) if line == anchor or (anchor.endswith("(") and line.startswith(anchor))]
        assert len(at) == 1, (anchor, len(at))
        i = at[0]
        indent = " " * (len(anchor) - len(anchor.lstrip()))
        block = [indent + c if c else c for c in code]
        if where == "+":
            lines[i + 1:i + 1] = block
        elif where == "=":
            lines[i:i + 1] = block
        else:
            lines[i:i] = block
    return "\n".join(lines) + _SOURCE


def load_stamped(path: str = "kernels/fused_sample/cuda.py"):
    """The stamped copy of `path`, imported as its own module."""
    out = pathlib.Path(tempfile.mkdtemp()) / "fs_stamped.py"
    out.write_text(stamped_source(pathlib.Path(path).read_text()))
    spec = importlib.util.spec_from_file_location("fs_stamped", out)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    import torch

    from kernels.fused_sample import api
    from kernels.fused_sample.ref import CHUNK, LIST_CAP
    from kernels.sampler.api import check_arguments, launch
    from kernels.sampler.cuda import sampler_flagged_tl
    from kernels.sampler.sampler_bench import decode_inputs

    mod = load_stamped()
    dev = torch.device("cuda")
    V = 129280
    n = -(-V // CHUNK)
    flush = torch.empty(512 << 20, dtype=torch.uint8, device=dev)
    print("device", torch.cuda.get_device_name(), flush=True)
    for B in [int(b) for b in os.environ.get("BATCHES", "1,128,512").split(",")]:
        args = (*decode_inputs(torch.float32, V, B, torch.Generator(device=dev).manual_seed(B), dev), True)
        ws = api._workspace(B, V, dev)
        want = api.fused_sample(*args[:7], return_logprobs=True)
        for cold in (False, False, False, True):
            if cold:
                flush.fill_(1)
            result = check_arguments("fused_sample", *args, None)
            launch(mod.fused_sample_flagging_tl, *args, result, ws)
            launch(sampler_flagged_tl, *args, result, ws[-1:])
        torch.cuda.synchronize()
        assert torch.equal(result.tokens, want.tokens), "stamped copy's tokens differ from the interface's"
        listed = ws[1][:B * n, 2]
        assert int(listed.max()) < LIST_CAP - _N_STAMPS, "a list reaches the stamps' slots: stamps overwrote entries"
        st = ws[3][:B * n, LIST_CAP - _N_STAMPS:].flip(1).to(torch.int64).cpu() & 0xFFFFFFFF  # column q: point q
        t0 = int(st[:, 0].min())
        rel = ((st - t0) & 0xFFFFFFFF).double() / 1000  # us from the first block's start
        fin = (st[:, 3] != 0) & (st[:, 7] != 0)  # rows finished here (a flagged row has no 7)
        steps = (st[:, 0].sort().values.diff()).abs()
        print(f"B={B} blocks={B * n} finishers={int(fin.sum())} timer step ns={int(steps[steps > 0].min()) if (steps > 0).any() else 0}")
        print(f"  last block start {rel[:, 0].max():.2f}  last arrival {rel[:, 2].max():.2f}  last finish end {rel[fin, 7].max():.2f} us")
        print(f"  median stage 1 (0->2) {(rel[:, 2] - rel[:, 0]).median():.2f} us, median finish (3->7) {(rel[fin, 7] - rel[fin, 3]).median():.2f} us")
        last = int(torch.nonzero(fin).flatten()[rel[fin, 7].argmax()])
        print("  last row's finish, us from its start: " + " ".join(f"{k}:{rel[last, k] - rel[last, 3]:.2f}" for k in _FINISH))
        print("  median over finishers, us from the finish's start: " + " ".join(f"{k}:{(rel[fin, k] - rel[fin, 3]).median():.2f}" for k in _FINISH))


if __name__ == "__main__":
    main()
