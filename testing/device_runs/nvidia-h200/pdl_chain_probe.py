"""Same-run probe: what programmatic dependent launch (kernels/tl_launch.py) does to a chain of
launch-bound kernels in one CUDA graph, the bench's way of timing them. Kept as the record of what
ran (testing/device_runs/nvidia-h200/calls_2026-12-06b.md); no target runs it. Run from a source
tree's root on an sm_90+ device, TileLang on the path.

Each case is a bench case (kernels/<k>/<k>_bench.py) run through its interface, with the
interfaces' PDL choice (kernels.interface.takes_pdl) forced off and on while the timer captures it:
testing.timer's CUDA-graph replay over input sets rotated past 2 x L2 (every launch of the graph is
the same kernel on the next set, as in the bench), median of three alternating rounds. An empty
TileLang kernel, plain and PDL, gives the floors. Correctness of the PDL launches is the device
suites' (they run the interfaces, which take PDL on sm_90+); KERNELS=a,b limits the packages,
CASE_IDS=x,y the cases. Run from another tree's root (python3 PATH/pdl_chain_probe.py), it times that
tree's kernels."""
import os
import sys

import torch

sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "platform")]
import tilelang  # noqa: E402
import tilelang.language as T  # noqa: E402

from kernels.tl_launch import dependent_entry  # noqa: E402
from testing import timer  # noqa: E402
from testing.variants import time_groups  # noqa: E402


@tilelang.jit
def empty(pdl: bool):
    @T.prim_func
    def empty_kernel(x: T.Tensor((1,), "int32")):
        with T.Kernel(1, threads=32) as _:
            dependent_entry(pdl)

    return empty_kernel


def empty_rows(dev):
    """An empty TileLang kernel, plain and PDL: the floors."""
    x = torch.zeros(1, dtype=torch.int32, device=dev)
    return {f"empty pdl={p}": [lambda k=empty(p): k(x)] * 4 for p in (False, True)}


# (kernel package, bench case ids): the decode sizes the issues' launch bar covers, and the large
# sizes where PDL could cost (its kernels' pointers lose __restrict__, so no read-only loads).
CASES = {
    "norm": ["t1_d7168_bf16", "t64_d7168_bf16", "t256_d7168_bf16", "add_t1_d7168_bf16", "add_t64_d7168_bf16",
             "add_fp8_g128_t1_d7168_bf16", "t16384_d7168_bf16", "add_t16384_d7168_bf16", "add_fp8_g128_t16384_d7168_bf16"],
    "store_kv_cache": ["mla_bf16_t1_d576", "mla_bf16_t8_d576", "mla_bf16_t64_d576", "mla_bf16_t256_d576", "mla_fp4_t1_d576",
                       "mla_fp4_t256_d576", "mla_bf16_t4096_d576", "mla_fp4_t4096_d576"],
    "schedule_mtp_varlen": ["decode_b1_k1", "decode_b64_k1", "decode_b256_k3", "decode_b1024_k1"],
    "swa_index": ["decode_b1_mtp1_w128", "decode_b64_mtp1_w128", "decode_b1_mtp1_w4096", "decode_b64_mtp1_w4096",
                  "decode_b256_mtp1_w4096", "decode_b1024_mtp3_w4096"],
    "get_kv_index": ["slots_decode_b1_t1", "slots_decode_b256_t256", "paged_decode_b1_t1", "paged_decode_b64_t64", "append_decode_b1_t1"],
    "quant": ["fp8_t1_d7168_g128", "fp8_t64_d7168_g128", "fp8_t16384_d7168_g128", "fp4_e4m3_t16384_d7168_g16"],
    "outlier_detection": ["rows_t1_d7168_bf16", "rows_t64_d7168_bf16", "rows_t16384_d7168_bf16"],
    "load_paged_kv_cache": ["bf16_b1_t4096_d576", "bf16_b8_t1024_d576", "fp4_b8_t1024_d576", "bf16_b64_t2048_d576", "fp4_b64_t2048_d576"],
    "candidate_blocks": ["decode_t1_nb2048_k64", "decode_t64_nb2048_k64", "prefill_t4096_nb2048_k64", "full_t4096_nb2048_k64"],
    "gather": ["n65536_m1_d7168_bf16_i64", "n65536_m64_d7168_bf16_i64", "n65536_m32768_d4096_bf16_i64"],
    "random_sampling": ["logits_float32_b1_v129280", "logits_bfloat16_b64_v151936"],
}


def with_pdl(pdl, fn):
    """fn run (and so captured) with the interfaces' PDL choice forced to `pdl`."""
    from kernels import interface

    def call():
        saved = interface.takes_pdl
        interface.takes_pdl = lambda t: pdl
        try:
            return fn()
        finally:
            interface.takes_pdl = saved

    return call


def bench_rows(dev, kernel, case_id):
    """The bench's case through its interface, as the bench times it, with PDL off and on."""
    import importlib

    case = next(c for c in importlib.import_module(f"kernels.{kernel}.{kernel}_bench").cases() if c.case_id == case_id)
    fns = [w.fn for w in (case.make(dev, k) for k in range(timer.sets_for_rotation(case.footprint_bytes, timer.l2_cache_bytes(dev))))]
    return {f"{kernel} {case_id} pdl={p}": [with_pdl(p, f) for f in fns] for p in (False, True)}


def main():
    dev = torch.device("cuda")
    lines = [f"device {torch.cuda.get_device_name()}, timer.empty_kernel_us {timer.empty_kernel_us(dev):.2f} us"]
    only = os.environ.get("KERNELS")
    only_ids = os.environ.get("CASE_IDS")
    groups = [empty_rows(dev)] + [
        bench_rows(dev, kernel, case_id)
        for kernel, ids in CASES.items()
        if not only or kernel in only.split(",")
        for case_id in ids
        if not only_ids or case_id in only_ids.split(",")
    ]
    time_groups(groups, lines, "pdl_chain.txt", width=52)


if __name__ == "__main__":
    main()
