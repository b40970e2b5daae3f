"""testing.baseline_table renders what the baseline files hold, and says which kernels have none."""

from __future__ import annotations

import json
import random

import torch

from testing import baseline_table


def _record(case_id: str, rng: random.Random, peers: dict[str, float | None], ceiling: tuple[float, float] = (4200, 4300), empty: float | None = None) -> dict:
    t = rng.uniform(1, 500)
    return {
        **({"empty_kernel_us": empty} if empty is not None else {}),
        "case_id": case_id,
        "device": "NVIDIA H200",
        "time_us": t,
        "bandwidth_gbs": rng.uniform(1, 4000),
        "pct_ceiling": rng.uniform(0, 100),
        "ceiling_gbs": rng.uniform(*ceiling),
        "peers": {name: ({"time_us": us} if us is not None else {"skipped": "why"}) for name, us in peers.items()},
    }


def _write(folder, kernel: str, records: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{kernel}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_table_holds_every_record_with_peers_in_order(tmp_path):
    rng = random.Random(torch.initial_seed())  # the plugin's per-test seed
    peers = {"torch_compile": rng.uniform(1, 900), "flashinfer": rng.uniform(1, 900), "torch_eager": rng.uniform(1, 2000)}
    # Ceilings a whole GB/s apart and empty kernels 0.01 us apart, so the title shows ranges; a
    # record from before the empty kernel was kept has no ratio.
    records = [
        _record("b_case", rng, peers, (4200, 4240), empty=rng.uniform(1.0, 1.1)),
        _record("a_case", rng, {"torch_compile": None}, (4260, 4300), empty=rng.uniform(1.2, 1.3)),
        _record("c_case", rng, {}, (4260, 4300)),
    ]
    _write(tmp_path / "dev", "k", records)
    text, missing = baseline_table.tables(["k"], "dev", tmp_path)
    assert missing == []
    lines = text.splitlines()
    ceilings = sorted(r["ceiling_gbs"] for r in records)
    empties = sorted(r["empty_kernel_us"] for r in records[:2])
    assert lines[0] == (
        f"### k (NVIDIA H200; 3 cases; copy ceiling {ceilings[0]:.0f}-{ceilings[-1]:.0f} GB/s; "
        f"empty kernel {empties[0]:.2f}-{empties[1]:.2f} us)"
    )
    peers = ["torch_eager", "torch_compile", "flashinfer"]
    assert _cells(lines[2]) == ["case", "us", "GB/s", "% ceiling", "x empty kernel", *(f"{p} us" for p in peers), *(f"x {p}" for p in peers)]
    rows = {cells[0]: cells for cells in map(_cells, lines[4:])}
    assert set(rows) == {"a_case", "b_case", "c_case"}
    for rec in records:
        row, t = rows[rec["case_id"]], rec["time_us"]
        assert row[1:4] == [f"{t:.2f}", f"{rec['bandwidth_gbs']:.0f}", f"{rec['pct_ceiling']:.1f}"]
        assert row[4] == (f"{t / rec['empty_kernel_us']:.2f}" if "empty_kernel_us" in rec else "-")
        for i, p in enumerate(peers):
            us = rec["peers"].get(p, {}).get("time_us")
            assert row[5 + i] == ("-" if us is None else f"{us:.2f}" if us < 1000 else f"{us:.1f}")
            assert row[5 + len(peers) + i] == (f"{us / t:.2f}" if us is not None else "-")


def test_one_ceiling_shows_once(tmp_path):
    rng = random.Random(torch.initial_seed())
    records = [_record(c, rng, {}) for c in ("x", "y")]
    for r in records:
        r["ceiling_gbs"] = records[0]["ceiling_gbs"]
    _write(tmp_path / "dev", "k", records)
    assert f"copy ceiling {records[0]['ceiling_gbs']:.0f} GB/s; empty kernel - us)" in baseline_table.tables(["k"], "dev", tmp_path)[0]


def test_kernels_without_baselines_are_named_and_fail_the_run(tmp_path, capsys):
    _write(tmp_path / "dev", "present", [_record("c", random.Random(torch.initial_seed()), {})])
    assert baseline_table.kernels_with_baselines("dev", tmp_path) == ["present"]
    assert baseline_table.main(["--device", "dev", "--baseline-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("### present ")
    assert baseline_table.main(["--device", "dev", "--baseline-dir", str(tmp_path), "--kernels", "present,absent"]) == 1
    captured = capsys.readouterr()
    assert "### present " in captured.out and captured.err == "absent: no baselines for dev\n"
