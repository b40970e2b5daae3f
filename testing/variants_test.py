"""testing.variants: each copy of a file is its own module; a name is taken once."""
import pytest

from testing.variants import load_variant


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
