"""Entry point of every Bazel py_test: runs pytest on the test file given as the first argument.

The `testing.plugin` plugin is always loaded; the cache provider is off because runfiles are read-only.
"""

import sys

import pytest


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: pytest_main.py TEST_FILE [pytest args...]", file=sys.stderr)
        return 2
    return int(pytest.main([argv[0], "-p", "testing.plugin", "-p", "no:cacheprovider", *argv[1:]]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
