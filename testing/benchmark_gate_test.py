"""CPU unit tests of the benchmark gate, its files, the report and the xdist device binding.

No accelerator is used: every decision is a pure function fed with synthetic numbers.
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from testing import benchmark as bm
from testing import device_binding as db
from testing import timer

MIB = 1024 * 1024
GATE_ENV = (bm.ENV_THRESHOLD, bm.ENV_MIN_DELTA_US, bm.ENV_MISSING, bm.ENV_MEM_THRESHOLD, bm.ENV_MEM_MIN_DELTA)


@pytest.fixture(autouse=True)
def _clean_gate_env(monkeypatch):
    """Each test starts from the defaults, whatever the caller's environment holds."""
    for name in GATE_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def rng(seed) -> random.Random:
    """Python's RNG from the plugin's per-test seed (--seed and the test id), like torch's."""
    return random.Random(seed)


# --- time gate ---------------------------------------------------------------------------------


def test_defaults_are_documented_values():
    s = bm.GateSettings.from_env({})
    assert (s.threshold, s.min_delta_us, s.missing) == (0.15, 3.0, "report")
    assert (s.mem_threshold, s.mem_min_delta_bytes) == (0.10, MIB)


def test_twenty_percent_and_four_us_slower_fails():
    v = bm.check_regression(24.0, 20.0)
    assert not v.ok and v.status == bm.REGRESSION
    assert "+20.0%" in v.detail


def test_twenty_percent_slower_fails_whenever_delta_exceeds_min(rng):
    for _ in range(200):
        base = rng.uniform(20.0, 5000.0)  # 20% of it is >= 4 us
        v = bm.check_regression(base * 1.2, base)
        assert v.status == bm.REGRESSION, (base, v)


def test_twenty_percent_but_one_us_passes():
    v = bm.check_regression(6.0, 5.0)
    assert v.ok and v.status == bm.PASS


def test_small_absolute_slowdowns_pass_however_relative(rng):
    for _ in range(200):
        base = rng.uniform(0.5, 10.0)
        cur = base + rng.uniform(0.0, 2.99)  # up to +600% but below 3 us
        assert bm.check_regression(cur, base).ok, (cur, base)


def test_ten_percent_slower_passes(rng):
    for _ in range(200):
        base = rng.uniform(1.0, 1e5)
        assert bm.check_regression(base * 1.10, base).ok


def test_faster_passes(rng):
    for _ in range(200):
        base = rng.uniform(1.0, 1e5)
        v = bm.check_regression(base * rng.uniform(0.2, 0.999), base)
        assert v.ok and v.status == bm.PASS


def test_boundary_is_strict():
    # Exactly +15% (and > 3 us) is not "more than 15%".
    assert bm.check_regression(115.0, 100.0).ok
    assert not bm.check_regression(115.5, 100.0).ok


def test_threshold_env_override(monkeypatch):
    assert bm.check_regression(110.0, 100.0).ok  # 10% under the default 15%
    monkeypatch.setenv(bm.ENV_THRESHOLD, "0.05")
    v = bm.check_regression(110.0, 100.0)
    assert not v.ok and v.status == bm.REGRESSION
    assert bm.GateSettings.from_env().threshold == 0.05


def test_min_delta_env_override(monkeypatch):
    assert not bm.check_regression(60.0, 50.0).ok  # 20%, 10 us: fails by default
    monkeypatch.setenv(bm.ENV_MIN_DELTA_US, "20")
    assert bm.check_regression(60.0, 50.0).ok
    assert not bm.check_regression(75.0, 50.0).ok  # 50%, 25 us


def test_explicit_arguments_win_over_env(monkeypatch):
    monkeypatch.setenv(bm.ENV_THRESHOLD, "0.5")
    assert not bm.check_regression(130.0, 100.0, threshold=0.2, min_delta_us=1.0).ok
    assert bm.check_regression(130.0, 100.0).ok  # env: 30% < 50%


@pytest.mark.parametrize("bad", ["abc", "-0.1", "nan"])
def test_invalid_env_values_are_rejected(monkeypatch, bad):
    monkeypatch.setenv(bm.ENV_THRESHOLD, bad)
    with pytest.raises(ValueError, match=bm.ENV_THRESHOLD):
        bm.GateSettings.from_env()


# --- missing baselines -------------------------------------------------------------------------


def _record(case_id: str, time_us: float | None, mem: int | None = 0, kernel: str = "k", peers=None) -> dict:
    rec = {"kernel": kernel, "case_id": case_id, "params": {}, "time_us": time_us, "peak_extra_bytes": mem, "bytes": 1000}
    rec["peers"] = peers or {}
    return rec


def test_missing_baseline_is_reported_by_default():
    v = bm.check_regression(10.0, None)
    assert v.ok and v.status == bm.MISSING


def test_missing_baseline_fails_in_fail_mode(monkeypatch):
    assert not bm.check_regression(10.0, None, missing="fail").ok
    monkeypatch.setenv(bm.ENV_MISSING, "fail")
    v = bm.check_regression(10.0, None)
    assert not v.ok and v.status == bm.MISSING
    # The flag wins over the environment.
    assert bm.GateSettings.from_env(missing="report").missing == "report"


def test_missing_mode_validated():
    with pytest.raises(ValueError):
        bm.GateSettings.from_env({bm.ENV_MISSING: "ignore"})


def test_missing_changes_exit_status_only_in_fail_mode():
    records = [_record("a", 10.0, 100), _record("b", 20.0, 100)]
    baselines = {"k/a": {"time_us": 10.0}}
    profiles = {"k/a": {"peak_extra_bytes": 100}, "k/b": {"peak_extra_bytes": 100}}
    report = bm.evaluate(records, baselines, profiles, bm.GateSettings(missing="report"))
    assert [r.time_verdict.status for r in report] == [bm.PASS, bm.MISSING]
    assert bm.exit_status(report) == 0
    failing = bm.evaluate(records, baselines, profiles, bm.GateSettings(missing="fail"))
    assert bm.exit_status(failing) == 1
    # Refreshing the baselines accepts the missing case.
    assert bm.exit_status(failing, refresh_baselines=True) == 0


def test_regression_and_error_drive_exit_status():
    records = [_record("a", 30.0, 100), _record("b", None, None)]
    records[1]["error"] = "RuntimeError: boom"
    baselines = {"k/a": {"time_us": 20.0}, "k/b": {"time_us": 20.0}}
    profiles = {"k/a": {"peak_extra_bytes": 100}, "k/b": {"peak_extra_bytes": 100}}
    report = bm.evaluate(records, baselines, profiles, bm.GateSettings())
    assert [r.label for r in report] == [bm.REGRESSION, bm.ERROR]
    table = bm.format_report(report)
    assert "k/b" in table and "ERROR" in table
    assert next(line for line in table.splitlines() if line.startswith("geomean")).split()[1] == "30.00"
    assert bm.exit_status(report) == 1
    # An error is never excused by a refresh.
    assert bm.exit_status(report, refresh_baselines=True, refresh_memory=True) == 1
    assert bm.exit_status(report[:1], refresh_baselines=True) == 0


# --- memory gate -------------------------------------------------------------------------------


def test_memory_leak_fails():
    v = bm.check_memory(30 * MIB, 20 * MIB)  # +50%, +10 MiB
    assert not v.ok and v.status == bm.MEM_GROWTH


def test_memory_growth_under_one_mib_passes():
    v = bm.check_memory(int(3 * MIB), int(2.5 * MIB))  # +20%, +0.5 MiB
    assert v.ok and v.status == bm.PASS


def test_memory_five_percent_passes(rng):
    for _ in range(100):
        prof = rng.randint(1, 8 * 1024) * MIB
        assert bm.check_memory(int(prof * 1.05), prof).ok


def test_memory_random_large_leaks_fail(rng):
    for _ in range(100):
        prof = rng.randint(11, 4096) * MIB
        cur = int(prof * rng.uniform(1.11, 3.0))
        assert not bm.check_memory(cur, prof).ok, (cur, prof)


def test_memory_from_zero_profile_and_missing():
    assert not bm.check_memory(2 * MIB, 0).ok  # from nothing to 2 MiB
    assert bm.check_memory(512 * 1024, 0).ok  # below the 1 MiB floor
    assert bm.check_memory(10, None).status == bm.MISSING
    assert not bm.check_memory(10, None, missing="fail").ok


def test_memory_verdict_in_evaluate():
    records = [_record("a", 10.0, 30 * MIB), _record("b", 10.0, 3 * MIB)]
    baselines = {"k/a": {"time_us": 10.0}, "k/b": {"time_us": 10.0}}
    profiles = {"k/a": {"peak_extra_bytes": 20 * MIB}, "k/b": {"peak_extra_bytes": int(2.5 * MIB)}}
    report = bm.evaluate(records, baselines, profiles, bm.GateSettings())
    assert [r.label for r in report] == [bm.MEM_GROWTH, bm.PASS]
    assert bm.exit_status(report) == 1
    assert bm.exit_status(report, refresh_memory=True) == 0


# --- files -------------------------------------------------------------------------------------


def _random_record(rng: random.Random, case_id: str) -> dict:
    return {
        "kernel": "gather",
        "case_id": case_id,
        "params": {"m": rng.randint(1, 1 << 16), "D": rng.choice([576, 4096, 7168]), "dtype": "bfloat16"},
        "time_us": rng.uniform(1.0, 1e4),
        "bytes": rng.randint(1, 1 << 34),
        "peers": {"torch_eager": {"time_us": rng.uniform(1.0, 1e4)}, "torch_compile": {"skipped": "Error: x"}},
        "notes": [],
    }


def test_jsonl_round_trip(tmp_path, rng):
    path = tmp_path / "nvidia-h200" / "gather.jsonl"
    ids = [f"case{rng.randint(0, 10**6):07d}" for _ in range(12)]
    records = {cid: _random_record(rng, cid) for cid in ids}
    bm.write_jsonl_atomic(path, list(records.values()))
    assert bm.load_jsonl(path) == records
    lines = path.read_text().splitlines()
    assert [json.loads(line)["case_id"] for line in lines] == sorted(records)  # sorted by case id


def test_load_jsonl_missing_file_and_bad_line(tmp_path):
    assert bm.load_jsonl(tmp_path / "absent.jsonl") == {}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"case_id": "a"}\nnot json\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        bm.load_jsonl(bad)


def test_refresh_keeps_other_cases_and_replaces_atomically(tmp_path, rng, monkeypatch):
    path = tmp_path / "gather.jsonl"
    old = {cid: _random_record(rng, cid) for cid in ("c_a", "c_b", "c_c")}
    bm.write_jsonl_atomic(path, old)
    new_b = _random_record(rng, "c_b")
    new_d = _random_record(rng, "c_d")

    replaced = []
    real_replace = os.replace

    def spy(src, dst):
        replaced.append((Path(src), Path(dst)))
        assert Path(src).parent == Path(dst).parent  # temp file in the same directory
        assert Path(dst).read_text() == before  # target untouched until the rename
        real_replace(src, dst)

    before = path.read_text()
    monkeypatch.setattr(os, "replace", spy)
    bm.refresh_jsonl(path, [new_b, new_d])
    assert len(replaced) == 1 and replaced[0][1] == path

    got = bm.load_jsonl(path)
    assert list(got) == ["c_a", "c_b", "c_c", "c_d"]
    assert got["c_a"] == old["c_a"] and got["c_c"] == old["c_c"]
    assert got["c_b"] == new_b and got["c_d"] == new_d
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gather.jsonl"]  # no temp file left


def test_failed_refresh_leaves_file_intact(tmp_path, rng, monkeypatch):
    path = tmp_path / "gather.jsonl"
    bm.write_jsonl_atomic(path, [_random_record(rng, "x1"), _random_record(rng, "x2")])
    before = path.read_text()

    def broken(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        bm.refresh_jsonl(path, [_random_record(rng, "x1")])
    assert path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gather.jsonl"]


def test_refresh_creates_directories(tmp_path, rng):
    path = tmp_path / "testing" / "benchmark_baselines" / "nvidia-h200" / "gather.jsonl"
    bm.refresh_jsonl(path, [_random_record(rng, "only")])
    assert list(bm.load_jsonl(path)) == ["only"]


def test_memory_profile_record_keeps_only_memory():
    rec = _record("a", 12.5, 7 * MIB, kernel="gather")
    prof = bm.memory_profile_record(rec)
    assert prof["peak_extra_bytes"] == 7 * MIB and prof["case_id"] == "a" and "time_us" not in prof


def test_baseline_paths_follow_repo_layout(monkeypatch, tmp_path):
    root = bm.repo_root()
    assert (root / "testing" / "benchmark.py").exists()
    p = bm.profile_file(root, bm.BASELINES_DIRNAME, "nvidia-h200", "gather")
    assert p == root / "testing" / "benchmark_baselines" / "nvidia-h200" / "gather.jsonl"
    monkeypatch.setenv("BUILD_WORKSPACE_DIRECTORY", str(tmp_path))
    assert bm.write_root() == tmp_path
    monkeypatch.delenv("BUILD_WORKSPACE_DIRECTORY")
    assert bm.write_root() == root


def test_device_slug():
    assert bm.slug_from_name("NVIDIA H200") == "nvidia-h200"
    assert bm.slug_from_name("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert bm.slug_from_name("  Ascend910B2 ") == "ascend910b2"
    assert bm.device_slug(torch.device("cpu")) == "cpu"
    assert bm.device_slug("cpu") == "cpu"


# --- report ------------------------------------------------------------------------------------


def test_geomean_matches_independent_computations(rng):
    for _ in range(50):
        values = [rng.uniform(0.1, 1e5) for _ in range(rng.randint(1, 20))]
        g = bm.geomean(values)
        assert math.isclose(g, statistics.geometric_mean(values), rel_tol=1e-12)
        assert math.isclose(g, math.exp(statistics.fmean(math.log(v) for v in values)), rel_tol=1e-12)
    assert math.isnan(bm.geomean([]))
    with pytest.raises(ValueError):
        bm.geomean([1.0, 0.0])


def test_summary_row_geomeans_of_times_and_speedups(rng):
    records = []
    for i in range(9):
        peers = {"torch_eager": {"time_us": rng.uniform(5, 500)}}
        if i % 3:
            peers["index_select"] = {"time_us": rng.uniform(5, 500)}
        else:
            peers["index_select"] = {"skipped": "failed to run: X"}
        records.append(_record(f"c{i}", rng.uniform(5, 500), 0, peers=peers))
    s = bm.summary_row(records)
    kt = [r["time_us"] for r in records]
    assert s["n"] == 9
    assert math.isclose(s["time_us"], statistics.geometric_mean(kt), rel_tol=1e-12)
    eager = [r["peers"]["torch_eager"]["time_us"] for r in records]
    assert math.isclose(s["peers"]["torch_eager"]["time_us"], statistics.geometric_mean(eager), rel_tol=1e-12)
    assert math.isclose(
        s["peers"]["torch_eager"]["speedup"], statistics.geometric_mean([e / k for e, k in zip(eager, kt)]), rel_tol=1e-12
    )
    # index_select: only the 6 cases where it was timed count.
    pairs = [(r["peers"]["index_select"]["time_us"], r["time_us"]) for r in records if "time_us" in r["peers"]["index_select"]]
    assert s["peers"]["index_select"]["n"] == len(pairs) == 6
    assert math.isclose(s["peers"]["index_select"]["speedup"], statistics.geometric_mean([p / k for p, k in pairs]), rel_tol=1e-12)


def test_format_report_table(rng):
    records = [
        _record("fast", 10.0, 2 * MIB, peers={"torch_eager": {"time_us": 40.0}, "torch_compile": {"skipped": "Error: no"}}),
        _record("slow", 30.0, 2 * MIB, peers={"torch_eager": {"time_us": 45.0}, "torch_compile": {"time_us": 60.0}}),
    ]
    for r in records:
        r["bandwidth_gbs"], r["pct_ceiling"] = 1234.4, 28.7
    records[0]["empty_kernel_us"] = 4.0  # the other record predates the empty kernel's keeping
    baselines = {"k/fast": {"time_us": 10.5}, "k/slow": {"time_us": 20.0}}
    reports = bm.evaluate(records, baselines, {}, bm.GateSettings())
    text = bm.format_report(reports)
    lines = text.splitlines()
    assert lines[0].split()[:5] == ["case", "us", "GB/s", "%ceil", "xempty"]
    assert "torch_eager" in lines[0] and "xtorch_compile" in lines[0]
    fast = next(line for line in lines if line.startswith("k/fast"))
    slow = next(line for line in lines if line.startswith("k/slow"))
    assert "4.00x" in fast and "skip" in fast and "-4.8" in fast
    assert "REGRESSION" in slow and "+50.0" in slow and "2.00x" in slow
    assert fast.split()[4] == "2.50" and slow.split()[4] == "-"
    geo = next(line for line in lines if line.startswith("geomean"))
    assert f"{statistics.geometric_mean([10.0, 30.0]):.2f}" in geo
    assert f"{statistics.geometric_mean([4.0, 1.5]):.2f}x" in geo
    # Fixed width: the separator spans the header, each row is no wider (the legend follows).
    assert lines[-1].startswith("us: median per call") and all(len(line) <= len(lines[1]) for line in lines[:-1])


def test_run_spread_and_combine_runs(rng):
    a, b = rng.uniform(10, 100), rng.uniform(10, 100)
    assert math.isclose(bm.run_spread([a, b]), abs(a - b) / min(a, b))
    assert bm.run_spread([a]) == 0.0
    r1 = _record("c", a, 5, peers={"torch_eager": {"time_us": 2 * a}})
    r2 = _record("c", b, 7, peers={"torch_eager": {"time_us": 2 * b}})
    combined, spreads = bm.combine_runs([[r1], [r2]])
    assert math.isclose(combined[0]["time_us"], (a + b) / 2)
    assert math.isclose(combined[0]["peers"]["torch_eager"]["time_us"], a + b)
    assert combined[0]["peak_extra_bytes"] == 7
    assert math.isclose(spreads["k/c"], abs(a - b) / min(a, b))


def test_inject_extra_pass_runs_the_call_twice():
    calls = []
    slowed = bm._with_extra_pass(lambda: calls.append(1) or len(calls))
    assert slowed() == 2 and len(calls) == 2


# --- timer helpers -----------------------------------------------------------------------------


def test_rotation_pool_exceeds_twice_l2(rng):
    l2 = 50 * MIB
    for _ in range(200):
        footprint = rng.randint(1, 1 << 31)
        n = timer.sets_for_rotation(footprint, l2, max_sets=1 << 40)
        assert n >= 2 and n * footprint >= 2 * l2
        assert n == 2 or (n - 1) * footprint < 2 * l2  # and not more than needed
    assert timer.sets_for_rotation(14344, l2, max_sets=8192) == 7311
    assert timer.sets_for_rotation(10, l2, max_sets=8192) == 8192


def test_graph_launch_count_is_multiple_of_sets(rng):
    for _ in range(200):
        sets = rng.randint(1, 9000)
        est = rng.uniform(0.5, 5000)
        n = timer.graph_launch_count(sets, est, 2000.0, 16384)
        assert n % sets == 0 and n >= sets
        assert n == sets or n * est >= 2000.0 or n + sets > max(16384, sets)


def test_sample_count_lets_slow_callables_take_fewer_samples(rng):
    for _ in range(500):
        sample_us = rng.uniform(1, 2e6)
        budget_s, cap_s = rng.uniform(0.1, 2), rng.uniform(0.5, 5)
        lo, hi = rng.randint(5, 20), rng.randint(20, 400)
        n = timer.sample_count(sample_us, budget_s, lo, hi, cap_s)
        uncapped = timer.sample_count(sample_us, budget_s, lo, hi)
        in_budget = min(hi, int(budget_s * 1e6 / sample_us))
        assert lo <= uncapped <= hi and max(timer.FEWEST_SAMPLES, in_budget) <= n <= uncapped
        # Fewer only where min_samples would overrun the cap, and then no more than fit the cap or budget.
        fit = max(timer.FEWEST_SAMPLES, int(cap_s * 1e6 / sample_us), in_budget)
        assert n == uncapped or (lo * sample_us > cap_s * 1e6 and n == fit)
    # swa_index's eager peer at B 1: 8192 calls of 80 us a sample, 15 samples -> 5 (3.3 s, not 9.8).
    assert timer.sample_count(8192 * 80.0, 0.5, 15, 200, 2.0) == timer.FEWEST_SAMPLES
    # The kernel beside it, 8192 calls of 1.7 us: 35 samples either way.
    assert timer.sample_count(8192 * 1.7, 0.5, 15, 200, 2.0) == timer.sample_count(8192 * 1.7, 0.5, 15, 200) == 35


def test_segment_iterations_excludes_flush(rng):
    flush_count, fn_count, n = 1, 3, 25
    acts, expected, t = [], [], 0.0
    for _ in range(n):
        for _ in range(flush_count):
            d = rng.uniform(20, 40)
            acts.append((t, t + d))
            t += d + 1
        total = 0.0
        for _ in range(fn_count):
            d = rng.uniform(1, 10)
            acts.append((t, t + d))
            total += d
            t += d + 0.5
        expected.append(total)
    rng.shuffle(acts)  # order comes from the timestamps, not the list
    got = timer.segment_iterations(acts, n, flush_count)
    assert len(got) == n and all(math.isclose(g, e) for g, e in zip(got, expected))
    with pytest.raises(timer.TimerError):
        timer.segment_iterations(acts[:-1], n, flush_count)
    with pytest.raises(timer.TimerError):
        timer.segment_iterations(acts, n, 4)


def test_summarize_statistics(rng):
    samples = [rng.uniform(1, 100) for _ in range(101)]
    t = timer.summarize(samples, "cuda_graph", launches_per_sample=8, input_sets=4)
    s = sorted(samples)
    assert t.median_us == s[50] and t.min_us == s[0] and t.max_us == s[-1]
    assert math.isclose(t.p20_us, s[20]) and math.isclose(t.p80_us, s[80])
    assert t.n == 101 and t.method == "cuda_graph" and t.to_dict()["input_sets"] == 4


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")
def test_timer_without_cuda_raises_clearly():
    with pytest.raises(timer.TimerError, match="CUDA is not available"):
        timer.measure(lambda: None)
    with pytest.raises(timer.TimerError):
        timer.copy_ceiling()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")
def test_cli_without_cuda_exits_2(capsys):
    assert bm.main(["--kernels", "gather"]) == 2
    err = capsys.readouterr().err
    assert "no CUDA device available" in err


def test_cli_refuses_refresh_with_injected_slowdown(capsys):
    assert bm.main(["--kernels", "gather", "--inject-extra-pass", "--refresh-baselines"]) == 2
    assert "refusing" in capsys.readouterr().err


# --- device binding ----------------------------------------------------------------------------


def test_workers_round_robin_over_devices():
    got = [db.plan_binding(f"gw{i}", {}, 4)[db.CUDA_VAR] for i in range(6)]
    assert got == ["0", "1", "2", "3", "0", "1"]


def test_random_worker_ids_modulo(rng):
    for _ in range(100):
        count = rng.randint(1, 16)
        i = rng.randint(0, 255)
        assert db.plan_binding(f"gw{i}", {}, count) == {db.CUDA_VAR: str(i % count)}


def test_pinned_device_left_alone():
    env = {db.CUDA_VAR: "3"}
    assert db.plan_binding("gw2", env, 8) == {}
    desc = db.apply_binding("gw2", env, 8)
    assert env == {db.CUDA_VAR: "3"} and "left alone" in desc
    assert db.plan_binding("gw1", {db.CUDA_VAR: ""}, 8) == {}  # nothing visible: untouched


def test_listed_devices_pick_modulo_the_list():
    env = {db.CUDA_VAR: "4, 6,7"}
    assert [db.plan_binding(f"gw{i}", env, 8)[db.CUDA_VAR] for i in range(4)] == ["4", "6", "7", "4"]


def test_ascend_backend_uses_ascend_variable():
    upd = db.plan_binding("gw5", {db.CUDA_VAR: "0,1"}, 4, backend="asc")
    assert upd == {db.ASCEND_VAR: "1"}
    assert db.plan_binding("gw1", {db.ASCEND_VAR: "2"}, 4, backend="ascend") == {}
    assert db.visibility_var("npu") == db.ASCEND_VAR and db.visibility_var("cuda") == db.CUDA_VAR


def test_no_xdist_changes_nothing():
    for wid in (None, "", "master"):
        assert db.plan_binding(wid, {}, 4) == {}
        env = {"PATH": "/bin"}
        desc = db.apply_binding(wid, env, 4) if wid is not None else db.apply_binding(env=env, device_count=4)
        assert env == {"PATH": "/bin"} and "unchanged" in desc


def test_apply_binding_mutates_env_and_describes():
    env = {"PYTEST_XDIST_WORKER": "gw1"}
    desc = db.apply_binding(env=env, device_count=2)
    assert env[db.CUDA_VAR] == "1"
    assert desc == "gw1 -> CUDA_VISIBLE_DEVICES=1 (2 devices)"


def test_device_count_override_and_no_device():
    assert db.detect_device_count("cuda", {db.COUNT_OVERRIDE_VAR: "3"}) == 3
    assert db.detect_device_count("asc", {db.COUNT_OVERRIDE_VAR: "0"}) == 0
    with pytest.raises(ValueError):
        db.detect_device_count("cuda", {db.COUNT_OVERRIDE_VAR: "many"})
    env = {"PYTEST_XDIST_WORKER": "gw0", db.COUNT_OVERRIDE_VAR: "0"}
    desc = db.apply_binding(env=env)
    assert db.CUDA_VAR not in env and "no device" in desc
    env = {"PYTEST_XDIST_WORKER": "gw3", db.COUNT_OVERRIDE_VAR: "2"}
    db.apply_binding(env=env)
    assert env[db.CUDA_VAR] == "1"


def test_per_worker_tilelang_cache(tmp_path):
    env = {db.PER_WORKER_CACHE_VAR: "1", db.TILELANG_CACHE_VAR: str(tmp_path)}
    upd = db.plan_binding("gw2", env, 4)
    assert upd[db.TILELANG_CACHE_VAR] == str(tmp_path / "gw2")
    env.update(upd)
    assert db.TILELANG_CACHE_VAR not in db.plan_binding("gw2", env, 4)  # idempotent
    assert db.TILELANG_CACHE_VAR not in db.plan_binding("gw2", {db.TILELANG_CACHE_VAR: str(tmp_path)}, 4)


def test_benchmark_allowed():
    ok, reason = db.benchmark_allowed(4, 2)
    assert not ok and "share 2 device" in reason and "-n 2" in reason
    assert db.benchmark_allowed(2, 2)[0]
    assert db.benchmark_allowed(1, 0)[0]
    assert not db.benchmark_allowed(3, 0)[0]
    env = {"PYTEST_XDIST_WORKER_COUNT": "4", db.COUNT_OVERRIDE_VAR: "2"}
    assert not bm.check_xdist_allowed(env)[0]
    assert bm.check_xdist_allowed({})[0]


# --- the CLI end to end, on a simulated device ------------------------------------------------


class _FakeDevice:
    """Stands in for torch.cuda and the timer: a call's "time" is its base cost x invocations."""

    def __init__(self, monkeypatch):
        self.calls = 0
        self.peak = 0
        cuda = torch.cuda
        for name, fn in {
            "is_available": lambda: True,
            "set_device": lambda d: None,
            "get_device_name": lambda d=None: "NVIDIA H200",
            "synchronize": lambda d=None: None,
            "empty_cache": lambda: None,
            "reset_peak_memory_stats": lambda d=None: None,
            "memory_allocated": lambda d=None: 1000,
            "max_memory_allocated": lambda d=None: 1000 + self.peak,
        }.items():
            monkeypatch.setattr(cuda, name, fn)
        monkeypatch.setattr(timer, "copy_ceiling_timing", lambda d=None, nbytes=0, method="cuda_graph": (4000.0, self._t(500.0, method)))
        monkeypatch.setattr(timer, "empty_kernel_us", lambda d=None, method="cuda_graph": 2.0)
        monkeypatch.setattr(timer, "l2_cache_bytes", lambda d=None: 50 * MIB)
        monkeypatch.setattr(timer, "measure", self.measure)
        # The runner's same-bytes copy costs half a case's kernel (bytes_moved = 4e6 x its us).
        monkeypatch.setattr(timer, "same_bytes_copy", lambda d, nbytes, l2: [self.call(nbytes / 8e6, 0)])
        monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)

    @staticmethod
    def _t(us: float, method: str) -> timer.Timing:
        return timer.summarize([us * 0.99, us, us * 1.01], method)

    def measure(self, fns, *, method="cuda_graph", device=None, **kw):
        fns = [fns] if callable(fns) else list(fns)
        if method == "cuda_graph" and getattr(fns[0], "uncapturable", False):
            raise timer.TimerError("CUDA graph capture failed: synchronises")
        self.calls = 0
        base = fns[0]()
        return self._t(base * self.calls, method)

    def call(self, cost: float, peak: int):
        def fn():
            self.calls += 1
            self.peak = peak
            return cost

        return fn

    def case(self, case_id: str, base_us: float, peak: int, peers: dict[str, float | None]) -> bm.BenchCase:
        def make(device, k):
            def broken():
                raise RuntimeError("torch.compile could not trace\nlong traceback")

            pf = {}
            for name, cost in peers.items():
                pf[name] = broken if cost is None else self.call(cost, peak)
            return bm.Workload(fn=self.call(base_us, peak), peers=pf)

        return bm.BenchCase("fake", case_id, {"base": base_us}, bytes_moved=int(base_us * 4e6), make=make)


def test_cli_end_to_end_with_a_fake_device(tmp_path, monkeypatch, capsys):
    fake = _FakeDevice(monkeypatch)
    cases = [
        fake.case("big", 200.0, 64 * MIB, {"torch_eager": 300.0, "torch_compile": None}),
        fake.case("small", 8.0, 2 * MIB, {"torch_eager": 20.0, "torch_compile": 9.0}),
    ]
    # The real load_cases, over a bench module that holds these cases.
    monkeypatch.setitem(sys.modules, "kernels.fake.fake_bench", SimpleNamespace(cases=lambda: cases))
    dirs = ["--baseline-dir", str(tmp_path / "base"), "--memory-dir", str(tmp_path / "mem")]
    out_json = tmp_path / "out.json"

    # 1. no baselines yet: reported, not failing; then fail mode fails.
    assert bm.main(["--kernels", "fake", *dirs]) == 0
    text = capsys.readouterr().out
    assert "missing baselines" in text and "MISSING" in text
    assert bm.main(["--kernels", "fake", "--missing", "fail", *dirs]) == 1
    capsys.readouterr()

    # 2. refresh both, with JSON output.
    assert bm.main(["--kernels", "fake", "--refresh-baselines", "--refresh-memory", "--json", str(out_json), *dirs]) == 0
    base = bm.load_jsonl(tmp_path / "base" / "nvidia-h200" / "fake.jsonl")
    mem = bm.load_jsonl(tmp_path / "mem" / "nvidia-h200" / "fake.jsonl")
    assert sorted(base) == sorted(mem) == ["big", "small"]
    assert math.isclose(base["big"]["time_us"], 200.0) and mem["small"]["peak_extra_bytes"] == 2 * MIB
    assert base["big"]["peers"]["torch_compile"]["skipped"].startswith("failed to run: RuntimeError: torch.compile could not trace")
    assert math.isclose(base["small"]["bandwidth_gbs"], 8.0 * 4e6 / 8.0 / 1e3)
    assert math.isclose(base["small"]["pct_ceiling"], 100 * base["small"]["bandwidth_gbs"] / 4000.0)
    # The run's empty-kernel floor stays with each case's baseline.
    assert base["big"]["empty_kernel_us"] == base["small"]["empty_kernel_us"] == 2.0
    assert math.isclose(base["big"]["peers"][bm.SAME_BYTES_COPY]["time_us"], 100.0)
    assert math.isclose(base["small"]["peers"][bm.SAME_BYTES_COPY]["bandwidth_gbs"], 2 * base["small"]["bandwidth_gbs"])
    payload = json.loads(out_json.read_text())
    assert payload["exit_status"] == 0 and payload["device_slug"] == "nvidia-h200" and len(payload["records"]) == 2
    assert math.isclose(payload["geomean"]["time_us"], statistics.geometric_mean([200.0, 8.0]), rel_tol=1e-9)
    capsys.readouterr()

    # 3. same numbers: pass; the table has peers side by side (the same-bytes copy last) and the
    # geomean row; two runs' records keep both times.
    assert bm.main(["--kernels", "fake", "--repeat-runs", "2", "--json", str(out_json), *dirs]) == 0
    text = capsys.readouterr().out
    assert "RESULT: PASS" in text and "geomean" in text and "1.50x" in text and "run-to-run spread" in text
    header = next(line for line in text.splitlines() if line.startswith("case "))
    assert header.index("torch_compile us") < header.index("same_bytes_copy us") and "xsame_bytes_copy" in header
    assert "0.50x" in text
    assert [r["run_times_us"] for r in json.loads(out_json.read_text())["records"]] == [[200.0, 200.0], [8.0, 8.0]]

    # 4. the gate's self-check: every call run twice is flagged (both cases exceed 3 us delta).
    assert bm.main(["--kernels", "fake", "--inject-extra-pass", *dirs]) == 1
    text = capsys.readouterr().out
    assert text.count("FAIL fake/") == 2 and "REGRESSION" in text

    # 5. memory growth fails; refreshing only the memory accepts it and keeps the other case.
    cases[0] = fake.case("big", 200.0, 96 * MIB, {"torch_eager": 300.0})
    assert bm.main(["--kernels", "fake", *dirs]) == 1
    assert "MEM-GROWTH" in capsys.readouterr().out
    assert bm.main(["--kernels", "fake", "--cases-filter", "big", "--refresh-memory", *dirs]) == 0
    mem = bm.load_jsonl(tmp_path / "mem" / "nvidia-h200" / "fake.jsonl")
    assert mem["big"]["peak_extra_bytes"] == 96 * MIB and mem["small"]["peak_extra_bytes"] == 2 * MIB


def test_cases_filter_is_a_regular_expression_searched_in_the_id(monkeypatch):
    ids = ["t1_d7168", "add_t1_d7168", "t16384_d7168", "t8_d4096", "fp8_t64_d7168"]
    monkeypatch.setitem(sys.modules, "kernels.fake.fake_bench", SimpleNamespace(cases=lambda: [SimpleNamespace(case_id=i) for i in ids]))

    def picked(flt):
        return [c.case_id for c in bm.load_cases(["fake"], flt)]

    assert picked(None) == ids
    assert picked("t1_d") == ["t1_d7168", "add_t1_d7168"]
    assert picked("t(1|8)_d") == ["t1_d7168", "add_t1_d7168", "t8_d4096"]
    assert picked("^t1") == ["t1_d7168", "t16384_d7168"]


def test_time_budget_keeps_the_cases_it_measured(tmp_path, monkeypatch, capsys):
    fake = _FakeDevice(monkeypatch)
    cases = [fake.case(f"c{i}", 10.0 + i, MIB, {"torch_eager": 20.0}) for i in range(4)]
    monkeypatch.setattr(bm, "load_cases", lambda kernels, flt=None: cases)
    now = [0.0]
    monkeypatch.setattr(bm, "time", SimpleNamespace(monotonic=lambda: now[0]))
    measure = bm.measure_case

    def ten_seconds(case, *args, **kwargs):
        now[0] += 10.0
        return measure(case, *args, **kwargs)

    monkeypatch.setattr(bm, "measure_case", ten_seconds)
    dirs = ["--baseline-dir", str(tmp_path / "base"), "--memory-dir", str(tmp_path / "mem")]
    out_json = tmp_path / "out.json"

    # c0 ends at 10 s, c1 at 20 s; c2 would end at 30 s, past the 25 s budget: not started.
    argv = ["--kernels", "fake", "--refresh-baselines", "--refresh-memory", "--time-budget", "25", "--json", str(out_json), *dirs]
    assert bm.main(argv) == 1
    text = capsys.readouterr().out
    assert "RESULT: INCOMPLETE (2 of 4 cases run, 0 failing)" in text
    assert "fake/c2 ..." not in text and "  fake/c2\n  fake/c3\n" in text
    assert sorted(bm.load_jsonl(tmp_path / "base" / "nvidia-h200" / "fake.jsonl")) == ["c0", "c1"]
    assert sorted(bm.load_jsonl(tmp_path / "mem" / "nvidia-h200" / "fake.jsonl")) == ["c0", "c1"]
    assert json.loads(out_json.read_text())["not_run"] == ["fake/c2", "fake/c3"]

    # Two runs, the second cut after one case: the complete first run is the result.
    now[0] = 0.0
    assert bm.main(["--kernels", "fake", "--repeat-runs", "2", "--time-budget", "55", *dirs]) == 0
    text = capsys.readouterr().out
    assert "combining the 1 complete runs of 2" in text and "RESULT: PASS (4 cases, 0 failing)" in text

    with pytest.raises(SystemExit):
        bm.main(["--kernels", "fake", "--time-budget", "0", *dirs])


def test_same_bytes_copy_is_skipped_without_bytes_and_noted_when_it_cannot_be_built(monkeypatch):
    fake = _FakeDevice(monkeypatch)
    dev = torch.device("cuda", 0)
    case = fake.case("zero", 5.0, 0, {"torch_eager": 7.0})
    case.bytes_moved = 0
    rec = bm.measure_case(case, dev, log=lambda _: None)
    assert rec["time_us"] == 5.0 and list(rec["peers"]) == ["torch_eager"]

    def out_of_memory(d, nbytes, l2):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(timer, "same_bytes_copy", out_of_memory)
    rec = bm.measure_case(fake.case("big", 9.0, 0, {"torch_eager": 7.0}), dev, log=lambda _: None)
    assert rec["time_us"] == 9.0 and rec["peers"]["torch_eager"]["time_us"] == 7.0
    assert rec["peers"][bm.SAME_BYTES_COPY]["skipped"].startswith("could not be built: OutOfMemoryError")


def test_cli_graph_capture_failure_falls_back_to_profiler(tmp_path, monkeypatch, capsys):
    fake = _FakeDevice(monkeypatch)
    case = fake.case("sync", 50.0, 0, {})
    orig_make = case.make

    def make(device, k):
        w = orig_make(device, k)
        w.fn.uncapturable = True
        return w

    case.make = make
    monkeypatch.setattr(bm, "load_cases", lambda kernels, flt=None: [case])
    out_json = tmp_path / "o.json"
    assert bm.main(["--kernels", "fake", "--baseline-dir", str(tmp_path), "--memory-dir", str(tmp_path), "--json", str(out_json)]) == 0
    rec = json.loads(out_json.read_text())["records"][0]
    assert rec["method"] == "profiler" and "profiler used" in rec["notes"][0]
    assert "cuda_graph unusable" in capsys.readouterr().out


def test_profiler_event_filter():
    from types import SimpleNamespace as NS

    from torch.autograd import DeviceType

    def evt(dtype, name="k", ann=False, kind="kernel"):
        return NS(device_type=dtype, name=name, is_user_annotation=ann, activity_type=kind)

    assert timer._is_device_activity(evt(DeviceType.CUDA))
    assert timer._is_device_activity(evt(DeviceType.CUDA, kind="gpu_memcpy"))
    assert not timer._is_device_activity(evt(DeviceType.CPU))
    assert not timer._is_device_activity(evt(DeviceType.CUDA, ann=True))
    assert not timer._is_device_activity(evt(DeviceType.CUDA, kind="gpu_user_annotation"))
    assert not timer._is_device_activity(evt(DeviceType.CUDA, kind="cuda_sync"))
    assert not timer._is_device_activity(evt(DeviceType.CUDA, name=timer.FLUSH_TAG, kind=None))


def test_baseline_of_another_method_counts_as_missing():
    rec = _record("a", 50.0, 0)
    rec["method"] = "profiler"
    base = {"k/a": {"time_us": 10.0, "method": "cuda_graph"}}
    (rep,) = bm.evaluate([rec], base, {"k/a": {"peak_extra_bytes": 0}}, bm.GateSettings())
    assert rep.time_verdict.status == bm.MISSING and "recorded with cuda_graph" in rep.time_verdict.detail
    (rep,) = bm.evaluate([rec], base, {"k/a": {"peak_extra_bytes": 0}}, bm.GateSettings(missing="fail"))
    assert not rep.ok
    base["k/a"]["method"] = "profiler"
    (rep,) = bm.evaluate([rec], base, {"k/a": {"peak_extra_bytes": 0}}, bm.GateSettings())
    assert rep.time_verdict.status == bm.REGRESSION


def test_same_bytes_copy_moves_the_bytes_it_is_given_from_rotated_sources(rng):
    l2 = rng.randint(1, 63) * 1024
    for nbytes in (1, 31, 32, 33, rng.randint(34, 10**6)):
        fns = timer.same_bytes_copy(torch.device("cpu"), nbytes, l2)
        half = max(16, -(-nbytes // 32) * 16)
        assert len(fns) == timer.sets_for_rotation(half, l2) and len(fns) * half >= min(2 * l2, 8192 * half)
        outs = [fn() for fn in fns]
        sources = {fn.__defaults__[0].data_ptr() for fn in fns}
        assert len(sources) == len(fns)
        for fn, out in zip(fns, outs):
            assert out.nbytes == half and 2 * half >= nbytes and (2 * half - nbytes < 32 or half == 16)
            assert torch.equal(out, ~fn.__defaults__[0])


def test_progress_line_reports_time_bandwidth_peers_and_errors(rng):
    us, gbs, pct, peer_us = rng.uniform(1, 500), rng.uniform(100, 4000), rng.uniform(1, 99), rng.uniform(1, 500)
    rec = {"time_us": us, "bandwidth_gbs": gbs, "pct_ceiling": pct, "peers": {"eager": {"time_us": peer_us}, "compiled": {"skipped": "x"}}}
    assert bm.progress_line(rec) == f"{us:.2f} us, {gbs:.0f} GB/s, {pct:.1f}% of ceiling; eager {peer_us:.2f} us, compiled skipped"
    rec["pct_ceiling"] = None
    assert "no ceiling" in bm.progress_line(rec)
    assert bm.progress_line({"time_us": None, "error": "boom", "peers": {}}) == "error: boom"
