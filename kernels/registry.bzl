"""Every kernel package under kernels/. A test checks this list equals the directories there.

Kept as a plain list literal: tilelang_ops reads it directly when it runs outside Bazel.
"""

KERNELS = [
    "gather",
    "norm",
    "outlier_detection",
    "quant",
]
