"""Smoke test of scripts/bench.py on a tiny random-weight checkpoint: structure of the table and
the JSON report (no timing assertions: the numbers depend on the machine and its load)."""

from __future__ import annotations

import importlib.util
import json

import pytest

import bench
import bundles

pytest.importorskip("torch", reason="the official reference needs torch (requirements-dev.txt)")
if importlib.util.find_spec("qwen_asr") is None:
    pytest.skip("the official code is missing: pip install --no-deps qwen-asr==0.0.6", allow_module_level=True)

RUNS, DECODE = 2, 3


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    ck, bd = bundles.bundle("tiny-a", "bfloat16")
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    code = bench.main(["--checkpoint", ck, "--bundle", bd, "--runs", str(RUNS), "--warmup", "0",
                       "--decode-tokens", str(DECODE), "--threads", "1", "--json", str(out)])
    assert code == 0
    with open(out, encoding="utf-8") as f:
        return json.load(f)


def test_report_has_every_system_with_spread(report):
    names = [r["name"] for r in report["results"]]
    assert names == ["official-fp32", "onnx-fp32", "onnx-int8", "onnx-int4"]
    for r in report["results"]:
        assert r["decode_tokens"] == DECODE
        assert r["prefill_tokens"] == 54  # 3 s: 39 audio tokens + 15 prompt tokens
        for key in ("encoder_ms", "encoder_ms_per_audio_s", "prefill_tok_s", "decode_tok_s"):
            s = r[key]
            assert len(s["values"]) == RUNS
            assert 0 < s["min"] <= s["median"] <= s["max"]
        assert r["encoder_ms_per_audio_s"]["median"] == pytest.approx(r["encoder_ms"]["median"] / 3.0)


def test_ratios_are_against_the_official_median(report):
    res = {r["name"]: r for r in report["results"]}
    ref = res["official-fp32"]
    assert sorted(report["ratios_vs_official"]) == ["onnx-fp32", "onnx-int4", "onnx-int8"]
    for name, q in report["ratios_vs_official"].items():
        assert q["decode_speedup"] == pytest.approx(res[name]["decode_tok_s"]["median"] / ref["decode_tok_s"]["median"])
        assert q["encoder_speedup"] == pytest.approx(ref["encoder_ms"]["median"] / res[name]["encoder_ms"]["median"])


def test_table_and_settings(report):
    lines = report["table"].splitlines()
    assert lines[0].startswith("| system | encoder ms")
    assert len(lines) == 2 + 4
    assert lines[2].startswith("| official-fp32 |") and lines[4].startswith("| onnx-int8 |")
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
