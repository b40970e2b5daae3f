"""WORKSPACE set-up shared by this repo and by downstream repos (Bazel 4, offline)."""

def _venv_python_impl(rctx):
    python = rctx.os.environ.get("TILELANG_OPS_PYTHON", "")
    if not python:
        found = rctx.which("python3")
        if not found:
            fail("TILELANG_OPS_PYTHON is unset and no python3 is on PATH; run tools/bazelw")
        python = str(found)
    rctx.file("BUILD.bazel", """\
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

py_runtime(
    name = "py3",
    interpreter_path = "{python}",
    python_version = "PY3",
    stub_shebang = "#!{python}",
)

py_runtime_pair(name = "pair", py3_runtime = ":py3")

toolchain(
    name = "toolchain",
    toolchain = ":pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)
""".format(python = python))

venv_python = repository_rule(
    implementation = _venv_python_impl,
    environ = ["TILELANG_OPS_PYTHON"],
    doc = "A py_runtime toolchain for the interpreter named by TILELANG_OPS_PYTHON (the pinned venv).",
)

def tilelang_ops_repositories(root = "."):
    """Declares the offline shims and the venv toolchain.

    Args:
      root: path from the calling workspace to this repository's root.
    """
    shims = root + "/tools/bazel_shims/"
    for name in ["rules_cc", "rules_python", "tilelang_ops_pypi", "remote_coverage_tools"]:
        native.local_repository(name = name, path = shims + name)
    native.local_repository(name = "rules_java", path = "/usr/share/bazel/rules/java")
    venv_python(name = "tilelang_ops_python")
