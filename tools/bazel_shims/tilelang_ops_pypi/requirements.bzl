"""Offline stand-in for the rules_python pip hub `tilelang_ops_pypi`.

Packages come from the pinned venv that `tools/bazelw` creates and registers as the Python toolchain,
so each requirement resolves to an empty library of its own name here. Under bzlmod the real hub
resolves the same names from `requirements_lock.txt`.
"""

PACKAGES = ["absl_py", "matplotlib", "numpy", "pytest", "pytest_xdist", "tilelang", "torch", "tqdm"]

def requirement(name):
    normalized = name.lower().replace("-", "_").replace(".", "_")
    if normalized not in PACKAGES:
        fail("requirement(%r): not a direct dependency in requirements.in (%s)" % (name, PACKAGES))
    return "@tilelang_ops_pypi//:" + normalized
