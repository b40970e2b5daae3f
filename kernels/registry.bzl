"""Every kernel package under kernels/. A test checks this list equals the directories there.

Kept as a plain list literal: tilelang_ops reads it directly when it runs outside Bazel.
"""

KERNELS = [
    "candidate_blocks",
    "dflash",
    "fused_sample",
    "gather",
    "get_kv_index",
    "load_paged_kv_cache",
    "norm",
    "outlier_detection",
    "quant",
    "random_sampling",
    "sampler",
    "schedule_mtp_varlen",
    "store_kv_cache",
    "swa_index",
]
