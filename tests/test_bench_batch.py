"""scripts/bench_batch.py on a tiny random-weight checkpoint: the batch-axis decoder it measures
is the bundle's decoder with a batch axis (B = 1 gives the bundle decoder's logits; on these
widths batched rows give each stream's own logits), and the report has its structure (no
timing assertions). On the 0.6B widths the int8/int4 kernels give batched rows slightly
different logits (docs/serving.md); the tool reports how far."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

pytest.importorskip("torch", reason="the random checkpoint is made with the official code (the dev extra)")

import bundles  # noqa: E402
from qwen3asr_tools import bench_batch  # noqa: E402


@pytest.fixture(scope="module")
def tiny():
    return bundles.bundle("tiny-a", "bfloat16")


@pytest.mark.parametrize("dtype,tol", [("fp32", 1e-5), ("int8", 1e-4), ("int4", 1e-4)])
def test_batched_rows_are_each_streams_own_logits(tiny, dtype, tol):
    ck, bd = tiny
    session, cfg = bench_batch.build_session(ck, dtype, threads=1)
    exact = bench_batch.check_exactness(session, cfg, b=3)
    assert exact["max_abs_diff"] <= tol and exact["min_cos"] >= 0.99999 and exact["argmax_same"] == 1.0
    # B = 1 of the batch-axis graph is the bundle's decoder: the same logits for the same cache
    import onnxruntime as ort

    with open(os.path.join(bd, "model.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    entry = next(d for d in manifest["decoder"]["variants"] if d["dtype"] == dtype)
    shipped = ort.InferenceSession(os.path.join(bd, entry["file"]), providers=["CPUExecutionProvider"])
    one = bench_batch.Caches(session, cfg, 1, 32, seed=3)
    feeds = {"inputs_embeds": (np.random.default_rng(4).standard_normal((1, 1, cfg.text.hidden_size)) * 0.05
                               ).astype(np.float32),
             "seqlens_k": np.array([20], np.int32), "total_sequence_length": np.array(21, np.int32),
             "logit_index": np.zeros(1, np.int64)}
    for i in range(cfg.text.num_hidden_layers):
        feeds[f"past_key_{i}"] = one.values[2 * i].numpy().copy()
        feeds[f"past_value_{i}"] = one.values[2 * i + 1].numpy().copy()
    want = shipped.run(["logits"], feeds)[0]
    got = one.step(feeds["inputs_embeds"], feeds["seqlens_k"])
    assert np.abs(got - want).max() <= tol


def test_report(tiny, tmp_path, capsys):
    ck, _ = tiny
    out = tmp_path / "batch.json"
    assert bench_batch.main(["--checkpoint", ck, "--dtypes", "fp32,int8", "--batches", "1,3", "--context", "16",
                             "--runs", "2", "--threads", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["dtypes"]) == {"fp32", "int8"}
    for dt, r in report["dtypes"].items():
        assert r["batched_vs_alone"]["max_abs_diff"] <= 1e-4 and r["batched_vs_alone"]["rows"] == 8
        assert [row["batch"] for row in r["rows"]] == [1, 3]
        for row in r["rows"]:
            assert row["batched_ms"] > 0 and row["sequential_ms"] > 0
            assert row["speedup"] == pytest.approx(row["sequential_ms"] / row["batched_ms"], rel=0.02)
            assert row["batched_tok_s"] == pytest.approx(row["batch"] * 1000 / row["batched_ms"], rel=0.02)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["dtype", "B"] and len([x for x in lines if x.startswith(("fp32 ", "int8 "))]) == 4


def test_bad_arguments_are_usage_errors(capsys):
    for argv in (["--preset", "0.6b", "--batches", "0"], ["--preset", "0.6b", "--dtypes", "int3"], []):
        with pytest.raises(SystemExit) as e:
            bench_batch.main(argv)
        assert e.value.code == 2
