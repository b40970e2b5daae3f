"""`tl_kernel(name)`: every target of one kernel package, from the package's fixed file set.

Libraries :ref :cuda :asc :api; CPU tests <name>_test_ref, <name>_codegen_cuda, <name>_codegen_ascend;
device tests <name>_test_cuda (tag gpu) and <name>_test_ascend (tag npu); binary <name>_bench.
All tests run <name>_test.py through testing/pytest_main.py, selecting one marker suite each.
"""

load("@rules_python//python:defs.bzl", "py_binary", "py_library", "py_test")
load("@tilelang_ops_pypi//:requirements.bzl", "requirement")

_ROOT = "../.."  # imports are root-relative (`from kernels.<name> import ref`)

def _suite_test(name, test_file, suite, deps, size, tags = [], extra_args = []):
    py_test(
        name = name,
        size = size,
        srcs = [test_file, "//testing:pytest_main.py"],
        main = "//testing:pytest_main.py",
        args = ["$(rootpath %s)" % test_file, "--tl-suite=" + suite] + extra_args,
        deps = deps,
        tags = tags,
    )

def tl_kernel(name, codegen_size = "medium", device_size = "large", ref_deps = [], backend_deps = [], api_deps = [], test_deps = [], bench_deps = []):
    """Declares the targets of kernels/<name>/.

    Args:
      name: the kernel (the package directory name).
      codegen_size: test size of the codegen targets (nvcc compiles every shipped configuration).
      device_size: test size of the device targets.
      ref_deps: other packages' libraries the reference uses (e.g. //kernels/quant:formats).
      backend_deps: other packages' libraries cuda.py and asc.py use (shared TileLang helpers).
      api_deps: other packages' libraries the interface uses.
      test_deps: libraries <name>_test.py imports besides the package's own (shared test helpers).
      bench_deps: libraries <name>_bench.py imports besides the package's own (shared cases).
    """
    native.package(default_visibility = ["//visibility:public"])
    torch = requirement("torch")
    tilelang = requirement("tilelang")
    py_library(name = "init", srcs = ["__init__.py"], imports = [_ROOT], deps = ["//kernels:init"])
    py_library(name = "ref", srcs = ["ref.py"], imports = [_ROOT], deps = [":init", torch] + ref_deps)
    # Backends may share the reference's contract-level helpers (e.g. how a parameter is rounded).
    py_library(name = "cuda", srcs = ["cuda.py"], imports = [_ROOT], deps = [":init", ":ref", "//kernels:static_args", tilelang] + backend_deps)
    py_library(name = "asc", srcs = ["asc.py"], imports = [_ROOT], deps = [":init", ":ref", "//kernels:static_args", tilelang] + backend_deps)

    # The interface reaches backends only through tilelang_ops (which depends on it), never directly.
    py_library(name = "api", srcs = ["api.py"], imports = [_ROOT], deps = [":init", ":ref", "//kernels:interface", torch] + api_deps)

    test_file = name + "_test.py"
    common = ["//platform:ops", "//testing", requirement("pytest")] + test_deps
    # medium, not small: quant's ref suite takes 36 s on CI's 2 cores, and ran past small's 60 s
    # limit when another suite's nvcc shared them (2026-12-02).
    _suite_test(name + "_test_ref", test_file, "ref", [":api", ":ref"] + common, "medium")
    _suite_test(name + "_codegen_cuda", test_file, "codegen_cuda", [":cuda", "//testing:codegen"] + common, codegen_size)
    _suite_test(name + "_codegen_ascend", test_file, "codegen_ascend", [":asc", "//testing:codegen"] + common, codegen_size)
    for suffix, backend, library, tag in [("cuda", "cuda", ":cuda", "gpu"), ("ascend", "asc", ":asc", "npu")]:
        _suite_test(
            name + "_test_" + suffix,
            test_file,
            "device",
            [":api", ":ref", library] + common,
            device_size,
            tags = [tag, "no-sandbox", "exclusive"],
            extra_args = ["--backend=" + backend],
        )

    py_library(
        name = "bench_cases",
        srcs = [name + "_bench.py"],
        imports = [_ROOT],
        deps = [":api", ":ref", "//platform:ops", "//testing:bench"] + bench_deps,
    )
    py_binary(
        name = name + "_bench",
        srcs = ["//testing:benchmark.py"],
        main = "//testing:benchmark.py",
        args = ["--kernels=" + name],
        deps = [":bench_cases"],
        tags = ["gpu"],
    )

    native.filegroup(
        name = "package_files",
        srcs = native.glob(["*"]),
        visibility = ["//kernels:__pkg__"],
    )
