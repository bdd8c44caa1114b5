"""scripts/bench_peers.py without the peers: its argument checks, the figures it derives from each
process, the per-round ratios and the tables, on canned process reports and a canned llama.cpp
log (the benchmark itself installs and builds the peers, which no test does)."""

from __future__ import annotations

import pytest

from qwen3asr_tools import bench_peers
from qwen3asr_tools.bench_peers import Measure, metrics, round_ratios, summarize
from qwen3asr_tools.peer_runs import CallTimes, ProcessReport, parse_llama_log, report_from_stdout


def _proc(name, rnd, process_s, rss, cold_ms, warm_ms=None, enc=100.0, prompt=(54, 500.0), dec=(32, 1000.0)):
    calls = [CallTimes(cold_ms, enc, prompt[0], prompt[1], dec[0], dec[1])]
    if warm_ms is not None:
        calls.append(CallTimes(warm_ms, enc / 2, prompt[0], prompt[1] / 2, dec[0], dec[1] / 2))
    return Measure(name, rnd, process_s, rss, ProcessReport(1000.0, tuple(calls), 39))


def test_metrics_take_stage_figures_from_the_warm_call():
    m = metrics(_proc("ours", 0, 5.0, 800.0, cold_ms=3000.0, warm_ms=2000.0))
    assert m == {"encoder_ms": 50.0, "prefill_tok_s": pytest.approx(54 / 0.25), "decode_tok_s": pytest.approx(64.0),
                 "warm_ms": 2000.0, "cold_ms": 3000.0, "process_s": 5.0, "peak_rss_mb": 800.0}


def test_metrics_of_a_one_call_process_have_no_warm_call():
    m = metrics(_proc("llama", 0, 4.0, 900.0, cold_ms=2500.0))
    assert m["warm_ms"] is None and m["cold_ms"] == 2500.0
    assert m["decode_tok_s"] == pytest.approx(32.0) and m["encoder_ms"] == 100.0


def test_summary_skips_warmup_rounds_and_gives_median_min_max():
    ms = [_proc("a", r, s, 100.0, 1000.0) for r, s in enumerate([99.0, 3.0, 1.0, 2.0])]
    s = summarize(ms, ["a"], warmup=1)["a"]
    assert s["process_s"] == (2.0, 1.0, 3.0)
    assert s["warm_ms"] is None  # never measured: a '-' cell, not a zero


def test_ratios_pair_the_two_sides_of_each_round():
    # ours is twice as slow in round 1 and equal in round 2; the round medians alone would say 1.5x on
    # process time either way, the per-round ratios must be 2 and 1 exactly
    ms = [_proc("ours", 1, 4.0, 500.0, 1000.0, 800.0), _proc("peer", 1, 2.0, 1000.0, 500.0, 400.0),
          _proc("ours", 2, 3.0, 500.0, 1000.0, 800.0), _proc("peer", 2, 3.0, 250.0, 1000.0, 800.0),
          _proc("ours", 0, 100.0, 1.0, 1.0, 1.0), _proc("peer", 0, 1.0, 1.0, 1.0, 1.0)]  # warm-up, not counted
    r = round_ratios(ms, "ours", "peer", warmup=1)
    assert r["process_s"] == (1.5, 1.0, 2.0)
    assert r["peak_rss_mb"] == (1.25, 0.5, 2.0)
    assert r["warm_ms"] == (1.5, 1.0, 2.0)


def test_ratio_against_a_peer_without_warm_calls_is_absent():
    ms = [_proc("ours", 0, 4.0, 500.0, 1000.0, 800.0), _proc("llama", 0, 2.0, 1000.0, 500.0)]
    r = round_ratios(ms, "ours", "llama", warmup=0)
    assert r["warm_ms"] is None and r["cold_ms"] == (2.0, 2.0, 2.0)


def test_tables_have_a_row_per_runtime_and_a_cell_per_metric():
    ms = [_proc("ours int4", r, 5.0 + r, 800.0, 3000.0, 2000.0) for r in range(3)] + \
         [_proc("llama", r, 4.0, 900.0, 2500.0) for r in range(3)]
    summary = summarize(ms, ["ours int4", "llama"], warmup=0)
    table = bench_peers.format_medians(summary, bench_peers.token_counts(ms)).splitlines()
    assert len(table) == 4 and all(line.count("|") == len(bench_peers.METRICS) + 3 for line in table)
    assert table[2].startswith("| ours int4 | 50 (50-50) |") and "| 6.00 (5.00-7.00) |" in table[2]
    assert table[3].split("|")[5:7] == [" - ", " 2500 (2500-2500) "] and table[3].endswith("| 54 + 32 |")
    ratios = bench_peers.format_ratios({("ours int4", "llama"): round_ratios(ms, "ours int4", "llama", 0)})
    assert "| ours int4 / llama | 0.50 (0.50-0.50) |" in ratios


def test_child_report_round_trips_and_a_missing_line_is_an_error():
    rep = _proc("x", 0, 1.0, 1.0, 10.0, 5.0).report
    import dataclasses
    import json

    line = "noise\nPEER_RESULT " + json.dumps(dataclasses.asdict(rep)) + "\n"
    assert report_from_stdout(line) == rep
    with pytest.raises(ValueError, match="no result line"):
        report_from_stdout("Traceback ...")


# lines of a real llama-mtmd-cli run (llama-cpp-python 0.3.36's llama.cpp, 0.6B random weights)
LLAMA_LOG = """\
0.04.436.846 I encoding mtmd batch, n_chunks = 1 (done = 1, total = 3)
0.06.605.771 I mtmd batch encoding done in 2169 ms
0.06.605.850 I decoding audio batch 1/1, n_tokens_batch = 39
0.07.904.930 I audio decoded (batch 1/1) in 1299 ms
0.16.182.951 I llama_perf_context_print:        load time =    1484.20 ms
0.16.182.961 I llama_perf_context_print: prompt eval time =    4204.53 ms /    49 tokens (   85.81 ms per token,    11.65 tokens per second)
0.16.182.967 I llama_perf_context_print:        eval time =    7486.03 ms /    31 runs   (  241.48 ms per token,     4.14 tokens per second)
0.16.182.973 I llama_perf_context_print:       total time =   12857.72 ms /    80 tokens
"""


def test_llama_log_gives_one_call():
    rep = parse_llama_log(LLAMA_LOG)
    assert rep.load_ms == 1484.20 and len(rep.calls) == 1
    c = rep.calls[0]
    assert (c.encoder_ms, c.prompt_tokens, c.prefill_ms, c.decode_tokens, c.decode_ms) == (2169.0, 49, 4204.53, 31, 7486.03)
    assert c.call_ms == pytest.approx(2169.0 + 4204.53 + 7486.03)
    older = parse_llama_log(LLAMA_LOG.replace("mtmd batch encoding done in 2169 ms", "audio slice encoded in 905 ms"))
    assert older.calls[0].encoder_ms == 905.0


def test_llama_log_without_timings_is_an_error():
    with pytest.raises(ValueError, match="audio encoding time"):
        parse_llama_log(LLAMA_LOG.replace("mtmd batch encoding done in 2169 ms", ""))
    with pytest.raises(ValueError, match="'eval time'"):
        parse_llama_log(LLAMA_LOG.replace("        eval time", "        evil time"))


@pytest.mark.parametrize("argv, message", [
    (["--rounds", "0"], "--rounds must be >= 1"),
    (["--peers", "whisper.cpp"], "unknown peers ['whisper.cpp']"),
    (["--ours-dtypes", "int3"], "--ours-dtypes: unknown 'int3'"),
    (["--ours-args", "--memory 'lean"], "--ours-args \"--memory 'lean\": No closing quotation"),
    (["--llama-samples", "10"], "--llama-samples must be >= 1600"),
])
def test_bad_arguments_are_one_error_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        bench_peers.parse_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_ours_args_make_one_row_each():
    args = bench_peers.parse_args(["--ours-args", "", "--ours-args", "--memory lean", "--ours-dtypes", "int4,int8",
                                   "--peers", ""])
    files = None  # no peers: their files are never looked at
    rts = bench_peers.make_runtimes("B", "c.wav", "l.wav", 8, 2, 2, args.ours_dtypes, args.ours_args, args.peers, files)
    assert [r.name for r in rts] == ["ours int4", "ours int4 --memory lean", "ours int8", "ours int8 --memory lean"]
    assert rts[1].argv[-3:] == ("--", "--memory", "lean") and rts[0].argv[-1] == "--"


def test_crispasr_names_cover_the_official_layout():
    from qwen3asr_tools.crispasr_gguf import gguf_name, storage_type

    pairs = {
        "thinker.audio_tower.conv2d1.weight": "audio.conv.1.weight",
        "thinker.audio_tower.conv_out.bias": "audio.conv_out.bias",
        "thinker.audio_tower.layers.17.self_attn.out_proj.weight": "audio.blk.17.attn_out.weight",
        "thinker.audio_tower.layers.0.fc1.bias": "audio.blk.0.ffn_up.bias",
        "thinker.audio_tower.layers.3.final_layer_norm.weight": "audio.blk.3.ffn_norm.weight",
        "thinker.audio_tower.proj2.weight": "audio.proj2.weight",
        "thinker.model.embed_tokens.weight": "token_embd.weight",
        "thinker.model.layers.27.self_attn.o_proj.weight": "blk.27.attn_output.weight",
        "thinker.model.layers.5.self_attn.k_norm.weight": "blk.5.attn_k_norm.weight",
        "thinker.model.layers.1.post_attention_layernorm.weight": "blk.1.ffn_norm.weight",
        "thinker.model.layers.2.mlp.down_proj.weight": "blk.2.ffn_down.weight",
        "thinker.model.norm.weight": "output_norm.weight",
        "thinker.lm_head.weight": "output.weight",
    }
    assert {k: gguf_name(k) for k in pairs} == pairs
    assert gguf_name("thinker.model.rotary_emb.inv_freq") is None
    assert gguf_name("thinker.audio_tower.layers.0.self_attn.rotary.weight") is None
    assert storage_type("blk.0.ffn_down.weight", (1024, 3072)) == "Q4_K"
    assert storage_type("audio.blk.0.ffn_up.weight", (3584, 896)) == "Q8_0"
    assert storage_type("audio.conv.1.weight", (480, 1, 3, 3)) == "F16"
    assert storage_type("blk.0.attn_q_norm.weight", (128,)) == "F32"
    assert storage_type("audio.blk.0.attn_q.bias", (896,)) == "F32"
    assert storage_type("blk.0.attn_q.weight", (128, 96)) == "Q8_0"  # 96 values a row: no Q4_K block fits
    assert storage_type("blk.0.attn_q.weight", (128, 40)) == "F16"
