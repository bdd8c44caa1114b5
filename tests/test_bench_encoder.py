"""scripts/bench_encoder.py on the ONNX Runtime backend: structure of the table and JSON (no timing claims)."""

from __future__ import annotations

import json

import pytest

from qwen3asr_tools import bench_encoder
import bundles


def test_bench_onnx_json_and_table(tmp_path, capsys):
    _, b = bundles.bundle("tiny-a")
    out = tmp_path / "bench.json"
    rc = bench_encoder.main(["--bundle", b, "--backend", "onnx", "--forms", "merged,split", "--sizes", "2,3",
                             "--runs", "3", "--warmup", "1", "--json", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert (doc["backend"], doc["runs"], doc["warmup"]) == ("onnx", 3, 1)
    res = doc["results"]
    assert [(r["form"], r["seconds"]) for r in res] == [("merged", 2.0), ("merged", 3.0), ("split", 2.0), ("split", 3.0)]
    # merged: one graph per run; split: one front-end call per 1 s chunk + the back end
    assert [r["calls_per_run"] for r in res] == [1, 1, 3, 4]
    for r in res:
        assert r["runs"] == 3 and r["core_mask"] is None
        assert 0 < r["min_ms"] <= r["mean_ms"] <= r["max_ms"]
        assert r["std_ms"] >= 0
        assert r["rtf"] == pytest.approx(r["mean_ms"] / 1000 / r["seconds"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["form", "dur", "s", "cores", "calls", "mean", "ms", "std", "min", "max", "RTF"]
    assert [ln.split()[:4] for ln in lines[2:]] == [["merged", "2", "-", "1"], ["merged", "3", "-", "1"],
                                                    ["split", "2", "-", "3"], ["split", "3", "-", "4"]]


def test_bench_all_sizes_by_default():
    _, b = bundles.bundle("tiny-a")
    res = bench_encoder.run(b, "onnx", ("merged",), None, (None,), runs=1, warmup=0)
    assert [r.seconds for r in res] == [2.0, 3.0, 4.0, 5.0, 8.0]


def test_bench_errors(capsys):
    _, b = bundles.bundle("tiny-a")
    assert bench_encoder.main(["--bundle", b, "--core-masks", "0_1"]) == 2
    assert "--core-masks applies to the rknn backend only" in capsys.readouterr().err
    assert bench_encoder.main(["--bundle", b, "--runs", "0"]) == 2
    assert "--runs must be >= 1" in capsys.readouterr().err
    assert bench_encoder.main(["--bundle", b, "--sizes", "7"]) == 2
    assert "encoder sizes [7] s not in the bundle (merged offers [2, 3, 4, 5, 8] s)" in capsys.readouterr().err
