"""Board settings of the rk backend: one frozen, validated options object."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional, Sequence

from ... import checks
from ...decoding import MAX_CONTEXT
from .soc import SUPPORTED_SOCS, cpu_capacities, resolve_core_mask

MIN_CONTEXT = 16  # the shortest KV cache worth a prompt: a prompt without audio takes about 10 positions
MAX_CPU = 7  # RK3576 and RK3588 have 8 CPUs (0-3 little, 4-7 big): enabled_cpus_mask has 8 bits


@dataclasses.dataclass(frozen=True)
class RKOptions:
    """Board settings of the rk backend (validated here; every field reaches the runtimes).

    soc: "rk3576" or "rk3588"; None reads ``$QWEN3ASR_SOC``, else the device tree.
    npu_cores: NPU cores of the RKNN encoder: None (all of the SoC), a core-mask name ("auto",
      "0", "1", "2", "0_1", "0_1_2") or its int (RKNNLite.NPU_CORE_*).
    cpus: CPUs the RKLLM decoder runs on (RKLLMExtendParam.enabled_cpus_*): None (the runtime's
      choice), a count n (the n fastest cores, as the reference CLI's ``enabled_cpus``), or a
      list such as "4-7" / "4,5,6,7" / [4, 5, 6, 7].
    lib_path / abi: librkllmrt.so and its C layout ("1.2" or "1.3"); None: ``$QWEN3ASR_RKLLM_LIB``
      / ``$QWEN3ASR_RKLLM_ABI``, else searched and detected (docs/rkllm_abi.md).
    max_context: KV-cache length given to rkllm_init (<= the converted model's); None: the model's.
    embed_flash: keep the embedding table in flash (RKLLMExtendParam.embed_flash).
    drafts: verify a final pass's draft (the streamed text) in one GET_LOGITS run before
      decoding the rest (docs/rkllm_abi.md, "Draft verification"); False: one GENERATE run always.
    """

    soc: Optional[str] = None
    npu_cores: Any = None
    cpus: Any = None
    lib_path: Optional[str] = None
    abi: Optional[str] = None
    max_context: Optional[int] = None
    embed_flash: bool = True
    drafts: bool = True

    def __post_init__(self):
        problems = []
        if self.soc is not None and self.soc not in SUPPORTED_SOCS:
            problems.append(f"soc must be one of {', '.join(SUPPORTED_SOCS)} or None (got {checks.show(self.soc)})")
        if self.npu_cores is not None:
            try:
                resolve_core_mask("rk3588", self.npu_cores)  # the SoC's own core count is checked at load
            except (ValueError, TypeError) as exc:
                problems.append(f"npu_cores: {exc}")
        if self.cpus is not None:
            try:
                object.__setattr__(self, "cpus", _parse_cpus(self.cpus))
            except ValueError as exc:
                problems.append(f"cpus: {exc}")
        if self.abi is not None and self.abi not in ("1.2", "1.3"):
            problems.append(f"abi must be \"1.2\", \"1.3\" or None (got {checks.show(self.abi)})")
        problems += filter(None, (checks.integer("max_context", self.max_context, MIN_CONTEXT, MAX_CONTEXT,
                                                 optional=True),
                                  checks.flag("embed_flash", self.embed_flash),
                                  checks.flag("drafts", self.drafts)))
        if self.lib_path is not None and not isinstance(self.lib_path, (str, os.PathLike)):
            problems.append(f"lib_path must be a path or None (got {type(self.lib_path).__name__})")
        if problems:
            raise ValueError("invalid rk options: " + "; ".join(problems))

    def cpu_mask(self, n_cpus: Optional[int] = None, capacities: Optional[Sequence[float]] = None) -> int:
        """The RKLLM enabled_cpus_mask (0 = the runtime's choice). A count takes the fastest
        cores (by ``capacities``, default read from sysfs: on RK3576/RK3588 CPUs 4-7 are the big
        cluster; among equals the lower-numbered first, so 2 gives CPUs 4 and 5)."""
        if self.cpus is None:
            return 0
        if isinstance(self.cpus, tuple):
            return sum(1 << c for c in self.cpus)
        caps = list(capacities) if capacities is not None else cpu_capacities()
        if self.cpus > len(caps):
            raise ValueError(f"cpus={self.cpus} but this machine has {len(caps)} CPUs")
        order = sorted(range(len(caps)), key=lambda c: (-caps[c], c))
        return sum(1 << c for c in order[:self.cpus])


def _parse_cpus(value) -> Any:
    """A count (int) or a sorted tuple of CPU numbers 0..MAX_CPU, from an int, a list or "4-7,0"."""
    if isinstance(value, bool):
        raise ValueError(f"give a CPU count, or CPU numbers such as \"4-7\" (got {value!r})")
    if checks.is_integer(value):
        if not 1 <= value <= MAX_CPU + 1:
            raise ValueError(f"a CPU count must be 1..{MAX_CPU + 1} (got {checks.show(value)})")
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit() and len(text) <= 2:  # "4": a count, as the reference CLI's --cpus
            return _parse_cpus(int(text))
        cpus = set()
        for part in text.split(","):
            a, _, b = part.strip().partition("-")
            if not (a.isdigit() and (not b or b.isdigit())):
                raise ValueError(f"CPU list {checks.show(value)} is not like \"4-7\" or \"4,5,6,7\"")
            first, last = _cpu_number(a, value), _cpu_number(b or a, value)  # bounded before any range is built
            cpus.update(range(first, last + 1))
        value = sorted(cpus)
    if not isinstance(value, (list, tuple, set, frozenset)):
        raise ValueError(f"give a CPU count or CPU numbers, got {checks.show(value)}")
    if not value or not all(checks.is_integer(c) and 0 <= c <= MAX_CPU for c in value):
        raise ValueError(f"CPU numbers must be 0..{MAX_CPU} (got {checks.show(value)})")
    return tuple(sorted({int(c) for c in value}))


def _cpu_number(digits: str, value) -> int:
    if len(digits) > 2 or int(digits) > MAX_CPU:
        raise ValueError(f"CPU numbers must be 0..{MAX_CPU} (got {checks.show(value)})")
    return int(digits)


__all__ = ["RKOptions"]
