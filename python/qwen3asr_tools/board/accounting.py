"""The compute of one real run of the engine, as the cost model reads it.

``Accounting``: a run's chunks in decoding order (``ChunkWork``: the encoder graphs called, the
decoder's prefill positions and decode steps, when the chunk's audio was complete) and, with word
timestamps, its alignments (``AlignWork``); to and from JSON (``to_dict`` / ``from_dict``, which
names a missing or bad field). ``compact_prompt``: the same run with a compact prompt. No costs
here (``costs``), no engine (``record`` makes accountings from real runs).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Tuple


@dataclasses.dataclass(frozen=True)
class ChunkWork:
    """What the engine computed for one chunk (one decoder run)."""

    start: float  # s of the input where the chunk's audio starts
    end: float  # s where it ends
    ready: float  # s of input time at which the engine had all audio it needed to decode it
    graphs: Tuple[Tuple[str, float], ...]  # encoder calls in order: ("merged"|"backend"|"frontend", seconds)
    prefill_tokens: int  # decoder prompt positions
    decode_tokens: int  # decoder steps after the prefill (one generated token each)
    prefix_tokens: int = 0  # header + text prefix tokens in the assistant turn (part of prefill_tokens)


CHUNK_FIELDS = tuple(f.name for f in dataclasses.fields(ChunkWork))


@dataclasses.dataclass(frozen=True)
class AlignWork:
    """What the forced aligner computed for one segment's words (one alignment)."""

    start: float  # s of the input: the aligned audio
    end: float
    ready: float  # s of input time at which the segment's audio was complete (its chunk's ``ready``)
    after_runs: int  # ASR decoder runs done when it ran: it runs before run ``after_runs`` (== len(chunks): after all)
    graphs: Tuple[Tuple[str, float], ...]  # the aligner encoder's calls, as ChunkWork.graphs
    positions: int  # rows of its one RKLLM prefill: audio + 2 + the words' tokens and slots
    slots: int  # <timestamp> rows the host head scores (2 per word)

    @property
    def words(self) -> int:
        return self.slots // 2


ALIGN_FIELDS = tuple(f.name for f in dataclasses.fields(AlignWork))


@dataclasses.dataclass(frozen=True)
class Accounting:
    """The compute of one real run: its chunks in decoding order."""

    label: str  # what was run (settings, clip)
    audio_seconds: float  # input duration
    chunks: Tuple[ChunkWork, ...]
    live: bool  # ready times are those of a stream fed in real time (caption latency applies)
    system_tokens: int = 5  # prompt tokens of the empty system block (what a compact prompt drops)
    alignments: Tuple[AlignWork, ...] = ()  # word timestamps: the alignments, in the order they ran

    def __post_init__(self):
        if not (isinstance(self.audio_seconds, (int, float)) and self.audio_seconds > 0):
            raise ValueError(f"audio_seconds must be > 0, got {self.audio_seconds!r}")
        if not self.chunks:
            raise ValueError("an accounting needs at least one chunk")
        runs = [a.after_runs for a in self.alignments]
        if runs != sorted(runs) or any(not 0 <= r <= len(self.chunks) for r in runs):
            raise ValueError(f"alignment after_runs must be ascending in 0..{len(self.chunks)} (the chunks), "
                             f"got {runs}")

    def without_words(self) -> "Accounting":
        """The same run without its alignments (the transcription alone)."""
        return dataclasses.replace(self, alignments=())

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d: Mapping) -> "Accounting":
        """From ``to_dict()`` output (e.g. a JSON file); ValueError names a missing or bad field."""
        need = ("label", "audio_seconds", "chunks", "live")
        if not isinstance(d, Mapping):
            raise ValueError(f"an accounting is a JSON object with fields {', '.join(need)}, got {type(d).__name__}")
        missing = [k for k in need if k not in d]
        if missing:
            raise ValueError(f"accounting is missing {', '.join(missing)}; fields: {', '.join(need)} "
                             "(optional: system_tokens)")
        chunks = []
        if not isinstance(d["chunks"], (list, tuple)):
            raise ValueError("accounting chunks must be a list of objects with fields " + ", ".join(CHUNK_FIELDS))
        for i, c in enumerate(d["chunks"]):
            if not isinstance(c, Mapping):
                raise ValueError(f"chunk {i} must be an object with fields {', '.join(CHUNK_FIELDS)}")
            miss = [k for k in CHUNK_FIELDS if k not in c and k != "prefix_tokens"]
            if miss:
                raise ValueError(f"chunk {i} is missing {', '.join(miss)}; chunk fields: {', '.join(CHUNK_FIELDS)}")
            graphs = _graphs(c["graphs"], f"chunk {i}")
            for k in ("prefill_tokens", "decode_tokens"):
                if not isinstance(c[k], int) or c[k] < 0:
                    raise ValueError(f"chunk {i}: {k} must be an integer >= 0, got {c[k]!r}")
            chunks.append(ChunkWork(start=float(c["start"]), end=float(c["end"]), ready=float(c["ready"]),
                                    graphs=graphs, prefill_tokens=c["prefill_tokens"],
                                    decode_tokens=c["decode_tokens"], prefix_tokens=int(c.get("prefix_tokens", 0))))
        aligns = []
        for i, a in enumerate(d.get("alignments") or ()):
            miss = [k for k in ALIGN_FIELDS if not isinstance(a, Mapping) or k not in a]
            if miss:
                raise ValueError(f"alignment {i} is missing {', '.join(miss)}; alignment fields: "
                                 f"{', '.join(ALIGN_FIELDS)}")
            for k in ("after_runs", "positions", "slots"):
                if not isinstance(a[k], int) or a[k] < 0:
                    raise ValueError(f"alignment {i}: {k} must be an integer >= 0, got {a[k]!r}")
            aligns.append(AlignWork(start=float(a["start"]), end=float(a["end"]), ready=float(a["ready"]),
                                    after_runs=a["after_runs"], graphs=_graphs(a["graphs"], f"alignment {i}"),
                                    positions=a["positions"], slots=a["slots"]))
        return Accounting(label=str(d["label"]), audio_seconds=float(d["audio_seconds"]), chunks=tuple(chunks),
                          live=bool(d["live"]), system_tokens=int(d.get("system_tokens", 5)),
                          alignments=tuple(aligns))


def _graphs(items, where: str) -> Tuple[Tuple[str, float], ...]:
    out = []
    for g in items:
        if len(g) != 2 or g[0] not in ("merged", "backend", "frontend"):
            raise ValueError(f"{where}: bad encoder graph {g!r}; expected [part, seconds] with part "
                             "merged, backend or frontend")
        out.append((str(g[0]), float(g[1])))
    return tuple(out)


def compact_prompt(acc: Accounting, header_tokens: int = 3) -> Accounting:
    """The same run with a compact prompt: no system block, no language header in the assistant turn.

    Saved per chunk: the empty system block (``acc.system_tokens``) and, on chunks whose
    assistant turn held text (prefix_tokens > 0, where a detected header is kept in front of
    the prefix), ``header_tokens`` (``language X<asr_text>`` is 3 tokens). Decode steps are
    left as they are. Only the cost is modelled: whether the model transcribes as well
    without those parts must be measured."""
    out = []
    for c in acc.chunks:
        saved = acc.system_tokens + (min(header_tokens, c.prefix_tokens) if c.prefix_tokens > 0 else 0)
        out.append(dataclasses.replace(c, prefill_tokens=max(0, c.prefill_tokens - saved),
                                       prefix_tokens=max(0, c.prefix_tokens - (saved - acc.system_tokens))))
    return dataclasses.replace(acc, label=acc.label + ", compact prompt", chunks=tuple(out), system_tokens=0)
