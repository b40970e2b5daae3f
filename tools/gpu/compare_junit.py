"""Compare two pytest JUnit XML reports test by test (used by h200_check.sh's multi-gpu step).

    python3 tools/gpu/compare_junit.py A.xml B.xml

Prints each report's outcome counts and every test whose outcome differs; exits 1 when any does or
when the two reports hold different tests.
"""

import sys
import xml.etree.ElementTree as ET
from collections import Counter


def outcomes(path: str) -> dict[str, str]:
    """Test id -> passed / failed / error / skipped."""
    result = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        result[f"{case.get('classname')}::{case.get('name')}"] = {"failure": "failed"}.get(
            kinds[0], kinds[0]
        ) if kinds else "passed"
    return result


def main(a_path: str, b_path: str) -> int:
    a, b = outcomes(a_path), outcomes(b_path)
    for path, res in ((a_path, a), (b_path, b)):
        print(f"{path}: {len(res)} tests, {dict(sorted(Counter(res.values()).items()))}")
    differ = sorted(t for t in a.keys() | b.keys() if a.get(t) != b.get(t))
    for t in differ:
        print(f"  differs: {t}: {a.get(t, 'absent')} vs {b.get(t, 'absent')}")
    print(f"{'identical outcomes' if not differ else f'{len(differ)} tests differ'} across the two runs")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
