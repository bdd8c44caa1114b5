"""Smoke test of scripts/bench_server.py against a real server process (HTTP, WebSocket and
Wyoming): every row is printed with its requests answered and none lost (no timing
assertions: the figures depend on the machine)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # a server process and every benchmark row

pytest.importorskip("websockets", reason="the websockets client is needed (the dev extra: pip install -e '.[dev]')")
pytest.importorskip("openai", reason="the openai client is needed (the dev extra: pip install -e '.[dev]')")
pytest.importorskip("uvicorn", reason="the server extra is needed (pip install '.[server]')")
pytest.importorskip("wyoming", reason="the server extra is needed (pip install '.[server]')")

from qwen3asr_tools import bench_server  # noqa: E402
from server_proc import ServerProcess, free_port  # noqa: E402


def test_bench_server_prints_every_row(tmp_path, capsys):
    port = free_port()
    with ServerProcess("--wyoming", f"tcp://127.0.0.1:{port}", log_path=str(tmp_path / "server.log")) as s:
        assert bench_server.main(["--url", s.url, "--seconds", "2", "--streams", "1,2", "--mix-uploads", "1",
                                  "--wyoming", f"127.0.0.1:{port}"]) == 0
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert lines[0].split()[:4] == ["clients", "requests", "ok", "503"]
    rows = {line[:22].strip(): line[22:].split() for line in lines[1:]}
    assert list(rows) == ["1 live", "2 live", "2 live + 1 upload", "1 wyoming", "2 wyoming"]
    for label, (requests, ok, rejected, errors, throughput, chunks, p50, p95) in rows.items():
        assert int(requests) >= 1 and int(ok) == int(requests) and int(errors) == 0, (label, out, err)
        assert float(throughput) > 0 and int(chunks) >= 1 and float(p95) >= float(p50) > 0, (label, out)
    assert "error:" not in err


def test_bench_server_refuses_bad_arguments(capsys):
    for argv in (["--streams", "0"], ["--streams", "a,b"], ["--wyoming", "10300"]):
        with pytest.raises(SystemExit) as e:
            bench_server.main(argv)
        assert e.value.code == 2
        assert argv[0] in capsys.readouterr().err
