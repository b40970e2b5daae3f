"""Self-test of testing/codegen_cuda.py on ptxas text: no nvcc, no GPU, no lowering.

The report below is the shape nvcc 13.0's `-Xptxas -v` prints for sm_90a: a kernel with static
shared memory, one whose local array lives on the stack, one that spills, and a non-inlined device
function reported after its caller.
"""

from __future__ import annotations

import dataclasses

import pytest

from testing import codegen_cuda

PTXAS_TEXT = """\
ptxas info    : 24 bytes gmem
ptxas info    : Compiling entry function 'stacky' for 'sm_90a'
ptxas info    : Function properties for stacky
    160 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 160 bytes cumulative stack size
ptxas info    : Compile time = 15.692 ms
ptxas info    : Compiling entry function 'smem_kernel' for 'sm_90a'
ptxas info    : Function properties for smem_kernel
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 1 barriers, 16384 bytes smem
ptxas info    : Compile time = 3.031 ms
ptxas info    : Compiling entry function 'spilly' for 'sm_90a'
ptxas info    : Function properties for spilly
    504 bytes stack frame, 1296 bytes spill stores, 1324 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 504 bytes cumulative stack size
ptxas info    : Compile time = 134.175 ms
ptxas info    : Compiling entry function 'caller' for 'sm_90a'
ptxas info    : Function properties for caller
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 31 registers, used 0 barriers, 64 bytes cumulative stack size
ptxas info    : Compile time = 5.615 ms
ptxas info    : Function properties for _Z6helperPKfi
    64 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
"""


def test_parse_reads_every_entry_function():
    reports = codegen_cuda.parse_ptxas(PTXAS_TEXT)
    assert sorted(reports) == ["caller", "smem_kernel", "spilly", "stacky"]
    assert reports["smem_kernel"] == codegen_cuda.PtxasReport(
        kernel="smem_kernel",
        arch="sm_90a",
        registers=12,
        stack_frame_bytes=0,
        spill_store_bytes=0,
        spill_load_bytes=0,
        static_smem_bytes=16384,
    )
    spilly = reports["spilly"]
    assert spilly.registers == 32 and spilly.stack_frame_bytes == 504
    assert (spilly.spill_store_bytes, spilly.spill_load_bytes) == (1296, 1324)
    assert reports["stacky"].stack_frame_bytes == 160 and reports["stacky"].static_smem_bytes == 0


def test_device_function_counts_only_through_the_callers_cumulative_stack():
    caller = codegen_cuda.parse_ptxas(PTXAS_TEXT)["caller"]
    assert caller.stack_frame_bytes == 64
    assert caller.spill_store_bytes == caller.spill_load_bytes == 0


def test_parse_of_sm100_report_and_of_nothing():
    text = PTXAS_TEXT.replace("'sm_90a'", "'sm_100a'")
    assert {r.arch for r in codegen_cuda.parse_ptxas(text).values()} == {"sm_100a"}
    assert codegen_cuda.parse_ptxas("ptxas info    : 0 bytes gmem\n") == {}


def test_parse_rejects_entry_without_register_line():
    truncated = PTXAS_TEXT.split("ptxas info    : Used 12 registers")[0]
    with pytest.raises(ValueError, match="smem_kernel"):
        codegen_cuda.parse_ptxas(truncated)


def test_clean_kernel_passes_and_smem_includes_dynamic():
    clean = codegen_cuda.parse_ptxas(PTXAS_TEXT)["smem_kernel"]
    report = dataclasses.replace(clean, dynamic_smem_bytes=200 * 1024)
    assert report.smem_bytes == 16384 + 200 * 1024
    for arch in codegen_cuda.ARCHS:
        codegen_cuda.assert_cuda_resources_ok(report, arch)


@pytest.mark.parametrize("arch", codegen_cuda.ARCHS)
def test_oversized_shared_memory_is_rejected(arch):
    limit = codegen_cuda.SMEM_PER_BLOCK_BYTES[arch]
    assert limit == 232448  # 227 KiB on both Hopper and Blackwell
    fits = dataclasses.replace(
        codegen_cuda.parse_ptxas(PTXAS_TEXT)["smem_kernel"], dynamic_smem_bytes=limit - 16384
    )
    codegen_cuda.assert_cuda_resources_ok(fits, arch)
    oversized = dataclasses.replace(fits, dynamic_smem_bytes=fits.dynamic_smem_bytes + 1)
    expected = rf"smem_kernel on {arch}.*shared memory {limit + 1} B .* > {limit} B per block"
    with pytest.raises(AssertionError, match=expected):
        codegen_cuda.assert_cuda_resources_ok(oversized, arch)


def test_spills_and_stack_are_rejected():
    reports = codegen_cuda.parse_ptxas(PTXAS_TEXT)
    with pytest.raises(AssertionError, match=r"spilly on sm_90a.*spills 1296 B stored / 1324 B loaded"):
        codegen_cuda.assert_cuda_resources_ok(reports["spilly"], "sm_90a")
    with pytest.raises(AssertionError, match=r"stacky on sm_90a.*stack frame 160 B > 0 B"):
        codegen_cuda.assert_cuda_resources_ok(reports["stacky"], "sm_90a")
    codegen_cuda.assert_cuda_resources_ok(reports["stacky"], "sm_90a", max_stack_bytes=160)


def test_find_nvcc_honours_the_environment(monkeypatch, tmp_path):
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("TILELANG_OPS_NVCC", str(fake))
    assert codegen_cuda.find_nvcc() == str(fake)
    monkeypatch.setenv("TILELANG_OPS_NVCC", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="TILELANG_OPS_NVCC"):
        codegen_cuda.find_nvcc()


def _dependent_ptx(*before_wait: str) -> str:
    """A PDL kernel's PTX shape (nvcc 13.0, sm_90a) with `before_wait` ahead of its wait."""
    return "\n".join([
        ".visible .entry k(", "\t.param .u64 k_param_0", ")", "{",
        "\tld.param.u64 \t%rd1, [k_param_0];",
        *before_wait,
        "\tgriddepcontrol.wait;",
        "\tgriddepcontrol.launch_dependents;",
        "\tld.global.nc.v4.u32 \t{%r1, %r2, %r3, %r4}, [%rd1];",
        "\tst.global.v4.u32 \t[%rd1], {%r1, %r2, %r3, %r4};",
        "\tret;", "}",
    ])


def test_dependent_entry_admits_only_l2_prefetches_before_the_wait():
    codegen_cuda.assert_dependent_entry(_dependent_ptx())
    codegen_cuda.assert_dependent_entry(_dependent_ptx("\t@%p1 prefetch.L2 \t[%rd1];", "\tprefetch.global.L2 \t[%rd1];"))
    for early in ("\tld.global.nc.u32 \t%r9, [%rd1];", "\tprefetch.global.L1 \t[%rd1];", "\t@%p1 prefetch.L1 \t[%rd1];"):
        with pytest.raises(AssertionError, match="global memory touched before griddepcontrol.wait"):
            codegen_cuda.assert_dependent_entry(_dependent_ptx(early))
    with pytest.raises(AssertionError, match="expected one griddepcontrol.wait"):
        codegen_cuda.assert_dependent_entry(_dependent_ptx().replace("\tgriddepcontrol.wait;\n", ""))


def test_dependent_entry_releases_the_next_grid_only_after_its_wait():
    released_first = _dependent_ptx().replace("\tgriddepcontrol.launch_dependents;\n", "")
    released_first = released_first.replace("\tgriddepcontrol.wait;", "\tgriddepcontrol.launch_dependents;\n\tgriddepcontrol.wait;")
    with pytest.raises(AssertionError, match="launch_dependents; before griddepcontrol.wait"):
        codegen_cuda.assert_dependent_entry(released_first)
