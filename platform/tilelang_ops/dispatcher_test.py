"""The dispatcher: backend choice, `ops` re-exports, name conflicts, missing kernels, interface."""

from __future__ import annotations

import importlib
import os
import platform
import sysconfig
import types

import pytest

import tilelang_ops
from tilelang_ops import dispatcher
from tilelang_ops.errors import KernelNameConflictError, KernelUnavailableError
from tilelang_ops.platform_info import choose_platform


def test_stdlib_platform_is_not_shadowed():
    assert os.path.dirname(platform.__file__) == sysconfig.get_paths()["stdlib"]
    assert platform.machine() and platform.python_version().startswith("3.")


def test_platform_backend_is_one_of_the_backends():
    assert tilelang_ops.PLATFORM.tilelang_ops_backend in ("cuda", "asc")
    assert tilelang_ops.PLATFORM.chosen_by in ("build", "env", "device", "default")


@pytest.mark.parametrize(
    "build,env,accelerator,expected",
    [
        ("asc", {"TILELANG_OPS_BACKEND": "cuda"}, "cuda", ("asc", "build")),
        ("", {"TILELANG_OPS_BACKEND": "asc"}, "cuda", ("asc", "env")),
        ("", {}, "cuda", ("cuda", "device")),
        ("", {}, "npu", ("asc", "device")),
        ("", {}, None, ("cuda", "default")),
    ],
)
def test_backend_choice_order(build, env, accelerator, expected):
    chosen = choose_platform(build, environ=env, accelerator=accelerator)
    assert (chosen.tilelang_ops_backend, chosen.chosen_by) == expected
    assert chosen.accelerator == accelerator


def test_unknown_backend_name_is_rejected():
    with pytest.raises(ValueError, match="'rocm' is not one of"):
        choose_platform("", environ={"TILELANG_OPS_BACKEND": "rocm"})


def test_kernel_table_matches_registry():
    kernels, _ = dispatcher.registered_kernels()
    assert kernels == tilelang_ops.KERNELS and "gather" in kernels


def test_ops_reexports_the_chosen_backend_factories():
    backend = tilelang_ops.PLATFORM.tilelang_ops_backend
    module = importlib.import_module(f"kernels.gather.{backend}")
    assert tilelang_ops.ops.gather_tl is module.gather_tl
    assert tilelang_ops.ops.names()["gather_tl"] == f"kernels.gather.{backend}"
    assert "gather_tl" in dir(tilelang_ops.ops)


def test_interface_functions_are_reexported():
    from kernels.gather import api

    assert tilelang_ops.gather is api.gather
    assert "gather" in tilelang_ops.__all__


def _fake_modules(tables: dict[str, dict[str, object]]):
    modules = {name: types.SimpleNamespace(**table) for name, table in tables.items()}

    def import_module(name):
        return modules.get(name)

    return import_module


def _factory(*args, **kwargs):
    return None


def test_two_kernels_exporting_one_name_is_an_error_naming_both():
    fake = _fake_modules({"kernels.a.cuda": {"same_tl": _factory}, "kernels.b.cuda": {"same_tl": _factory}})
    with pytest.raises(KernelNameConflictError, match=r"'same_tl' is exported by both kernels\.a\.cuda and kernels\.b\.cuda"):
        dispatcher.Ops("cuda", ["a", "b"], import_module=fake)


def test_interface_name_conflict_is_an_error():
    with pytest.raises(KernelNameConflictError, match="kernels.a.api and kernels.b.api"):
        dispatcher.merge_exports([("kernels.a.api", {"f": _factory}), ("kernels.b.api", {"f": _factory})])


def test_missing_factory_names_kernel_backend_and_providers():
    fake = _fake_modules(
        {
            "kernels.a.cuda": {"a_tl": _factory},
            "kernels.a.asc": {"a_tl": _factory, "a_only_npu_tl": _factory},
        }
    )
    ops = dispatcher.Ops("cuda", ["a"], import_module=fake)
    assert ops.a_tl is _factory
    with pytest.raises(KernelUnavailableError) as err:
        ops.a_only_npu_tl
    assert (err.value.kernel, err.value.backend, err.value.available_on) == ("a", "cuda", ("asc",))
    assert str(err.value) == "a_only_npu_tl (kernel 'a') is not available on backend 'cuda'; provided by: asc"


def test_unknown_factory_says_no_kernel_provides_it():
    ops = dispatcher.Ops("asc", ["a"], import_module=_fake_modules({"kernels.a.asc": {}}))
    with pytest.raises(KernelUnavailableError, match="nope_tl: no registered kernel provides it"):
        ops.nope_tl


def test_backend_module_absent_from_the_build_gives_an_empty_table():
    ops = dispatcher.Ops("asc", ["a"], import_module=_fake_modules({}))
    assert ops.names() == {}


def test_only_public_tl_callables_are_factories():
    module = types.SimpleNamespace(x_tl=_factory, _hidden_tl=_factory, CONST_tl=3, helper=_factory)
    assert dispatcher.factories_of(module) == {"x_tl": _factory}
