"""The text python/transcribe.py must print for a bundled clip, for deploy/rehearse_board.sh.

    python deploy/rehearse_expect.py zh_1.wav          # 六点半 (the CLI's default: no ITN)
    python deploy/rehearse_expect.py zh_1.wav --itn    # 6点半

The clip's transcript from audio/transcripts.json, with spoken numbers written as digits
(qwen3asr.itn.inverse_normalize, which the engine applies) when the CLI applies inverse text
normalisation: with --itn, or by default if the CLI's own parser says so. The default is read
from the CLI, not written here again, so the rehearsal expects what the CLI prints even after
the default changes (issue 36: it had kept expecting ITN after ITN went off by default).
tests/test_rehearse_expect.py checks this against the host's CLI on every short clip.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from qwen3asr.cli.transcribe import build_parser
from qwen3asr.itn import inverse_normalize

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "audio" / "transcripts.json"


def cli_default_itn() -> bool:
    """Whether transcribe.py applies ITN when run without --itn: its --itn flag's default."""
    return bool(build_parser().get_default("itn"))


def expected_text(clip: str, itn: bool = False) -> str:
    """What ``transcribe.py --audio audio/<clip>`` prints (text format), plus ``--itn`` if
    ``itn``. ValueError: a clip that audio/transcripts.json does not list."""
    clips = {c["file"]: c for c in json.loads(TRANSCRIPTS.read_text(encoding="utf-8"))["clips"]}
    if clip not in clips:
        raise ValueError(f"{clip} is not in {TRANSCRIPTS.name}; the clips are: {', '.join(clips)}")
    text = clips[clip]["text"]
    if text and (itn or cli_default_itn()):
        return inverse_normalize(text, clips[clip]["language"])
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Print the text transcribe.py must print for a bundled clip.")
    ap.add_argument("clip", help="a file name from audio/transcripts.json, e.g. zh_1.wav")
    ap.add_argument("--itn", action="store_true", help="the text for transcribe.py --itn")
    args = ap.parse_args(argv)
    try:
        print(expected_text(args.clip, itn=args.itn))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
