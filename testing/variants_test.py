"""testing.variants: each copy of a file is its own module; a name is taken once; entries timed in turns."""
import random
import types

import pytest

from testing.variants import alternating_median_us, load_variant


def test_copies_are_independent_modules(tmp_path):
    path = tmp_path / "kernel_file.py"
    path.write_text("LIMIT = 1\n\ndef limit():\n    return LIMIT\n")
    a = load_variant(f"variants_test_a_{id(tmp_path)}", str(path))
    b = load_variant(f"variants_test_b_{id(tmp_path)}", str(path))
    b.LIMIT = 2
    assert (a.limit(), b.limit()) == (1, 2)


def test_a_name_is_loaded_once(tmp_path):
    path = tmp_path / "kernel_file.py"
    path.write_text("X = 0\n")
    name = f"variants_test_once_{id(tmp_path)}"
    load_variant(name, str(path))
    with pytest.raises(ValueError, match="already loaded"):
        load_variant(name, str(path))


def test_alternating_median_takes_turns_and_the_median_of_rounds(monkeypatch):
    from testing import timer

    order = []
    per_call = {"a": iter([5.0, 1.0, 3.0]), "b": iter([2.0, 9.0, 4.0])}

    def measure(calls, budget_s):
        name = calls[0]()
        order.append(name)
        return types.SimpleNamespace(median_us=next(per_call[name]))

    monkeypatch.setattr(timer, "measure", measure)
    got = alternating_median_us({"a": [lambda: "a"], "b": [lambda: "b"]}, rounds=3, budget_s=0.1)
    assert order == ["a", "b"] * 3 and got == {"a": 3.0, "b": 4.0}


def test_table_row_lists_each_entry_and_marks_mismatches(monkeypatch, seed):
    from testing import variants

    rng = random.Random(seed)
    times = {"main": rng.uniform(1, 50), "branch": rng.uniform(1, 50)}
    monkeypatch.setattr(variants, "alternating_median_us", lambda fns, budget_s: {name: times[name] for name in fns})
    lines = ["header"]
    variants.table_row("k 1 B 64", {"main": [], "branch": []}, {"main": True, "branch": False}, lines)
    assert lines == ["header", f"k 1 B 64  main {times['main']:6.2f}  branch {times['branch']:6.2f} MISMATCH"]


def test_report_header_names_the_device_and_the_empty_kernel(monkeypatch, seed):
    import torch

    from testing import timer, variants

    us = random.Random(seed).uniform(0.5, 3.0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(timer, "empty_kernel_us", lambda d=None, method="cuda_graph": us)
    assert variants.report_header() == [f"device NVIDIA H100 80GB HBM3, empty kernel {us:.2f} us; median us of 3 alternating rounds"]
