"""scripts/bench_oneshot.py on real child processes (small Python commands): the rotation, the
counted rounds, the ratios to the first command, peak RSS from wait4, and its errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from qwen3asr_tools import bench_oneshot, bench_peers

PY = sys.executable
# about 200 MB more resident than the small one: the peak must see it
BIG = f"{PY} -c \"b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096])\""
SMALL = f"{PY} -c pass"


def test_rounds_rotate_and_ratios_refer_to_the_first(monkeypatch):
    """...and each peak is the command's own, not this (large) process's: a child forked from a big
    parent reports the parent's map in ru_maxrss, which the spawn helper keeps out."""
    monkeypatch.setattr(bench_peers, "SETTLE_S", 0)
    ballast = bytearray(400 * 2**20)
    ballast[::4096] = b"x" * len(ballast[::4096])  # resident: this process is over 400 MB
    seen = []
    runs = bench_oneshot.bench(bench_oneshot.parse_commands([f"small={SMALL}", f"big={BIG}"]), rounds=2, warmup=1,
                               progress=seen.append)
    assert [m.split(":")[0] for m in seen] == ["warm-up small", "warm-up big", "round 1/2 big", "round 1/2 small",
                                               "round 2/2 small", "round 2/2 big"]
    assert len(runs["small"]) == len(runs["big"]) == 2
    rows = {r["name"]: r for r in bench_oneshot.summarize(runs)}
    assert rows["small"]["ratio"] == 1.0
    assert rows["small"]["peak_mb"] < 100 and rows["big"]["peak_mb"] > rows["small"]["peak_mb"] + 150
    del ballast
    walls = [w for w, _ in runs["big"]]
    assert rows["big"]["wall_range"] == (min(walls), max(walls))
    ratios = [b / s for (b, _), (s, _) in zip(runs["big"], runs["small"])]
    assert rows["big"]["ratio"] == pytest.approx(sum(ratios) / 2)
    table = bench_oneshot.format_table(list(rows.values()))
    assert table.splitlines()[0].startswith("| command | wall s") and "| big |" in table


def test_command_line_writes_json_and_refuses_bad_input(tmp_path):
    out = tmp_path / "r.json"
    r = subprocess.run([PY, "-m", "qwen3asr_tools.bench_oneshot", "--rounds", "1", "--warmup", "0",
                        "--cmd", f"a={SMALL}", "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[2].startswith("| a | ")
    assert json.loads(out.read_text())["summary"][0]["ratio"] == 1.0
    for args, msg in ((["--cmd", "nonamegiven"], "give NAME=COMMAND"), (["--cmd", f"a={SMALL}", "--cmd", f"a={SMALL}"],
                      "given twice"), (["--cmd", f"a={SMALL}", "--rounds", "0"], "--rounds takes")):
        r = subprocess.run([PY, "-m", "qwen3asr_tools.bench_oneshot", *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and msg in r.stderr, r.stderr
    r = subprocess.run([PY, "-m", "qwen3asr_tools.bench_oneshot", "--rounds", "1", "--warmup", "0", "--cmd",
                        f"bad={PY} -c \"raise SystemExit('broken on purpose')\""], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and "bad exited with 1" in r.stderr and "broken on purpose" in r.stderr


def test_a_command_that_cannot_start_is_reported():
    with pytest.raises(OSError, match="cannot start /no/such/program"):
        bench_oneshot.run_child(["/no/such/program"], dict())
