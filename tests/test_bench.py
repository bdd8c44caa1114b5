"""Smoke test of scripts/bench.py on a tiny random-weight checkpoint: structure of the table and
the JSON report (no timing assertions: the numbers depend on the machine and its load)."""

from __future__ import annotations

import importlib.util
import json
import statistics

import pytest

pytestmark = pytest.mark.slow  # timed runs of the official model and ours

from qwen3asr_tools import bench
import bundles

pytest.importorskip("torch", reason="the official reference needs torch (the dev extra: pip install -e '.[dev]')")
if importlib.util.find_spec("qwen_asr") is None:
    pytest.skip("the official code is missing: pip install --no-deps qwen-asr==0.0.6", allow_module_level=True)

RUNS, DECODE = 3, 3  # 3 runs: a median that is not also the mean


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    ck, bd = bundles.bundle("tiny-a", "bfloat16")
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    code = bench.main(["--checkpoint", ck, "--bundle", bd, "--runs", str(RUNS), "--warmup", "0",
                       "--decode-tokens", str(DECODE), "--threads", "1", "--json", str(out)])
    assert code == 0
    with open(out, encoding="utf-8") as f:
        return json.load(f)


ENCODER_KEYS = ("encoder_ms", "encoder_ms_per_audio_s")
DECODER_KEYS = ("prefill_tok_s", "decode_tok_s")


def _check_spread(s):
    """A Spread is the median/min/max of its own per-run values."""
    assert len(s["values"]) == RUNS
    assert all(v > 0 for v in s["values"])
    assert s["median"] == statistics.median(s["values"])
    assert (s["min"], s["max"]) == (min(s["values"]), max(s["values"]))


def test_report_has_every_system_with_spread(report):
    names = [r["name"] for r in report["results"]]
    assert names == ["official-fp32", "onnx-encoder", "onnx-fp32", "onnx-int8", "onnx-int4"]
    for r in report["results"]:
        # The encoder graph does not depend on the decoder dtype: one onnx-encoder row, and
        # the onnx-<dtype> rows measure only the decoder.
        measures_encoder = r["name"] in ("official-fp32", "onnx-encoder")
        measures_decoder = r["name"] != "onnx-encoder"
        for key in ENCODER_KEYS:
            if measures_encoder:
                _check_spread(r[key])
            else:
                assert r[key] is None, (r["name"], key)
        for key in DECODER_KEYS:
            if measures_decoder:
                _check_spread(r[key])
            else:
                assert r[key] is None, (r["name"], key)
        if measures_decoder:
            assert r["decode_tokens"] == DECODE
            assert r["prefill_tokens"] == 54  # 3 s: 39 audio tokens + 15 prompt tokens
        else:
            assert r["decode_tokens"] is None and r["prefill_tokens"] is None
        if measures_encoder:
            assert r["encoder_ms_per_audio_s"]["values"] == pytest.approx([v / 3.0 for v in r["encoder_ms"]["values"]])
            assert r["encoder_ms_per_audio_s"]["median"] == pytest.approx(r["encoder_ms"]["median"] / 3.0)


def test_ratios_are_against_the_official_median(report):
    res = {r["name"]: r for r in report["results"]}
    ref = res["official-fp32"]
    ratios = report["ratios_vs_official"]
    assert sorted(ratios) == ["onnx-encoder", "onnx-fp32", "onnx-int4", "onnx-int8"]
    assert ratios["onnx-encoder"]["encoder_speedup"] == pytest.approx(
        statistics.median(ref["encoder_ms"]["values"]) / statistics.median(res["onnx-encoder"]["encoder_ms"]["values"]))
    assert ratios["onnx-encoder"]["prefill_speedup"] is None and ratios["onnx-encoder"]["decode_speedup"] is None
    for name in ("onnx-fp32", "onnx-int8", "onnx-int4"):
        q = ratios[name]
        assert q["encoder_speedup"] is None
        assert q["decode_speedup"] == pytest.approx(
            statistics.median(res[name]["decode_tok_s"]["values"]) / statistics.median(ref["decode_tok_s"]["values"]))
        assert q["prefill_speedup"] == pytest.approx(
            statistics.median(res[name]["prefill_tok_s"]["values"]) / statistics.median(ref["prefill_tok_s"]["values"]))
        assert q["decode_speedup_fastest"] == pytest.approx(
            max(res[name]["decode_tok_s"]["values"]) / max(ref["decode_tok_s"]["values"]))
        assert q["prefill_speedup_fastest"] == pytest.approx(
            max(res[name]["prefill_tok_s"]["values"]) / max(ref["prefill_tok_s"]["values"]))
        assert q["encoder_speedup_fastest"] is None
    assert ratios["onnx-encoder"]["encoder_speedup_fastest"] == pytest.approx(
        min(ref["encoder_ms"]["values"]) / min(res["onnx-encoder"]["encoder_ms"]["values"]))
    assert report["fastest"].startswith("x off. of each side's fastest counted run: ")
    assert f"onnx-encoder encoder {ratios['onnx-encoder']['encoder_speedup_fastest']:.2f}" in report["fastest"]


def test_table_and_settings(report):
    lines = report["table"].splitlines()
    assert lines[0].startswith("| system | encoder ms")
    assert len(lines) == 2 + 5
    assert lines[2].startswith("| official-fp32 |") and lines[5].startswith("| onnx-int8 |")
    # onnx-encoder: encoder cells and ratio only; onnx-<dtype>: decoder cells and ratios only.
    enc_cells = [c.strip() for c in lines[3].split("|")[1:-1]]
    assert enc_cells[0] == "onnx-encoder" and enc_cells[4:] == ["-"] * 4 and enc_cells[1] != "-"
    int8_cells = [c.strip() for c in lines[5].split("|")[1:-1]]
    assert int8_cells[1:4] == ["-"] * 3 and "-" not in int8_cells[4:]
    assert report["settings"]["audio_seconds"] == pytest.approx(3.0)
    assert report["settings"]["threads"] == 1
    assert report["machine"]["cpu_count"] >= 1


def test_bad_arguments_are_refused(capsys):
    ck, bd = bundles.bundle("tiny-a", "bfloat16")
    assert bench.main(["--checkpoint", ck, "--bundle", bd, "--dtypes", "fp16", "--no-official"]) == 2
    assert "unknown decoder dtypes ['fp16']" in capsys.readouterr().err
    assert bench.main(["--bundle", bd]) == 2
    assert "give --preset, or both --checkpoint and --bundle" in capsys.readouterr().err
    with pytest.raises(ValueError, match="runs >= 1"):
        bench.bench(ck, bd, bench.DEFAULT_AUDIO, 3.0, 0, 0, 1, 4, ["fp32"], official=False)


def test_reuse_rows_compare_the_same_work_with_and_without_prefix_reuse(report):
    r = report["reuse"]
    assert r["dtype"] == "fp32" and 150 <= r["context_tokens"] <= 220  # the 50 names
    assert [row["work"] for row in r["rows"]] == ["long-context request", "stream, default context",
                                                 "stream, 180-token context"]
    for row in r["rows"]:
        _check_spread(row["ms_without"])
        _check_spread(row["ms_with"])
        assert row["speedup"] == pytest.approx(row["ms_without"]["median"] / row["ms_with"]["median"])
        assert 0 < row["prefill_share_without"] < 1
    assert r["rows"][0]["prefill_tokens"] > r["context_tokens"] + 39  # the context, the 3 s of audio
    assert r["rows"][1]["chunks"] >= 3
    # one miss per distinct prefix (the 180-token context, the empty one), hits for everything else
    assert r["prefix_cache"]["misses"] == 2 and r["prefix_cache"]["hits"] > 2 * RUNS
    lines = r["table"].splitlines()
    assert lines[0].startswith("| work (per unit) | ms without reuse") and len(lines) == 2 + 3


def test_roofline_rows_follow_from_the_graph_and_the_measured_read(report):
    """One roofline row per quantised decoder: its bytes per step are the graph's own weights
    (counted again here from the ONNX file) plus the KV rows at the mean context, and the
    roofline and fraction follow from the median read bandwidth of the same run."""
    import onnx

    bw = report["read_gb_s"]
    _check_spread(bw)
    rows = {r["system"]: r for r in report["roofline"]}
    assert sorted(rows) == ["onnx-int4", "onnx-int8"]
    ck, bd = bundles.bundle("tiny-a", "bfloat16")
    res = {r["name"]: r for r in report["results"]}
    with open(f"{bd}/model.json", encoding="utf-8") as f:
        t = json.load(f)["config"]["text"]
    for name, r in rows.items():
        m = onnx.load(f"{bd}/decoder/decoder_{name.split('-')[1]}.onnx")
        weights = sum(onnx.numpy_helper.to_array(i).nbytes for i in m.graph.initializer if not i.name.startswith("rope_"))
        assert r["weight_bytes"] == weights
        kv = 2 * t["num_hidden_layers"] * t["num_key_value_heads"] * t["head_dim"] * 4 * (54 + DECODE / 2)
        assert r["kv_bytes"] == int(kv)
        assert r["roofline_tok_s"] == pytest.approx(bw["median"] * 1e9 / (weights + int(kv)))
        assert r["decode_tok_s"] == res[name]["decode_tok_s"]["median"]
        assert r["fraction"] == pytest.approx(r["decode_tok_s"] / r["roofline_tok_s"])
    # int4 reads fewer bytes than int8
    assert rows["onnx-int4"]["weight_bytes"] < rows["onnx-int8"]["weight_bytes"]
    assert report["roofline_table"].splitlines()[0].startswith("memory roofline: streaming read")


def test_spin_wait_rows(tmp_path, monkeypatch):
    ck, bd = bundles.bundle("tiny-a", "bfloat16")
    out = tmp_path / "bench.json"
    # every timed run is followed by the settle pause, so no row starts while the last one's threads spin
    events = []
    real_sleep = bench.time.sleep
    monkeypatch.setattr(bench.time, "sleep", lambda s: (events.append(("sleep", s)), real_sleep(s)))
    monkeypatch.setattr(bench, "read_bandwidth", lambda probe: (events.append(("probe", None)), 1.0)[1])
    assert bench.main(["--checkpoint", ck, "--bundle", bd, "--runs", "2", "--warmup", "0", "--decode-tokens", "2",
                       "--threads", "1", "--no-official", "--no-reuse-rows", "--dtypes", "int4",
                       "--spin-wait-rows", "--json", str(out)]) == 0
    with open(out, encoding="utf-8") as f:
        rep = json.load(f)
    assert [r["name"] for r in rep["results"]] == ["onnx-encoder", "onnx-encoder+spin", "onnx-int4", "onnx-int4+spin"]
    assert [r["system"] for r in rep["roofline"]] == ["onnx-int4", "onnx-int4+spin"]
    # per round: the probe, then 4 systems each followed by its pause (the second probe comes after one)
    assert events == [("probe", None)] + [("sleep", bench.SETTLE_S)] * 4 + [("probe", None)] + \
        [("sleep", bench.SETTLE_S)] * 4
