"""Board cost model: predicted wall time, RTF and caption latency on RK3576 / RK3588.

    PYTHONPATH=python .venv/bin/python scripts/board_model.py --model models/default --json build/board_model.json
    ... --aligner DIR   # with word timestamps and memory (board.words; docs/board.md section 8)

The model multiplies the compute accounting of a REAL run of our engine (any backend: per
chunk the encoder graphs run, the decoder's prefill tokens and decode steps, and when the
chunk's audio was complete) by per-SoC unit costs with stated sources (``unit_costs``):

    chunk ms = sum(encoder graph ms) + prefill_tokens / prefill rate
               + decode_tokens / decode rate + one decoder-run overhead

Serial: the encoder, then the decoder, chunk after chunk. Overlap (``overlap=True``): a
two-stage pipeline where the encoder of chunk n+1 runs while the decoder works on chunk n
(per step the max of the two stages instead of their sum once both are busy); this is an
upper bound on the gain, as the two share the NPU's memory bandwidth.

Wall time is for audio that is all there (a file); RTF = wall / audio seconds. Caption
latency is per chunk, in a live stream (audio arriving in real time): from the moment the
chunk's audio was complete (``ChunkWork.ready``, measured in the run) to the moment its
decoder run ends.

The decoder's unit costs are Rockchip's published benchmark (``RKLLM_BENCHMARK``); the
encoder's, the table of the reference design (docs/reference_design.md). Two of its published
figures disagree under these costs (docs/board.md, "Cost model"): its caption latency is
reproduced, its RTF is not. So a second, pessimistic RK3576 prefill rate is fitted
(``fit_prefill_rate``) at which its settings reproduce its published RTF;
``unit_costs(prefill="rtf-fit")`` uses it. No board SDK is imported here; the engine is
imported only by the functions that run it (``record_stream``, ``record_file``,
``record_one_pass``).

Word timestamps (``word_timestamps=True`` in the record functions): every alignment the run
made is recorded (``AlignWork``: the segment, the aligner encoder's graphs, the positions of
its one RKLLM prefill, its slot rows) and costs

    alignment ms = sum(ASR encoder graph ms x aligner/ASR compute ratio) + positions / prefill rate
                   + slot rows x 2 x 1024 x 5000 FLOP / host rate + one run overhead

in the decoder's stage, before the decoder run during which the engine made it (a stream
aligns a segment when it commits it). ``board.budget`` holds the compute ratio and the memory
budget of both models.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from .accounting import Accounting
from .costs import SOCS, unit_costs
from .predict import predict
from .report import build_report, prediction_table, print_report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/default", help="bundle to run on the CPU (default %(default)s)")
    ap.add_argument("--audio", default="audio/long_mixed.wav", help="clip with speech segments in "
                    "audio/transcripts.json (default %(default)s)")
    ap.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads")
    ap.add_argument("--aligner", default=None, help="forced-aligner bundle whose runs give the word-timestamp counts "
                    "(default: $QWEN3ASR_ALIGNER, else the bundled demo aligner; none: no word-timestamp section)")
    ap.add_argument("--accounting", help="instead: predict a saved accounting (JSON from --json or bench_board.py)")
    ap.add_argument("--soc", default="rk3576", help=f"with --accounting: {', '.join(SOCS)}")
    ap.add_argument("--prefill", default="published", help="with --accounting: the decoder prefill rate, "
                    "'published' (Rockchip's benchmark) or 'rtf-fit' (RK3576: fitted to the reference design's RTF)")
    ap.add_argument("--json", help="write the report here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        if args.accounting:
            with open(args.accounting, encoding="utf-8") as f:
                data = json.load(f)
            items = data["accountings"].values() if "accountings" in data else [data]
            accs = [Accounting.from_dict(d) for d in items]
            costs = unit_costs(args.soc, prefill=args.prefill)
            print(prediction_table([predict(a, costs, ov) for a in accs for ov in (False, True)]))
            return 0
        try:
            import qwen3asr  # noqa: F401
        except ImportError:
            print("error: the qwen3asr package is not importable: run with PYTHONPATH=python or after "
                  "pip install -e .", file=sys.stderr)
            return 2
        report = build_report(args.model, args.audio, args.threads, args.aligner)
    except (ValueError, OSError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print_report(report)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
