"""testing.device_results writes exactly the cases each call measured, later calls winning."""

from __future__ import annotations

import io
import json
import random
import tarfile

import torch

from testing import device_results
from testing.benchmark import load_jsonl

SLUG = "some-gpu"


def _record(kernel: str, case_id: str, rng: random.Random, **extra) -> dict:
    return {"kernel": kernel, "case_id": case_id, "device": "Some GPU", "params": {"T": rng.randint(1, 9)},
            "time_us": rng.uniform(1, 100), "peak_extra_bytes": rng.randint(0, 1 << 30), **extra}


def _results_tar(path, benches: dict[str, list[dict]]) -> None:
    """A results.tar as tools/gpu/verify.sh packs it (members under ./), with a baselines.tar that
    must not be read. A key with a prefix (tree_...) names the whole file; others are bench_KEY."""
    with tarfile.open(path, "w") as tar:
        named = {(k if k.startswith("tree_") else f"bench_{k}"): recs for k, recs in benches.items()}
        for name, data in [(f"./{k}.json", json.dumps({"device_slug": SLUG, "records": recs}).encode()) for k, recs in named.items()] + [
            ("./baselines.tar", b"not read"),
            ("./bench_x.log", b"RESULT: PASS"),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_measured_cases_replace_theirs_and_keep_the_rest(tmp_path):
    rng = random.Random(torch.initial_seed())
    base, mem = tmp_path / "base", tmp_path / "mem"
    (base / SLUG).mkdir(parents=True)
    old = [_record("k", c, rng) for c in ("kept", "first", "both")]
    (base / SLUG / "k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    call1 = {"k_a": [_record("k", "first", rng), _record("k", "both", rng)], "k_b": [_record("k", "broken", rng, error="boom")]}
    call2 = {"k_c": [_record("k", "both", rng), _record("j", "other", rng)]}
    _results_tar(tmp_path / "1.tar", call1)
    _results_tar(tmp_path / "2.tar", call2)

    lines = device_results.merge([tmp_path / "1.tar", tmp_path / "2.tar"], base, mem)

    assert len(lines) == 3 and "(1 with errors skipped)" in lines[1]
    got = load_jsonl(base / SLUG / "k.jsonl")
    assert set(got) == {"kept", "first", "both"}, "an errored case is not written"
    assert got["kept"] == old[0], "a case no call measured keeps its baseline"
    assert got["first"] == call1["k_a"][0]
    assert got["both"] == call2["k_c"][0], "the later call wins"
    assert load_jsonl(base / SLUG / "j.jsonl") == {"other": call2["k_c"][1]}
    profiles = load_jsonl(mem / SLUG / "k.jsonl")
    assert set(profiles) == {"first", "both"}
    assert profiles["both"]["peak_extra_bytes"] == call2["k_c"][0]["peak_extra_bytes"]


def test_a_branch_trees_benches_are_folded_only_when_asked(tmp_path):
    rng = random.Random(torch.initial_seed())
    main_case, branch_case = _record("k", "c", rng), _record("k", "c", rng)
    _results_tar(tmp_path / "1.tar", {"k": [main_case], "tree_br_k": [branch_case]})

    lines = device_results.merge([tmp_path / "1.tar"], tmp_path / "base", tmp_path / "mem")
    assert len(lines) == 1
    assert load_jsonl(tmp_path / "base" / SLUG / "k.jsonl") == {"c": main_case}, "the branch's timing stays out"

    lines = device_results.merge([tmp_path / "1.tar"], tmp_path / "base", tmp_path / "mem", trees=True)
    assert len(lines) == 2
    assert load_jsonl(tmp_path / "base" / SLUG / "k.jsonl") == {"c": branch_case}, "tree_ sorts after bench_: it wins"
