"""scripts/bench_board.py on the CPU backend (no board here): it says the numbers are CPU numbers,
prints the measured table in the cost model's format, and its JSON accountings feed the model.
No timing assertions (the numbers depend on the machine)."""

from __future__ import annotations

import json
import os

import pytest

from qwen3asr_tools import bench_board
from qwen3asr_tools.board import cli
from qwen3asr_tools.board.accounting import Accounting
from qwen3asr_tools.board.costs import SOCS
from qwen3asr_tools.board.report import prediction_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "default")
CLIP = os.path.join(ROOT, "audio", "en_2.wav")  # 2.4 s, with a speech segment in transcripts.json
HEADER = prediction_table([]).splitlines()[0]


def _rows(table: str) -> list:
    lines = table.splitlines()
    assert lines[0] == HEADER and lines[1] == "|" + "---|" * 14
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_board") / "b.json"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = bench_board.main(["--model", MODEL, "--backend", "onnx", "--audio", CLIP, "--threads", "1",
                                 "--json", str(out)])
    assert code == 0
    with open(out, encoding="utf-8") as f:
        return buf.getvalue(), json.load(f)


def test_says_these_are_cpu_numbers(run):
    out, report = run
    assert out.splitlines()[0].startswith("CPU NUMBERS, NOT BOARD NUMBERS: backend onnx")
    assert report["board"] is False and report["soc"] is None and report["backend"] == "onnx"


def test_measured_table_has_the_cost_model_columns(run):
    out, report = run
    assert HEADER in out
    rows = _rows(report["measured_table"])
    assert [r[0] for r in rows] == ["file, one pass, en_2.wav", "file, VAD-first, en_2.wav",
                                    "stream defaults, en_2.wav", "stream defaults, continuous speech"]
    for r, m in zip(rows, report["measured"]):
        assert len(r) == 14 and r[1] == "cpu" and r[2] == "no" and r[0] == m["label"]
        assert float(r[9]) == pytest.approx(m["wall_s"], abs=0.005)
        assert float(r[10]) == pytest.approx(m["wall_s"] / m["audio_seconds"], abs=0.0005)
        # encoder + prefill + decode + overhead = wall
        assert m["encoder_s"] + m["prefill_s"] + m["decode_s"] + m["overhead_s"] == pytest.approx(m["wall_s"])
        assert min(m["encoder_s"], m["prefill_s"], m["decode_s"]) > 0
    files, streams = rows[:2], rows[2:]
    assert all(r[11:] == ["-", "-", "-"] for r in files)
    assert all(float(r[11]) >= 0 for r in streams)  # replayed latency of the first chunk


def test_predictions_cover_both_socs_for_the_same_runs(run):
    _, report = run
    rows = _rows(report["predicted_table"])
    assert [(r[0], r[1]) for r in rows] == [(name, soc) for name in report["accountings"] for soc in SOCS]


def test_json_accountings_are_what_the_model_reads(run, tmp_path, capsys):
    _, report = run
    accs = [Accounting.from_dict(d) for d in report["accountings"].values()]
    measured = {m["label"]: m for m in report["measured"]}
    for a in accs:
        assert len(a.chunks) == measured[a.label]["chunks"]
        assert all(c.graphs for c in a.chunks)
    path = tmp_path / "b.json"
    path.write_text(json.dumps(report), encoding="utf-8")
    assert cli.main(["--accounting", str(path), "--soc", "rk3576"]) == 0
    assert len(_rows(capsys.readouterr().out)) == 2 * len(accs)


def test_realtime_stream_measures_latency():
    report = bench_board.bench(MODEL, "onnx", CLIP, ["stream"], realtime=True, threads=1)
    assert report["latency"] == {"stream defaults, en_2.wav": "measured"}
    (row,) = _rows(report["measured_table"])
    # one 2.4 s chunk (4 s chunks): decoded at finish(), its latency measured from the audio's end
    assert row[4] == "1" and float(row[11]) >= 0 and row[13] == row[11] and row[12] == "-"


def test_bad_runs_name_the_accepted_ones(capsys):
    assert bench_board.main(["--model", MODEL, "--backend", "onnx", "--runs", "stream,warp"]) == 2
    assert "unknown runs warp; accepted: one_pass, vad_first, stream, stream_continuous" in capsys.readouterr().err
