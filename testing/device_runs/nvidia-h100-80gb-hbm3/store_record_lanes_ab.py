"""Same-run A/B of store_kv_cache's quantised-record kernels (FP4 / FP8 MLA records) built with other
lanes per token and threads per block (kernels/store_kv_cache/PERF.md), kept as the record of what
ran; no target runs it. Run from a source tree's root on a CUDA device, TileLang on the path:

    VARIANTS="l16=16,l32=32,l64=64" KINDS=fp4,fp8 TOKENS=1,64,256,4096,16384 python3 store_record_lanes_ab.py

Each variant NAME=LANES[:THREADS] is kernels/store_kv_cache/cuda.py imported under its own module
name with `_RECORD_LANES` (and `_BLOCK_THREADS`, 128 unless named) set before its factories build;
the kernels are the interface's (int64 slots, block size 64, dense rows and cache, PDL on sm_90+).
Data: the bench's (randn rows; slots from its _slots: whole blocks of 64 in a random block order; the run
of calls_2026-12-07h.md built the same slots inline, the same draws in the same order). Every
variant's cache, poisoned with 0xA5 first, must equal layout.encode_rows placed at the slots and
0xA5 elsewhere (the table marks a MISMATCH). Timing: testing.timer (CUDA-graph replay, input sets
rotated past 2 x L2), median of three alternating rounds, us, with `copy`: an SM copy of the
case's bytes (timer.same_bytes_copy, the bench's same_bytes_copy peer). The table goes to stdout
and $OUT/store_record_lanes_ab.txt."""
import os
import sys

import torch

sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "platform")]
from kernels.store_kv_cache import layout  # noqa: E402
from kernels.store_kv_cache.store_kv_cache_bench import _slots as bench_slots  # noqa: E402
from testing import timer  # noqa: E402
from testing.variants import load_variant, report_header, table_row, write_report  # noqa: E402

BLOCK = 64
VARIANTS = [v.split("=") for v in os.environ.get("VARIANTS", "l16=16,l32=32").split(",")]
KINDS = os.environ.get("KINDS", "fp4,fp8").split(",")
TOKENS = [int(t) for t in os.environ.get("TOKENS", "1,64,256,4096,16384").split(",")]
PATH = "kernels/store_kv_cache/cuda.py"


def variant_factories():
    out = {}
    for name, spec in VARIANTS:
        lanes, _, threads = spec.partition(":")
        module = load_variant(f"store_variant_{name}", PATH)
        module._RECORD_LANES = int(lanes)
        module._BLOCK_THREADS = int(threads or 128)
        out[name] = module
    return out


def main():
    dev = torch.device("cuda")
    pdl = torch.cuda.get_device_capability(dev)[0] >= 9
    modules = variant_factories()
    l2 = timer.l2_cache_bytes(dev)
    lines = report_header()
    for kind in KINDS:
        rec = layout.FP4 if kind == "fp4" else layout.FP8
        kernels = {name: getattr(m, f"store_kv_{kind}_tl")("int64", BLOCK, layout.WIDTH, BLOCK * rec.record_bytes, x_align=16, pdl=pdl) for name, m in modules.items()}
        for t in TOKENS:
            g = torch.Generator(device=dev).manual_seed(7 * t + len(kind))
            nb = -(-t // BLOCK)
            per_set = t * (layout.WIDTH * 2 + 8 + rec.record_bytes)

            def one_set():
                kv = torch.randn((t, layout.WIDTH), generator=g, device=dev).to(torch.bfloat16)
                slots, _ = bench_slots(t, BLOCK, g, dev)
                return kv, slots, torch.empty((nb, BLOCK, rec.record_bytes), dtype=torch.uint8, device=dev)

            sets = [one_set() for _ in range(timer.sets_for_rotation(per_set, l2))]
            kv, slots, _ = sets[0]
            want = torch.full((nb * BLOCK, rec.record_bytes), 0xA5, dtype=torch.uint8, device=dev)
            want[slots] = layout.encode_rows(kv, rec)
            ok = {}
            for name, k in kernels.items():
                cache = torch.full((nb, BLOCK, rec.record_bytes), 0xA5, dtype=torch.uint8, device=dev)
                k(kv, slots, cache)
                ok[name] = torch.equal(cache.view(-1, rec.record_bytes), want)
            fns = {name: [lambda s=s, k=k: k(*s) for s in sets] for name, k in kernels.items()}
            fns["copy"] = timer.same_bytes_copy(dev, per_set, l2)
            ok["copy"] = True
            table_row(f"{kind} T {t:6d}", fns, ok, lines)
    write_report(lines, "store_record_lanes_ab.txt")


if __name__ == "__main__":
    main()
