"""kernels/registry.bzl lists exactly the kernel directories, and each has its full file set."""

from __future__ import annotations

import ast
import pathlib

import pytest

REQUIRED = ("BUILD.bazel", "ref.py", "cuda.py", "asc.py", "api.py", "{name}_test.py", "{name}_bench.py")


def registry_kernels(registry: pathlib.Path) -> list[str]:
    for node in ast.parse(registry.read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["KERNELS"]:
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{registry} has no KERNELS list")


def registry_problems(kernels_dir: pathlib.Path) -> list[str]:
    """Every way the directory tree and the registry disagree, as readable lines."""
    registered = registry_kernels(kernels_dir / "registry.bzl")
    problems = [f"{k!r} is registered twice" for k in sorted({k for k in registered if registered.count(k) > 1})]
    present = {p.name for p in kernels_dir.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    problems += [f"kernels/{d}/ is not in kernels/registry.bzl" for d in sorted(present - set(registered))]
    problems += [f"{k!r} is registered but kernels/{k}/ does not exist" for k in sorted(set(registered) - present)]
    for name in sorted(set(registered) & present):
        for pattern in REQUIRED:
            f = pattern.format(name=name)
            if not (kernels_dir / name / f).is_file():
                problems.append(f"kernels/{name}/ lacks {f}")
    return problems


def _source_kernels_dir() -> pathlib.Path:
    # Runfiles are symlinks into the source tree; following one finds the real directory listing.
    return (pathlib.Path(__file__).parent / "registry.bzl").resolve().parent


def test_registry_matches_kernel_directories():
    assert registry_problems(_source_kernels_dir()) == []


def _fake_tree(tmp_path: pathlib.Path, registered: list[str], dirs: dict[str, list[str]]) -> pathlib.Path:
    (tmp_path / "registry.bzl").write_text(f"KERNELS = {registered!r}\n")
    for name, files in dirs.items():
        (tmp_path / name).mkdir()
        for f in files:
            (tmp_path / name / f).write_text("")
    return tmp_path


def _complete(name: str) -> list[str]:
    return [p.format(name=name) for p in REQUIRED]


def test_complete_fake_tree_passes(tmp_path):
    assert registry_problems(_fake_tree(tmp_path, ["a", "b"], {"a": _complete("a"), "b": _complete("b")})) == []


@pytest.mark.parametrize("missing", REQUIRED)
def test_missing_file_is_reported(tmp_path, missing):
    files = [f for f in _complete("a") if f != missing.format(name="a")]
    problems = registry_problems(_fake_tree(tmp_path, ["a"], {"a": files}))
    assert problems == [f"kernels/a/ lacks {missing.format(name='a')}"]


def test_unregistered_directory_is_reported(tmp_path):
    problems = registry_problems(_fake_tree(tmp_path, ["a"], {"a": _complete("a"), "new": []}))
    assert problems == ["kernels/new/ is not in kernels/registry.bzl"]


def test_registered_without_directory_is_reported(tmp_path):
    problems = registry_problems(_fake_tree(tmp_path, ["a", "ghost"], {"a": _complete("a")}))
    assert problems == ["'ghost' is registered but kernels/ghost/ does not exist"]
