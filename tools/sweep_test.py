"""CPU test of //tools:sweep and //tools:plot_pareto: a tiny sweep into a temporary directory.

Checks the files, that results.json and results.csv agree, that every PNG is a PNG carrying the run
label, and that what the plots show (read back from the figures into plots.json) is what the JSON
says; then that plot_pareto redraws the same plots from the JSON alone.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest
import torch
from absl import flags

from testing.benchmark import BenchCase
from tools import plot_pareto, sweep, sweep_lib

CPU_LABEL = "reference backend on CPU"
BATCHES = [1, 2, 4]
MTP = 1
VOCAB = 512  # hidden is left to the CPU default, so the scaled-down note must name hidden only
TINY = [
    "--kernels=gather",
    f"--batches={','.join(map(str, BATCHES))}",
    f"--vocab={VOCAB}",
    f"--mtp={MTP}",
    "--method=cpu_wall",
]
PEERS = ["torch_eager", "torch_compile", "index_select"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sweep")
    assert sweep.run(["sweep", *TINY, f"--out={out}"]) == 0
    return out


@pytest.fixture(scope="module")
def results(out_dir) -> dict:
    return json.loads((out_dir / "results.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def manifest(out_dir) -> dict:
    return json.loads((out_dir / plot_pareto.MANIFEST).read_text(encoding="utf-8"))


def expected_pngs(results: dict) -> set[str]:
    names = {f"{kind}_{k}.png" for k in results["kernels"] for kind in ("latency", "ceiling")}
    return names | ({"hot_path_pareto.png"} if plot_pareto.timed_points(results["hot_path"]) else set())


def test_files_written(out_dir, results):
    assert expected_pngs(results) == {"latency_gather.png", "ceiling_gather.png", "hot_path_pareto.png"}
    for name in ["results.json", "results.csv", "plots.json", *expected_pngs(results)]:
        assert (out_dir / name).is_file(), name


def test_metadata_labels_the_cpu_run(results):
    meta = results["metadata"]
    assert results["schema"] == sweep_lib.SCHEMA
    assert meta["label"] == CPU_LABEL
    assert (meta["backend"], meta["method"], meta["device"]) == ("reference", "cpu_wall", "cpu")
    assert meta["model"] == {
        "hidden": sweep_lib.CPU_HIDDEN,
        "vocab": VOCAB,
        "block_size": 64,
        "mtp": MTP,
        "tokens_per_request": 1 + MTP,
    }
    assert "hidden" in meta["model_note"] and "vocab" not in meta["model_note"]
    assert meta["ceiling_gbs"] > 0


def test_kernel_records(results):
    meta = results["metadata"]
    records = results["kernels"]["gather"]["records"]
    assert [r["batch"] for r in records] == BATCHES
    for rec in records:
        assert rec["tokens"] == rec["batch"] * (1 + MTP)
        assert rec["params"]["m"] == rec["tokens"] and rec["params"]["n"] == VOCAB
        assert rec["time_us"] > 0 and "error" not in rec
        expected_pct = 100 * rec["bytes"] / (rec["time_us"] * 1e-6) / 1e9 / meta["ceiling_gbs"]
        assert math.isclose(rec["pct_ceiling"], expected_pct, rel_tol=1e-9)
        assert sorted(rec["peers"]) == sorted(PEERS)


def test_hot_path_points(results):
    hot = results["hot_path"]
    # The sweep ran with --kernels=gather: every other registered stage is skipped, saying why.
    assert [s["kernel"] for s in hot["stages"]] == ["gather"]
    others = [s for s in sweep_lib.HOT_PATH_STAGES if s.kernel != "gather"]
    assert [s["name"] for s in hot["skipped_stages"]] == [s.name for s in others]
    assert all(s["reason"] == "kernel not selected by --kernels" for s in hot["skipped_stages"])
    assert [p["batch"] for p in hot["points"]] == BATCHES
    for p in hot["points"]:
        assert p["step_us"] > 0
        assert math.isclose(p["tokens_per_s_per_user"], 1e6 / p["step_us"])
        assert math.isclose(p["tokens_per_s_per_gpu"], p["batch"] * 1e6 / p["step_us"])


def _csv_value(text: str):
    return None if text == "" else float(text)


def test_csv_agrees_with_json(out_dir, results):
    lines = (out_dir / "results.csv").read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("#") and CPU_LABEL in lines[0]
    rows = sweep_lib.read_csv(out_dir / "results.csv")
    got = {(r["section"], r["impl"], int(r["batch"])): r for r in rows}
    expected = {}
    for kernel, entry in results["kernels"].items():
        for rec in entry["records"]:
            expected[("kernel", kernel, rec["batch"])] = rec
            for peer, p in rec["peers"].items():
                expected[("kernel", peer, rec["batch"])] = p
    for p in results["hot_path"]["points"]:
        expected[("hot_path", "step", p["batch"])] = {**p, "time_us": p["step_us"]}
    assert len(rows) == len(got) == len(expected)
    assert set(got) == set(expected)
    for key, want in expected.items():
        row = got[key]
        for column in ("time_us", "bandwidth_gbs", "pct_ceiling", "tokens_per_s_per_user", "tokens_per_s_per_gpu"):
            assert _csv_value(row[column]) == want.get(column), (key, column)


def png_info(path: Path) -> tuple[int, int, dict[str, str]]:
    """(width, height, tEXt entries) of a PNG; fails unless the signature and IHDR are right."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    length, kind = struct.unpack(">I4s", data[8:16])
    assert (length, kind) == (13, b"IHDR"), path
    width, height = struct.unpack(">II", data[16:24])
    texts, pos = {}, 8
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if kind == b"tEXt":
            key, _, value = data[pos + 8 : pos + 8 + length].partition(b"\0")
            texts[key.decode("latin-1")] = value.decode("latin-1")
        pos += 12 + length
    return width, height, texts


def test_pngs_are_valid_and_labelled(out_dir, results):
    for name in expected_pngs(results):
        width, height, texts = png_info(out_dir / name)
        assert width > 0 and height > 0, name
        assert texts.get("Description") == CPU_LABEL, name
        assert CPU_LABEL in texts.get("Title", ""), name


def _series(entry: dict) -> dict[str, tuple[str, int]]:
    return {s["name"]: (s["linestyle"], s["points"]) for s in entry["series"]}


def test_plots_show_what_the_json_says(results, manifest):
    plots = {p["file"]: p for p in manifest["plots"]}
    assert set(plots) == expected_pngs(results)
    assert manifest["label"] == CPU_LABEL
    meta = results["metadata"]
    for entry in plots.values():
        assert CPU_LABEL in entry["title"], entry["file"]
    for kernel, data in results["kernels"].items():
        records = data["records"]
        kernel_and_peers = {kernel: ("-", len(records))}
        kernel_and_peers.update({p: ("--", sum(p in r["peers"] for r in records)) for p in records[0]["peers"]})

        latency = plots[f"latency_{kernel}.png"]
        assert latency["title"].startswith(f"{kernel}: time per call")
        assert (latency["xlabel"], latency["ylabel"]) == ("batch size (decode requests per GPU)", "time per call (µs)")
        assert (latency["xscale"], latency["yscale"]) == ("log", "log")
        assert _series(latency) == kernel_and_peers

        ceiling = plots[f"ceiling_{kernel}.png"]
        assert ceiling["ylabel"] == f"% of copy ceiling ({meta['ceiling_gbs']:.0f} GB/s = 100%)"
        assert (ceiling["xscale"], ceiling["yscale"]) == ("log", "linear")
        assert _series(ceiling) == {"copy ceiling": (":", 2), **kernel_and_peers}

    pareto = plots["hot_path_pareto.png"]
    points = results["hot_path"]["points"]
    assert "kernel path only (no GEMM, attention or communication)" in pareto["title"]
    assert all(f"{s['name']} ({s['kernel']})" in pareto["title"] for s in results["hot_path"]["stages"])
    assert pareto["xlabel"] == "tokens/s per GPU (batch / step time)"
    assert pareto["ylabel"] == "tokens/s per user (1 / step time)"
    assert (pareto["xscale"], pareto["yscale"]) == ("log", "log")
    assert pareto["point_labels"] == [f"B={p['batch']}" for p in points]
    assert [s["points"] for s in pareto["series"]] == [len(points)]


def test_plot_pareto_replots_from_the_json(out_dir, manifest, tmp_path):
    assert plot_pareto.main(["--results", str(out_dir / "results.json"), "--out", str(tmp_path)]) == 0
    replotted = json.loads((tmp_path / plot_pareto.MANIFEST).read_text(encoding="utf-8"))
    assert replotted == manifest
    for entry in replotted["plots"]:
        assert (tmp_path / entry["file"]).read_bytes()[:8] == PNG_SIGNATURE


def _fake_case(batch, model_config, device) -> BenchCase:
    raise AssertionError("a skipped stage must never be built")


def test_stages_of_unavailable_kernels_are_skipped(monkeypatch):
    embed = sweep_lib.HOT_PATH_STAGES[0]
    later = sweep_lib.HotPathStage("sampler", "not_a_kernel", "samples the next tokens", _fake_case)
    monkeypatch.setattr(sweep_lib, "HOT_PATH_STAGES", [embed, later])
    plan = sweep_lib.make_plan(sweep_lib.CpuWallTimer(), ["gather"], [1])
    assert plan.stages == [embed]
    assert [(s["name"], s["reason"]) for s in plan.skipped_stages] == [
        ("sampler", "kernel not registered in kernels/registry.bzl")
    ]
    included, skipped = sweep_lib.split_stages([embed], registered=["gather"], reasons={})
    assert included == [] and skipped[0]["reason"] == "kernel not selected by --kernels"
    included, skipped = sweep_lib.split_stages([embed], registered=["gather"], reasons={"gather": "no sweep_case"})
    assert included == [] and skipped[0]["reason"] == "no sweep_case"
    hot = {"stages": [embed.to_dict()], "skipped_stages": plan.skipped_stages}
    assert plot_pareto.stages_line(hot) == "stages: embed (gather); skipped: sampler (not_a_kernel)"


def test_kernels_without_sweep_hooks_are_reported():
    assert sweep_lib.sweepable("gather") == ""
    assert "cannot import kernels/not_a_kernel/not_a_kernel_bench.py" in sweep_lib.sweepable("not_a_kernel")


def test_register_stage_refuses_a_duplicate_name(monkeypatch):
    monkeypatch.setattr(sweep_lib, "HOT_PATH_STAGES", list(sweep_lib.HOT_PATH_STAGES))
    with pytest.raises(ValueError, match="already registered"):
        sweep_lib.register_stage(sweep_lib.HOT_PATH_STAGES[0])


def test_default_batches_are_powers_of_two_up_to_the_cap():
    assert sweep_lib.powers_of_two(64) == [1, 2, 4, 8, 16, 32, 64]
    assert sweep_lib.powers_of_two(100) == [1, 2, 4, 8, 16, 32, 64]
    plan = sweep_lib.make_plan(sweep_lib.CpuWallTimer(), None, None)
    assert plan.kernel_batches["gather"] == sweep_lib.powers_of_two(sweep_lib.CPU_MAX_BATCH)
    assert plan.hot_path_batches == plan.kernel_batches["gather"]


def test_usage_errors(tmp_path):
    assert sweep.run(["sweep", "--kernels=not_a_kernel", f"--out={tmp_path}"]) == 2
    assert sweep.run(["sweep", "--batches=1,x", f"--out={tmp_path}"]) == 2
    with pytest.raises(flags.IllegalFlagValueError):
        sweep.run(["sweep", "--mtp=4", f"--out={tmp_path}"])
    if not torch.cuda.is_available():
        assert sweep.run(["sweep", "--method=cuda_graph", f"--out={tmp_path}"]) == 2
    assert not any(tmp_path.iterdir())
